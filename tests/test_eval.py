"""The evaluation CLI (verl/trainer/main_eval.py, verl/eval/) on the tiny model: outputs, sweeps, probe,
bad input, and the summary recomputed by hand from samples.jsonl."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.e2e_utils import HANG_S
from verl.config import CONFIG_DIR, ConfigError
from verl.eval.config import load_eval_config, resolve_model_dir
from verl.eval.summary import summarise_run
from verl.utils.fs import read_jsonl
from verl.utils.math_data import VENDORED_MATH_DIR

REPO = Path(__file__).resolve().parents[1]
SAMPLE_KEYS = {
    "run", "mode", "thinking_budget", "max_chunks", "keep_head", "keep_tail", "problem_index",
    "data_source", "problem", "ground_truth", "extra_info", "sample_index", "seed", "chunks", "trace",
    "answer", "score", "thinking_tokens", "num_chunks", "has_eos",
}  # fmt: skip
CHUNK_KEYS = {"prompt", "response", "response_ids", "prompt_tokens", "response_tokens", "finish_reason"}


def base_overrides(assets, out_dir) -> list[str]:
    return [
        f"model_path={assets / 'model'}",
        f"data_files=[{assets / 'data' / 'val.jsonl'}]",
        f"output_dir={out_dir}",
        "max_problems=3",
        "num_threads=1",
    ]


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return hydra_compose(config_name="eval", overrides=overrides)


def run_eval(overrides: list[str]) -> dict:
    from verl.eval.evaluate import evaluate

    return evaluate(load_eval_config(compose(overrides)))


def read_samples(out_dir: Path) -> list[dict]:
    return read_jsonl(out_dir / "samples.jsonl")


def run_cli(*overrides: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "verl.trainer.main_eval", *overrides],
        cwd=cwd, capture_output=True, text=True, timeout=HANG_S,
    )  # fmt: skip


# ------------------------------------------------------------------------------------------------
# summary metrics against hand-computed numbers


def record(problem: int, sample: int, score: float, answer: str | None, source: str = "s", **kw) -> dict:
    return {"problem_index": problem, "sample_index": sample, "score": score, "answer": answer,
            "data_source": source, "thinking_tokens": kw.get("tokens", 10), "num_chunks": kw.get("chunks", 1),
            "has_eos": kw.get("eos", True)}  # fmt: skip


def test_summarise_run_against_hand_computed_values():
    samples = [
        # problem 0: 2 of 3 right; "5" wins the vote and is right
        record(0, 0, 1.0, "5", tokens=10, chunks=1),
        record(0, 1, 0.0, "3", tokens=20, chunks=2),
        record(0, 2, 1.0, "5", tokens=30, chunks=3, eos=False),
        # problem 1 (another source): 1 of 3 right; "2" and "7" tie, "2" came first and is wrong
        record(1, 0, 0.0, None, "t", tokens=40),
        record(1, 1, 0.0, "2", "t", tokens=50),
        record(1, 2, 1.0, "7", "t", tokens=60),
    ]
    out = summarise_run(samples, ks=[1, 2], wall_time_s=2.0)
    overall = out["metrics"]["all"]
    # pass@2 = 1 - C(N-c, 2) / C(N, 2): problem 0: 1 - 0/3 = 1; problem 1: 1 - 1/3
    assert overall["mean@3"] == pytest.approx((2 / 3 + 1 / 3) / 2)
    assert overall["maj@3"] == pytest.approx((1.0 + 0.0) / 2)
    assert overall["pass@1"] == pytest.approx(0.5)
    assert overall["pass@2"] == pytest.approx((1.0 + 2 / 3) / 2)
    assert overall["thinking_tokens_mean"] == pytest.approx(35.0)
    assert overall["thinking_tokens_max"] == 60
    assert overall["chunks_per_trace_mean"] == pytest.approx(9 / 6)
    assert overall["has_eos_rate"] == pytest.approx(5 / 6)
    assert out["metrics"]["s"]["mean@3"] == pytest.approx(2 / 3)
    assert out["metrics"]["t"]["maj@3"] == 0.0
    assert out["sampled_tokens"] == 210
    assert out["tokens_per_s"] == pytest.approx(105.0)


def test_resolve_model_dir_accepts_a_checkpoint_step_dir(tiny_assets, tmp_path):
    hf = tmp_path / "global_step_3" / "actor" / "huggingface"
    hf.mkdir(parents=True)
    (hf / "config.json").write_text("{}")
    assert resolve_model_dir(str(tmp_path / "global_step_3")) == hf
    assert resolve_model_dir(str(hf)) == hf
    assert resolve_model_dir(str(tiny_assets / "model")) == tiny_assets / "model"
    assert resolve_model_dir(str(tmp_path)) is None


# ------------------------------------------------------------------------------------------------
# bad input: exit code 2, the key named, no model loaded


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("model_path=/no/such/model", "model_path"),
        ("+sampling.temprature=0.5", "sampling.temprature"),
        ("sampling.n=lots", "sampling.n"),
        ("delethink.chunk_size=16", "delethink.keep_tail=12"),  # C = keep_head 4 + keep_tail 12: no room
        ("pass_k=[1,4]", "pass_k[1]"),  # k > sampling.n = 1
    ],
)
def test_bad_config_exits_2_naming_the_key_before_loading_a_model(tiny_assets, tmp_path, override, named):
    overrides = base_overrides(tiny_assets, tmp_path / "out") + ["mode=delethink", override]
    result = run_cli(*overrides)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "config error:" in result.stderr and named in result.stderr
    assert "Loading weights" not in result.stderr + result.stdout
    assert not (tmp_path / "out").exists()


def test_config_error_in_process_names_every_problem(tiny_assets, tmp_path):
    overrides = base_overrides(tiny_assets, tmp_path) + [
        "mode=delethink",
        "sampling.n=0",
        "delethink.max_chunks=[]",
    ]
    with pytest.raises(ConfigError) as err:
        load_eval_config(compose(overrides))
    assert "sampling.n=0" in str(err.value) and "delethink.max_chunks=[]" in str(err.value)


# ------------------------------------------------------------------------------------------------
# end to end on the tiny model


def test_delethink_sweep_writes_every_field_respects_chunks_and_recomputes_by_hand(tiny_assets, tmp_path):
    out = tmp_path / "sweep"
    chunk, head, tail = 8, 1, 2
    summary = run_eval(
        base_overrides(tiny_assets, out)
        + ["mode=delethink", f"delethink.chunk_size={chunk}", f"delethink.keep_head={head}",
           f"delethink.keep_tail={tail}", "delethink.max_chunks=[1,3]", "sampling.n=3", "pass_k=[1,2,3]"]
    )  # fmt: skip
    samples = read_samples(out)
    assert len(samples) == 2 * 3 * 3  # runs x problems x samples
    for s in samples:
        assert set(s) == SAMPLE_KEYS
        assert s["chunks"] and all(set(c) == CHUNK_KEYS for c in s["chunks"])
    # one summary entry per budget, in the sweep's order, and the plot
    runs = summary["runs"]
    assert [r["max_chunks"] for r in runs] == [1, 3]
    assert [r["thinking_budget"] for r in runs] == [chunk, chunk + 2 * (chunk - head - tail)]
    assert (out / "accuracy_vs_budget.png").stat().st_size > 0
    assert json.loads((out / "summary.json").read_text())["runs"][1]["label"] == "delethink_I3"

    # chunk records follow the Delethink environment: budgets C then C - m, carry-over of at most m
    question_len = {s["problem_index"]: s["chunks"][0]["prompt_tokens"] for s in samples}
    for s in samples:
        chunks, written = s["chunks"], 0
        assert len(chunks) <= s["max_chunks"]
        for i, c in enumerate(chunks):
            assert c["response_tokens"] <= (chunk if i == 0 else chunk - head - tail)
            if i > 0:
                assert c["prompt_tokens"] == question_len[s["problem_index"]] + min(written, head + tail)
                assert c["prompt"].startswith(s["problem"])
            assert (c["finish_reason"] == "stop") == (i == len(chunks) - 1 and s["has_eos"])
            written += c["response_tokens"]
        assert s["thinking_tokens"] == written <= s["thinking_budget"]
        assert s["num_chunks"] == len(chunks)

    # the summary, recomputed by hand from samples.jsonl for the I=3 run
    mine = [s for s in samples if s["run"] == "delethink_I3"]
    per_problem = {}
    for s in sorted(mine, key=lambda s: s["sample_index"]):
        per_problem.setdefault(s["problem_index"], []).append(s)
    mean, maj, pass2 = [], [], []
    for group in per_problem.values():
        scores = [s["score"] for s in group]
        mean.append(sum(scores) / 3)
        votes = Counter(s["answer"] for s in group if s["answer"] is not None)
        if votes:
            top = max(votes.values())
            winner = next(s for s in group if s["answer"] is not None and votes[s["answer"]] == top)
            maj.append(winner["score"])
        else:
            maj.append(0.0)
        c = sum(x > 0 for x in scores)
        pass2.append(1 - math.comb(3 - c, 2) / math.comb(3, 2))
    metrics = runs[1]["metrics"]["all"]
    assert metrics["mean@3"] == pytest.approx(sum(mean) / len(mean))
    assert metrics["maj@3"] == pytest.approx(sum(maj) / len(maj))
    assert metrics["pass@2"] == pytest.approx(sum(pass2) / len(pass2))
    assert metrics["thinking_tokens_mean"] == pytest.approx(
        sum(s["thinking_tokens"] for s in mine) / len(mine)
    )
    assert metrics["chunks_per_trace_mean"] == pytest.approx(sum(s["num_chunks"] for s in mine) / len(mine))
    assert metrics["has_eos_rate"] == pytest.approx(sum(s["has_eos"] for s in mine) / len(mine))
    assert runs[1]["sampled_tokens"] == sum(s["thinking_tokens"] for s in mine)


def test_longcot_sweep_caps_thinking_at_each_budget(tiny_assets, tmp_path):
    out = tmp_path / "longcot"
    summary = run_eval(base_overrides(tiny_assets, out) + ["mode=longcot", "longcot.budgets=[4,12]"])
    assert [r["thinking_budget"] for r in summary["runs"]] == [4, 12]
    for s in read_samples(out):
        assert s["mode"] == "longcot" and s["num_chunks"] == 1 and s["max_chunks"] is None
        assert s["thinking_tokens"] <= s["thinking_budget"]
    assert (out / "accuracy_vs_budget.png").is_file()


def test_probe_cli_compares_both_modes_at_equal_total_budget(tiny_assets, tmp_path):
    out = tmp_path / "probe"
    result = run_cli(
        *base_overrides(tiny_assets, out),
        "mode=probe", "delethink.chunk_size=8", "delethink.keep_head=1", "delethink.keep_tail=2",
        "delethink.max_chunks=[2]",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    budget = 8 + (8 - 3)  # C + (I - 1)(C - m)
    assert [(r["mode"], r["thinking_budget"]) for r in summary["runs"]] == [
        ("longcot", budget),
        ("delethink", budget),
    ]
    (pair,) = summary["probe"]
    assert pair["thinking_budget"] == budget
    assert pair["longcot"] == summary["runs"][0]["metrics"]["all"]["mean@1"]
    assert pair["delethink"] == summary["runs"][1]["metrics"]["all"]["mean@1"]
    assert f"probe at thinking budget {budget}" in result.stdout
    assert (out / "accuracy_vs_budget.png").is_file()


def test_val_tasks_group_fills_tasks():
    cfg = compose(["model_path=x", "val_tasks@tasks=[aime24,math500]"])
    assert set(cfg.tasks) == {"aime24", "math500"}
    assert cfg.tasks.aime24.data_source == "aime24"


def test_the_stored_math_sets_evaluate_from_any_directory(tiny_assets, tmp_path):
    # the documented form, run where no data folder is beside it
    out = tmp_path / "out"
    result = run_cli(
        f"model_path={tiny_assets / 'model'}", "val_tasks@tasks=[aime24,math500]", "mode=delethink",
        "max_prompt_length=600", "max_problems=2", "delethink.max_chunks=[2]", f"output_dir={out}",
        "num_threads=1", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    samples = read_samples(out)
    assert [s["data_source"] for s in samples] == ["aime24", "aime24", "math500", "math500"]
    aime = [json.loads(line) for line in (VENDORED_MATH_DIR / "aime24.jsonl").open()]
    assert samples[0]["ground_truth"] == str(int(aime[samples[0]["extra_info"]["index"]]["answer"]))


def test_messages_name_main_evals_keys_not_the_trainers(tiny_assets, tmp_path):
    # main_eval refuses data.max_prompt_length: its own key is max_prompt_length, and so the message says
    result = run_cli(
        f"model_path={tiny_assets / 'model'}", "val_tasks@tasks=[aime24]", "mode=delethink",
        f"output_dir={tmp_path / 'out'}",
    )  # fmt: skip
    assert result.returncode == 2
    aime = VENDORED_MATH_DIR / "aime24.jsonl"
    # the tiny tokenizer spends a token per byte, plus <|user|>, <|assistant|> and <think>
    suffix = "\n\nPlease reason step by step, and put your final answer within \\boxed{}."
    shortest = min(len((json.loads(line)["problem"] + suffix).encode()) + 3 for line in aime.open())
    assert result.stderr.splitlines()[-1] == (  # after the progress bar of datasets reading the file
        f"config error: max_prompt_length: all 30 prompts of task aime24 ({aime}) are longer than the "
        f"{96 - 4 - 12} tokens allowed (max_prompt_length less any Delethink carry-over); the shortest has "
        f"{shortest}"
    )
    assert "data." not in result.stderr
    with pytest.raises(ConfigError) as error:
        run_eval(base_overrides(tiny_assets, tmp_path / "out") + ["prompt_key=question"])
    val = tiny_assets / "data" / "val.jsonl"
    assert str(error.value).startswith(f"prompt_key='question': {val} has no such column")


def test_task_problems_run_alongside_a_data_file(tiny_assets, tmp_path):
    task_file = tmp_path / "sums.jsonl"
    task_file.write_text(
        "".join(json.dumps({"q": f"a{d} b1", "a": str((d + 1) % 10)}) + "\n" for d in range(4))
    )
    out = tmp_path / "tasks"
    columns = {"path": task_file, "data_source": "synthetic/sums", "problem_key": "q", "answer_key": "a"}
    task = [f"+tasks.sums.{k}={v}" for k, v in columns.items()] + ["+tasks.sums.prompt_template='{q}'"]
    run_eval(base_overrides(tiny_assets, out) + task + ["longcot.budgets=[4]", "max_problems=2"])
    samples = read_samples(out)
    assert [s["data_source"] for s in samples] == ["synthetic/running_sum"] * 2 + ["synthetic/sums"] * 2
    assert [s["ground_truth"] for s in samples[2:]] == ["1", "2"]  # (d + 1) % 10 for d = 0, 1
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["runs"][0]["metrics"]) == {"all", "synthetic/running_sum", "synthetic/sums"}


def test_a_budget_past_the_models_positions_is_a_config_error_before_weights_load(tiny_assets, tmp_path):
    # the tiny model has max_position_embeddings=1024
    with pytest.raises(
        ConfigError, match=r"longcot.budgets: .* exceeds the model's max_position_embeddings=1024"
    ):
        run_eval(base_overrides(tiny_assets, tmp_path / "out") + ["longcot.budgets=[8,1020]"])
    assert not (tmp_path / "out").exists()


def test_ignore_eos_fills_every_budget_in_both_modes(tiny_assets, tmp_path):
    # the untrained model at a high temperature samples nearly uniformly, so it draws EOS early enough
    hot = ["sampling.temperature=3.0", "sampling.n=4"]
    delethink = ["mode=delethink", "delethink.chunk_size=32", "delethink.keep_head=4",
                 "delethink.keep_tail=8", "delethink.max_chunks=[6]", *hot]  # fmt: skip
    longcot = ["mode=longcot", "longcot.budgets=[72]", *hot]
    for name, mode in (("delethink", delethink), ("longcot", longcot)):
        stopping = run_eval(base_overrides(tiny_assets, tmp_path / name) + mode)
        # the model stops early on its own, so filling the budget below is the option's doing
        assert stopping["runs"][0]["metrics"]["all"]["has_eos_rate"] > 0
        filled = run_eval(
            base_overrides(tiny_assets, tmp_path / f"{name}_filled") + mode + ["sampling.ignore_eos=true"]
        )
        budget = filled["runs"][0]["thinking_budget"]
        samples = read_samples(tmp_path / f"{name}_filled")
        assert [s["thinking_tokens"] for s in samples] == [budget] * len(samples)
        assert not any(s["has_eos"] for s in samples)
        if name == "delethink":
            assert all(s["num_chunks"] == 6 for s in samples)


def test_a_bad_data_row_exits_2_naming_file_and_row_without_a_traceback(tiny_assets, tmp_path):
    bad = tmp_path / "bad.jsonl"
    good = (tiny_assets / "data" / "val.jsonl").read_text().splitlines()[0]
    bad.write_text(good + "\n" + json.dumps([1, 2]) + "\n")
    overrides = base_overrides(tiny_assets, tmp_path / "out")
    overrides[1] = f"data_files=[{bad}]"
    result = run_cli(*overrides)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "data error:" in result.stderr and "bad.jsonl" in result.stderr
    assert "Traceback" not in result.stderr

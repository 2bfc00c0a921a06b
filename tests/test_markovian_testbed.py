"""The Markovian testbed recipe: its claim checks on hand-made evaluations, its evaluation data, the seeds
and run-config checks, the warm-start check, the aggregate over seeds, and (slow) the whole recipe at its
smoke size, which must write a seed's report with its verdict table, and over two seeds, their aggregate."""

import dataclasses
import importlib
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from tests.e2e_utils import HANG_S
from verl.data import shift_register as sr
from verl.eval import paired
from verl.tools.results import load_record

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes" / "markovian_testbed"


def load(name: str):
    # by its package name (recipes/ is a namespace package): the name mutmut gives the module it mutates
    return importlib.import_module(f"recipes.markovian_testbed.{name}")


report = load("report")
lora_table = load("lora_table")
run_config = load("run_config")
aggregate = load("aggregate")
settings = load("settings")
step_errors = load("step_errors")


def summary(
    mode: str, accuracy: dict[int, tuple[float, float]], tokens_per_s: dict[int, float] | None = None
):
    """A main_eval summary: per budget, (accuracy on trained sizes, accuracy past B)."""
    runs = []
    for budget, (trained, past) in accuracy.items():
        metrics = {report.TRAINED: {"mean@4": trained}, report.PAST_B: {"mean@4": past}}
        rate = (tokens_per_s or {}).get(budget, 1000.0)
        runs.append({"mode": mode, "thinking_budget": budget, "metrics": metrics, "tokens_per_s": rate})
    return {"config": {"sampling": {"n": 4}}, "runs": runs}


def write_samples(root: Path, name: str, rows: list[dict]) -> None:
    (root / "eval" / name).mkdir(parents=True, exist_ok=True)
    (root / "eval" / name / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def scored(mode: str, scores: list[list[float]], budget: int = 256) -> list[dict]:
    """Sample rows of one run: problem p's samples score scores[p]."""
    return [sample(mode, budget, p, s) for p, row in enumerate(scores) for s in row]


def test_heldout_gains_pair_by_problem_and_claim_a_is_the_accuracy_ratio(tmp_path):
    warm_lc = [[1, 0], [0, 0], [1, 1], [0, 0]]  # per-problem 0.5, 0, 1, 0: accuracy 0.375
    warm_dt = [[0, 0], [0, 0], [1, 1], [0, 0]]  # 0, 0, 1, 0: 0.25
    write_samples(tmp_path, "heldout_sft", scored("longcot", warm_lc) + scored("delethink", warm_dt))
    write_samples(tmp_path, "heldout_longcot_rl", scored("longcot", [[1, 1], [1, 0], [1, 1], [1, 0]]))
    write_samples(tmp_path, "heldout_delethink_rl", scored("delethink", [[1, 1], [0, 0], [1, 1], [1, 0]]))
    lines, verdicts, _ = report.heldout_section(tmp_path, 256, 7)
    text = "\n".join(lines)
    by_key = {v.key: v for v in verdicts}
    # LongCoT: differences 0.5, 0.5, 0, 0.5: gain 0.375, sd 0.25, standard error 0.125 -> 3 SE: held
    assert "| LongCoT | 0.375 ± 0.239 | 0.750 ± 0.144 | +0.375 ± 0.125 |" in text
    assert by_key["gain_longcot"].value == pytest.approx(0.375) and by_key["gain_longcot"].held
    # Delethink: differences 1, 0, 0, 0.5: gain 0.375, sd 0.479, standard error 0.239 -> 1.6 SE: not held
    assert by_key["gain_delethink"].value == pytest.approx(0.375) and not by_key["gain_delethink"].held
    # (a): Delethink-RL 0.625 / LongCoT-RL 0.75 = 0.833 < 0.95
    assert by_key["a"].value == pytest.approx(0.625 / 0.75) and by_key["a"].held is False
    assert "(a) Delethink-RL / LongCoT-RL = 0.833 ±" in text and "**not held**" in text
    assert (
        "Markovian-ness probe: the warm start with Delethink inference / with LongCoT inference = 0.667"
        in text
    )
    # the probe's verdict, first of this section's: 0.25 / 0.375 = 0.667 < 0.95
    assert verdicts[0].key == "probe" and verdicts[0].held is False
    assert verdicts[0].value == pytest.approx(0.25 / 0.375)
    assert verdicts[0].measured.startswith("0.67x ±") and verdicts[0].measured.endswith(
        "(0.250 against 0.375)"
    )
    # no evaluation of the RL runs: not measured, not a crash
    empty = tmp_path / "empty"
    write_samples(empty, "heldout_sft", scored("longcot", warm_lc))
    verdicts = {v.key: v for v in report.heldout_section(empty, 256, 7)[1]}
    assert verdicts["a"].held is None and verdicts["gain_longcot"].measured.startswith("not measured")
    assert verdicts["probe"].held is None  # the warm start in one mode only


def test_claim_b_needs_a_rising_delethink_and_a_small_longcot_gain():
    dt = summary("delethink", {512: (0, 0.0), 768: (0, 0.2), 1024: (0, 0.4), 2048: (0, 0.1)})
    # Delethink +0.4 from B to 2B; LongCoT +0.1 < 0.5 * 0.4
    lc = summary("longcot", {512: (0, 0.0), 1024: (0, 0.1)})
    lines, verdict = report.claim_b(lc, dt, 512)
    text = "\n".join(lines)
    assert "Delethink gains +0.400 (rising at every measured budget), LongCoT gains +0.100" in text
    assert "**held**" in text and "not held" not in text
    assert verdict.held and verdict.value == pytest.approx(0.4)
    # LongCoT gains as much: not held
    lc = summary("longcot", {512: (0, 0.0), 1024: (0, 0.3)})
    assert "**not held**" in "\n".join(report.claim_b(lc, dt, 512)[0])
    # Delethink dips between B and 2B: not rising, not held (past 2B it may fall: not part of the claim)
    dips = summary("delethink", {512: (0, 0.1), 768: (0, 0.05), 1024: (0, 0.4)})
    lc = summary("longcot", {512: (0, 0.0), 1024: (0, 0.0)})
    text = "\n".join(report.claim_b(lc, dips, 512)[0])
    assert "not rising" in text and "**not held**" in text
    lines, verdict = report.claim_b(lc, summary("delethink", {512: (0, 0)}), 512)
    assert "not decided" in "\n".join(lines) and verdict.held is None


def timed(wall_s: float, thinking_tokens: int, update_s: float = 1.0, decode_ms: float = 1.0) -> dict:
    """A timed step batch, and its budget's distinct-problem pass decoding at `decode_ms` per token."""
    return {
        "wall_s": wall_s, "thinking_tokens": thinking_tokens, "prefill_s": 0.5, "prefill_tokens": 100,
        "reused_prompt_tokens": 40, "trajectories": 128, "update_s": update_s, "step_s": wall_s + update_s,
        "distinct": {"decode_ms_per_token": decode_ms, "prefill_ms_per_token": 0.25},
    }  # fmt: skip


def with_ratios(row: dict) -> dict:
    lc, dt = row["longcot"], row["delethink"]
    return {
        **row, "delethink_over_longcot": dt["wall_s"] / lc["wall_s"],
        "step_delethink_over_longcot": dt["step_s"] / lc["step_s"],
    }  # fmt: skip


def test_claim_c_step_batch_rollout_and_per_token_growth():
    # 10 thinking tokens per budget token. The earlier measure, rollout ms per thinking token: LongCoT 1.0 ->
    # 2.0; Delethink 1.2 -> 1.32 (1.10x). Decode ms per token of the distinct rows: LongCoT 0.8 -> 2.0
    # (2.50x), Delethink 0.5 -> 0.575 (1.15x)
    rows = [
        with_ratios({"budget": b, "max_chunks": i, "longcot": timed(lc, 10 * b, decode_ms=lc_decode),
                     "delethink": timed(dt, 10 * b, decode_ms=dt_decode)})
        for b, i, lc, dt, lc_decode, dt_decode in ((512, 7, 5.12, 6.144, 0.8, 0.5),
                                                    (1024, 15, 15.36, 13.517, 1.2, 0.52),
                                                    (2048, 31, 40.96, 27.034, 2.0, 0.575))
    ]  # fmt: skip
    as_trained = {"budget": 512, "longcot": timed(4.0, 3000), "delethink": timed(4.4, 3100)}
    as_trained["delethink_over_longcot"] = 1.1
    timing = {"prompts": 16, "samples": 8, "repeats": 3, "distinct_rows": 128, "rows": rows,
              "as_trained": as_trained}  # fmt: skip
    lines, cost, verdicts = report.claim_c({}, timing, 512, 128, 64)
    text = "\n".join(lines)
    by_key = {v.key: v for v in verdicts}
    assert by_key["c_rollout"].held is None  # no RL runs given
    assert by_key["c_crossover"].value == 2.0 and by_key["c_crossover"].held  # from 1024 = 2B
    assert by_key["c_flat"].value == pytest.approx(0.575 / 0.5) and by_key["c_flat"].held
    assert "| 512 | 7 | 5.12 | 6.14 | 1.20 | 0.50 (100 / 40) |" in text
    # decode and prefill ms per token of the distinct rows, then the earlier measure
    assert "| 512 | 0.800 | 0.500 | 0.250 | 0.250 | 1.000 | 1.200 |" in text
    assert "Delethink 4.40 s (3100 thinking tokens), LongCoT 4.00 s (3000)" in text
    assert "Delethink / LongCoT = 1.10 (target < 1): **not held**" in text
    assert "budgets at which Delethink's rollout is the cheaper one: [1024, 2048]" in text
    assert (
        "- longcot: decode time per token at 2048 / at 512 = 2.50x (the earlier measure, rollout time per "
        "thinking token: 2.00x)" in text
    )
    assert "- delethink: decode time per token at 2048 / at 512 = 1.15x (the earlier measure" in text
    assert "LongCoT growing (> 1x) and faster than Delethink: **held**" in text
    # per trajectory (128): LongCoT rollout 40 ms at 512, update 1 s / 128 = 7.8 ms, step 47.8 ms
    assert "| 512 | 40.0 | 48.0 | 7.8 | 7.8 | 47.8 | 55.8 | 1.17 |" in text
    assert "whole step (rollout + update) per trajectory is the cheaper one from budget 1024" in text
    assert "its rollout from budget 1024; at 2048 Delethink / LongCoT is 0.67 for the step" in text
    assert report.ms_per_token(cost["timing"][2]["longcot"]) == pytest.approx(2.0)
    # LongCoT's decode not growing (0.48x) is not held, even with Delethink's falling faster (0.42x), and
    # whatever the earlier measure says (unchanged here: 2.00x and 1.10x)
    for r, (lc, dt) in zip(rows, ((1.0, 1.2), (0.96, 1.02), (0.48, 0.504)), strict=True):
        r["longcot"]["distinct"]["decode_ms_per_token"] = lc
        r["delethink"]["distinct"]["decode_ms_per_token"] = dt
    flat = "\n".join(report.claim_c({}, timing, 512, 128, 64)[0])
    assert (
        "longcot: decode time per token at 2048 / at 512 = 0.48x" in flat
        and "faster than Delethink: **not held**" in flat
    )


def test_claim_c_in_training_is_the_median_of_the_paired_steps():
    # Delethink / LongCoT per step: 0.5, 0.62, 0.9, 3.02 (one slow step); median 0.76 holds, the mean
    # (1.26) would not; quartiles 0.5 + 0.75 x 0.12 and 0.9 + 0.25 x 2.12 (linear between the steps).
    # Step 5, logged by LongCoT alone, pairs with nothing and is left out.
    lc = [{"step": s, "timing/gen_s": 2.0} for s in (1, 2, 3, 4, 5)]
    dt = [{"step": s, "timing/gen_s": g} for s, g in ((1, 1.0), (2, 1.24), (3, 1.8), (4, 6.04))]
    lines, verdict = report.rollout_in_training({"longcot": lc, "delethink": dt})
    assert verdict.value == pytest.approx(0.76) and verdict.held
    assert verdict.measured == "0.76x (quartiles 0.59-1.43 over 4 steps)"
    assert "(median over 4 steps" in lines[1] and lines[1].endswith("**held**")
    slow = [{**r, "timing/gen_s": 2.2} for r in dt]  # 1.1x at every step
    assert not report.rollout_in_training({"longcot": lc, "delethink": slow})[1].held
    assert report.rollout_in_training({"longcot": lc}) == ([], None)


def test_claim_c_flat_needs_longcot_to_grow_faster_than_delethink():
    # decode ms per token: Delethink within 1.2x (1.15x) but LongCoT growing less (1.05x): LongCoT's cost
    # did not grow "more"; the earlier measure (LongCoT 2.00x, Delethink 1.00x) does not decide it
    rows = [
        {
            "budget": b,
            "longcot": timed(lc, 10 * b, decode_ms=lc_ms),
            "delethink": timed(dt, 10 * b, decode_ms=dt_ms),
        }
        for b, lc, dt, lc_ms, dt_ms in ((512, 5.12, 5.12, 1.0, 1.0), (2048, 40.96, 20.48, 1.05, 1.15))
    ]
    lines, verdict = report.flatness(rows)
    assert verdict.value == pytest.approx(1.15) and not verdict.held
    assert verdict.measured == "Delethink 1.15x, LongCoT 1.05x from 512 to 2048"
    rows[1]["longcot"]["distinct"]["decode_ms_per_token"] = 1.2  # 1.20x: now faster than Delethink's growth
    assert report.flatness(rows)[1].held
    # a timing file without the distinct-problem pass decides nothing
    del rows[0]["delethink"]["distinct"]
    assert report.flatness(rows) == (
        [], report.not_measured("c_flat", report.C_FLAT_CLAIM, report.C_FLAT_TARGET,
                                "old timing.json (no distinct pass)"),
    )  # fmt: skip


def test_crossover_is_where_delethink_stays_cheaper_up_to_the_largest_budget():
    def rows(step_ratios: list[float]) -> list[dict]:
        return [
            {"budget": 256 * (i + 1), "step_delethink_over_longcot": r, "delethink_over_longcot": 1.5}
            for i, r in enumerate(step_ratios)
        ]

    assert report.crossover(rows([1.2, 0.9, 1.01, 0.8, 0.7]), "step_delethink_over_longcot") == 1024
    assert report.crossover(rows([0.9, 0.8]), "step_delethink_over_longcot") == 256
    assert report.crossover(rows([0.9, 1.1]), "step_delethink_over_longcot") is None
    text = report.crossover_sentence(rows([0.9, 0.8]))
    # a timing file written before the updates were timed gets a line, not a KeyError
    assert "predates the update timing" in "\n".join(report.cost_curve([{"budget": 256, "longcot": {}}]))
    assert (
        "the cheaper one from budget 256 (the smallest measured), its rollout at no measured budget" in text
    )


def test_eval_data_groups_and_timing_problems(tmp_path):
    sr.write_dataset(tmp_path, train_size=50, val_size=4, min_steps=3, max_steps=13, seed=0)
    subprocess.run(
        [
            sys.executable,
            str(RECIPE / "make_eval_data.py"),
            "--out",
            str(tmp_path),
            "--budget",
            "128",
            "--min-steps",
            "3",
            "--train-data",
            str(tmp_path / "train.jsonl"),
            "--per-group",
            "5",
            "--timing-problems",
            "2",
        ],
        check=True,
        capture_output=True,
        cwd=REPO,
    )
    rows = [json.loads(line) for line in (tmp_path / "eval.jsonl").open()]
    timing = [json.loads(line) for line in (tmp_path / "timing.jsonl").open()]
    steps = {
        source: [r["extra_info"]["num_steps"] for r in rows if r["data_source"] == source]
        for source in (report.TRAINED, report.PAST_B)
    }
    # 128 tokens hold 13 steps; 4 x 128 = 512 hold 55
    assert steps[report.TRAINED] == sr.problem_sizes(5, 3, 13)
    assert steps[report.PAST_B] == sr.problem_sizes(5, 14, 55)
    assert [r["extra_info"]["num_steps"] for r in timing] == [55, 55]
    train = {json.loads(line)["prompt"][0]["content"] for line in (tmp_path / "train.jsonl").open()}
    questions = [r["prompt"][0]["content"] for r in rows + timing]
    assert len(set(questions)) == len(questions) and not set(questions) & train


def test_eval_data_at_b_alone_has_no_past_budget_or_timing_problems(tmp_path):
    sr.write_dataset(tmp_path, train_size=20, val_size=2, min_steps=3, max_steps=13, seed=0)
    load("make_eval_data").main(
        ["--out", str(tmp_path), "--budget", "128", "--min-steps", "3", "--train-data",
         str(tmp_path / "train.jsonl"), "--per-group", "4", "--past-per-group", "0", "--timing-problems", "0"]
    )  # fmt: skip
    rows = [json.loads(line) for line in (tmp_path / "eval.jsonl").open()]
    assert [r["data_source"] for r in rows] == [report.TRAINED] * 4
    assert [r["extra_info"]["num_steps"] for r in rows] == [3, 6, 10, 13]  # 3 + round(i * 10 / 3)
    assert (tmp_path / "timing.jsonl").read_text() == ""


def sample(mode: str, budget: int, problem: int, score: float) -> dict:
    return {"mode": mode, "thinking_budget": budget, "problem_index": problem, "score": score}


def test_accuracy_standard_error_paired_gain_and_ratio():
    warm_rows = [sample("longcot", 256, p, s) for p, s in ((0, 1), (0, 1), (1, 0), (1, 1), (2, 0), (2, 0))]
    others = [sample("delethink", 256, 0, 0), sample("longcot", 512, 3, 1)]  # another run in the same file
    warm = paired.problem_scores(warm_rows + others, "longcot", 256)
    assert warm == {0: [1.0, 1.0], 1: [0.0, 1.0], 2: [0.0, 0.0]}
    # per-problem means 1, 0.5, 0: mean 0.5, standard deviation 0.5, standard error 0.5 / sqrt(3)
    assert paired.accuracy(warm) == pytest.approx((0.5, 0.5 / math.sqrt(3)))
    run = {0: [1.0, 1.0], 1: [1.0, 1.0], 2: [0.0, 1.0]}
    # differences 0, 0.5, 0.5: mean 1/3, standard deviation sqrt(1/12), standard error 1/6
    assert paired.paired_gain(run, warm) == pytest.approx((1 / 3, 1 / 6))
    assert paired.fmt(paired.paired_gain(run, warm), signed=True) == "+0.333 ± 0.167"
    with pytest.raises(ValueError, match="different problems: 2 against 3"):
        paired.paired_gain({0: [1.0], 1: [1.0]}, warm)
    assert math.isnan(paired.mean_and_standard_error([1.0])[1])
    # the ratio of accuracies (2.5 / 1.5 correct problem-means), its bootstrap spread positive; a run
    # against itself is 1 with no spread, whatever problems the bootstrap draws
    ratio, spread = paired.paired_ratio(run, warm)
    assert ratio == pytest.approx(2.5 / 1.5) and spread > 0
    assert paired.paired_ratio(run, run) == (1.0, 0.0)
    assert all(math.isnan(x) for x in paired.paired_ratio(run, {p: [0.0] for p in run}))


def test_lora_table_reads_a_heldout_evaluation_and_none_where_it_was_not_run(tmp_path):
    evaluation = tmp_path / "eval" / "heldout_sft"
    evaluation.mkdir(parents=True)
    rows = [sample("longcot", 256, 0, 1.0), sample("delethink", 256, 0, 0.0), sample("longcot", 256, 1, 0.0)]
    (evaluation / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert lora_table.heldout(tmp_path, "heldout_sft", "longcot", 256) == {0: [1.0], 1: [0.0]}
    assert lora_table.heldout(tmp_path, "heldout_longcot_rl", "longcot", 256) is None
    with pytest.raises(SystemExit, match="no longcot samples at budget 512"):
        lora_table.heldout(tmp_path, "heldout_sft", "longcot", 512)


def test_lora_table_labels_a_run_by_its_saved_config(tmp_path):
    for run, rank in (("full/longcot", 0), ("full/delethink", 0), ("point/delethink", 16)):
        (tmp_path / run / ".hydra").mkdir(parents=True)
        (tmp_path / run / ".hydra" / "config.yaml").write_text(
            f"actor_rollout_ref:\n  model: {{lora_rank: {rank}, lora_alpha: 32.0}}\n"
            "  actor: {optim: {lr: 1.0e-4}}\n"
        )
    assert lora_table.run_label(tmp_path / "full" / "longcot") == "full RL, lr 0.0001"
    # a sweep point cut short: its Delethink run is its only one
    assert lora_table.root_label(tmp_path / "point") == "LoRA r 16 (alpha 32), lr 0.0001"
    with pytest.raises(SystemExit, match="no RL run"):
        lora_table.root_label(tmp_path / "empty")


def run_recipe(tmp_path: Path, *overrides: str, **env: str) -> subprocess.CompletedProcess:
    """run.sh at smoke size into tmp_path/out, its RL runs in one process (the Ray path is the same run:
    tests/test_local_launcher.py, and is run end to end in tests/test_e2e_tiny.py)."""
    env = {**os.environ, "SIZE": "smoke", "OUT": str(tmp_path / "out"), "PYTHON": sys.executable, **env}
    command = ["bash", str(RECIPE / "run.sh"), "trainer.logger=[console,jsonl]", "trainer.launcher=local"]
    return subprocess.run(
        [*command, *overrides], cwd=REPO, env=env, capture_output=True, text=True, timeout=HANG_S
    )


@pytest.mark.slow
def test_the_recipe_at_smoke_size_writes_every_table(tmp_path):
    """The recipe's plumbing for one seed, stage to stage: STOP_AFTER=eval stops before the timing stage,
    a call without it goes on from there to the report and its verdicts, the figures, the timing stage;
    the same call again finds every stage done."""
    run = tmp_path / "out"
    before = run_recipe(tmp_path, SEED="2", SFT_ARGS="train.check_every=3", STOP_AFTER="eval")
    assert before.returncode == 0, before.stdout[-3000:] + before.stderr[-3000:]
    assert "STOP_AFTER=eval" in before.stdout
    assert (run / "eval" / "delethink_rl" / "summary.json").is_file()  # the budget sweeps ran
    assert not (run / "eval" / "timing.json").exists() and not (run / "report.md").exists()
    done = {
        p: p.stat().st_mtime_ns
        for p in (run / "longcot" / "metrics.jsonl", run / "eval" / "delethink_rl" / "summary.json")
    }
    result = run_recipe(tmp_path, SEED="2", SFT_ARGS="train.check_every=3")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    # the stages before timing were done: nothing of theirs is written again
    assert "sft:" not in result.stderr and {p: p.stat().st_mtime_ns for p in done} == done
    sft = OmegaConf.load(run / "sft" / "sft_config.yaml").train
    assert (sft.check_every, sft.seed) == (3, 2)  # SFT_ARGS, and the seed
    assert OmegaConf.load(run / "longcot" / ".hydra" / "config.yaml").trainer.seed == 2
    # both RL runs train at the size's RL_LR (smoke's is not the config's own, so run.sh must pass it)
    rl_lr = float(json.loads((run / run_config.CONFIG_FILE).read_text())["RL_LR"])
    for mode in ("longcot", "delethink"):
        assert OmegaConf.load(run / mode / ".hydra" / "config.yaml").actor_rollout_ref.actor.optim.lr == rl_lr
    text = (run / "report.md").read_text()
    # the verdict table opens the report
    assert text.splitlines()[4] == "| claim | target | measured | verdict |"
    for heading in (
        "| the warm start learned the task (held-out T = 1 accuracy) |",
        "| the warm start resumes after a cut (probe: Delethink / LongCoT inference at B) |",
        "| LongCoT-RL gains over its own warm start (held-out accuracy at B) |",
        "| (a) Delethink-RL's accuracy at B, against LongCoT-RL's |",
        "## RL against its warm start, and (a): held-out problems of the trained sizes at B = 128",
        "Markovian-ness probe: the warm start with Delethink inference",
        "## (b) accuracy vs thinking budget on problems longer than B = 128",
        "## (c) training cost",
        "Rollout per step, Delethink / LongCoT =",
        "decode time per token at 256 / at 128",
        "budgets at which Delethink's rollout is the cheaper one",
        "### The cost curve: one trajectory, LongCoT against Delethink",
        "On this machine Delethink's whole step (rollout + update) per trajectory is the cheaper one",
    ):
        assert heading in text, heading
    keys = [v["key"] for v in json.loads((run / "verdicts.json").read_text())]
    assert keys == ["warm_start", "probe", "gain_longcot", "gain_delethink", "a", "b", "c_rollout",
                    "c_crossover", "c_flat"]  # fmt: skip
    for png in ("accuracy_vs_budget.png", "cost.png", "crossover.png", "training_curves.png"):
        assert (run / png).stat().st_size > 0
    # the timing runs ignore end-of-sequence: every sample wrote its whole budget
    timing = json.loads((run / "eval" / "timing.json").read_text())
    assert [r["budget"] for r in timing["rows"]] == [128, 256]  # B and 2B at smoke size
    for r in timing["rows"]:
        for mode in ("longcot", "delethink"):
            assert r[mode]["thinking_tokens"] == r["budget"] * timing["prompts"] * timing["samples"], mode
            # each rollout was followed by its update: the batch's training rows went through the actor
            assert r[mode]["update_s"] > 0 and r[mode]["train_tokens"] >= r[mode]["thinking_tokens"]
            assert r[mode]["step_s"] == pytest.approx(r[mode]["wall_s"] + r[mode]["update_s"])
    again = run_recipe(tmp_path, SEED="2", SFT_ARGS="train.check_every=3")
    assert again.returncode == 0 and "== 2/4 RL" in again.stdout and "sft:" not in again.stderr
    assert (run / "report.md").read_text() == text


@pytest.mark.slow
def test_the_recipe_over_two_seeds_aggregates_them_and_checks_their_settings(tmp_path):
    """SEEDS runs the recipe once per seed (here to the warm start: the stages after it are the one-seed
    test's), then the aggregate and its record; settings that differ from a seed's first call are refused
    before any stage, and FORCE=1 redoes the stages of the seeds it is given. A warm start below its
    target stops its seed before RL, with one line that names the seed."""
    result = run_recipe(tmp_path, SEEDS="1 2", SFT_ARGS="train.check_every=3", STOP_AFTER="sft")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = tmp_path / "out"
    for seed in (1, 2):
        sft = OmegaConf.load(out / f"seed_{seed}" / "sft" / "sft_config.yaml").train
        assert (sft.check_every, sft.seed) == (3, seed)
    text = (out / "aggregate.md").read_text()
    assert "| the warm start reached its target | >= 0.0 |" in text and "| 2 of 2 |" in text
    assert text in result.stdout  # printed as well
    record = load_record(out / "record.yaml")  # the run's results record, with the call that made it
    assert (
        record.verdicts.seeds == [1, 2] and 'SEEDS="1 2"' in record.command and "SIZE=smoke" in record.command
    )
    assert [c.held[0] for c in record.verdicts.claims][:1] == [True]  # the warm start's target 0.0
    # the same call again finds every stage done; another STEPS is refused before any stage runs
    again = run_recipe(tmp_path, SEEDS="1 2", SFT_ARGS="train.check_every=3", STOP_AFTER="sft")
    assert again.returncode == 0 and again.stdout.count("==== seed") == 2 and "sft:" not in again.stderr
    changed = run_recipe(tmp_path, SEEDS="1 2", SFT_ARGS="train.check_every=3", STEPS="2")
    assert changed.returncode == 2 and "STEPS was '1', now '2'" in changed.stderr
    assert "==== seed" not in changed.stdout
    # FORCE=1 records the new settings and redoes the stages (of the seeds it is given); a target the
    # 4 steps never reach stops the seed after its warm start, without STOP_AFTER
    forced = run_recipe(
        tmp_path, SEEDS="1", SFT_ARGS="train.check_every=3 train.stop_at_accuracy=1.0", STEPS="2", FORCE="1"
    )
    assert forced.returncode == 1, forced.stderr[-3000:]
    assert "sft:" in forced.stderr  # the warm start trained again
    missed = [line for line in forced.stderr.splitlines() if "below its target 1.0" in line]
    assert len(missed) == 1 and "warm start (seed 1)" in missed[0] and "(train.stop_at_accuracy)" in missed[0]
    assert forced.stderr.splitlines()[-1].startswith("seeds that stopped before their report: 1 ")
    assert (out / "seed_1" / "sft").is_dir() and not (out / "seed_1" / "longcot").exists()
    steps = {
        seed: json.loads((out / f"seed_{seed}" / run_config.CONFIG_FILE).read_text())["STEPS"]
        for seed in (1, 2)
    }
    assert steps == {1: "2", 2: "1"}


def test_bad_seeds_stop_the_recipe_before_any_stage(tmp_path):
    for seeds in ("", "1 x", "2 2"):
        result = run_recipe(tmp_path, SEEDS=seeds)
        assert result.returncode == 2 and result.stderr.startswith("run.sh: SEEDS"), result.stderr
        assert result.stderr.count("\n") == 1 and not (tmp_path / "out").exists()


def test_seeds_must_be_distinct_integers():
    assert run_config.parse_seeds(" 1 2\t30 ") == [1, 2, 30]
    for text, message in (
        ("", "SEEDS is empty"),
        ("1 two 3", "'two' is not an integer >= 0"),
        ("1 -2", "'-2' is not an integer >= 0"),
        ("1 2 1", "seed 1 is given more than once"),
    ):
        with pytest.raises(ValueError, match=message):
            run_config.parse_seeds(text)


def test_a_run_directory_continues_only_with_the_settings_that_started_it(tmp_path):
    out, first = tmp_path / "out", {"SIZE": "demo", "STEPS": "20", "SFT_ARGS": ""}
    run_config.check(out, first, force=False)
    run_config.check(out, first, force=False)  # the same: fine
    with pytest.raises(ValueError, match="STEPS was '20', now '40'"):
        run_config.check(out, {**first, "STEPS": "40"}, force=False)
    with pytest.raises(ValueError, match="SFT_ARGS was '', now 'train.lr=1e-4'"):
        run_config.check(out, {**first, "SFT_ARGS": "train.lr=1e-4"}, False)
    with pytest.raises(ValueError, match="has no record of B, LONG_START, so its finished stages"):
        run_config.check(out, {**first, "LONG_START": "0.3", "B": "256"}, False)
    assert json.loads((out / run_config.CONFIG_FILE).read_text()) == first  # refusals write nothing
    run_config.check(out, {**first, "STEPS": "40"}, force=True)  # FORCE=1 records it
    assert json.loads((out / run_config.CONFIG_FILE).read_text())["STEPS"] == "40"


@pytest.mark.parametrize(
    "size, shape, problem_sizes, sweeps, timing",
    [
        # C = B/4; keep_head = one step (9 tokens); keep_tail = C/2 - 9; I = 1 + (B - C) / (C - m) = 7. RL
        # problems: n steps think 9(n + 1) tokens, so the longest within B is B // 9 - 1, the shortest a
        # quarter of it; continuation chunks come from problems up to 4B. Sweeps: B, 1.5B, 2B, 3B, 4B
        ("full", (512, 128, 9, 55, 64, 7), (13, 55, 226), ((512, 768, 1024, 1536, 2048), (7, 11, 15, 23, 31)),
         (512, 1024, 2048, 4096)),
        ("demo", (256, 64, 9, 23, 32, 7), (6, 27, 112), ((256, 384, 512, 768, 1024), (7, 11, 15, 23, 31)),
         (256, 512, 1024, 2048)),
        # smoke sweeps and times B..2B alone
        ("smoke", (128, 32, 9, 7, 16, 7), (3, 13, 55), ((128, 192, 256), (7, 11, 15)), (128, 256)),
    ],
)  # fmt: skip
def test_each_size_derives_its_delethink_shape_and_problem_sizes(size, shape, problem_sizes, sweeps, timing):
    s = settings.SIZES[size]
    assert (s.budget, s.chunk_size, s.keep_head, s.keep_tail, s.carry, s.max_chunks) == shape
    assert s.chunk_size + (s.max_chunks - 1) * (s.chunk_size - s.carry) == s.budget  # Delethink's budget is B
    assert (s.min_steps, s.max_steps, s.cont_max_steps) == problem_sizes
    assert (s.sweep_budgets, s.sweep_chunks) == sweeps
    assert s.timing_budgets == timing
    # the timing problems: one per row of an RL step (16 x 8, 8 x 8, 2 x 2), for claim (c)'s distinct pass
    assert s.timing_problems == {"full": 128, "demo": 64, "smoke": 4}[size]


@pytest.mark.parametrize(
    "change, message",
    [
        ({"budget": 100}, "budget=100: must be a multiple of 8 and >= 80, so that C = B/4 and m = C/2"),
        ({"budget": 72}, "budget=72: must be a multiple of 8 and >= 80"),  # keep_tail would be 0
        ({"budget": 512.0}, "budget=512.0: must be an integer >= 1"),
        ({"sft_steps": 0}, "sft_steps=0: must be an integer >= 1"),
        ({"zero_prob": 1.5}, "zero_prob=1.5: must be a number in [0, 1]"),
        ({"check_both": 1}, "check_both=1: must be True or False"),
        ({"rl_lr": 0.0}, "rl_lr=0.0: must be a number > 0"),
        ({"long_start": 0.6}, "long_start=0.6: must be <= 1 - cont_prob = 0.5 (the shares of SFT examples"),
        ({"prompts": 15}, "prompts=15: must be even"),
    ],
)
def test_a_bad_setting_is_refused_with_a_line_naming_it(change, message):
    with pytest.raises(ValueError, match=re.escape(f"TestbedSettings: {message}")) as refused:
        dataclasses.replace(settings.SIZES["full"], **change)
    assert "\n" not in str(refused.value)


def test_the_settings_and_targets_are_the_preregistered_ones():
    """preregistered.yaml holds the full setting's and the demo's values and the claims' targets as they
    were before its seeds ran: a change to settings.py shows here, and must come with new seeds."""
    registered = yaml.safe_load((REPO / "recipes/markovian_testbed/preregistered.yaml").read_text())
    for size, values in registered["settings"].items():
        assert settings.SIZES[size] == settings.TestbedSettings(**values), size
    targets = {name: getattr(settings, name) for name in dir(settings) if name.startswith("TARGET_")}
    assert targets == registered["targets"]
    for size, run in registered["runs"].items():
        seeds = " ".join(map(str, run["seeds"]))
        assert f'SEEDS="{seeds}"' in run["command"] and (size == "full") != ("SIZE=demo" in run["command"])


@pytest.mark.parametrize("size", list(settings.SIZES))
def test_the_shell_variables_read_back_as_the_same_settings(size):
    """What run.sh does with settings.py's lines (declare), echoed back: every field's value by its run.sh
    name, and the derived ones as the dataclass has them."""
    script = (
        'SIZE_SETTINGS=$("$PYTHON" recipes/markovian_testbed/settings.py "$SIZE")\ndeclare $SIZE_SETTINGS\n'
        'for name in ${SIZE_SETTINGS}; do name=${name%%=*}; echo "$name=${!name}"; done'
    )
    done = subprocess.run(
        ["bash", "-euc", script], cwd=REPO, env={**os.environ, "SIZE": size, "PYTHON": sys.executable},
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    variables = dict(line.split("=", 1) for line in done.stdout.splitlines())
    expected = settings.SIZES[size]

    def read(name: str, like: object) -> object:
        return variables[name] == "1" if isinstance(like, bool) else type(like)(variables[name])

    fields = {f.name: "B" if f.name == "budget" else f.name.upper() for f in dataclasses.fields(expected)}
    declared = {field: read(name, getattr(expected, field)) for field, name in fields.items()}
    assert settings.TestbedSettings(**declared) == expected
    derived = {"C": expected.chunk_size, "HEAD": expected.keep_head, "TAIL": expected.keep_tail,
               "M": expected.carry, "I": expected.max_chunks, "MIN_STEPS": expected.min_steps,
               "MAX_STEPS": expected.max_steps, "CONT_MAX_STEPS": expected.cont_max_steps,
               "TIMING": expected.prompts * expected.samples}  # fmt: skip
    assert {name: int(variables[name]) for name in derived} == derived
    budgets = {"SWEEP_BUDGETS": expected.sweep_budgets, "SWEEP_CHUNKS": expected.sweep_chunks,
               "TIMING_BUDGETS": expected.timing_budgets}  # fmt: skip
    assert {name: tuple(map(int, variables[name].split(","))) for name in budgets} == budgets
    assert set(variables) == {*fields.values(), *derived, *budgets}  # nothing else


def test_an_unknown_size_stops_the_recipe_with_one_line(tmp_path):
    result = run_recipe(tmp_path, SIZE="huge")
    assert result.returncode == 2 and result.stderr == "SIZE must be one of full, demo, smoke, got 'huge'\n"
    assert not (tmp_path / "out").exists()


def test_a_change_to_the_settings_refuses_a_directory_started_before_it(tmp_path):
    """run.sh records every value settings.py gives its size, so a directory whose warm start ran with
    another LONG_START is refused before any stage, and one recorded before the sizes were kept is refused
    too."""
    sizes = settings.SIZES["smoke"].variables()
    rl_args = "trainer.logger=[console,jsonl] trainer.launcher=local"  # what run_recipe passes
    run_vars = {
        "SIZE": "smoke",
        "SEED": "1",
        "STEPS": sizes["STEPS_DEFAULT"],
        "SFT_ARGS": "",
        "RL_ARGS": rl_args,
    }
    record = tmp_path / "out" / run_config.CONFIG_FILE
    record.parent.mkdir()
    for saved, message in (
        ({**run_vars, **sizes, "LONG_START": "0.05"}, f"LONG_START was '0.05', now '{sizes['LONG_START']}'"),
        (run_vars, "has no record of ANSWER_CUTS, B, C, CHECK_BOTH,"),
    ):
        record.write_text(json.dumps(saved))
        result = run_recipe(tmp_path)
        assert result.returncode == 2 and message in result.stderr, result.stderr
        assert result.stderr.count("\n") == 1 and sorted(p.name for p in record.parent.iterdir()) == [
            run_config.CONFIG_FILE
        ]
        assert json.loads(record.read_text()) == saved  # the record is left as it was


def fake_warm_start(
    sft_dir: Path, seed: int, target: float | None, checks: list[tuple[int, float]], delethink_chunks: int = 0
) -> None:
    sft_dir.mkdir(parents=True)
    steps = checks[-1][0] if checks else 3
    metrics = {"losses": [0.1] * steps, "checks": [{"step": s, "accuracy": a} for s, a in checks]}
    (sft_dir / "sft_metrics.json").write_text(json.dumps(metrics))
    (sft_dir / "sft_config.yaml").write_text(
        OmegaConf.to_yaml(
            {
                "train": {"seed": seed, "stop_at_accuracy": target},
                "eval": {"delethink_chunks": delethink_chunks},
            }
        )
    )


def test_the_warm_start_check_passes_a_warm_start_at_its_target_and_stops_one_below(tmp_path):
    fake_warm_start(tmp_path / "good", 3, 0.5, [(50, 0.0), (100, 0.25), (150, 0.625)])
    fake_warm_start(tmp_path / "stuck", 7, 0.5, [(50, 0.0), (100, 0.062), (150, 0.031)], delethink_chunks=7)
    script = RECIPE / "warm_start.py"
    good = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "good")], capture_output=True, text=True
    )
    assert good.returncode == 0
    assert "0.000@50, 0.250@100, 0.625@150; reached its target 0.5 in 150 steps" in good.stdout
    stuck = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "stuck")], capture_output=True, text=True
    )
    assert stuck.returncode == 1 and stuck.stdout == ""
    assert stuck.stderr.count("\n") == 1  # one line
    assert (
        "warm start (seed 7): held-out T = 1 accuracy, the lower of LongCoT and Delethink inference"
        in stuck.stderr
    )
    assert "it reached 0.062 in 150 steps, below its target 0.5 (train.stop_at_accuracy)" in stuck.stderr
    assert "(LongCoT's alone while it was below the target)" in stuck.stderr  # no check holds Delethink's


def test_aggregate_over_seeds_counts_where_each_claim_held(tmp_path):
    def verdict(key: str, value: float | None, held: bool | None) -> dict:
        return {"key": key, "claim": f"claim {key}", "target": ">= 0.95x", "measured": f"{value}x",
                "value": value, "held": held}  # fmt: skip

    for seed, a, gain in ((1, 0.9, 0.05), (2, 1.1, 0.03)):
        fake_warm_start(tmp_path / f"seed_{seed}" / "sft", seed, 0.5, [(50, 0.2), (100, 0.6)])
        verdicts = [verdict("a", a, a >= 0.95), verdict("gain_longcot", gain, True), verdict("b", None, None),
                    verdict("c_rollout", math.nan if seed == 1 else 0.8, seed != 1)]  # fmt: skip
        if seed == 2:  # a report's own warm-start line is what the record shows for that seed
            verdicts.insert(
                0,
                {
                    **verdict("warm_start", 0.6, True),
                    "claim": "the warm start learned it",
                    "measured": "0.600 at SFT step 100",
                },
            )
        (tmp_path / f"seed_{seed}" / "verdicts.json").write_text(json.dumps(verdicts))
    # seed 3 stopped at its warm start: no report
    fake_warm_start(tmp_path / "seed_3" / "sft", 3, 0.5, [(50, 0.0), (100, 0.1)])
    text = aggregate.aggregate(tmp_path, [1, 2, 3])
    # (a): 0.9 and 1.1 -> mean 1.0, sd 0.141; held in seed 2 only, seed 3 not measured
    assert "| claim a | >= 0.95x | 1.000 ± 0.141 | 1 of 2 (1 not measured) |" in text
    assert "| claim b | >= 0.95x | - | 0 of 0 (3 not measured) |" in text
    assert (
        "| claim c_rollout | >= 0.95x | 0.800 (one seed) | 1 of 2 (1 not measured) |" in text
    )  # nan left out
    # the warm start: best accuracies 0.6, 0.6, 0.1 -> mean 0.433, sd 0.289; reached in 2 of 3
    assert "| the warm start reached its target | >= 0.5 | 0.433 ± 0.289 | 2 of 3 |" in text
    assert "| 3 | 0.000@50, 0.100@100 | **no** (0.5) |" in text
    assert "| claim a | 0.9x (**not held**) | 1.1x (held) | - |" in text

    # the results record of the run: every claim seed by seed, the warm start's from its checks
    aggregate.main(["--root", str(tmp_path), "--seeds", "1", "2", "3", "--command", "SEEDS='1 2 3' run.sh"])
    record = load_record(tmp_path / "record.yaml")
    assert (record.section, record.command) == ("testbed", "SEEDS='1 2 3' run.sh")
    assert record.verdicts.seeds == [1, 2, 3]
    claims = {c.claim: c for c in record.verdicts.claims}
    # the warm start's row in the words of the report that has one
    assert list(claims) == ["the warm start learned it", "claim a", "claim gain_longcot", "claim b",
                            "claim c_rollout"]  # fmt: skip
    warm = claims["the warm start learned it"]
    assert warm.measured == [
        "best 0.600 in 100 SFT steps",
        "0.600 at SFT step 100",
        "best 0.100 in 100 SFT steps",
    ]
    assert warm.held == [True, True, False]
    assert claims["claim a"].measured == ["0.9x", "1.1x", "not measured: no report"]
    assert claims["claim a"].held == [False, True, None]


def test_step_errors_sorts_each_thinking_token_by_the_rule_that_decides_it():
    problem = sr.solve("8103", 2)
    assert problem.thinking == " 002:8103 001:1039 000:0391"
    kinds = step_errors.token_kinds(problem)
    zero, neither = step_errors.KINDS[2], step_errors.KINDS[3]
    assert kinds[:9] == [None] + [(0, "counter")] * 3 + [None] + [(0, "copy")] * 4
    assert kinds[9:18] == [None] + [(1, "counter")] * 3 + [None] + [(1, "copy")] * 3 + [(1, neither)]
    assert kinds[26] == (2, zero)  # 1 + 0: the step before is 1039
    assert len(kinds) == len(problem.thinking)

    counts: dict = {}
    for missed in (17, None):  # two traces, the first wrong at step 1's new digit only
        step_errors.tally(kinds, [i != missed for i in range(len(kinds))], counts)
    assert counts[(1, neither)] == [1, 2] and counts[(2, zero)] == [2, 2] and counts[(0, "copy")] == [8, 8]
    assert step_errors.table(counts, show=2).splitlines()[2:] == [
        "| 0 | 1.00 (6) | 1.00 (8) | - | - |",
        "| 1 | 1.00 (6) | 1.00 (6) | - | 0.50 (2) |",
        "| 2+ | 1.00 (6) | 1.00 (6) | 1.00 (2) | - |",
    ]


def test_the_first_weak_token_is_the_earliest_in_trace_order_below_the_bar():
    neither = step_errors.KINDS[3]
    counts = {
        (2, "counter"): [50, 100],  # weak, but later in the trace than step 1's new digit
        (1, neither): [80, 100],
        (1, "counter"): [90, 100],  # at the bar: not weak
        (0, "copy"): [100, 100],
    }
    assert step_errors.first_weak(counts) == (1, neither, 0.8)
    assert step_errors.first_weak(counts, weak=0.5) is None  # 50 of 100 is not below one half
    assert step_errors.where_it_goes_wrong(step_errors.Errors(counts)) == (
        "its trace first goes wrong at step 1's new digit, neither is 0 (teacher-forced accuracy 0.80)"
    )


def test_a_model_right_on_every_token_is_told_what_sampling_makes_of_its_doubts():
    """Where no kind of token is weak, the miss is T = 1 sampling: the probability off the reference,
    summed per kind over the response (thinking, then the answer), and the chance of following it all."""
    problem = sr.solve("8103", 2)  # 27 thinking characters: " 002:8103 001:1039 000:0391"
    kinds = step_errors.token_kinds(problem)
    errors = step_errors.Errors({(0, "copy"): [95, 100]})
    doubtful = [1.0] * 29  # the thinking, then two answer tokens
    doubtful[1], doubtful[4], doubtful[27] = 0.9, 0.8, 0.5  # step 0's counter, its ':', after it
    errors.add_sampled(kinds, doubtful)
    errors.add_sampled(kinds, [1.0] * 29)
    # followed: (0.9 * 0.8 * 0.5 + 1) / 2 = 0.68; off the reference per trace: (0.1 + 0.2 + 0.5) / 2 = 0.4
    assert errors.followed == pytest.approx([0.36, 1.0])
    assert errors.off_reference == pytest.approx(
        {**dict.fromkeys(step_errors.RESPONSE_KINDS, 0.0), "counter": 0.1, "fixed": 0.2, "answer": 0.5}
    )
    assert step_errors.where_it_goes_wrong(errors) == (
        "under teacher forcing every kind of token at every step is right at least 0.9 of the time, but a "
        "T = 1 sample follows the whole reference trace with probability 0.680; it draws 0.400 tokens off "
        "it per trace (counter: 0.050; copy: 0.000; new digit, a or b is 0: 0.000; new digit, neither is 0: "
        "0.000; fixed: 0.100; answer: 0.250)"
    )


def test_a_warm_start_that_missed_says_where_its_trace_goes_wrong(tiny_assets, tmp_path):
    sft_dir = tmp_path / "sft"
    fake_warm_start(sft_dir, 7, 0.8, [(250, 0.0), (500, 0.0)])
    for path in (tiny_assets / "model").iterdir():  # an untrained model: wrong from the first token
        (sft_dir / path.name).write_bytes(path.read_bytes())
    config = OmegaConf.load(sft_dir / "sft_config.yaml")
    config.task = {"name": "shift_register"}
    config.eval.min_size, config.eval.max_size = 2, 3
    OmegaConf.save(config, sft_dir / "sft_config.yaml")
    result = subprocess.run(
        [sys.executable, str(RECIPE / "warm_start.py"), str(sft_dir)], capture_output=True, text=True
    )
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    missed = "below its target 0.8 (train.stop_at_accuracy); its trace first goes wrong at step 0's counter"
    assert missed in result.stderr
    assert f"(step_errors.py {sft_dir}): RL from it would have nothing to learn" in result.stderr


def test_step_errors_runs_on_the_tiny_model(tiny_assets, capsys):
    model = str(tiny_assets / "model")
    step_errors.main([model, "--problems", "3", "--min-steps", "4", "--max-steps", "4", "--show", "2"])
    rows = capsys.readouterr().out.splitlines()
    # title, header, rule, steps 0, 1, 2+, where it goes wrong, what sampling draws off the trace
    assert rows[0].endswith("3 problems of 4..4 steps") and len(rows) == 8
    assert rows[6].startswith("its trace first goes wrong at step 0's counter")  # an untrained model
    # which samples its way off the reference almost surely (a few hundred tokens to choose from each time)
    followed = float(rows[7].split("with probability ")[1].split(";")[0])
    assert rows[7].startswith("A T = 1 sample follows the whole reference trace") and followed < 0.01
    assert rows[3].startswith("| 0 | ") and rows[3].count("(9)") == 1 and "(12)" in rows[3]


def test_step_errors_says_where_each_head_looks_at_the_first_steps(tiny_assets):
    table = step_errors.head_offsets(tiny_assets / "model", 2, 5, 6, seed=0).splitlines()
    heads = [f"L{layer}H{head}" for layer in range(2) for head in range(4)]  # the tiny model's shape
    assert table[0] == "| token | " + " | ".join(heads) + " |"
    assert [row.split(" | ")[0] for row in table[2:]] == [f"| {label}" for label in step_errors.HEAD_TOKENS]
    for row in table[2:]:  # per head: the offset it weighs most (never ahead of the token), and its weight
        for cell in row.strip("| ").split(" | ")[1:]:
            offset, weight = cell.split(" (")
            assert int(offset) < 0 and 0 < float(weight.rstrip(")")) <= 1


def test_failure_start_names_where_a_sample_first_leaves_its_reference(tmp_path):
    question = "<|user|>002:8103<|assistant|><think>"  # reference: " 002:8103 001:1039 000:0391"
    answer = "</think>\\boxed{0391}<|end|>"

    def sample(*responses: str, mode: str = "delethink", score: float = 0.0) -> dict:
        chunks = [{"response": r} for r in responses]
        return {"problem": question, "chunks": chunks, "mode": mode, "thinking_budget": 256, "score": score}

    starts = report.FAILURE_STARTS
    cases = {
        None: sample(" 002:8103 001:1039 000:0391" + answer, score=1.0),
        starts[0]: sample(" 003:8103 002:1039" + answer),
        starts[1]: sample(" 002:8103 001:1038 000:0381" + answer),
        starts[3]: sample(" 002:8103 001:10", "39 000:0392" + answer),  # 10 tokens after the cut
        starts[2]: sample(" 002:8103 001:1039 00", "0:0392" + answer),  # 5 tokens after the cut
        starts[4]: sample(" 002:8103 001:1039 000:0391</think>\\boxed{0392}<|end|>"),
        starts[5]: sample(" 002:8103 001:10"),
    }
    for expected, case in cases.items():
        assert report.failure_start(case) == expected

    (tmp_path / "eval" / "heldout_sft").mkdir(parents=True)
    rows = [
        *cases.values(),
        sample(" 002:8103 001:1038", mode="longcot"),
        {**cases[None], "thinking_budget": 512},
    ]
    (tmp_path / "eval" / "heldout_sft" / "samples.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows)
    )
    table = report.failure_starts_section(tmp_path, 256)
    assert (
        table[4] == "| first wrong token | warm start, LongCoT inference | warm start, Delethink inference |"
    )
    assert f"| {starts[1]} | 1.000 (1) | 0.143 (1) |" in table  # 7 Delethink samples at B, 1 LongCoT
    assert "| none: solved | 0.000 (0) | 0.143 (1) |" in table
    assert report.failure_starts_section(tmp_path / "none", 256) == []


def test_eval_runs_splits_its_arguments_at_each_double_dash():
    eval_runs = load("eval_runs")
    assert eval_runs.split_runs(["--", "a=1", "b=2", "--", "c=3"]) == [["a=1", "b=2"], ["c=3"]]
    for argv, problem in (([], "each run starts with `--`"), (["a=1"], "each run starts with `--`"),
                          (["--", "a=1", "--"], "a `--` with no overrides")):  # fmt: skip
        with pytest.raises(eval_runs.ConfigError, match=problem):
            eval_runs.split_runs(argv)


def test_eval_runs_checks_every_run_before_the_first_starts(tiny_assets, tmp_path):
    good = [f"model_path={tiny_assets / 'model'}", f"data_files=[{tiny_assets / 'data' / 'val.jsonl'}]",
            f"output_dir={tmp_path / 'first'}", "longcot.budgets=[8]"]  # fmt: skip
    for second, line in (
        (["longcot.budgets=[0]"], "config error: run 2 of 2: longcot.budgets"),
        (["longcot.budgts=[8]"], "config error: run 2 of 2: longcot.budgts: unknown key; did you mean"),
        (
            ["mode=longcot=x"],
            "config error: run 2 of 2: 'mode=longcot=x': mismatched input",
        ),  # Hydra's grammar
    ):
        result = subprocess.run(
            [sys.executable, str(RECIPE / "eval_runs.py"), "--", *good, "--", *good[:2], *second],
            capture_output=True, text=True, timeout=HANG_S, cwd=REPO,
        )  # fmt: skip
        assert result.returncode == 2 and result.stderr.startswith(line), (second, result.stderr)
        assert result.stderr.count("\n") == 1 and not (tmp_path / "first").exists()

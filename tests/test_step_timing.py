"""The one timing script (recipes/scaling/benchmark.py) with trained checkpoints, as the Markovian testbed's
timing stage runs it: claim (c)'s per-token arithmetic against numbers worked by hand, the refusals before
any model loads, and short real runs on the tiny model (the timing table and its update profile). The tiny
model's own mode is tests/test_scaling_benchmark.py's."""

import json
import math
import statistics

import pytest

from recipes.scaling.benchmark import main
from recipes.scaling.step_timing import op_time_split, per_token_ms, summarize


def repeat(wall_s: float, decode_s: float, prefill_s: float, update_s: float, rss: int) -> dict:
    """One repeat's measures of a step batch: 4 trajectories of 3 requests each, 104 tokens sampled."""
    return {"wall_s": wall_s, "cpu_s": wall_s / 2, "decode_s": decode_s, "prefill_s": prefill_s,
            "update_s": update_s, "update_cpu_s": update_s, "rollout_rss": rss, "update_rss": 2 * rss,
            "trajectories": 4, "thinking_tokens": 104, "requests": 12, "prefill_tokens": 50,
            "reused_prompt_tokens": 20}  # fmt: skip


def test_a_pass_is_its_median_times_its_highest_memory_and_the_per_token_times_of_those():
    row = summarize(
        [repeat(1.0, 0.3, 0.10, 2.0, 5), repeat(3.0, 0.5, 0.20, 1.0, 9), repeat(2.0, 0.4, 0.15, 4.0, 7)]
    )
    assert (row["wall_s"], row["cpu_s"], row["update_s"], row["decode_s"], row["prefill_s"]) == (
        2.0, 1.0, 2.0, 0.4, 0.15,
    )  # fmt: skip
    assert (row["rollout_rss"], row["update_rss"]) == (9, 18)  # the highest, not the median's repeat's
    assert row["step_s"] == 4.0 and row["step_cpu_s"] == 3.0  # the medians' sums: 2 + 2, 1 + 2
    # each request's first token comes from its prefill: 104 - 12 = 92 decoded
    assert row["decoded_tokens"] == 92
    assert row["decode_ms_per_token"] == pytest.approx(1e3 * 0.4 / 92)  # 4.348 ms
    assert row["prefill_ms_per_token"] == pytest.approx(1e3 * 0.15 / 50)  # 3.0 ms
    assert [r["wall_s"] for r in row["repeats"]] == [1.0, 3.0, 2.0] and "rollout_rss" not in row["repeats"][0]
    assert (row["trajectories"], row["reused_prompt_tokens"]) == (4, 20)
    # a rollout pass without an update (the distinct-problem pass) has no step
    rollout_only = summarize([{k: v for k, v in repeat(1.0, 0.3, 0.1, 0, 5).items() if "update" not in k}])
    assert "step_s" not in rollout_only and rollout_only["decode_ms_per_token"] == pytest.approx(300 / 92)


def test_per_token_time_of_no_tokens_is_not_a_number():
    assert per_token_ms(0.5, 250) == 2.0
    assert math.isnan(per_token_ms(0.5, 0))


def test_op_time_split_counts_matmul_and_attention_kernels_against_the_rest():
    split = op_time_split(
        {"aten::mm": 3.0, "aten::addmm": 1.0, "aten::mul": 2.0, "aten::silu": 0.5,
         "aten::_scaled_dot_product_flash_attention_for_cpu_backward": 1.5, "aten::copy_": 2.0},
        top=2,
    )  # fmt: skip
    assert split["op_s"] == 10.0 and split["matmul_s"] == 5.5 and split["matmul_share"] == 0.55
    assert split["top_other"] == [("aten::mul", 2.0), ("aten::copy_", 2.0)]
    assert op_time_split({})["matmul_share"] == 0.0


def checkpoint_argv(tiny_assets, data, *extra: str) -> list[str]:
    model = str(tiny_assets / "model")
    return ["--longcot", model, "--delethink", model, "--data", str(data), "--chunk-size", "12",
            "--keep-head", "2", "--keep-tail", "4", "--prompts", "2", "--samples", "2", *extra]  # fmt: skip


def test_a_data_file_with_too_few_distinct_problems_is_refused_before_any_model_loads(
    tiny_assets, tmp_path, monkeypatch
):
    rows = (tiny_assets / "data" / "train.jsonl").read_text().splitlines()
    data = tmp_path / "timing.jsonl"
    data.write_text("\n".join([rows[0], rows[1], rows[0], rows[2]]) + "\n")  # 4 rows, 3 distinct problems

    def no_model(*args, **kwargs):
        raise AssertionError("a model loaded before the data file was checked")

    monkeypatch.setattr("verl.single_controller.fsdp_workers.load_causal_lm", no_model)
    with pytest.raises(SystemExit) as refused:
        main(checkpoint_argv(tiny_assets, data, "--budgets", "24"))
    message = str(refused.value)
    assert message.startswith(f"--data {data}: 3 distinct problems") and "\n" not in message
    assert "fewer than the 4 of the distinct-problem pass (--prompts x --samples" in message
    # the profile needs the step batch's 2 problems alone
    with pytest.raises(AssertionError, match="a model loaded"):
        main(checkpoint_argv(tiny_assets, data, "--budgets", "24", "--profile-update"))


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--prompts", "4"], "--prompts is for checkpoints only"),
        (["--longcot", "m", "--delethink", "m", "--data", "d"],
         "with checkpoints give --chunk-size, --keep-head, --keep-tail, --budgets or --chunks"),
        (["--longcot", "m", "--delethink", "m", "--data", "d", "--chunk-size", "12", "--keep-head", "2",
          "--keep-tail", "4", "--budgets", "24", "--quick"], "--quick is for the tiny model only"),
        (["--budgets", "64,100"], "thinking_budget=100: must be C = 64 plus whole chunks of C - m = 32"),
        (["--budgets", "64,x"], "--budgets '64,x': give comma-separated whole numbers"),
        (["--chunks", "0"], "max_chunks=0: must be >= 1"),
        (["--repeats", "0"], "--repeats=0; it must be >= 1"),
    ],
)  # fmt: skip
def test_bad_flags_stop_before_anything_loads_naming_the_flag(argv, message, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2 and message in capsys.readouterr().err


def test_the_checkpoint_timing_writes_both_passes_of_every_budget(tiny_assets, tmp_path, capsys):
    """The testbed's timing stage in seconds: two budgets (I = 3 and 5 chunks), 2 problems x 2 samples and
    the distinct-problem pass of 4, two alternating repeats."""
    data = tiny_assets / "data" / "train.jsonl"
    out = tmp_path / "timing.json"
    run = main(checkpoint_argv(tiny_assets, data, "--budgets", "24,36", "--repeats", "2", "--json", str(out)))
    result = run["result"]
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    assert (result["prompts"], result["samples"], result["distinct_rows"], result["repeats"]) == (2, 2, 4, 2)
    questions = [json.loads(line)["prompt"][0]["content"] for line in data.read_text().splitlines()[:4]]
    # the tiny tokenizer: one token per byte, and the chat template adds 3
    lengths = [len(q) + 3 for q in questions]
    for row, chunks in zip(result["rows"], (3, 5), strict=True):
        budget = row["budget"]
        assert row["max_chunks"] == chunks
        for mode, requests in (("longcot", 1), ("delethink", chunks)):
            step, distinct = row[mode], row[mode]["distinct"]
            assert step["thinking_tokens"] == distinct["thinking_tokens"] == 4 * budget  # budgets filled
            assert distinct["trajectories"] == 4 and distinct["requests"] == 4 * requests
            for run_ in (step, distinct):
                assert run_["decoded_tokens"] == run_["thinking_tokens"] - run_["requests"]
                assert run_["decode_ms_per_token"] == pytest.approx(
                    1e3 * run_["decode_s"] / run_["decoded_tokens"]
                )
                assert run_["prefill_ms_per_token"] == pytest.approx(
                    1e3 * run_["prefill_s"] / run_["prefill_tokens"]
                )
                assert run_["wall_s"] == statistics.median(r["wall_s"] for r in run_["repeats"])
                assert len(run_["repeats"]) == 2
            assert step["update_s"] > 0 and step["train_tokens"] >= step["thinking_tokens"]
            assert step["step_s"] == pytest.approx(step["wall_s"] + step["update_s"])
        # LongCoT's step batch prefills each problem once and copies it for its second sample; the distinct
        # pass copies nothing and prefills all four problems
        lc = row["longcot"]
        assert lc["prefill_tokens"] == lc["reused_prompt_tokens"] == lengths[0] + lengths[1]
        assert (
            lc["distinct"]["prefill_tokens"] == sum(lengths) and lc["distinct"]["reused_prompt_tokens"] == 0
        )
        assert row["delethink"]["max_context"] <= max(lengths) + 12  # question + C, at every budget
        assert row["longcot"]["max_context"] == max(lengths[:2]) + budget
    # the as-trained pair honours end-of-sequence, at the first budget, with no distinct pass
    trained = result["as_trained"]
    assert trained["budget"] == 24 and "distinct" not in trained["longcot"]
    assert 4 <= trained["longcot"]["thinking_tokens"] <= 4 * 24
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-3].startswith("decode ms/token, distinct rows, L=24 -> 36: Delethink ")


def test_the_update_profile_runs_both_environments_on_the_tiny_model(tiny_assets, tmp_path, capsys):
    """--profile-update end to end on the random tiny model: a rollout, then its update under the profiler."""
    out = tmp_path / "profile.json"
    result = main(
        checkpoint_argv(
            tiny_assets,
            tiny_assets / "data" / "train.jsonl",
            "--budgets",
            "24",
            "--profile-update",
            "--json",
            str(out),
        )  # fmt: skip
    )["result"]
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    for mode in ("longcot", "delethink"):
        row = result[mode]
        assert 0 < row["matmul_s"] < row["op_s"] and 0 < row["matmul_share"] < 1
        assert row["update_s"] > 0 and row["train_tokens"] >= 4 * 24  # 4 trajectories, budget filled
    # Delethink's rows repeat the question and the carry-over in every chunk: more tokens than LongCoT's
    assert result["delethink"]["train_tokens"] > result["longcot"]["train_tokens"]
    assert "matmul + attention" in capsys.readouterr().out

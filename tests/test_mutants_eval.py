"""verl/eval/'s pure parts to the letter: the paired statistics (verl/eval/paired.py), the summary of a
run's samples (verl/eval/summary.py) and the figure writer (verl/eval/plot.py), each against numbers
worked by hand. Written for `make mutants`."""

import dataclasses
import importlib.util
import json
import math
import os
import shutil
import stat
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from verl.agent_loop.delethink import DelethinkAgentLoop
from verl.agent_loop.single_turn import SingleTurnAgentLoop
from verl.config import ConfigError, TaskConfig
from verl.core.delethink import delethink_param_problems
from verl.core.trajectory import PromptItem, Trajectory, Turn
from verl.eval import paired, summary
from verl.eval.config import (
    DelethinkEvalConfig,
    EvalConfig,
    EvalSamplingConfig,
    LongCoTEvalConfig,
    load_eval_config,
    resolve_model_dir,
    rule_errors,
)
from verl.eval.evaluate import (
    EvalRun,
    _json_safe,
    build_loop,
    check_fits_context,
    evaluate,
    first_turn_budget,
    load_items,
    planned_runs,
    probe_pairs,
    run_summary,
    sample_records,
    sample_seed,
)
from verl.eval.plot import save_figure
from verl.models.tiny import build_tokenizer
from verl.utils.seeding import derive_seed
from verl.workers.reward_manager import RewardResult


def test_problem_scores_keep_only_the_runs_mode_and_budget_in_sample_order():
    samples = [
        {"mode": "longcot", "thinking_budget": 256, "problem_index": 1, "score": 1},
        {"mode": "longcot", "thinking_budget": 512, "problem_index": 1, "score": 0},
        {"mode": "delethink", "thinking_budget": 256, "problem_index": 1, "score": 0},
        {"mode": "longcot", "thinking_budget": 256, "problem_index": 0, "score": 0.5},
        {"mode": "longcot", "thinking_budget": 256, "problem_index": 1, "score": 0},
    ]
    assert paired.problem_scores(samples, "longcot", 256) == {1: [1.0, 0.0], 0: [0.5]}


def test_the_standard_error_is_the_sample_sd_over_root_n_and_nan_for_one_value():
    # 1, 2, 3, 6: mean 3, sample variance (4 + 1 + 0 + 9) / 3 = 14 / 3, standard error sqrt(14/3) / 2
    mean, se = paired.mean_and_standard_error([1.0, 2.0, 3.0, 6.0])
    assert mean == 3.0 and se == pytest.approx(math.sqrt(14 / 3) / 2)
    mean, se = paired.mean_and_standard_error([0.25])
    assert mean == 0.25 and math.isnan(se)


def test_accuracy_weighs_every_problem_the_same_whatever_its_samples():
    # problem means 0.5 and 1.0 (not the 3 of 4 samples): 0.75, standard error sd 0.354 / sqrt 2 = 0.25
    assert paired.accuracy({0: [1.0, 0.0], 1: [1.0]}) == pytest.approx((0.75, 0.25))


def test_runs_on_different_problems_are_not_paired():
    with pytest.raises(ValueError, match=r"^different problems: 2 against 1$"):
        paired.paired_gain({0: [1.0], 1: [0.0]}, {0: [1.0]})
    with pytest.raises(ValueError, match=r"^different problems: 1 against 1$"):
        paired.paired_ratio({0: [1.0]}, {1: [1.0]})


def test_a_paired_gain_is_the_mean_and_standard_error_of_the_per_problem_differences():
    # differences 0.5 - 0, 1 - 1, 0 - 0.5: mean 0, sample sd 0.5, standard error 0.5 / sqrt 3
    gain = paired.paired_gain({0: [1.0, 0.0], 1: [1.0], 2: [0.0]}, {0: [0.0], 1: [1.0], 2: [0.5]})
    assert gain == pytest.approx((0.0, 0.5 / math.sqrt(3)))


def test_a_paired_ratio_is_the_ratio_of_accuracies_with_a_bootstrap_spread():
    run, base = {0: [1.0], 1: [1.0], 2: [0.0]}, {0: [1.0], 1: [0.0], 2: [1.0]}
    ratio, spread = paired.paired_ratio(run, base, resamples=200, seed=1)
    assert ratio == 1.0  # 2 / 2
    assert 0 < spread < 2
    assert paired.paired_ratio(run, base, resamples=200, seed=1) == (ratio, spread)  # the seed fixes it
    assert paired.paired_ratio(run, base, resamples=200, seed=2)[1] != spread
    nan_ratio, nan_spread = paired.paired_ratio(run, {0: [0.0], 1: [0.0], 2: [0.0]})
    assert math.isnan(nan_ratio) and math.isnan(nan_spread)


def test_a_bootstrap_of_one_problem_has_no_spread():
    ratio, spread = paired.paired_ratio({0: [0.5]}, {0: [1.0]}, resamples=5)
    assert ratio == 0.5 and spread == 0.0  # every resample picks the one problem: five ratios of 0.5


def test_fmt_writes_three_decimals_and_a_sign_when_asked():
    assert paired.fmt((0.625, 0.0214)) == "0.625 ± 0.021"
    assert paired.fmt((0.0514, 0.012), signed=True) == "+0.051 ± 0.012"
    assert paired.fmt((-0.0514, 0.012), True) == "-0.051 ± 0.012"


def sample(problem: int, index: int, answer: str, score: float, source: str = "a", **lengths) -> dict:
    return {"problem_index": problem, "sample_index": index, "answer": answer, "score": score,
            "data_source": source, "thinking_tokens": lengths.get("tokens", 10),
            "num_chunks": lengths.get("chunks", 1), "has_eos": lengths.get("eos", True)}  # fmt: skip


def test_accuracy_metrics_average_each_problems_metrics_with_majority_ties_to_the_first_sample():
    samples = [
        sample(0, 1, "7", 0.0), sample(0, 0, "5", 1.0),  # a tie: sample 0's answer, 5, is the majority
        sample(1, 0, "2", 0.0), sample(1, 1, "2", 0.0),
    ]  # fmt: skip
    metrics = summary.accuracy_metrics(samples, ks=[1, 2])
    assert metrics["mean@2"] == 0.25  # (0.5 + 0) / 2
    assert metrics["maj@2"] == 0.5  # (1 + 0) / 2
    assert metrics["pass@2"] == 0.5


def test_length_metrics_count_problems_samples_tokens_chunks_and_eos():
    samples = [sample(0, 0, "1", 1, tokens=10, chunks=1, eos=True), sample(0, 1, "1", 1, tokens=30, chunks=3,
               eos=False), sample(3, 0, "1", 1, tokens=20, chunks=2, eos=True)]  # fmt: skip
    assert summary.length_metrics(samples) == {
        "num_problems": 2, "num_samples": 3, "thinking_tokens_mean": 20.0, "thinking_tokens_max": 30,
        "chunks_per_trace_mean": 2.0, "has_eos_rate": pytest.approx(2 / 3),
    }  # fmt: skip


def test_a_run_summary_holds_all_sources_then_each_and_its_speed():
    samples = [sample(0, 0, "1", 1.0, "a", tokens=30), sample(1, 0, "2", 0.0, "b", tokens=10)]
    found = summary.summarise_run(samples, ks=[1], wall_time_s=8.0)
    assert list(found["metrics"]) == ["all", "a", "b"]
    assert found["metrics"]["all"]["mean@1"] == 0.5 and found["metrics"]["b"]["mean@1"] == 0.0
    assert found["metrics"]["a"]["num_samples"] == 1
    assert (found["wall_time_s"], found["sampled_tokens"], found["tokens_per_s"]) == (8.0, 40, 5.0)
    assert math.isnan(summary.summarise_run(samples, ks=[1], wall_time_s=0.0)["tokens_per_s"])
    assert summary.summarise_run(samples, ks=[1], wall_time_s=0.5)["tokens_per_s"] == 80.0  # under a second


def png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")  # the IHDR chunk's


def test_a_figure_is_written_whole_readable_by_all_and_closed(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(2, 1))
    ax.plot([0, 1], [0, 1])
    save_figure(fig, tmp_path / "deep" / "er" / "f.png", dpi=50)
    path = tmp_path / "deep" / "er" / "f.png"
    assert png_size(path) == (100, 50)  # 2 x 1 inches at 50 dots per inch
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert os.listdir(path.parent) == ["f.png"]  # no temporary file left
    assert not plt.fignum_exists(fig.number)


def test_a_figure_is_written_at_120_dots_per_inch_unless_told(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    save_figure(plt.subplots(figsize=(2, 1))[0], tmp_path / "f.png")
    assert png_size(tmp_path / "f.png") == (240, 120)


def test_the_accuracy_figure_has_a_line_per_mode_over_the_budgets(tmp_path, monkeypatch):
    from verl.eval import plot

    saved = {}

    def keep(fig, path, dpi=120):
        saved["fig"] = fig
        save_figure(fig, path, dpi=dpi)

    monkeypatch.setattr(plot, "save_figure", keep)

    def run(mode: str, budget: int, accuracy: float) -> dict:
        return {
            "mode": mode,
            "thinking_budget": budget,
            "metrics": {"all": {"mean@4": accuracy}, "x": {"mean@4": 0}},
        }

    runs = [run("longcot", 512, 0.5), run("delethink", 512, 0.25), run("longcot", 256, 0.125)]
    plot.plot_accuracy_vs_budget(runs, "mean@4", tmp_path / "a.png")
    fig = saved["fig"]
    (ax,) = fig.axes
    assert list(fig.get_size_inches()) == [6, 4] and png_size(tmp_path / "a.png") == (720, 480)
    found = [
        (line.get_label(), list(line.get_xdata()), list(line.get_ydata()), line.get_marker())
        for line in ax.lines
    ]
    assert found == [("delethink", [512], [0.25], "o"), ("longcot", [256, 512], [0.125, 0.5], "o")]
    assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_ylim()) == ("thinking budget (tokens)", "mean@4", (0, 1))
    assert all(
        g.get_visible() and g.get_alpha() == 0.3 for g in ax.xaxis.get_gridlines() + ax.yaxis.get_gridlines()
    )
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["delethink", "longcot"]


def test_a_bootstrap_needs_two_ratios_for_a_spread_and_defaults_to_2000_resamples_of_seed_0():
    one = {0: [1.0]}
    ratio, spread = paired.paired_ratio(one, one, resamples=1)
    assert ratio == 1.0 and math.isnan(spread)
    assert paired.paired_ratio(one, one, resamples=2) == (1.0, 0.0)
    run, base = {0: [1.0], 1: [1.0], 2: [0.0]}, {0: [1.0], 1: [0.0], 2: [1.0]}
    assert paired.paired_ratio(run, base) == paired.paired_ratio(run, base, resamples=2000, seed=0)


def test_a_figure_is_drawn_to_a_hidden_temporary_file_beside_its_path_and_only_it_is_closed(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    saved, other = plt.subplots()[0], plt.subplots()[0]  # the other one is pyplot's current figure
    drawn_to = []
    draw = saved.savefig

    def record_then_draw(path, **kwargs):  # the temporary file: renamed onto the path, so on its filesystem
        drawn_to.append(Path(path))
        draw(path, **kwargs)

    saved.savefig = record_then_draw
    save_figure(saved, tmp_path / "f.png")
    (temporary,) = drawn_to
    assert (
        temporary.parent == tmp_path and temporary.name.startswith(".f.png.") and temporary.suffix == ".png"
    )
    assert not plt.fignum_exists(saved.number) and plt.fignum_exists(other.number)
    plt.close(other)


# --- config.py: every rule at its edge, with its exact message ---------------------------------------------


def model_dir(path: Path, config: dict | None = None) -> Path:
    """The files a model directory needs to pass the checks (their contents are never loaded here)."""
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(config or {}))
    for name in ("model.safetensors", "tokenizer.json", "chat_template.jinja"):
        (path / name).write_text("")
    return path


@pytest.fixture
def good(tmp_path) -> EvalConfig:
    data = tmp_path / "val.jsonl"
    data.write_text("")
    return EvalConfig(model_path=str(model_dir(tmp_path / "model")), output_dir=str(tmp_path / "out"),
                      data_files=[str(data)])  # fmt: skip


def with_(config: EvalConfig, **changes) -> EvalConfig:
    """`config` with top-level fields or (as "sampling.n") a nested one changed."""
    for key, value in changes.items():
        if "." in key:
            part, name = key.split(".")
            config = dataclasses.replace(
                config, **{part: dataclasses.replace(getattr(config, part), **{name: value})}
            )
        else:
            config = dataclasses.replace(config, **{key: value})
    return config


@pytest.mark.parametrize(
    "changes, error",
    [
        ({"mode": "fast"}, "mode='fast': must be one of ['longcot', 'delethink', 'probe']"),
        ({"engine": "vllm"}, "engine='vllm': must be one of ['hf', 'sglang']"),
        ({"data_files": []}, "data_files=[]: empty, and no tasks either: nothing to evaluate"),
        ({"max_problems": 0}, "max_problems=0: must be -1 (all) or >= 1"),
        ({"max_problems": -2}, "max_problems=-2: must be -1 (all) or >= 1"),
        ({"max_num_seqs": 0}, "max_num_seqs=0: must be >= 1"),
        ({"num_threads": -1}, "num_threads=-1: must be >= 0 (0: every core)"),
        ({"pass_k": []}, "pass_k=[]: must list at least one k"),
        ({"sampling.temperature": -0.5}, "sampling.temperature=-0.5: must be >= 0 (0: greedy)"),
        ({"sampling.top_p": 0.0}, "sampling.top_p=0.0: must be in (0, 1]"),
        ({"sampling.top_p": 1.5}, "sampling.top_p=1.5: must be in (0, 1]"),
        ({"sampling.top_k": 0}, "sampling.top_k=0: must be >= 1, or -1 to disable it"),
        ({"sampling.top_k": -2}, "sampling.top_k=-2: must be >= 1, or -1 to disable it"),
        ({"pass_k": [0]}, "pass_k[0]=0: must be in [1, sampling.n=1]"),
        ({"pass_k": [1, 2]}, "pass_k[1]=2: must be in [1, sampling.n=1]"),
        ({"reward.path": "/nope/reward.py"}, "reward.path='/nope/reward.py': no such file"),
        ({"longcot.budgets": [128, 0]}, "longcot.budgets[1]=0: must be >= 1 thinking token"),
        ({"max_prompt_length": 0}, "max_prompt_length=0: must be >= 1"),
    ],
)
def test_a_bad_value_is_named_with_its_key_and_rule(good, changes, error):
    assert rule_errors(with_(good, **changes)) == [error]


def test_no_samples_leave_no_k_in_range(good):
    assert rule_errors(with_(good, **{"sampling.n": 0})) == [
        "sampling.n=0: must be >= 1", "pass_k[0]=1: must be in [1, sampling.n=0]"
    ]  # fmt: skip


@pytest.mark.parametrize(
    "changes",
    [{"max_problems": -1}, {"max_problems": 1}, {"max_num_seqs": 1}, {"num_threads": 0},
     {"sampling.temperature": 0.0}, {"sampling.top_p": 1.0}, {"sampling.top_k": -1}, {"sampling.top_k": 1},
     {"sampling.n": 4, "pass_k": [1, 4]}, {"longcot.budgets": [1]}, {"max_prompt_length": 1},
     {"mode": "probe", "longcot.budgets": []}],
)  # fmt: skip
def test_a_value_at_the_edge_of_its_rule_passes(good, changes):
    assert rule_errors(with_(good, **changes)) == []


def test_the_model_is_a_complete_directory_or_a_checkpoints_hf_folder(good, tmp_path):
    run = tmp_path / "run" / "global_step_3"
    model_dir(run / "actor" / "huggingface")
    assert resolve_model_dir(str(run)) == run / "actor" / "huggingface"
    assert resolve_model_dir(good.model_path) == Path(good.model_path)
    assert rule_errors(with_(good, model_path=str(run))) == []
    assert rule_errors(with_(good, model_path=str(tmp_path / "nope"))) == [
        f"model_path='{tmp_path / 'nope'}': no config.json in it or in its actor/huggingface/"
    ]
    (Path(good.model_path) / "model.safetensors").unlink()
    assert rule_errors(good) == [
        f"model_path='{good.model_path}': not a complete model directory ({good.model_path}): no weights "
        "(model.safetensors or pytorch_model.bin)"
    ]


def test_a_sliding_window_model_is_refused_by_the_hf_engine_only(good, tmp_path):
    window = str(model_dir(tmp_path / "window", {"sliding_window": 64}))
    refusal = "it attends within a sliding window of 64 tokens: the HF engine runs full attention only"
    assert rule_errors(with_(good, model_path=window)) == [f"model_path='{window}': {refusal}"]
    installed = importlib.util.find_spec("sglang") is not None
    install = "SGLang is not installed: pip install --no-deps -r requirements-sglang-cpu.txt"
    assert rule_errors(with_(good, model_path=window, engine="sglang")) == (
        [] if installed else [f"engine='sglang': {install}"]
    )


def test_data_files_must_exist_and_tasks_are_checked_under_their_names(good, tmp_path):
    assert rule_errors(with_(good, data_files=[good.data_files[0], str(tmp_path / "x.jsonl")])) == [
        f"data_files[1]='{tmp_path / 'x.jsonl'}': no such file"
    ]
    task = TaskConfig(path=good.data_files[0], data_source="s")
    assert rule_errors(with_(good, data_files=[], tasks={"t": task})) == []
    bad = dataclasses.replace(task, skip_rows=-1, path=str(tmp_path / "gone.jsonl"))
    errors = rule_errors(with_(good, tasks={"t": bad}))
    assert errors[0] == "tasks.t.skip_rows=-1: must be >= 0"
    assert (
        errors[1].startswith(f"tasks.t.path='{tmp_path / 'gone.jsonl'}': no such file") and len(errors) == 2
    )


def delethink(good: EvalConfig, **changes) -> EvalConfig:
    return with_(good, mode="delethink", **{f"delethink.{k}": v for k, v in changes.items()})


def test_delethink_needs_an_i_valid_params_at_every_i_and_room_for_the_question(good):
    assert rule_errors(with_(delethink(good, max_chunks=[]), max_prompt_length=96)) == [
        "delethink.max_chunks=[]: must list at least one I"
    ]
    # keep_head + keep_tail = 16 by default: the question needs at least one token more
    assert rule_errors(with_(delethink(good), max_prompt_length=17)) == []
    assert rule_errors(with_(delethink(good), max_prompt_length=16)) == [
        "max_prompt_length=16: must be > delethink.keep_head + keep_tail = 16: the question needs room next "
        "to the carry-over"
    ]
    # a bad field is named once, whatever the number of I values; then the room is not checked
    bad = with_(delethink(good, keep_head=-1, max_chunks=[3, 5]), max_prompt_length=1)
    expected = [f"delethink.{p}" for p in delethink_param_problems(**bad.delethink.params_fields(3))]
    assert rule_errors(bad) == expected and len(expected) == 1
    assert rule_errors(with_(good, mode="probe", max_prompt_length=16))[0].startswith(
        "max_prompt_length=16: must be >"
    )


def test_a_delethink_sweep_is_one_parameter_set_per_i_and_the_question_gets_what_the_carry_leaves(good):
    config = delethink(good, max_chunks=[3, 5])
    assert [p.max_chunks for p in config.delethink.sweep()] == [3, 5]
    assert config.delethink.params_fields(5) == {**dataclasses.asdict(config.delethink), "max_chunks": 5}
    assert (config.uses_delethink, config.max_question_tokens) == (True, 96 - 16)
    assert (good.uses_delethink, good.max_question_tokens) == (False, 96)
    assert with_(good, mode="probe").uses_delethink


def test_the_config_loader_names_missing_and_unresolvable_keys_and_counts_several_problems(good):
    base = OmegaConf.create(dataclasses.asdict(good))  # what Hydra composes: a plain tree
    with pytest.raises(ConfigError) as missing:
        load_eval_config(OmegaConf.structured(EvalConfig))  # neither of the keys without a default
    assert str(missing.value) == (
        "model_path: required, set model_path=...; output_dir: required, set output_dir=..."
    )
    with pytest.raises(ConfigError, match=r"^output_dir: cannot resolve the value: "):
        load_eval_config(OmegaConf.merge(base, {"output_dir": "${nope}"}))
    with pytest.raises(ConfigError) as one:
        load_eval_config(OmegaConf.merge(base, {"max_num_seqs": 0}))
    assert str(one.value) == "max_num_seqs=0: must be >= 1"
    with pytest.raises(ConfigError) as two:
        load_eval_config(OmegaConf.merge(base, {"max_num_seqs": 0, "num_threads": -1}))
    assert str(two.value) == (
        "2 problems:\n  - max_num_seqs=0: must be >= 1\n  - num_threads=-1: must be >= 0 (0: every core)"
    )
    assert load_eval_config(OmegaConf.merge(base, {"hydra": {"run": {"dir": "x"}}})) == good


# --- evaluate.py: the runs it plans, what it checks before loading weights, what it writes -----------------


def sweep(good: EvalConfig, mode: str) -> EvalConfig:
    # C = 32, m = 4 + 12: I = 3 gives 32 + 2 x 16 = 64 thinking tokens, I = 7 gives 32 + 6 x 16 = 128
    return with_(good, mode=mode, **{"longcot.budgets": [64, 128], "delethink.max_chunks": [3, 7]})


def test_the_planned_runs_are_each_budget_each_i_or_both_at_equal_totals(good):
    assert planned_runs(sweep(good, "longcot")) == [EvalRun("longcot", 64), EvalRun("longcot", 128)]
    i3, i7 = sweep(good, "delethink").delethink.sweep()
    assert planned_runs(sweep(good, "delethink")) == [
        EvalRun("delethink", 64, i3),
        EvalRun("delethink", 128, i7),
    ]
    assert planned_runs(sweep(good, "probe")) == [
        EvalRun("longcot", 64), EvalRun("delethink", 64, i3),
        EvalRun("longcot", 128), EvalRun("delethink", 128, i7),
    ]  # fmt: skip
    assert [(r.label, r.max_chunks) for r in planned_runs(sweep(good, "probe"))[:2]] == [
        ("longcot_B64", None), ("delethink_I3", 3)
    ]  # fmt: skip
    assert [first_turn_budget(r) for r in planned_runs(sweep(good, "probe"))[:2]] == [
        64,
        32,
    ]  # C for Delethink


def prompts(*lengths: int) -> list[PromptItem]:
    return [PromptItem(list(range(n)), "s", "1") for n in lengths]


@pytest.mark.parametrize(
    "mode, later, key, budget",
    [("longcot", None, "longcot.budgets", 128), ("delethink", None, "delethink.chunk_size", 32),
     ("probe", None, "delethink.max_chunks", 128), ("delethink", 16, "delethink.chunk_size", 32),
     # later chunks of 17: m = 16 carried + 17 new = 33 tokens, one more than the first chunk's C = 32
     ("delethink", 17, "delethink.intermediate_max_new_tokens", 33)],
)  # fmt: skip
def test_the_longest_prompt_and_longest_request_must_fit_the_models_positions(good, mode, later, key, budget):
    config = with_(sweep(good, mode), **{"delethink.intermediate_max_new_tokens": later})
    assert check_fits_context(config, prompts(5, 9), 9 + budget) == 9 + budget
    with pytest.raises(ConfigError) as too_long:
        check_fits_context(config, prompts(5, 9), 9 + budget - 1)
    assert str(too_long.value) == (
        f"{key}: the longest prompt (9 tokens) plus {budget} thinking tokens exceeds the model's "
        f"max_position_embeddings={9 + budget - 1}"
    )


def test_a_run_is_built_on_its_own_loop():
    i3 = DelethinkEvalConfig(max_chunks=[3]).sweep()[0]
    single, chunked = build_loop(EvalRun("longcot", 64), None), build_loop(EvalRun("delethink", 64, i3), None)
    assert (
        type(single) is SingleTurnAgentLoop and type(chunked) is DelethinkAgentLoop and chunked.params == i3
    )


def test_items_come_from_each_file_then_each_task_each_cut_to_max_problems(good, tmp_path):
    tokenizer = build_tokenizer()
    rows = [
        {"prompt": p, "reward_model": {"ground_truth": "1"}, "data_source": "f"}
        for p in ("a1", "a2", "x" * 85)
    ]
    files = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    for path in files:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "t.jsonl").write_text(
        "".join(json.dumps({"problem": p, "answer": "2"}) + "\n" for p in ("t1", "t2"))
    )
    task = TaskConfig(path=str(tmp_path / "t.jsonl"), data_source="task", prompt_template="{problem}")
    config = with_(good, data_files=[str(f) for f in files], tasks={"t": task}, max_problems=1)
    assert [it.data_source for it in load_items(config, tokenizer)] == ["f", "f", "task"]
    # all of them: the longest prompt, 85 + 3 tokens, fits the question's 96 tokens (max_prompt_length)
    every = load_items(with_(config, max_problems=-1), tokenizer)
    assert [len(it.prompt_ids) for it in every] == [5, 5, 88, 5, 5, 88, 5, 5]
    # with Delethink the question gets 96 - 16 = 80 tokens: the 88-token prompts are dropped
    assert len(load_items(with_(config, mode="delethink", max_problems=-1), tokenizer)) == 6


def test_a_sample_record_holds_the_run_the_problem_the_sample_each_chunk_and_the_score(good):
    tokenizer = build_tokenizer()
    config = with_(good, **{"sampling.n": 2, "sampling.seed": 5})
    run = EvalRun("delethink", 64, DelethinkEvalConfig(max_chunks=[3]).sweep()[0])
    item = PromptItem(tokenizer("q")["input_ids"], "src", "7", {"index": 3})
    turns = [Turn(tokenizer("q")["input_ids"], tokenizer("ab")["input_ids"], [0.0, 0.0], "length"),
             Turn(tokenizer("qb")["input_ids"], tokenizer("c")["input_ids"], [0.0], "stop")]  # fmt: skip
    trajectories = [Trajectory(turns), Trajectory(turns[:1])]
    results = [RewardResult(1.0, "abc</think>\\boxed{7}"), RewardResult(0.0, "ab")]
    first, second = sample_records(run, config, [item], trajectories, results, tokenizer)
    assert first == {
        "run": "delethink_I3", "mode": "delethink", "thinking_budget": 64, "max_chunks": 3, "keep_head": 4,
        "keep_tail": 12, "problem_index": 0, "data_source": "src", "problem": "q", "ground_truth": "7",
        "extra_info": {"index": 3}, "sample_index": 0, "seed": derive_seed(5, 0, 0),
        "chunks": [
            {"prompt": "q", "response": "ab", "response_ids": [97, 98], "prompt_tokens": 1,
             "response_tokens": 2, "finish_reason": "length"},
            {"prompt": "qb", "response": "c", "response_ids": [99], "prompt_tokens": 2, "response_tokens": 1,
             "finish_reason": "stop"},
        ],
        "trace": "abc</think>\\boxed{7}", "answer": "7", "score": 1.0, "thinking_tokens": 3, "num_chunks": 2,
        "has_eos": True,
    }  # fmt: skip
    assert (second["sample_index"], second["seed"], second["has_eos"], second["answer"]) == (
        1, derive_seed(5, 0, 1), False, None
    )  # fmt: skip
    longcot = sample_records(EvalRun("longcot", 64), config, [item], trajectories[:1], results[:1], tokenizer)
    assert [longcot[0][k] for k in ("run", "max_chunks", "keep_head", "keep_tail")] == [
        "longcot_B64",
        None,
        None,
        None,
    ]
    assert sample_seed(config, 4, 1) == derive_seed(5, 4, 1)


def test_a_run_summary_names_its_run_and_delethinks_parameters(good):
    samples = [{"problem_index": 0, "sample_index": 0, "answer": "1", "score": 1.0, "data_source": "a",
                "thinking_tokens": 8, "num_chunks": 1, "has_eos": True}]  # fmt: skip
    run = EvalRun("delethink", 64, DelethinkEvalConfig(max_chunks=[3]).sweep()[0])
    found = run_summary(run, good, samples, 2.0)
    assert {k: v for k, v in found.items() if k != "metrics"} == {
        "label": "delethink_I3", "mode": "delethink", "thinking_budget": 64, "max_chunks": 3,
        "chunk_size": 32, "keep_head": 4, "keep_tail": 12, "wall_time_s": 2.0, "sampled_tokens": 8,
        "tokens_per_s": 4.0,
    }  # fmt: skip
    assert found["metrics"]["all"]["pass@1"] == 1.0  # config.pass_k
    assert "max_chunks" not in run_summary(EvalRun("longcot", 64), good, samples, 2.0)


def test_probe_pairs_put_both_modes_side_by_side_by_budget():
    def run(mode: str, budget: int, accuracy: float) -> dict:
        return {"mode": mode, "thinking_budget": budget, "metrics": {"all": {"mean@1": accuracy}}}

    runs = [
        run("longcot", 128, 0.5),
        run("delethink", 128, 0.75),
        run("longcot", 64, 0.25),
        run("delethink", 64, 0.0),
    ]
    assert probe_pairs(runs, "mean@1") == [
        {"thinking_budget": 64, "metric": "mean@1", "longcot": 0.25, "delethink": 0.0},
        {"thinking_budget": 128, "metric": "mean@1", "longcot": 0.5, "delethink": 0.75},
    ]


def test_nan_is_written_as_null_anywhere_in_the_summary():
    found = _json_safe({"a": math.nan, "b": [1.5, math.nan, {"c": math.nan}], "d": math.inf, "e": "nan"})
    assert found == {"a": None, "b": [1.5, None, {"c": None}], "d": math.inf, "e": "nan"}


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from verl.models.tiny import save_tiny

    path = tmp_path_factory.mktemp("tiny") / "model"
    save_tiny(path, seed=0)
    return path


def test_a_probe_evaluation_writes_every_runs_samples_its_summary_and_the_pairs(tiny_model, tmp_path, capsys):
    data = tmp_path / "val.jsonl"
    rows = [{"prompt": q, "reward_model": {"ground_truth": "1"}, "data_source": "d"} for q in ("a1", "b2")]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = EvalConfig(
        model_path=str(tiny_model), output_dir=str(tmp_path / "out"), mode="probe", data_files=[str(data)],
        delethink=DelethinkEvalConfig(chunk_size=8, keep_head=2, keep_tail=2, max_chunks=[2, 3]),
        sampling=EvalSamplingConfig(n=2, seed=3), pass_k=[1, 2], num_threads=1,
    )  # fmt: skip
    threads = torch.get_num_threads()
    try:
        summary = evaluate(config)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
    # C = 8, m = 4: I = 2 gives 8 + 4 = 12 thinking tokens, I = 3 gives 16; LongCoT at each total
    labels = ["longcot_B12", "delethink_I2", "longcot_B16", "delethink_I3"]
    assert [r["label"] for r in summary["runs"]] == labels
    assert (summary["model_dir"], summary["engine"]) == (str(tiny_model), "HFRolloutEngine")
    assert summary["config"] == dataclasses.asdict(config)
    assert [(p["thinking_budget"], p["metric"]) for p in summary["probe"]] == [(12, "mean@2"), (16, "mean@2")]
    assert summary["plot"] == str(tmp_path / "out" / "accuracy_vs_budget.png")
    assert (tmp_path / "out" / "accuracy_vs_budget.png").is_file()
    written = (tmp_path / "out" / "summary.json").read_text()
    assert written == json.dumps(_json_safe(summary), indent=2) + "\n"
    samples = [json.loads(line) for line in (tmp_path / "out" / "samples.jsonl").open()]
    assert [s["run"] for s in samples] == [label for label in labels for _ in range(4)]  # 2 problems x 2
    assert all(s["thinking_tokens"] <= s["thinking_budget"] for s in samples)
    assert [s["seed"] for s in samples[:4]] == [derive_seed(3, p, j) for p in (0, 1) for j in (0, 1)]
    assert all(len(s["chunks"]) == 1 for s in samples if s["mode"] == "longcot")
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out] == [
        *labels,
        "probe at thinking budget 12",
        "probe at thinking budget 16",
    ]
    for line, run in zip(out, summary["runs"], strict=False):  # a line per run as it ends, then the pairs
        m = run["metrics"]["all"]
        assert line.startswith(
            f"{run['label']}: mean@2={m['mean@2']:.3f} thinking={m['thinking_tokens_mean']:.1f} "
            f"chunks={m['chunks_per_trace_mean']:.2f} eos={m['has_eos_rate']:.2f} ("
        ) and line.endswith(" s)")
    pair = summary["probe"][0]
    assert out[4] == (
        f"probe at thinking budget 12: mean@2 longcot={pair['longcot']:.3f} delethink={pair['delethink']:.3f}"
    )


def test_a_single_run_has_no_figure_and_a_model_gone_since_the_check_is_named(tiny_model, tmp_path):
    data = tmp_path / "val.jsonl"
    data.write_text(json.dumps({"prompt": "a1", "reward_model": {"ground_truth": "1"}}) + "\n")
    config = EvalConfig(model_path=str(tiny_model), output_dir=str(tmp_path / "out"), data_files=[str(data)],
                        longcot=LongCoTEvalConfig(budgets=[4]))  # fmt: skip
    summary = evaluate(config)
    assert (
        "plot" not in summary
        and "probe" not in summary
        and not (tmp_path / "out" / "accuracy_vs_budget.png").exists()
    )
    assert summary["runs"][0]["metrics"]["all"]["num_samples"] == 1
    with pytest.raises(ConfigError) as gone:
        evaluate(with_(config, model_path=str(tmp_path / "gone")))
    assert str(gone.value) == f"model_path='{tmp_path / 'gone'}': no HF model in it"


def test_sglang_must_be_importable_for_its_engine_only(good, monkeypatch):
    monkeypatch.setitem(sys.modules, "sglang", None)  # Python's own way to make a module unimportable
    assert rule_errors(with_(good, engine="sglang")) == [
        "engine='sglang': SGLang is not installed: pip install --no-deps -r requirements-sglang-cpu.txt"
    ]
    assert rule_errors(good) == []


def test_every_problem_is_kept_and_a_hub_task_out_of_reach_says_how_to_save_it(good, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")  # the hub check answers without asking the network
    hub = TaskConfig(data_source="s", hf_dataset="org/set", hf_split="test")
    assert rule_errors(with_(good, mode="fast", tasks={"mine": hub}, **{"longcot.budgets": []})) == [
        "mode='fast': must be one of ['longcot', 'delethink', 'probe']",
        "tasks.mine: no local file (tasks.mine.path is null) and the Hugging Face hub cannot give org/set "
        "(split test) (HF_DATASETS_OFFLINE is on); where there is network access save it, python -c "
        "\"import datasets; datasets.load_dataset('org/set', split='test').to_json('mine.jsonl')\", then "
        "pass "
        "tasks.mine.path=/path/to/mine.jsonl",
    ]
    assert rule_errors(with_(good, **{"longcot.budgets": []})) == [
        "longcot.budgets=[]: must list at least one budget"
    ]


def test_an_incomplete_model_names_each_thing_it_lacks_and_a_reward_file_that_exists_passes(good, tmp_path):
    reward = tmp_path / "reward.py"
    reward.write_text("def compute_score(*args):\n    return 0.0\n")
    assert rule_errors(with_(good, **{"reward.path": str(reward)})) == []
    for name in ("model.safetensors", "tokenizer.json"):
        (Path(good.model_path) / name).unlink()
    assert rule_errors(good) == [
        f"model_path='{good.model_path}': not a complete model directory ({good.model_path}): no weights "
        "(model.safetensors or pytorch_model.bin); no tokenizer files (tokenizer.json, tokenizer.model or "
        "vocab.json + merges.txt)"
    ]


def test_interpolations_are_resolved_and_one_that_cannot_be_is_named(good):
    tree = OmegaConf.create({**dataclasses.asdict(good), "output_dir": "${model_path}/eval"})
    assert load_eval_config(tree).output_dir == f"{good.model_path}/eval"
    with pytest.raises(ConfigError) as bad:
        load_eval_config(OmegaConf.create({**dataclasses.asdict(good), "output_dir": "${nope}"}))
    assert str(bad.value) == "output_dir: cannot resolve the value: Interpolation key 'nope' not found"


def one_problem(tmp_path: Path) -> str:
    data = tmp_path / "val.jsonl"
    data.write_text(json.dumps({"prompt": "a1", "reward_model": {"ground_truth": "1"}}) + "\n")
    return str(data)


def responses(out_dir: Path) -> list[str]:
    return [
        "".join(c["response"] for c in json.loads(line)["chunks"])
        for line in (out_dir / "samples.jsonl").open()
    ]


def test_samples_are_seeded_top_k_applies_and_ignore_eos_fills_the_budget(tiny_model, tmp_path):
    config = EvalConfig(model_path=str(tiny_model), output_dir=str(tmp_path / "a"),
                        data_files=[one_problem(tmp_path)], longcot=LongCoTEvalConfig(budgets=[12]),
                        sampling=EvalSamplingConfig(n=3))  # fmt: skip
    evaluate(config)
    evaluate(with_(config, output_dir=str(tmp_path / "b")))
    first = responses(tmp_path / "a")
    assert first == responses(tmp_path / "b") and len(set(first)) == 3  # seeded per sample: again the same
    evaluate(with_(config, output_dir=str(tmp_path / "k"), **{"sampling.top_k": 1}))
    assert len(set(responses(tmp_path / "k"))) == 1  # the top token only: every sample the same
    evaluate(with_(config, output_dir=str(tmp_path / "e"), **{"sampling.ignore_eos": True}))
    samples = [json.loads(line) for line in (tmp_path / "e" / "samples.jsonl").open()]
    assert [s["thinking_tokens"] for s in samples] == [12, 12, 12]


def test_a_model_without_a_generation_config_takes_its_end_tokens_from_its_config(tiny_model, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    (model / "generation_config.json").unlink()
    config = EvalConfig(model_path=str(model), output_dir=str(tmp_path / "out"),
                        data_files=[one_problem(tmp_path)],
                        longcot=LongCoTEvalConfig(budgets=[12]))  # fmt: skip
    with_config = with_(config, model_path=str(tiny_model), output_dir=str(tmp_path / "ref"))
    evaluate(config), evaluate(with_config)
    assert responses(tmp_path / "out") == responses(tmp_path / "ref")

"""The Markovian testbed's verdicts to the letter (recipes/markovian_testbed/aggregate.py and report.py):
each claim's exact line and verdict at its target's edge, the report's tables and the aggregate over seeds,
against numbers worked by hand. Written for `make mutants`, which mutates the recipe's modules under
their package names, so they are imported by those."""

import json
import math
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import matplotlib.pyplot as plt
import pytest
from matplotlib.colors import to_hex
from matplotlib.container import ErrorbarContainer
from omegaconf import OmegaConf

from recipes.markovian_testbed import aggregate, report
from verl.eval import paired
from verl.eval.plot import save_figure
from verl.models.tiny import build_tokenizer
from verl.tools import summary_picture
from verl.tools.cost_model import delethink_cost, longcot_cost, qwen2_dims
from verl.tools.results import Claim, load_record
from verl.tools.summary_picture import SummaryPicture


def matplotlib_color(color) -> str:
    return to_hex(color)


def test_spread_is_the_mean_and_sample_sd_over_the_seeds_that_measured():
    assert aggregate.spread([]) == "-"
    assert aggregate.spread([0.5]) == "0.500 (one seed)"
    assert aggregate.spread([1.0, 2.0, 4.0]) == "2.333 ± 1.528"  # sd sqrt((1.78 + 0.11 + 2.78) / 2)


def test_a_seed_cell_shows_what_was_measured_and_whether_it_held():
    assert aggregate.seed_cell(None) == "-"
    assert aggregate.seed_cell({"measured": "0.9x", "held": None}) == "0.9x"
    assert aggregate.seed_cell({"measured": "0.9x", "held": True}) == "0.9x (held)"
    assert aggregate.seed_cell({"measured": "0.9x", "held": False}) == "0.9x (**not held**)"


def test_held_count_reads_each_seeds_verdict():
    verdicts = [{"held": True}, None, {"held": False}, {"held": None}]
    assert aggregate.held_count(verdicts) == "1 of 2 (2 not measured)"


# --- report.py: the figures, read back from matplotlib's objects ------------------------------------------


@pytest.fixture
def figures(monkeypatch):
    """Every figure report.py saves, by file name (each still written, then closed, by save_figure)."""
    import matplotlib

    matplotlib.use("Agg")
    saved = {}

    def keep(fig, path, dpi=120):
        saved[Path(path).name] = (fig, dpi)
        save_figure(fig, path, dpi=dpi)

    monkeypatch.setattr(report, "save_figure", keep)
    return saved


def summary(mode: str, accuracy: dict[int, tuple[float, float]]) -> dict:
    """A main_eval summary of 4 samples: per budget, (accuracy on trained sizes, accuracy past B)."""
    runs = [
        {
            "mode": mode,
            "thinking_budget": b,
            "metrics": {report.TRAINED: {"mean@4": t}, report.PAST_B: {"mean@4": p}},
        }
        for b, (t, p) in accuracy.items()
    ]
    return {"config": {"sampling": {"n": 4}}, "runs": runs}


def timed(wall_s: float, thinking_tokens: int, update_s: float = 1.0, decode_ms: float | None = None) -> dict:
    """A timed step batch; with `decode_ms`, its budget's distinct-problem pass (prefill a fifth of that)."""
    run = {"wall_s": wall_s, "thinking_tokens": thinking_tokens, "prefill_s": 0.5, "prefill_tokens": 100,
           "reused_prompt_tokens": 40, "trajectories": 100, "update_s": update_s,
           "step_s": wall_s + update_s}  # fmt: skip
    if decode_ms is not None:
        run["distinct"] = {"decode_ms_per_token": decode_ms, "prefill_ms_per_token": decode_ms / 5}
    return run


def timing_row(budget: int, lc: float, dt: float, chunks: int = 7, decode: tuple = (None, None)) -> dict:
    """Rollouts of lc and dt seconds; `decode`: each environment's distinct-pass decode ms per token."""
    longcot = timed(lc, 10 * budget, decode_ms=decode[0])
    delethink = timed(dt, 10 * budget, decode_ms=decode[1])
    return {"budget": budget, "max_chunks": chunks, "longcot": longcot, "delethink": delethink,
            "delethink_over_longcot": dt / lc,
            "step_delethink_over_longcot": (dt + 1) / (lc + 1)}  # fmt: skip


def lines_of(ax) -> list[tuple]:
    return [
        (line.get_label(), list(line.get_xdata()), list(line.get_ydata()), line.get_marker())
        for line in ax.lines
    ]


def gridded(ax, axis: str = "both") -> bool:
    lines = {"x": ax.xaxis.get_gridlines(), "y": ax.yaxis.get_gridlines()}
    shown = {k: all(g.get_visible() and g.get_alpha() == 0.3 for g in v) for k, v in lines.items()}
    return shown == {"x": axis in ("x", "both"), "y": axis in ("y", "both")}


def legend_of(ax) -> tuple[list[str], float] | None:
    legend = ax.get_legend()
    return (
        None
        if legend is None
        else ([t.get_text() for t in legend.get_texts()], legend.get_texts()[0].get_fontsize())
    )


COST = {
    "records": {
        "longcot": [{"step": 1, "timing/gen_s": 2.0}, {"step": 2, "timing/gen_s": 3.0}, {"step": 3}],
        "delethink": [{"step": 1, "timing/gen_s": 1.0}],
    },
    "timing": [timing_row(512, 5.0, 6.0), timing_row(1024, 20.0, 12.0)],
}


def test_the_accuracy_figure_has_both_size_groups_with_each_run_and_the_training_budget(tmp_path, figures):
    lc = summary("longcot", {256: (0.5, 0.1), 512: (0.75, 0.2)})
    dt = summary("delethink", {512: (1.0, 0.4), 256: (0.25, 0.3)})
    report.plot(tmp_path, lc, dt, 512, COST)
    fig, dpi = figures["accuracy_vs_budget.png"]
    assert list(fig.get_size_inches()) == [9, 3.6] and dpi == 120
    trained, past = fig.axes
    assert trained.get_position().x1 < past.get_position().x0  # side by side
    assert [trained.get_title(), past.get_title()] == ["trained sizes", "past budget sizes"]
    assert lines_of(trained) == [
        ("LongCoT-RL", [256, 512], [0.5, 0.75], "o"), ("Delethink-RL", [256, 512], [0.25, 1.0], "o"),
        ("training budget B=512", [512, 512], [0, 1], "None"),
    ]  # fmt: skip
    assert lines_of(past)[:2] == [
        ("LongCoT-RL", [256, 512], [0.1, 0.2], "o"),
        ("Delethink-RL", [256, 512], [0.3, 0.4], "o"),
    ]
    budget_line = trained.lines[2]
    assert (budget_line.get_color(), budget_line.get_linestyle()) == ("grey", ":")
    for ax in (trained, past):
        assert (
            ax.get_xlabel() == "thinking budget (tokens)" and ax.get_ylim() == (-0.02, 1.02) and gridded(ax)
        )
    assert (trained.get_ylabel(), past.get_ylabel()) == ("mean@4", "")
    assert (
        legend_of(trained) == (["LongCoT-RL", "Delethink-RL", "training budget B=512"], 8)
        and past.get_legend() is None
    )
    assert (tmp_path / "accuracy_vs_budget.png").is_file()


def test_without_both_sweeps_there_is_no_accuracy_figure_and_the_cost_panels_say_not_measured(
    tmp_path, figures
):
    report.plot(tmp_path, summary("longcot", {256: (0.5, 0.1)}), None, 512, {"records": {}, "timing": []})
    assert set(figures) == {"cost.png"}
    for ax in figures["cost.png"][0].axes:
        (text,) = ax.texts
        assert (text.get_text(), text.get_position(), text.get_ha(), text.get_va()) == (
            "not measured",
            (0.5, 0.5),
            "center",
            "center",
        )
        assert text.get_transform() == ax.transAxes and ax.get_legend() is None


def test_the_cost_figure_has_training_rollouts_and_the_timed_batches_per_budget(tmp_path, figures):
    report.plot(tmp_path, None, None, 512, COST)
    fig, dpi = figures["cost.png"]
    assert list(fig.get_size_inches()) == [13, 3.6] and dpi == 120
    training, batch, per_token = fig.axes
    assert lines_of(training) == [
        ("longcot rollout", [1, 2], [2.0, 3.0], "None"),
        ("delethink rollout", [1], [1.0], "None"),
    ]
    assert lines_of(batch) == [
        ("longcot", [512, 1024], [5.0, 20.0], "o"),
        ("delethink", [512, 1024], [6.0, 12.0], "o"),
    ]
    # ms per thinking token: 5 s over 5120 tokens, 20 s over 10240; 6 s / 5120, 12 s / 10240
    assert [(label, x, marker) for label, x, _, marker in lines_of(per_token)] == [
        ("longcot", [512, 1024], "o"), ("delethink", [512, 1024], "o")
    ]  # fmt: skip
    assert (
        training.get_position().x1
        < batch.get_position().x0
        < batch.get_position().x1
        < per_token.get_position().x0
    )
    assert per_token.lines[0].get_ydata() == pytest.approx([5000 / 5120, 20000 / 10240])
    assert per_token.lines[1].get_ydata() == pytest.approx([6000 / 5120, 12000 / 10240])
    assert [(ax.get_xlabel(), ax.get_ylabel()) for ax in fig.axes] == [
        ("RL step", "rollout time in training (s)"),
        ("thinking budget (tokens)", "rollout of a step-sized batch (s)"),
        ("thinking budget (tokens)", "rollout ms per thinking token"),
    ]
    for ax in fig.axes:
        assert gridded(ax) and legend_of(ax)[1] == 8 and len(ax.texts) == 0
    assert set(figures) == {"cost.png", "crossover.png"}  # the timed updates give the crossover too


def test_the_crossover_figure_has_rollout_and_step_per_trajectory_on_a_log_budget_axis(tmp_path, figures):
    report.plot_crossover(tmp_path, COST["timing"])
    fig, dpi = figures["crossover.png"]
    assert list(fig.get_size_inches()) == [10, 3.8] and dpi == 120
    rollout, step = fig.axes
    assert rollout.get_position().x1 < step.get_position().x0  # side by side
    assert rollout.get_title() == "rollout per trajectory"
    assert step.get_title() == "whole step (rollout + update) per trajectory"
    # per trajectory (100): rollouts 50, 200 and 60, 120 ms; steps 60, 210 and 70, 130 ms
    assert lines_of(rollout) == [
        ("LongCoT", [512, 1024], [50.0, 200.0], "o"),
        ("Delethink", [512, 1024], [60.0, 120.0], "o"),
    ]
    assert lines_of(step) == [
        ("LongCoT", [512, 1024], [60.0, 210.0], "o"),
        ("Delethink", [512, 1024], [70.0, 130.0], "o"),
    ]
    for ax in fig.axes:
        assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_ylim()[0]) == (
            "thinking budget (tokens)",
            "ms per trajectory",
            0,
        )
        assert ax.get_xscale() == "log" and ax.xaxis.get_transform().base == 2
        assert list(ax.get_xticks()) == [512, 1024] and [t.get_text() for t in ax.get_xticklabels()] == [
            "512",
            "1024",
        ]
        assert gridded(ax) and legend_of(ax) == (["LongCoT", "Delethink"], 8)


def test_the_summary_pictures_numbers_are_the_accuracies_and_the_step_cost_rounded():
    accuracies = {"longcot": ((0.123456, 0.05), (0.5, 0.1))}
    picture = report.summary_picture(accuracies, COST["timing"], 512)
    # the step per trajectory: 60, 210 ms (LongCoT) and 70, 130 ms (Delethink)
    assert picture == SummaryPicture(
        512,
        {"longcot": [0.1235, 0.05, 0.5, 0.1]},
        [512, 1024],
        {"longcot": [60.0, 210.0], "delethink": [70.0, 130.0]},
    )
    rows = [{**row, "longcot": {**row["longcot"], "step_s": 0.0123456}} for row in COST["timing"]]
    # 0.0123456 s over 100 trajectories: 0.123456 ms, kept to 2 decimals
    assert report.summary_picture(accuracies, rows, 512).step_ms["longcot"] == [0.12, 0.12]
    untimed = [{k: v for k, v in row.items() if k != "step_delethink_over_longcot"} for row in COST["timing"]]
    assert report.summary_picture(accuracies, untimed, 512) == SummaryPicture(512, picture.accuracy)
    assert report.summary_picture({}, [], 256) == SummaryPicture(256, {})


def test_the_summary_figure_has_each_environments_bars_and_its_step_cost_in_units_of_b(tmp_path):
    from PIL import Image

    accuracies = {"longcot": ((0.25, 0.05), (0.5, 0.1)), "delethink": ((0.375, 0.02), (0.75, 0.04))}
    picture = report.summary_picture(accuracies, COST["timing"], 512)
    fig = summary_picture.draw(picture)
    summary_picture.save(picture, tmp_path / "summary.png")
    with Image.open(tmp_path / "summary.png") as image:
        assert image.size == (640, 256)  # 8 x 3.2 inches at 80 dots an inch
    assert list(fig.get_size_inches()) == [8, 3.2]
    bars, cost = fig.axes
    assert [(p.get_x() + p.get_width() / 2, p.get_height()) for p in bars.patches] == [
        (0, 0.25), (1, 0.5), (3, 0.375), (4, 0.75)
    ]  # fmt: skip
    colors = [matplotlib_color(p.get_facecolor()) for p in bars.patches]
    assert colors == ["#bbbbbb", matplotlib_color("C0"), "#bbbbbb", matplotlib_color("C1")]
    bands = [c.lines[2][0] for c in bars.containers if isinstance(c, ErrorbarContainer)]
    errors = [top - bottom for band in bands for (_, bottom), (_, top) in band.get_segments()]
    caps = [cap for c in bars.containers if isinstance(c, ErrorbarContainer) for cap in c.lines[1]]
    assert {cap.get_markersize() for cap in caps} == {6.0}  # a cap 3 points either side
    assert bars.get_position().x1 < cost.get_position().x0  # side by side
    assert bars.get_position().y0 == cost.get_position().y0
    assert errors == pytest.approx([0.1, 0.2, 0.04, 0.08])  # one standard error either side
    assert [t.get_text() for t in bars.get_xticklabels()] == [
        "warm\nstart",
        "LongCoT\n-RL",
        "warm\nstart",
        "Delethink\n-RL",
    ]
    assert list(bars.get_xticks()) == [0, 1, 3, 4]
    assert (bars.get_ylabel(), bars.get_ylim()) == ("held-out accuracy at B = 512", (0, 1)) and gridded(
        bars, "y"
    )
    # the whole step per trajectory: 60, 210 ms (LongCoT) and 70, 130 ms (Delethink)
    assert lines_of(cost) == [
        ("LongCoT", [512, 1024], [60.0, 210.0], "o"),
        ("Delethink", [512, 1024], [70.0, 130.0], "o"),
    ]
    assert cost.get_xscale() == "log" and cost.xaxis.get_transform().base == 2 and cost.get_ylim()[0] == 0
    assert [t.get_text() for t in cost.get_xticklabels()] == ["1B", "2B"]
    assert (cost.get_xlabel(), cost.get_ylabel()) == ("thinking budget", "RL step per trajectory (ms)")
    assert gridded(cost) and legend_of(cost) == (["LongCoT", "Delethink"], 8)
    plt.close(fig)


def test_the_summary_figure_leaves_out_an_environment_without_accuracies_and_old_timings():
    old = [{k: v for k, v in row.items() if k != "step_delethink_over_longcot"} for row in COST["timing"]]
    # a warm start at 0 with its error bar below 0: the axis still starts at 0
    picture = report.summary_picture({"delethink": ((0.0, 0.2), (0.5, 0.0))}, old, 512)
    fig = summary_picture.draw(picture)
    bars, cost = fig.axes
    assert [p.get_x() + p.get_width() / 2 for p in bars.patches] == [3, 4] and bars.get_ylim() == (0, 1)
    assert len(cost.lines) == 0 and cost.get_legend() is None and cost.get_xscale() == "linear"
    plt.close(fig)


# --- report.py: verdicts and tables --------------------------------------------------------------------


def warm_start(root: Path, target: float | None, checks: list[tuple[int, float]], steps: int = 120) -> None:
    (root / "sft").mkdir(parents=True)
    metrics = {"losses": [0.1] * steps, "checks": [{"step": s, "accuracy": a} for s, a in checks]}
    (root / "sft" / "sft_metrics.json").write_text(json.dumps(metrics))
    config = {"train": {"seed": 1, "stop_at_accuracy": target}, "eval": {"delethink_chunks": 0}}
    (root / "sft" / "sft_config.yaml").write_text(OmegaConf.to_yaml(config))


WARM = "the warm start learned the task (held-out T = 1 accuracy)"


@pytest.mark.parametrize(
    "target, checks, verdict",
    [
        # the first check at the target, not the best or the last
        (0.5, [(50, 0.25), (100, 0.5), (120, 0.75)], (">= 0.5", "0.500 at SFT step 100 of 120", 0.75, True)),
        (0.9, [(50, 0.25), (100, 0.5)], (">= 0.9", "0.500 at SFT step 100 of 120", 0.5, False)),
        (None, [(50, 0.25), (100, 0.125)], ("no target", "0.250 at SFT step 50 of 120", 0.25, True)),
    ],
)
def test_the_warm_start_verdict_names_the_first_check_that_reached_the_target(
    tmp_path, target, checks, verdict
):
    warm_start(tmp_path, target, checks)
    found = report.warm_start_verdict(tmp_path)
    assert (found.key, found.claim) == ("warm_start", WARM)
    assert (found.target, found.measured, found.value, found.held) == verdict


def test_a_warm_start_without_checks_or_files_is_said_so(tmp_path):
    assert report.warm_start_verdict(tmp_path) == report.Verdict(
        "warm_start", WARM, "its train.stop_at_accuracy", "not measured: no warm start"
    )
    warm_start(tmp_path, 0.5, [])
    found = report.warm_start_verdict(tmp_path)
    assert (found.target, found.measured, found.value, found.held) == (
        ">= 0.5",
        "no accuracy checks in 120 steps",
        None,
        False,
    )
    assert (found.key, found.claim) == ("warm_start", WARM)


def test_the_verdict_table_says_held_not_held_or_not_measured():
    verdicts = [report.Verdict("a", "c1", "t1", "m1", 1.0, True),
                report.Verdict("b", "c2", "t2", "m2", 0.5, False),
                report.not_measured("c", "c3", "t3", "why")]  # fmt: skip
    assert report.verdict_table(verdicts) == [
        "| claim | target | measured | verdict |", "|---|---|---|---|", "| c1 | t1 | m1 | held |",
        "| c2 | t2 | m2 | **not held** |", "| c3 | t3 | not measured: why | not measured |", "",
    ]  # fmt: skip


def test_the_crossover_verdict_is_in_units_of_b_or_none_measured_or_not_measured_for_an_old_file():
    rows = [timing_row(512, 5.0, 6.0), timing_row(1024, 20.0, 12.0)]  # step ratios 7/6, 13/21
    found = report.crossover_verdict(rows, 512)
    assert (found.key, found.claim, found.target) == (
        "c_crossover",
        report.C_CROSSOVER_CLAIM,
        "within the measured budgets",
    )
    assert (found.measured, found.value, found.held) == ("from 1024 = 2B (0.62x at 1024)", 2.0, True)
    found = report.crossover_verdict(rows[:1], 512)
    assert (found.measured, found.value, found.held) == ("none measured (1.17x at 512)", None, False)
    old = [{k: v for k, v in r.items() if k != "step_delethink_over_longcot"} for r in rows]
    assert report.crossover_verdict(old, 512).measured == "not measured: old timing.json"


def test_the_as_trained_lines_give_the_pair_at_b_and_the_budgets_where_delethink_is_cheaper():
    trained = {
        "budget": 512,
        "longcot": timed(4.0, 3000),
        "delethink": timed(3.6, 3100),
        "delethink_over_longcot": 0.9,
    }
    rows = [timing_row(512, 5.0, 6.0), timing_row(1024, 20.0, 12.0)]
    assert report.as_trained_lines(trained, rows) == [
        "- at 512 with end-of-sequence honoured, as in training: Delethink 3.60 s (3100 thinking tokens), "
        "LongCoT 4.00 s (3000); Delethink / LongCoT = 0.90 (target < 1): **held**",
        "- budgets at which Delethink's rollout is the cheaper one: [1024]",
    ]
    assert report.as_trained_lines(trained, rows[:1])[1].endswith(": none measured")


def test_the_timing_table_has_a_row_per_budget():
    timing = {"prompts": 16, "samples": 8, "repeats": 3, "rows": [timing_row(512, 5.0, 6.0, chunks=7)]}
    assert report.timing_table(timing) == [
        "Rollout of one RL-step-sized batch (16 problems x 8 samples) at budgets B..8B (`python -m "
        "recipes.scaling.benchmark`): end-of-sequence ignored, so every sample writes its whole budget; both "
        "trained models alternate in one process, median of 3 repeats.",
        "",
        "| budget | I | LongCoT s | Delethink s | Delethink / LongCoT "
        "| Delethink prefill s (tokens prefilled / copied) |",
        "|---|---|---|---|---|---|",
        "| 512 | 7 | 5.00 | 6.00 | 1.20 | 0.50 (100 / 40) |",
    ]


def test_the_per_token_table_has_the_distinct_rows_decode_and_prefill_and_the_earlier_measure_beside():
    rows = [timing_row(512, 5.0, 6.0, decode=(0.5, 0.25)), timing_row(1024, 20.0, 12.0, decode=(1.0, 0.3))]
    assert report.per_token_table({"distinct_rows": 128, "rows": rows}) == [
        "", "### Time per token: the context each token is computed against", "",
        "One more rollout per budget whose 128 rows are distinct problems, one sample each, "
        "end-of-sequence ignored: no row copies another's question, and every budget decodes the same rows. "
        "The engine's decode seconds per token decoded and prefill seconds per prompt token prefilled, "
        "apart; the earlier measure, the step batch's rollout wall time per thinking token, beside them.",
        "",
        "| budget | LongCoT decode ms/token | Delethink decode ms/token | LongCoT prefill ms/token "
        "| Delethink prefill ms/token | earlier measure: LongCoT ms/token | Delethink ms/token |",
        "|---|---|---|---|---|---|---|",
        # earlier: 5 s / 5120 tokens = 0.977 ms, 6 s / 5120 = 1.172; 20 s / 10240 = 1.953, 12 / 10240 = 1.172
        "| 512 | 0.500 | 0.250 | 0.100 | 0.050 | 0.977 | 1.172 |",
        "| 1024 | 1.000 | 0.300 | 0.200 | 0.060 | 1.953 | 1.172 |",
    ]  # fmt: skip
    # a file from before the distinct pass: a line, not a KeyError (one environment's pass is not enough)
    rows[1]["longcot"].pop("distinct")
    assert report.per_token_table({"rows": rows})[3:] == [
        "not measured: eval/timing.json predates the distinct-problem pass; delete it, rerun"
    ]


DIMS = {"hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
        "intermediate_size": 16, "vocab_size": 300}  # fmt: skip


def rl_run(root: Path, mode: str, gen_s: list[float], checkpoints: dict[int, int] | None = None) -> Path:
    """An RL run's directory: metrics.jsonl (steps 1.. with these rollout times), one logged rollout
    (prompt "abc": three byte tokens; 10 thinking tokens) and checkpoints {step: hidden size}."""
    run = root / mode
    (run / "rollouts").mkdir(parents=True)
    records = [{"step": s + 1, "timing/gen_s": g, "timing/old_log_prob_s": 0.5, "timing/update_s": 1.0 + s,
                "timing/step_s": g + 2.0, "train/thinking_tokens_mean": 100.0 * (s + 1)}
               for s, g in enumerate(gen_s)]  # fmt: skip
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [*records, {"step": 99}]))
    (run / "rollouts" / "step_1.jsonl").write_text(
        json.dumps({"prompt": "abc", "thinking_tokens": 10}) + "\n"
    )
    for step, hidden in (checkpoints or {}).items():
        hf = run / f"global_step_{step}" / "actor" / "huggingface"
        hf.mkdir(parents=True)
        (hf / "config.json").write_text(json.dumps({**DIMS, "hidden_size": hidden}))
        build_tokenizer().backend_tokenizer.save(str(hf / "tokenizer.json"))
    return run


def test_run_flops_use_the_newest_checkpoints_shape_and_delethinks_chunk_and_carry(tmp_path):
    runs = {
        "longcot": rl_run(tmp_path, "longcot", [2.0], {2: 8, 10: 16}),  # by step: 10 after 2
        "delethink": rl_run(tmp_path, "delethink", [1.0]),
    }
    dims = qwen2_dims(SimpleNamespace(**{**DIMS, "hidden_size": 16}))  # global_step_10's, not 2's
    flops = report.run_flops(runs, 4, 2)  # chunks of 4 with a carry of 2: ten thinking tokens in 4 chunks
    assert flops == {
        "longcot": longcot_cost(dims, 3, 10).total_flops,
        "delethink": delethink_cost(dims, 3, 10, 4, 2).total_flops,
    }
    assert flops["longcot"] != flops["delethink"]


def test_the_training_table_has_each_runs_medians_and_flops(tmp_path):
    records = {
        "longcot": [
            json.loads(line)
            for line in (rl_run(tmp_path, "longcot", [2.0, 4.0, 3.0]) / "metrics.jsonl").open()
        ]
    }
    # rollout median 3; update 0.5 + 1, 2, 3: median 2.5; step median 5; thinking tokens median 200
    assert report.training_table(records, {"longcot": 1234567.0})[4:] == [
        "| run | steps | rollout (s) | update (s) | step (s) | thinking tokens / traj | est. FLOPs |",
        "|---|---|---|---|---|---|---|",
        "| longcot | 3 | 3.00 | 2.50 | 5.00 | 200 | 1.235e+06 |",
    ]


def saved_config(root: Path, chunks: str = "7") -> None:
    """The run_config.json run.sh starts a run with; what the report reads: B = 512, C = 4, m = 2, I."""
    root.mkdir(parents=True, exist_ok=True)
    saved = {"SIZE": "smoke", "B": "512", "C": "4", "HEAD": "1", "TAIL": "1", "M": "2", "I": chunks}
    (root / "run_config.json").write_text(json.dumps(saved))


def test_the_report_of_a_whole_run_has_its_verdicts_figures_and_sections_in_order(tmp_path, capsys, figures):
    warm_start(tmp_path, 0.5, [(50, 0.25), (100, 0.5)])
    (tmp_path / "training_curves.png").write_bytes(b"")  # another stage's figure: listed where it belongs
    (tmp_path / "eval").mkdir()
    for name, mode, acc in (("longcot_rl", "longcot", {512: (0.5, 0.1), 1024: (0.5, 0.2)}),
                            ("delethink_rl", "delethink", {512: (0.5, 0.1), 1024: (0.5, 0.6)})):  # fmt: skip
        (tmp_path / "eval" / name).mkdir()
        (tmp_path / "eval" / name / "summary.json").write_text(json.dumps(summary(mode, acc)))
    rl_run(tmp_path, "longcot", [2.0, 2.0], {4: 8})
    rl_run(tmp_path, "delethink", [1.0, 3.0])
    timing = {"prompts": 2, "samples": 2, "repeats": 1, "rows": COST["timing"],
              "as_trained": {"budget": 512, "longcot": timed(4.0, 3), "delethink": timed(3.6, 3),
                             "delethink_over_longcot": 0.9}}  # fmt: skip
    (tmp_path / "eval" / "timing.json").write_text(json.dumps(timing))
    heldout = [{"mode": m, "thinking_budget": 512, "problem_index": p, "score": 1.0}
               for m in ("longcot", "delethink") for p in (0, 1)]  # fmt: skip
    (tmp_path / "eval" / "heldout_sft").mkdir()
    (tmp_path / "eval" / "heldout_sft" / "samples.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in heldout)
    )
    # B, C, m and I from the run's saved config, as run.sh writes them (strings); 07 is read as 7
    saved_config(tmp_path, chunks="07")
    report.main(["--root", str(tmp_path)])
    text = (tmp_path / "report.md").read_text()
    lines = text.splitlines()
    assert lines[:2] == ["# Markovian testbed report (generated by recipes/markovian_testbed/report.py)", ""]
    assert lines[2:4] == ["LongCoT budget B = 512; Delethink C = 4, m = 2, I = 7.", ""]
    assert "gain is paired by problem. Delethink inference: I = 7 chunks, the same total budget." in text
    verdicts = json.loads((tmp_path / "verdicts.json").read_text())
    keys = [
        "warm_start",
        "probe",
        "gain_longcot",
        "gain_delethink",
        "a",
        "b",
        "c_rollout",
        "c_crossover",
        "c_flat",
    ]
    assert [v["key"] for v in verdicts] == keys
    by_key = {v["key"]: v for v in verdicts}
    assert by_key["warm_start"]["measured"] == "0.500 at SFT step 100 of 120"
    assert by_key["b"]["measured"] == "Delethink +0.500 (rising), LongCoT +0.100" and by_key["b"]["held"]
    assert by_key["c_rollout"]["value"] == 1.0  # the median of 0.5 and 1.5
    assert by_key["c_crossover"]["value"] == 2.0
    table = lines.index("| claim | target | measured | verdict |")
    assert lines[table + 2 + len(keys) :][:7] == [
        "", "![summary](summary.png)", "![accuracy_vs_budget](accuracy_vs_budget.png)",
        "![crossover](crossover.png)", "![training_curves](training_curves.png)", "![cost](cost.png)", "",
    ]  # fmt: skip
    picture = json.loads((tmp_path / "summary_picture.json").read_text())
    assert picture["budgets"] == [512, 1024] and list(picture["step_ms"]) == ["longcot", "delethink"]
    assert summary_picture.drawn_from(tmp_path / "summary.png") == summary_picture.fingerprint(
        summary_picture.picture_from_dict(picture, "summary_picture.json")
    )
    # one key per line, indented by one space (both files are read by people as well)
    assert (tmp_path / "verdicts.json").read_text().startswith('[\n {\n  "key": "warm_start",\n  "claim": ')
    picture_text = (tmp_path / "summary_picture.json").read_text()
    assert picture_text.startswith('{\n "budget": 512,\n "accuracy": {},\n "budgets": [\n  512,\n')
    sections = [line for line in lines if line.startswith("## ")]
    assert sections == [
        "## RL against its warm start, and (a): held-out problems of the trained sizes at B = 512",
        "## Where the failed samples first go wrong: held-out problems at B = 512",
        "## (b) accuracy vs thinking budget on problems longer than B = 512",
        "## (c) training cost",
    ]
    assert "| longcot | 2 | 2.00 | 2.00 | 4.00 | 150 |" in text  # the training table, from run_flops too
    assert capsys.readouterr().out == "\n".join(line for line in lines if not line.startswith("![")) + "\n"


def test_the_report_of_a_run_stopped_after_its_warm_start_measures_none_of_the_rest(tmp_path, capsys):
    warm_start(tmp_path, 0.5, [(50, 0.25)])
    saved_config(tmp_path)
    report.main(["--root", str(tmp_path)])
    verdicts = json.loads((tmp_path / "verdicts.json").read_text())
    assert [v["held"] for v in verdicts] == [False] + [None] * 8
    by_key = {v["key"]: v for v in verdicts}
    assert by_key["b"]["measured"] == (
        "not measured: no budget sweeps here (the demo's warm start saw no whole trace past B)"
    )
    assert by_key["c_rollout"]["measured"] == "not measured: no pair of RL runs"
    assert by_key["c_flat"]["measured"] == "not measured: no timing stage"
    assert "![summary](summary.png)\n![cost](cost.png)\n" in (tmp_path / "report.md").read_text()
    assert (by_key["b"]["claim"], by_key["b"]["target"]) == (report.B_CLAIM, report.B_TARGET)


def test_one_sweep_alone_does_not_decide_claim_b(tmp_path, capsys):
    (tmp_path / "eval" / "longcot_rl").mkdir(parents=True)
    (tmp_path / "eval" / "longcot_rl" / "summary.json").write_text(
        json.dumps(summary("longcot", {512: (0.5, 0.1)}))
    )
    saved_config(tmp_path)
    report.main(["--root", str(tmp_path)])
    verdicts = {v["key"]: v for v in json.loads((tmp_path / "verdicts.json").read_text())}
    assert verdicts["b"]["measured"].startswith("not measured: no budget sweeps here")


def test_the_report_reads_b_c_m_and_i_from_the_runs_saved_config_and_names_what_it_lacks(tmp_path):
    with pytest.raises(SystemExit) as stopped:
        report.main(["--root", str(tmp_path)])
    assert str(stopped.value) == (
        f"report.py: {tmp_path}/run_config.json: no such file (run.sh writes the run's settings there when "
        "it starts it)"
    )
    (tmp_path / "run_config.json").write_text(json.dumps({"B": "512", "C": "4", "I": "7"}))
    with pytest.raises(SystemExit, match=r"run_config.json has no M: it was written before run.sh recorded"):
        report.main(["--root", str(tmp_path)])
    assert not (tmp_path / "report.md").exists()
    saved_config(tmp_path)
    assert report.run_shape(tmp_path) == (512, 4, 2, 7)


def test_the_cost_section_without_runs_or_timings_is_its_heading_and_figure(tmp_path):
    lines, cost, verdicts = report.claim_c({}, None, 512, 4, 2)
    assert lines == ["## (c) training cost", "", "![cost](cost.png)", ""]
    assert cost == {"records": {}, "timing": []}
    assert verdicts == [
        report.Verdict("c_rollout", report.C_ROLLOUT_CLAIM, "<= 1.0x", "not measured: no pair of RL runs"),
        report.Verdict("c_crossover", report.C_CROSSOVER_CLAIM, "within the measured budgets",
                       "not measured: no timing stage"),
        report.Verdict("c_flat", report.C_FLAT_CLAIM, report.C_FLAT_TARGET, "not measured: no timing stage"),
    ]  # fmt: skip


def test_the_cost_section_of_two_runs_ends_with_their_rollout_ratio_then_the_figure(tmp_path):
    runs = {
        "longcot": rl_run(tmp_path, "longcot", [2.0], {1: 8}),
        "delethink": rl_run(tmp_path, "delethink", [1.0]),
    }
    lines, cost, verdicts = report.claim_c(runs, None, 512, 4, 2)
    assert lines[:3] == ["## (c) training cost", "", report.training_table({}, {})[0]]
    assert lines[-5:-2] == ["", lines[-4], ""] and lines[-4].startswith(
        "Rollout per step, Delethink / LongCoT = 0.50"
    )
    assert lines[-2:] == ["![cost](cost.png)", ""]
    assert [r["timing/gen_s"] for r in cost["records"]["delethink"] if "timing/gen_s" in r] == [1.0]
    assert verdicts[0].measured == "0.50x (quartiles 0.50-0.50 over 1 steps)"


# --- aggregate.py ---------------------------------------------------------------------------------------


def seed_report(root: Path, seed: int, verdicts: list[dict]) -> None:
    (root / f"seed_{seed}").mkdir(parents=True, exist_ok=True)
    (root / f"seed_{seed}" / "verdicts.json").write_text(json.dumps(verdicts))


CLAIM_A = {"key": "a", "claim": "claim a", "target": ">= 1", "measured": "1.5x", "value": 1.5, "held": True}
CLAIM_B = {"key": "b", "claim": "claim b", "target": "t", "measured": "m", "value": None, "held": None}


def test_the_aggregate_of_one_report_and_a_seed_that_wrote_nothing_is_this_text(tmp_path):
    seed_report(tmp_path, 1, [CLAIM_A, CLAIM_B])
    assert aggregate.aggregate(tmp_path, [1, 2]) == "\n".join([
        "# Markovian testbed over seeds 1 2 (generated by aggregate.py)",
        "",
        "Each seed is a whole run (model init, warm start and RL seeded; the same problems): the value each "
        "verdict was decided on, as mean ± standard deviation over the seeds that measured it.",
        "",
        "| claim | target | mean ± sd over seeds | held in |",
        "|---|---|---|---|",
        "| claim a | >= 1 | 1.500 (one seed) | 1 of 1 (1 not measured) |",
        "| claim b | t | - | 0 of 0 (2 not measured) |",
        "",
        "## Warm starts",
        "",
        "| seed | held-out T = 1 accuracy @ SFT step | reached its target |",
        "|---|---|---|",
        "| 1 | no warm start | - |",
        "| 2 | no warm start | - |",
        "",
        "## Each seed",
        "",
        "| claim | seed 1 | seed 2 |",
        "|---|---|---|",
        "| claim a | 1.5x (held) | - |",
        "| claim b | m | - |",
    ]) + "\n"  # fmt: skip


def test_warm_starts_alone_give_their_row_and_curves_and_no_seed_table(tmp_path):
    warm_start(tmp_path / "seed_1", 0.5, [(50, 0.25), (100, 0.5)])
    warm_start(tmp_path / "seed_2", 0.5, [(50, 0.125)])
    text = aggregate.aggregate(tmp_path, [1, 2])
    assert "| the warm start reached its target | >= 0.5 | 0.312 ± 0.265 | 1 of 2 |" in text
    assert "| 1 | 0.250@50, 0.500@100 | yes (0.5) |\n| 2 | 0.125@50 | **no** (0.5) |\n" in text
    assert "## Each seed" not in text


def test_the_record_names_the_run_and_each_claim_in_its_reports_words(tmp_path, capsys):
    seed_report(tmp_path, 1, [CLAIM_A])
    seed_report(tmp_path, 2, [{**CLAIM_A, "claim": "claim a, reworded", "measured": "0.5x", "held": False}])
    aggregate.main(["--root", str(tmp_path), "--seeds", "1", "2"])
    record = load_record(tmp_path / "record.yaml")
    assert (record.title, record.section) == ("The Markovian testbed over seeds 1 2", "testbed")
    assert record.command == f"python recipes/markovian_testbed/aggregate.py --root {tmp_path} --seeds 1 2"
    assert record.verdicts.claims == [Claim("claim a, reworded", ">= 1", ["1.5x", "0.5x"], [True, False])]
    text = (tmp_path / "aggregate.md").read_text()
    assert text == aggregate.aggregate(tmp_path, [1, 2]) and capsys.readouterr().out == text + "\n"


def test_the_record_with_readme_holds_that_seeds_summary_picture_and_a_missing_one_is_named(tmp_path, capsys):
    seed_report(tmp_path, 1, [CLAIM_A])
    seed_report(tmp_path, 2, [CLAIM_A])
    picture = {"budget": 256, "accuracy": {"longcot": [0.5, 0.1, 0.75, 0.1]}}
    (tmp_path / "seed_2" / "summary_picture.json").write_text(json.dumps(picture))
    aggregate.main(["--root", str(tmp_path), "--seeds", "1", "2", "--readme", "2"])
    record = load_record(tmp_path / "record.yaml")
    assert (record.readme, record.picture) == (2, SummaryPicture(256, picture["accuracy"]))
    with pytest.raises(SystemExit) as caught:
        aggregate.record(tmp_path, [1, 2], "x", readme=1)
    assert str(caught.value) == (
        f"aggregate.py: --readme 1: no {tmp_path / 'seed_1' / 'summary_picture.json'} (report.py writes it)"
    )
    (tmp_path / "seed_1" / "summary_picture.json").write_text("{")
    with pytest.raises(SystemExit) as caught:
        aggregate.record(tmp_path, [1, 2], "x", readme=1)
    assert str(caught.value).startswith(
        f"aggregate.py: {tmp_path / 'seed_1' / 'summary_picture.json'}: not JSON ("
    )
    (tmp_path / "seed_1" / "summary_picture.json").write_text(json.dumps({**picture, "budget": "B"}))
    with pytest.raises(SystemExit) as caught:
        aggregate.record(tmp_path, [1, 2], "x", readme=1)
    where = tmp_path / "seed_1" / "summary_picture.json"
    assert str(caught.value) == f"aggregate.py: {where}: invalid literal for int() with base 10: 'B'"
    capsys.readouterr()
    with pytest.raises(SystemExit):
        aggregate.main(["--root", str(tmp_path), "--seeds", "1", "2", "--readme", "3"])
    assert "error: --readme 3 is not one of --seeds 1 2\n" in capsys.readouterr().err


def test_the_aggregate_cli_needs_a_root_and_seeds_and_says_what_each_option_is(tmp_path, monkeypatch, capsys):
    for argv, missing in ((["--seeds", "1"], "--root"), (["--root", str(tmp_path)], "--seeds")):
        with pytest.raises(SystemExit):
            aggregate.main(argv)
        assert f"the following arguments are required: {missing}" in capsys.readouterr().err
    monkeypatch.setenv("COLUMNS", "200")  # no help text wrapped
    with pytest.raises(SystemExit):
        aggregate.main(["--help"])
    out = capsys.readouterr().out
    assert (
        "\nThe testbed over several seeds: each claim's mean and spread over the seeds, and in how many it "
        "held.\n" in out
    )
    assert re.search(r"\n  --root ROOT\s+run.sh's OUT with SEEDS set\n", out)
    assert re.search(
        r"\n  --command COMMAND\s+the call that ran the seeds, for the record \(default: this one's\)\n", out
    )
    assert re.search(r"\n  --readme README\s+the seed whose table and picture the README shows\n", out)


def test_the_record_of_a_command_line_run_names_that_command(tmp_path, monkeypatch, capsys):
    seed_report(tmp_path, 1, [CLAIM_A])
    monkeypatch.setattr(sys, "argv", ["aggregate.py", "--root", str(tmp_path), "--seeds", "1"])
    aggregate.main()
    record = load_record(tmp_path / "record.yaml")
    assert record.command == f"python recipes/markovian_testbed/aggregate.py --root {tmp_path} --seeds 1"
    assert aggregate.record(tmp_path, [1], "x").name == "record"


# --- report.py: the claims at their edges ----------------------------------------------------------------


def past_b(mode: str, accuracy: dict[int, float]) -> dict:
    return summary(mode, {b: (0.0, a) for b, a in accuracy.items()})


def test_claim_b_undecided_without_both_budgets_says_which_it_needs():
    lines, verdict = report.claim_b(past_b("longcot", {512: 0.125}), past_b("delethink", {1024: 0.25}), 512)
    assert lines == [
        "## (b) accuracy vs thinking budget on problems longer than B = 512", "",
        "| budget | LongCoT-RL (longer budget) | Delethink-RL (more chunks) |", "|---|---|---|",
        "| 512 | 0.125 | nan |", "| 1024 | nan | 0.250 |", "",
        "not decided: both sweeps need budgets 512 and 1024", "",
    ]  # fmt: skip
    assert verdict == report.Verdict(
        "b", report.B_CLAIM, report.B_TARGET, "not measured: both sweeps need budgets 512 and 1024"
    )


def test_claim_b_holds_only_for_a_longcot_gain_strictly_below_half_delethinks():
    dt = past_b("delethink", {512: 0.0, 1024: 0.5})
    lines, verdict = report.claim_b(past_b("longcot", {512: 0.0, 1024: 0.25}), dt, 512)
    assert lines[-2] == (
        "From B to 2B: Delethink gains +0.500 (rising at every measured budget), LongCoT gains +0.250 "
        "(target: Delethink rises and LongCoT gains < 0.5 x Delethink's gain): **not held**"
    )
    assert (verdict.measured, verdict.value, verdict.held) == (
        "Delethink +0.500 (rising), LongCoT +0.250",
        0.5,
        False,
    )
    assert report.claim_b(past_b("longcot", {512: 0.0, 1024: 0.125}), dt, 512)[1].held


def test_delethink_rises_through_a_flat_step_but_not_to_its_own_level_and_only_between_b_and_2b():
    lc = past_b("longcot", {512: 0.0, 1024: 0.0})
    flat_then_up = past_b("delethink", {256: 0.5, 512: 0.125, 768: 0.125, 1024: 0.375, 2048: 0.0})
    assert report.claim_b(lc, flat_then_up, 512)[1].held  # 256 and 2048 are outside [B, 2B]
    level = report.claim_b(lc, past_b("delethink", {512: 0.25, 1024: 0.25}), 512)[1]
    assert (level.measured, level.held) == ("Delethink +0.000 (not rising), LongCoT +0.000", False)


def test_the_summary_readers_take_the_runs_mode_and_source_and_the_metric_of_its_samples(tmp_path):
    run = summary("longcot", {512: (0.5, 0.25)})
    other_source = {"mode": "longcot", "thinking_budget": 256, "metrics": {"other": {"mean@4": 1.0}}}
    run["runs"] += [{**run["runs"][0], "mode": "delethink", "thinking_budget": 1024}, other_source]
    assert report.metric_name({"config": {"sampling": {"n": 7}}}) == "mean@7"
    assert report.accuracy_by_budget(run, "longcot", report.PAST_B) == {512: 0.25}
    assert report.load_summary(tmp_path, "longcot_rl") is None
    (tmp_path / "eval" / "longcot_rl").mkdir(parents=True)
    (tmp_path / "eval" / "longcot_rl" / "summary.json").write_text(json.dumps(run))
    assert report.load_summary(tmp_path, "longcot_rl") == run


def test_medians_leave_out_records_without_the_key_and_are_nan_without_any():
    assert report.median_of([{"x": 1.0}, {"y": 9.0}, {"x": 3.0}, {"x": 2.0}], "x") == 2.0
    assert math.isnan(report.median_of([{"y": 1.0}], "x"))


def test_the_crossover_sentence_says_when_delethink_is_never_the_cheaper():
    rows = [timing_row(512, 5.0, 6.0), timing_row(1024, 20.0, 22.0)]
    assert report.crossover_sentence(rows) == (
        "On this machine Delethink's whole step (rollout + update) per trajectory is the cheaper one at no "
        "measured budget (up to 1024), its rollout at no measured budget (up to 1024); at 1024 Delethink / "
        "LongCoT is 1.10 for the step and 1.10 for the rollout."
    )
    rows[1] = timing_row(1024, 20.0, 12.0)
    assert "cheaper one from budget 1024, its rollout from budget 1024;" in report.crossover_sentence(rows)


def test_delethink_is_not_the_cheaper_at_a_ratio_of_exactly_one():
    trained = {
        "budget": 512,
        "longcot": timed(4.0, 3),
        "delethink": timed(4.0, 3),
        "delethink_over_longcot": 1.0,
    }
    rows = [timing_row(512, 5.0, 5.0), timing_row(1024, 20.0, 12.0)]
    assert report.as_trained_lines(trained, rows) == [
        "- at 512 with end-of-sequence honoured, as in training: Delethink 4.00 s (3 thinking tokens), "
        "LongCoT 4.00 s (3); Delethink / LongCoT = 1.00 (target < 1): **not held**",
        "- budgets at which Delethink's rollout is the cheaper one: [1024]",
    ]


def test_the_cost_curve_is_this_table_and_this_line_for_an_old_timing_file():
    rows = [timing_row(512, 5.0, 6.0)]  # per trajectory (100): rollouts 50, 60 ms; updates 10; steps 60, 70
    assert report.cost_curve(rows) == [
        "", "### The cost curve: one trajectory, LongCoT against Delethink", "",
        "The same runs, each followed by the update the trainer makes of that batch (old log-probs + PPO "
        "update, the testbed configs' actor settings); step = rollout + update, per trajectory.",
        "",
        "| budget | LongCoT rollout ms | Delethink rollout ms | LongCoT update ms | Delethink update ms "
        "| LongCoT step ms | Delethink step ms | step Delethink / LongCoT |",
        "|---|---|---|---|---|---|---|---|",
        "| 512 | 50.0 | 60.0 | 10.0 | 10.0 | 60.0 | 70.0 | 1.17 |",
        "", report.crossover_sentence(rows), "", "![crossover](crossover.png)", "",
    ]  # fmt: skip
    old = [{k: v for k, v in rows[0].items() if k != "step_delethink_over_longcot"}]
    assert report.cost_curve(old) == [
        "", "### The cost curve: one trajectory, LongCoT against Delethink", "",
        "not measured: eval/timing.json predates the update timing; delete it and rerun", "",
    ]  # fmt: skip


def test_the_training_table_opens_with_what_it_measures():
    assert report.training_table({}, {}) == [
        "Per RL step, medians over the run (rollout = generation; update = old log-probs + PPO update).",
        "FLOPs: verl/tools/cost_model.py over every logged training trajectory (generation + 3x",
        "forward).",
        "",
        "| run | steps | rollout (s) | update (s) | step (s) | thinking tokens / traj | est. FLOPs |",
        "|---|---|---|---|---|---|---|",
    ]


def test_the_rollout_claim_in_training_holds_at_a_ratio_of_one_and_names_its_quartiles():
    lc = [{"step": s, "timing/gen_s": 2.0} for s in (1, 2)]
    dt = [{"step": 1, "timing/gen_s": 0.0}, {"step": 2, "timing/gen_s": 2.0}]
    lines, verdict = report.rollout_in_training({"longcot": lc, "delethink": dt})
    assert lines == [
        "",
        "Rollout per step, Delethink / LongCoT = 0.50 (median over 2 steps, each step's two rollouts on the "
        "same prompts; quartiles 0.25-0.75; target <= 1.0x): **held**",
    ]
    assert (verdict.key, verdict.claim, verdict.target) == ("c_rollout", report.C_ROLLOUT_CLAIM, "<= 1.0x")
    assert verdict.measured == "0.50x (quartiles 0.25-0.75 over 2 steps)"
    level = report.rollout_in_training({"longcot": lc, "delethink": lc})[1]
    assert (level.value, level.held) == (1.0, True)


def sample_of(*chunks: str) -> dict:
    # the reference of 002:8103: " 002:8103 001:1039 000:0391</think>\\boxed{0391}"; 9 characters a step
    return {"problem": "<|user|>002:8103<|assistant|><think>", "chunks": [{"response": c} for c in chunks]}


def test_a_sample_that_thinks_on_where_its_answer_should_start_fails_in_the_answer():
    assert report.failure_start(sample_of(" 002:8103 001:1039 000:0391 999")) == report.FAILURE_STARTS[4]


@pytest.mark.parametrize(
    "chunks, start",
    [
        ((" 002:8103 001:10", "39 000:0392"), 3),  # wrong at 26, 10 after the cut at 16: not within a step
        ((" 002:8103 001:103", "9 000:0392"), 3),  # wrong at 26, 9 after the cut at 17
        ((" 002:8103 001:1039", " 000:0392"), 2),  # wrong at 26, 8 after the cut at 18
        ((" 002:8103 001:1039 000:039", "2"), 2),  # the first character of the second chunk is wrong
        ((" 002:8103 ", "001:1039 ", "000:0392"), 2),  # the third chunk starts at 19, wrong at 26
    ],
)
def test_a_later_step_is_after_a_cut_only_within_one_step_of_the_chunk_it_is_in(chunks, start):
    assert report.failure_start(sample_of(*chunks)) == report.FAILURE_STARTS[start]


def test_a_ratio_of_exactly_one_at_the_largest_budget_is_no_crossover():
    rows = [{"budget": 512, "r": 0.5}, {"budget": 1024, "r": 1.0}]
    assert report.crossover(rows, "r") is None
    rows[1]["r"] = 0.99
    assert report.crossover(rows, "r") == 512


def test_claims_without_the_timings_they_need_are_not_measured_with_their_own_words():
    old = [{k: v for k, v in timing_row(512, 5.0, 6.0).items() if k != "step_delethink_over_longcot"}]
    assert report.crossover_verdict(old, 512) == report.Verdict(
        "c_crossover", report.C_CROSSOVER_CLAIM, report.C_CROSSOVER_TARGET, "not measured: old timing.json"
    )
    assert report.flatness([timing_row(512, 5.0, 6.0)]) == (
        [],
        report.Verdict("c_flat", report.C_FLAT_CLAIM, report.C_FLAT_TARGET, "not measured: one budget timed"),
    )
    assert report.flatness([timing_row(512, 5.0, 6.0), timing_row(1024, 20.0, 12.0)]) == (
        [],
        report.not_measured(
            "c_flat", report.C_FLAT_CLAIM, report.C_FLAT_TARGET, "old timing.json (no distinct pass)"
        ),
    )


def per_token(budget: int, lc_ms: float, dt_ms: float) -> dict:
    """A timing row whose distinct rows decoded at these milliseconds per token; the earlier measure the
    same at every budget (3 and 1.5 ms per thinking token of 1000), so it cannot decide the claim."""
    return {"budget": budget, "longcot": timed(3.0, 1000, decode_ms=lc_ms),
            "delethink": timed(1.5, 1000, decode_ms=dt_ms)}  # fmt: skip


def test_flatness_holds_at_exactly_its_target_and_needs_longcot_strictly_faster_growing():
    lines, verdict = report.flatness([per_token(512, 1.0, 1.0), per_token(2048, 2.0, 1.2)])
    assert (verdict.claim, verdict.target, verdict.value, verdict.held) == (
        report.C_FLAT_CLAIM,
        report.C_FLAT_TARGET,
        1.2,
        True,
    )
    assert verdict.measured == "Delethink 1.20x, LongCoT 2.00x from 512 to 2048"
    assert lines == [
        "- longcot: decode time per token at 2048 / at 512 = 2.00x (the earlier measure, rollout time per "
        "thinking token: 1.00x)",
        "- delethink: decode time per token at 2048 / at 512 = 1.20x (the earlier measure, rollout time per "
        "thinking token: 1.00x)",
        "- target: Delethink flat within 1.2x, LongCoT growing (> 1x) and faster than Delethink: **held**",
    ]
    assert not report.flatness([per_token(512, 1.0, 1.0), per_token(2048, 2.0, 1.21)])[1].held
    # LongCoT not growing at all (1.00x) is not "more", even against a Delethink that got cheaper
    assert not report.flatness([per_token(512, 1.0, 1.0), per_token(2048, 1.0, 0.5)])[1].held
    # read from the first and the last budget, whatever lies between
    rows = [per_token(512, 1.0, 1.0), per_token(1024, 0.1, 9.0), per_token(2048, 2.0, 1.2)]
    assert report.flatness(rows)[1].value == 1.2


def test_claim_b_reads_delethink_up_to_and_including_2b_and_says_when_it_is_not_rising():
    lc = past_b("longcot", {512: 0.0, 1024: 0.0})
    lines, verdict = report.claim_b(lc, past_b("delethink", {512: 0.125, 768: 0.5, 1024: 0.375}), 512)
    assert lines[-2:] == [
        "From B to 2B: Delethink gains +0.250 (not rising at every measured budget), LongCoT gains +0.000 "
        "(target: Delethink rises and LongCoT gains < 0.5 x Delethink's gain): **not held**",
        "",
    ]
    assert verdict == report.Verdict(
        "b", report.B_CLAIM, report.B_TARGET, "Delethink +0.250 (not rising), LongCoT +0.000", 0.25, False
    )


def test_the_report_cli_needs_a_root_and_says_what_it_is(monkeypatch, capsys):
    with pytest.raises(SystemExit):
        report.main([])
    assert "the following arguments are required: --root" in capsys.readouterr().err
    monkeypatch.setenv("COLUMNS", "200")  # no help text wrapped
    with pytest.raises(SystemExit):
        report.main(["--help"])
    out = capsys.readouterr().out
    assert (
        "\nThe Markovian testbed report: a verdict table first (each claim, its target, what was measured "
        in out
    )
    assert re.search(r"\n  --root ROOT\s+the recipe's output directory\n", out)


# --- report.py: the held-out section ------------------------------------------------------------------------


def heldout(root: Path, name: str, mode: str, scores: list[list[float]], budget: int = 256) -> None:
    rows = [{"mode": mode, "thinking_budget": budget, "problem_index": p, "score": s}
            for p, samples in enumerate(scores) for s in samples]  # fmt: skip
    path = root / "eval" / name / "samples.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))


GAIN_TARGET = "> 2 standard errors"
PROBE = "the warm start resumes after a cut (probe: Delethink / LongCoT inference at B)"
A_CLAIM = "(a) Delethink-RL's accuracy at B, against LongCoT-RL's"


def test_the_heldout_section_is_this_table_these_lines_and_these_verdicts(tmp_path):
    heldout(tmp_path, "heldout_sft", "longcot", [[1, 1], [0, 0]])  # per problem 1, 0: 0.5 ± 0.5
    heldout(tmp_path, "heldout_sft", "delethink", [[1, 0], [0, 0]])  # 0.5, 0: 0.25 ± 0.25
    heldout(tmp_path, "heldout_longcot_rl", "longcot", [[1, 1], [1, 0]])  # 1, 0.5: 0.75 ± 0.25
    heldout(tmp_path, "heldout_delethink_rl", "delethink", [[1, 1], [1, 1]])  # 1, 1: 1 ± 0
    lines, verdicts, accuracies = report.heldout_section(tmp_path, 256, 7)
    a = paired.paired_ratio({0: [1.0, 1.0], 1: [1.0, 1.0]}, {0: [1.0, 1.0], 1: [1.0, 0.0]})  # 2 / 1.5
    probe = paired.paired_ratio({0: [1.0, 0.0], 1: [0.0, 0.0]}, {0: [1.0, 1.0], 1: [0.0, 0.0]})  # 0.5 / 1
    assert lines == [
        "## RL against its warm start, and (a): held-out problems of the trained sizes at B = 256", "",
        "2 problems x 2 samples at T = 1, the same problems and sample seeds in every evaluation; accuracy ± "
        "one standard error over problems; the gain is paired by problem. Delethink inference: I = 7 chunks, "
        "the same total budget.", "",
        "| environment | warm start | after RL | gain (paired) |", "|---|---|---|---|",
        "| LongCoT | 0.500 ± 0.500 | 0.750 ± 0.250 | +0.250 ± 0.250 |",  # differences 0, 0.5
        "| Delethink | 0.250 ± 0.250 | 1.000 ± 0.000 | +0.750 ± 0.250 |",  # differences 0.5, 1
        "",
        f"(a) Delethink-RL / LongCoT-RL = 1.333 ± {a[1]:.3f} (bootstrap over problems; target >= 0.95x): "
        "**held**",
        "Markovian-ness probe: the warm start with Delethink inference / with LongCoT inference = "
        f"0.500 ± {probe[1]:.3f} (at the same budget, before any RL)",
        "",
    ]  # fmt: skip
    gains = [
        f"{label}-RL gains over its own warm start (held-out accuracy at B)"
        for label in ("LongCoT", "Delethink")
    ]
    assert verdicts == [
        report.Verdict("probe", PROBE, ">= 0.95x", f"0.50x ± {probe[1]:.2f} (0.250 against 0.500)", 0.5,
                       False),
        report.Verdict("gain_longcot", gains[0], GAIN_TARGET, "+0.250 ± 0.250 (0.500 -> 0.750)", 0.25,
                       False),
        report.Verdict("gain_delethink", gains[1], GAIN_TARGET, "+0.750 ± 0.250 (0.250 -> 1.000)", 0.75,
                       True),
        report.Verdict("a", A_CLAIM, ">= 0.95x", f"1.33x ± {a[1]:.2f} (1.000 against 0.750)", a[0], True),
    ]  # fmt: skip
    assert list(accuracies) == ["longcot", "delethink"]
    assert [x for mode in accuracies.values() for pair in mode for x in pair] == pytest.approx(
        [0.5, 0.5, 0.75, 0.25, 0.25, 0.25, 1.0, 0.0]
    )


def test_a_gain_of_exactly_two_standard_errors_is_noise_and_a_ratio_of_exactly_095_holds(tmp_path):
    heldout(tmp_path, "heldout_sft", "longcot", [[0] * 4, [0] * 4])
    heldout(tmp_path, "heldout_longcot_rl", "longcot", [[1, 0, 0, 0], [1, 1, 1, 0]])  # differences 0.25, 0.75
    heldout(tmp_path, "heldout_sft", "delethink", [[0]] * 20, budget=512)
    heldout(tmp_path, "heldout_longcot_rl", "longcot", [[1]] * 20, budget=512)
    heldout(tmp_path, "heldout_delethink_rl", "delethink", [[1]] * 19 + [[0]], budget=512)  # 19 / 20
    verdicts = {v.key: v for v in report.heldout_section(tmp_path, 256, 7)[1]}
    assert (verdicts["gain_longcot"].value, verdicts["gain_longcot"].held) == (0.5, False)  # 0.5 = 2 x 0.25
    a = {v.key: v for v in report.heldout_section(tmp_path, 512, 7)[1]}["a"]
    assert (a.value, a.held) == (0.95, True)


def test_without_every_evaluation_the_missing_claims_are_not_measured(tmp_path):
    heldout(tmp_path, "heldout_longcot_rl", "longcot", [[1, 1], [1, 0]])
    lines, verdicts, accuracies = report.heldout_section(tmp_path, 256, 7)
    gains = [
        f"{label}-RL gains over its own warm start (held-out accuracy at B)"
        for label in ("LongCoT", "Delethink")
    ]
    assert verdicts == [
        report.Verdict("probe", PROBE, ">= 0.95x", "not measured: no held-out evaluation of the warm start"),
        report.Verdict("gain_longcot", gains[0], GAIN_TARGET, "not measured: no held-out evaluation"),
        report.Verdict("gain_delethink", gains[1], GAIN_TARGET, "not measured: no held-out evaluation"),
        report.Verdict("a", A_CLAIM, ">= 0.95x", "not measured: no held-out evaluation of both RL runs"),
    ]
    assert accuracies == {} and lines[2].startswith("2 problems x 2 samples at T = 1")
    heading = "## RL against its warm start, and (a): held-out problems of the trained sizes at B = 256"
    assert report.heldout_section(tmp_path / "none", 256, 7)[0] == [heading, "", "", ""]


def test_an_evaluation_with_no_sample_at_b_counts_as_not_run(tmp_path):
    heldout(tmp_path, "heldout_sft", "longcot", [[1]], budget=512)
    assert report.heldout_scores(tmp_path, "heldout_sft", "longcot", 256) is None
    assert report.heldout_scores(tmp_path, "heldout_sft", "longcot", 512) == {0: [1.0]}
    assert report.heldout_scores(tmp_path, "heldout_delethink_rl", "longcot", 512) is None


def test_a_probe_of_exactly_095_holds_and_each_measured_line_shows_the_means(tmp_path):
    heldout(tmp_path, "heldout_sft", "longcot", [[1]] * 20)  # 1 ± 0
    heldout(tmp_path, "heldout_sft", "delethink", [[1]] * 19 + [[0]])  # 0.95 ± 0.05
    heldout(tmp_path, "heldout_longcot_rl", "longcot", [[1]] * 19 + [[0]])
    verdicts = {v.key: v for v in report.heldout_section(tmp_path, 256, 7)[1]}
    probe = verdicts["probe"]
    assert (probe.value, probe.held) == (0.95, True)
    assert probe.measured.startswith("0.95x ± ") and probe.measured.endswith(" (0.950 against 1.000)")
    assert verdicts["gain_longcot"].measured == "-0.050 ± 0.050 (1.000 -> 0.950)"


def test_the_failure_table_has_a_column_per_evaluation_found_in_this_order(tmp_path):
    solved = {
        "problem": "<|user|>001:8103<|assistant|><think>",
        "chunks": [],
        "thinking_budget": 256,
        "score": 1,
    }
    for name, mode in (("heldout_longcot_rl", "longcot"), ("heldout_delethink_rl", "delethink")):
        (tmp_path / "eval" / name).mkdir(parents=True)
        (tmp_path / "eval" / name / "samples.jsonl").write_text(json.dumps({**solved, "mode": mode}) + "\n")
    table = report.failure_starts_section(tmp_path, 256)  # the warm start's evaluation is missing
    assert table[:4] == [
        "## Where the failed samples first go wrong: held-out problems at B = 256", "",
        "Each failed sample against its problem's reference, at the first token that differs; a share of "
        "the run's samples (and their number). A gap between the inference modes that sits in the row after "
        "a cut is a resume the model has not learned; errors in steps 0 and 1 are the start of a trace, "
        "which only whole traces (and long starts) teach.", "",
    ]  # fmt: skip
    assert table[4:6] == ["| first wrong token | LongCoT-RL | Delethink-RL |", "|---|---|---|"]
    assert table[6:] == [
        *(f"| {start} | 0.000 (0) | 0.000 (0) |" for start in report.FAILURE_STARTS),
        "| none: solved | 1.000 (1) | 1.000 (1) |", "",
    ]  # fmt: skip


def test_the_cost_section_with_timings_ends_with_the_flatness_lines_then_the_figure():
    rows = [timing_row(512, 5.0, 6.0, decode=(0.5, 0.25)), timing_row(1024, 20.0, 12.0, decode=(1.0, 0.3))]
    timing = {"prompts": 2, "samples": 2, "repeats": 1, "distinct_rows": 4, "rows": rows,
              "as_trained": {"budget": 512, "longcot": timed(4.0, 3), "delethink": timed(3.6, 3),
                             "delethink_over_longcot": 0.9}}  # fmt: skip
    lines, cost, verdicts = report.claim_c({}, timing, 512, 4, 2)
    assert lines[-3:] == ["", "![cost](cost.png)", ""] and lines[-4].startswith(
        "- target: Delethink flat within"
    )
    # the seconds table, then the per-token table, then the cost curve
    tables = [i for i, line in enumerate(lines) if line.startswith("| budget |")]
    headings = [lines[i].split(" | ")[1] for i in tables]
    assert headings == ["I", "LongCoT decode ms/token", "LongCoT rollout ms"]
    assert cost == {"records": {}, "timing": rows}
    assert (verdicts[-1].key, verdicts[-1].value) == ("c_flat", 1.2)  # 0.3 / 0.25

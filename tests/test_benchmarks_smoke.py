"""Quick modes of benchmarks/ that have no other test file: they run and print every figure."""

import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e_utils import HANG_S
from verl.tools.results import load_record

BENCHMARKS = Path(__file__).parents[1] / "benchmarks"


def test_microbatch_throughput_quick_mode_measures_every_variant(capsys, tmp_path):
    benchmark = runpy.run_path(str(BENCHMARKS / "microbatch_throughput.py"))
    results = benchmark["main"](["--quick", "--repeats", "1", "--record", str(tmp_path / "micro.yaml")])

    variants = ["padded", "budget", "budget+packed"]
    assert list(results) == variants
    for name, r in results.items():
        assert r["best"] > 0 and r["median"] > 0, name
        assert r["ratio"] > 0 and r["pair"] > 0, name
        assert r["micro"] >= 1, name
    assert results["padded"]["ratio"] == results["padded"]["pair"] == 1.0
    assert results["padded"]["micro"] == 2  # 16 rows of 8 per fixed micro-batch: 2 forwards
    assert results["budget"]["micro"] == results["budget+packed"]["micro"]  # same plan, packed or not

    lines = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:1] == ["variant"])
    assert [line.split()[0] for line in lines[header + 1 : header + 4]] == variants
    (table,) = load_record(tmp_path / "micro.yaml").tables  # the printed table, as a results record
    assert [row[:2] for row in table.rows] == [[name, str(results[name]["micro"])] for name in variants]
    assert table.rows[1][-2] == f"{results['budget']['ratio']:.2f}x"


def test_shared_prefix_quick_mode_counts_each_shared_prompt_once(capsys, tmp_path):
    benchmark = runpy.run_path(str(BENCHMARKS / "shared_prefix.py"))
    results = benchmark["main"](["--quick", "--record", str(tmp_path / "shared.yaml")])

    assert list(results) == ["LongCoT", "Delethink"]
    for env, variants in results.items():
        padded, shared = variants["padded"], variants["shared"]
        assert padded["rows"] == shared["rows"], env
        # 2 problems x 4 samples: each group's prompt runs once instead of 4 times (less 1 token a row)
        assert shared["forward_tokens"] < padded["forward_tokens"] <= padded["positions"], env
        assert shared["positions"] == shared["forward_tokens"], env  # packed: no padding
        assert shared["best_s"] > 0 and padded["speedup"] == 1.0, env
    assert results["Delethink"]["padded"]["rows"] > results["LongCoT"]["padded"]["rows"]  # chunk rows
    out = capsys.readouterr().out
    assert "Delethink / LongCoT, shared: forward tokens" in out
    record = load_record(tmp_path / "shared.yaml")  # the printed table, as a results record
    assert record.section == "actor" and record.command.endswith(
        "--quick --record " + str(tmp_path / "shared.yaml")
    )
    assert [row[:3] for row in record.tables[0].rows] == [
        [env, v, str(results[env][v]["rows"])] for env in results for v in ("padded", "shared")
    ]


def _table(report: str, heading: str) -> list[list[str]]:
    """The body rows of the markdown table under the `## heading...` line of `report`."""
    section = report.split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


@pytest.mark.slow
def test_gpu_check_smoke_runs_every_section_without_ray(tmp_path):
    out = tmp_path / "gpu_check.md"
    # a fresh interpreter: the benchmark must run where Ray is not installed, so nothing may import it
    script = (
        "import runpy, sys; sys.argv = ['gpu_check.py', '--smoke', '--out', sys.argv[1]]; "
        "runpy.run_path('benchmarks/gpu_check.py', run_name='__main__'); "
        "print('ray imported:', 'ray' in sys.modules)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(out)], cwd=BENCHMARKS.parent, capture_output=True, text=True,
        timeout=HANG_S,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ray imported: False" in proc.stdout
    report = out.read_text()
    for heading in ("## Actor", "## Engine", "## RL"):  # printed, and written to --out
        assert heading in report and heading in proc.stdout

    actor = _table(report, "Actor")
    cases = [row[0] for row in actor if row[0]]
    assert len(cases) == 4  # two budgets, with and without gradient checkpointing
    assert sum(row[1:3] == ["update loss finite", "-"] and row[3] == "True" for row in actor) == 4
    for row in actor:
        if row[1] in ("gradients shard", "Adam moments"):  # counted tensors against the estimate's 4Ψ, 8Ψ
            assert abs(float(row[4]) - 1) < 0.05, row
        if row[1].endswith(": peak"):
            assert float(row[2]) > 0 and row[3] != "-", row

    engine = _table(report, "Engine")
    assert [row[0].split()[0] for row in engine] == ["Delethink", "LongCoT", "LongCoT"]
    delethink, longcot, ratio = engine
    assert delethink[1] == longcot[1] == "64"  # 2 sequences x (16 + 2 x 8) = 2 x 32 tokens, each way
    assert ratio[1] == "1.00" and float(delethink[3]) > 0 and float(longcot[3]) > 0

    rl = _table(report, "RL")
    assert [row[0] for row in rl] == ["longcot", "delethink"]
    for row in rl:
        assert row[1] == "3" and row[-1] == "True", row
        assert float(row[2]) > 0 and float(row[4]) > 0 and float(row[5]) >= float(row[2]), row


def test_the_mutation_run_is_written_as_a_results_record_a_row_per_module(tmp_path):
    mutants = runpy.run_path(str(BENCHMARKS / "mutants.py"))  # its record, without running mutmut
    counts = dict(mutants=10, killed=8, equivalent=1, survived=1, not_run=0, killed_share=0.8889, wall_s=12.3)
    unrun = dict(mutants=5, killed=0, equivalent=0, survived=0, not_run=5, killed_share=None, wall_s=None)
    summary = {
        "modules": {"verl.core.trimmers": counts, "verl.core.batch": unrun},
        "survivors": [
            {"name": "verl.core.trimmers.x_trim__mutmut_3", "status": "survived", "diff": "-a\n+b"}
        ],
        "equivalent": [],
        "stale_equivalent": ["verl.core.trimmers.x_trim__mutmut_1"],
        "unused_equivalent": [],
    }
    path = tmp_path / "mutants.yaml"
    mutants["write_record"](path, mutants["record"](summary, "3.8.1", 12.3, []))
    record = load_record(path)
    assert (record.section, record.command, record.method) == (
        "suite",
        "make mutants",
        "benchmarks/README.md",
    )
    (table,) = record.tables
    assert table.rows == [
        ["`verl/core/trimmers.py`", "10", "8", "1", "1", "0", "88.9%", "12"],
        ["`verl/core/batch.py`", "5", "0", "0", "0", "5", "not run", ""],
    ]
    assert table.caption.endswith("; 12 s of wall time.")
    assert (
        record.notes
        == "Named equivalent with another mutation (check again): verl.core.trimmers.x_trim__mutmut_1."
    )

    reported = mutants["record"]({**summary, "stale_equivalent": []}, "3.8.1", None, ["--report"])
    assert reported.command == "python benchmarks/mutants.py --report" and reported.notes == ""
    assert reported.tables[0].caption.endswith("at that commit.")  # nothing ran: no wall time
    unused = {**summary, "unused_equivalent": ["verl.core.trimmers.x_trim__mutmut_2"]}
    assert mutants["record"](unused, "3.8.1", None, []).notes == (
        "Named equivalent with another mutation (check again): verl.core.trimmers.x_trim__mutmut_1. "
        "Named equivalent, no surviving mutant (remove): verl.core.trimmers.x_trim__mutmut_2."
    )


def test_an_equivalents_entry_that_no_surviving_mutant_matches_is_named():
    """A named mutant that is killed now, or that no longer exists, is named; an entry of a module not
    summarised is not (that module's next run needs it)."""
    unused_entries = runpy.run_path(str(BENCHMARKS / "mutants.py"))["unused_entries"]
    equivalent = dict.fromkeys(
        [
            "verl.core.trimmers.x_trim__mutmut_1",  # still survives, as named
            "verl.core.trimmers.x_trim__mutmut_2",  # killed now
            "verl.core.trimmers.x_trim__mutmut_9",  # no such mutant
            "verl.core.trimmers.xǁTrimmerǁcut__mutmut_3",  # a method's
            "verl.core.trimmers_old.x_trim__mutmut_1",  # another module whose name starts alike
            "verl.core.batch.x_collate__mutmut_1",  # a module not summarised
        ],
        {"mutation": "+    a = 2", "why": "w"},
    )
    matched = {"verl.core.trimmers.x_trim__mutmut_1"}
    assert unused_entries(equivalent, ["verl.core.trimmers"], matched) == [
        "verl.core.trimmers.x_trim__mutmut_2", "verl.core.trimmers.x_trim__mutmut_9",
        "verl.core.trimmers.xǁTrimmerǁcut__mutmut_3",
    ]  # fmt: skip
    assert unused_entries(equivalent, [], matched) == []


def test_real_model_eval_counts_equal_traces_and_where_the_others_part():
    benchmark = runpy.run_path(str(BENCHMARKS / "real_model_eval.py"))

    def sample(*chunks):
        return {"chunks": [{"response_ids": list(c)} for c in chunks]}

    ours = [sample([1, 2], [3]), sample([1, 2, 3]), sample([5, 6], [7, 8]), sample([9])]
    theirs = [sample([1, 2], [3]), sample([1, 2], [3]), sample([5, 6], [7, 9]), sample([4])]
    # traces are compared whole: chunk edges do not matter, the first differing thinking token does
    assert benchmark["agreement"](ours, theirs) == {"traces": 4, "equal": 2, "parted_at": [0, 3]}
    with pytest.raises(ValueError):
        benchmark["agreement"](ours, theirs[:3])

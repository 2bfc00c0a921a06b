"""Quick modes of benchmarks/ that have no other test file: they run and print every figure."""

import runpy
from pathlib import Path

BENCHMARKS = Path(__file__).parents[1] / "benchmarks"


def test_microbatch_throughput_quick_mode_measures_every_variant(capsys):
    benchmark = runpy.run_path(str(BENCHMARKS / "microbatch_throughput.py"))
    results = benchmark["main"](["--quick", "--repeats", "1"])

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
    assert [line.split()[0] for line in lines[header + 1 :]] == variants


def test_shared_prefix_quick_mode_counts_each_shared_prompt_once(capsys):
    benchmark = runpy.run_path(str(BENCHMARKS / "shared_prefix.py"))
    results = benchmark["main"](["--quick"])

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

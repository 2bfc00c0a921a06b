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

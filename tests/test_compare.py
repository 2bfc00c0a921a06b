"""The run comparison tool reads metrics.jsonl, summarises and plots."""

import json
import math

import pytest

from verl.tools.compare import format_table, main, summary


def write_run(path, records):
    path.mkdir(parents=True)
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


RECORDS = [
    {"step": 0, "val/score_mean": 0.25},
    {"step": 1, "train/score_mean": 0.5, "train/thinking_tokens_mean": 10.0, "perf/cum_time_s": 2.0},
    {
        "step": 2,
        "train/score_mean": 0.75,
        "train/thinking_tokens_mean": 20.0,
        "perf/cum_time_s": 5.0,
        "val/score_mean": 0.5,
    },
]


def test_summary_reads_before_after_and_means():
    s = summary(RECORDS)
    assert s == {
        "val_before": 0.25,
        "val_after": 0.5,
        "thinking_tokens": 15.0,
        "train_time_s": 5.0,
        "steps": 2,
    }
    no_val = summary(RECORDS[1:2])
    assert math.isnan(no_val["val_before"]) and math.isnan(no_val["val_after"])


def test_cli_prints_table_and_writes_png(tmp_path, capsys):
    write_run(tmp_path / "a", RECORDS)
    write_run(tmp_path / "b", RECORDS[:2])
    main([str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "cmp.png")])
    out = capsys.readouterr().out
    assert "a " in out and "0.250" in out and (tmp_path / "cmp.png").stat().st_size > 10_000
    assert format_table({"x": RECORDS}).splitlines()[2].split()[:3] == ["x", "2", "0.250"]
    with pytest.raises(SystemExit, match="metrics.jsonl not found"):
        main([str(tmp_path / "missing")])

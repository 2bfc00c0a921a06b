"""trainer.log_val_generations: validation generation rows go to val_generations.jsonl next to
metrics.jsonl and to wandb (offline) as a Table, read back here from what wandb wrote."""

import json

import pytest

from verl.config import ConfigError, compose_config
from verl.trainer.config_loader import load_config
from verl.utils.fs import read_jsonl
from verl.utils.tracking import Tracking, generation_table


def rows(step):
    chunks = [
        {"step": step, "index": 0, "chunk": 0, "response": "abc", "response_ids": [97, 98, 99]},
        {"step": step, "index": 0, "chunk": 1, "response": "</think>\\boxed{3}", "response_ids": [262]},
    ]
    return [
        {"step": step, "index": 0, "data_source": "synthetic", "prompt": "1+2?", "answer": "3", "score": 1.0,
         "chunks": chunks},
    ]  # fmt: skip


EXPECTED = [
    0,
    0,
    "synthetic",
    "1+2?",
    "--- chunk 1 ---\nabc\n--- chunk 2 ---\n</think>\\boxed{3}",
    2,
    "3",
    1.0,
]


def test_generation_table_has_one_text_cell_with_every_chunk():
    columns, data = generation_table(rows(0))
    assert columns == ["step", "index", "data_source", "question", "chunks", "num_chunks", "answer", "score"]
    assert data == [EXPECTED]


def test_generations_go_to_jsonl_and_an_offline_wandb_table(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    t = Tracking(["jsonl", "wandb"], tmp_path, "proj", "exp", "grp", config={})
    t.log({"val/score_mean": 1.0}, step=0)
    t.log_generations(rows(0), step=0)
    t.log_generations([], step=1)  # trainer.log_val_generations=0: nothing written
    t.finish()
    assert read_jsonl(tmp_path / "val_generations.jsonl") == rows(0)
    (table,) = (tmp_path / "wandb").glob("offline-run-*/files/media/table/val/generations_0_*.table.json")
    written = json.loads(table.read_text())
    assert written["columns"][:4] == ["step", "index", "data_source", "question"]
    assert written["data"] == [EXPECTED]


def test_a_resumed_run_drops_generations_after_its_checkpoint(tmp_path):
    t = Tracking(["jsonl"], tmp_path, "p", "e", "g", config={})
    for step in (0, 2, 4):
        t.log_generations(rows(step), step=step)
    Tracking(["jsonl"], tmp_path, "p", "e", "g", config={}, resume_step=2)
    assert [r["step"] for r in read_jsonl(tmp_path / "val_generations.jsonl")] == [0, 2]


def test_log_val_generations_must_not_be_negative():
    cfg = compose_config("tiny_delethink", ["trainer.log_val_generations=-1"])
    with pytest.raises(ConfigError, match=r"trainer.log_val_generations=-1: must be >= 0"):
        load_config(cfg, check_paths=False)

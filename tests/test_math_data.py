"""The math problem sets stored in the package: found from any working directory, MATH_DATA_DIR overrides
the folder, every file matches the row count and checksum of SOURCES.md, and a file changed since is named
at start-up with what differs, under the key of the entry point that checks it."""

import hashlib
import shutil

import pytest
from hydra import compose, initialize_config_dir

from verl.config import CONFIG_DIR, ConfigError, compose_config
from verl.eval.config import load_eval_config
from verl.trainer.config_loader import load_config
from verl.utils import math_data
from verl.utils.math_data import VENDORED_MATH_DIR, count_rows, vendored_file_problem, vendored_table

# rows of each file as published upstream (the counts the data's first SOURCES.md gave, by hand)
ROWS = {
    "aime24.jsonl": 30, "aime25.jsonl": 30, "amc23.jsonl": 40, "math500.jsonl": 500,
    "gsm8k_test.jsonl": 1319, "deepscaler_head803.json": 803, "deepscaler_part_aime_1983_2023.json": 975,
    "math_train_rllm.json": 7474,
}  # fmt: skip


def test_the_table_lists_every_stored_file_with_its_rows_and_checksum():
    table = vendored_table(VENDORED_MATH_DIR)
    stored = {p.name for p in VENDORED_MATH_DIR.iterdir() if p.suffix in (".json", ".jsonl")}
    assert set(table) == stored == set(ROWS)
    for name, (rows, sha256) in table.items():
        path = VENDORED_MATH_DIR / name
        assert rows == ROWS[name] == count_rows(path), name
        assert sha256 == hashlib.sha256(path.read_bytes()).hexdigest(), name
        assert vendored_file_problem(str(path)) is None


def test_task_files_are_found_from_any_directory_and_math_data_dir_overrides(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MATH_DATA_DIR", raising=False)
    tasks = ["val_tasks=[aime24,gsm8k]", "train_tasks=[math_train]"]
    config = load_config(compose_config("tiny_longcot", tasks), check_paths=False)
    assert config.val_tasks["aime24"].path == str(VENDORED_MATH_DIR / "aime24.jsonl")
    assert config.val_tasks["gsm8k"].path == str(VENDORED_MATH_DIR / "gsm8k_test.jsonl")
    assert config.train_tasks["math_train"].path == str(VENDORED_MATH_DIR / "math_train_rllm.json")
    monkeypatch.setenv("MATH_DATA_DIR", "/data/math")
    config = load_config(compose_config("tiny_longcot", tasks), check_paths=False)
    assert config.val_tasks["aime24"].path == "/data/math/aime24.jsonl"


@pytest.fixture
def stored_copy(tmp_path, monkeypatch):
    """A copy of the stored folder that math_data takes for the stored one (the tests edit it, not ours)."""
    copy = tmp_path / "math"
    shutil.copytree(VENDORED_MATH_DIR, copy)
    monkeypatch.setattr(math_data, "VENDORED_MATH_DIR", copy)
    monkeypatch.delenv("MATH_DATA_DIR", raising=False)
    return copy


def test_a_changed_file_is_named_with_what_differs(stored_copy):
    aime, table = stored_copy / "aime24.jsonl", stored_copy / "SOURCES.md"
    lines = aime.read_bytes().splitlines(keepends=True)
    aime.write_bytes(b"".join(lines[:-1]))  # a row less
    new_sha = hashlib.sha256(aime.read_bytes()).hexdigest()
    old_sha = "af2b8bd2aa911b6333ad0df32f3ca05c7ae8ed10f1731f4372c8ae26990bf7ac"
    assert vendored_file_problem(str(aime)) == (
        f"{aime} changed since it was stored: 29 rows where the table has 30, sha256 {new_sha} where the "
        f"table has {old_sha} ({table}); restore it (git checkout) or, if the change is meant, update its "
        "row in that table"
    )
    aime.write_bytes(b"".join(lines).replace(b'"answer":"204"', b'"answer":"205"', 1))  # same rows
    assert b'"answer":"205"' in aime.read_bytes()
    problem = vendored_file_problem(str(aime))
    assert problem.startswith(f"{aime} changed since it was stored: sha256 ") and "rows" not in problem
    broken = stored_copy / "deepscaler_head803.json"
    broken.write_bytes(broken.read_bytes()[:1000])  # cut off: no longer a JSON list
    assert "unreadable (JSONDecodeError) rows where the table has 803" in vendored_file_problem(str(broken))
    unlisted = stored_copy / "aime26.jsonl"
    unlisted.write_text('{"problem": "p", "answer": 1}\n')
    assert vendored_file_problem(str(unlisted)) == (
        f"{unlisted} is not listed in {table}: add its source, licence, rows and sha256"
    )
    assert vendored_file_problem(str(VENDORED_MATH_DIR / "aime24.jsonl")) is None  # not the stored folder now


def test_a_changed_file_stops_either_entry_point_at_start_up_under_its_own_key(stored_copy, tiny_assets):
    aime = stored_copy / "aime24.jsonl"
    aime.write_bytes(aime.read_bytes() + b'{"problem": "one more", "answer": "1"}\n')
    said = f"{aime} changed since it was stored: 31 rows where the table has 30, sha256 "
    training = compose_config(
        "tiny_longcot", [f"actor_rollout_ref.model.path={tiny_assets / 'model'}", "val_tasks=[aime24]"]
    )
    with pytest.raises(ConfigError) as error:
        load_config(training)
    assert f"val_tasks.aime24.path='{aime}': {said}" in str(error.value)
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        evaluation = compose("eval", [f"model_path={tiny_assets / 'model'}", "val_tasks@tasks=[aime24]"])
    with pytest.raises(ConfigError) as error:
        load_eval_config(evaluation)
    assert str(error.value).startswith(f"tasks.aime24.path='{aime}': {said}")

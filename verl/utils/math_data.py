"""Where the math tasks' problem sets come from: the folder stored in the package, checked against the
table of its SOURCES.md, and the Hugging Face hub for the sets too large to store.

The folder lives inside the package (verl/data/math/, package data in setup.py) rather than next to it,
so that it is found from its own path, whatever the working directory, in an editable install and in a
built wheel alike.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

VENDORED_MATH_DIR = Path(__file__).resolve().parents[1] / "data" / "math"
HUB_TIMEOUT_S = 10.0  # a machine whose firewall drops packets answers nothing: do not wait longer at start-up


def vendored_table(folder: Path) -> dict[str, tuple[int, str]]:
    """file name -> (rows, sha256), read from the table in `folder`/SOURCES.md (its rows whose first
    cell is a .json or .jsonl file; the columns are file, rows, sha256, ...)."""
    table = {}
    for line in (folder / "SOURCES.md").read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0].endswith((".json", ".jsonl")):
            table[cells[0]] = (int(cells[1]), cells[2])
    return table


def count_rows(path: Path) -> int:
    """Rows of a .jsonl file (its non-blank lines) or of a .json file (the entries of its list)."""
    if path.suffix == ".jsonl":
        with path.open("rb") as f:
            return sum(1 for line in f if line.strip())
    return len(json.loads(path.read_bytes()))


def vendored_file_problem(path: str) -> str | None:
    """What differs between a stored problem set and its row in SOURCES.md (row count, checksum); None
    when they match or when `path` is not a file of the stored folder (MATH_DATA_DIR names another)."""
    file, folder = Path(path).resolve(), VENDORED_MATH_DIR
    if file.parent != folder or not file.is_file():
        return None
    expected = vendored_table(folder).get(file.name)
    if expected is None:
        return f"{file} is not listed in {folder / 'SOURCES.md'}: add its source, licence, rows and sha256"
    rows, sha256 = expected
    actual_sha256 = hashlib.sha256(file.read_bytes()).hexdigest()
    if actual_sha256 == sha256:
        return None
    try:
        actual_rows: int | str = count_rows(file)
    except (ValueError, TypeError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        actual_rows = f"unreadable ({type(e).__name__})"
    differs = [f"sha256 {actual_sha256} where the table has {sha256}"]
    if actual_rows != rows:
        differs.insert(0, f"{actual_rows} rows where the table has {rows}")
    return (
        f"{file} changed since it was stored: {', '.join(differs)} ({folder / 'SOURCES.md'}); restore it "
        "(git checkout) or, if the change is meant, update its row in that table"
    )


def hub_problem(dataset_id: str) -> str | None:
    """Why the Hugging Face hub cannot give `dataset_id` now (offline mode, no connection, no such
    dataset, ...), in a few words; None when it can. Asks the hub for the dataset's metadata only."""
    from huggingface_hub import HfApi, constants

    # HF_HUB_OFFLINE makes the request below fail at once; `datasets` has its own switch besides
    if os.environ.get("HF_DATASETS_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE"):
        return "HF_DATASETS_OFFLINE is on"
    try:
        HfApi().dataset_info(dataset_id, timeout=HUB_TIMEOUT_S)
    except Exception as e:  # no network, DNS, timeout, offline mode, 404, gated: each means no data
        detail = (str(e).strip().splitlines() or [""])[0]
        return f"{constants.ENDPOINT} gave {type(e).__name__}: {detail}"
    return None


def save_command(dataset_id: str, split: str, file: str) -> str:
    """A shell line that saves one split of a hub dataset as a .jsonl file (run where there is network)."""
    return (
        f"python -c \"import datasets; datasets.load_dataset('{dataset_id}', split='{split}')"
        f".to_json('{file}')\""
    )

"""What the test session leaves in the repository: a snapshot of every path git reports as modified,
untracked or ignored (with its size and modification time), taken before and after the session by
tests/conftest.py, so that a test writing inside the checkout fails the run. Comparing two snapshots,
not one against a clean tree, leaves a developer's own uncommitted edits out of it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

# what tools write inside any checkout on their own: bytecode, the caches of pytest, ruff, import-linter
# (`make lint`) and hypothesis (its example database and constants), the virtual environment
TOOL_DIRS = frozenset(
    {"__pycache__", ".pytest_cache", ".ruff_cache", ".import_linter_cache", ".hypothesis", ".venv"}
)

Snapshot = dict[str, tuple[int, int] | None]  # path -> (size, mtime_ns); None: gone (a deleted file)


def _stat(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:  # a deleted tracked file, a dangling link
        return None
    return st.st_size, st.st_mtime_ns


def snapshot(root: Path) -> Snapshot | None:
    """Every file under `root` that git lists as modified, deleted, untracked or ignored, tool directories
    aside; an ignored directory is listed file by file. None when `root` is not the top of a git
    checkout (or git is missing): then there is nothing to compare."""
    root = root.resolve()
    try:
        top = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        if Path(top).resolve() != root:
            return None
        status = subprocess.run(
            ["git", "status", "--porcelain", "-z", "--untracked-files=all", "--ignored=matching"],
            cwd=root, capture_output=True, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return None
    fields = iter(os.fsdecode(status).split("\0"))
    files: Snapshot = {}
    for field in fields:
        if not field:
            continue
        code, name = field[:2], field[3:]
        if code[0] in "RC":  # a rename or copy in the index names its source next
            next(fields, None)
        if TOOL_DIRS.intersection(Path(name).parts):
            continue
        path = root / name
        if name.endswith("/"):  # an ignored directory (matching mode): what is inside it
            for dirpath, dirnames, filenames in os.walk(path):
                dirnames[:] = [d for d in dirnames if d not in TOOL_DIRS]
                for file in filenames:
                    inner = Path(dirpath) / file
                    files[str(inner.relative_to(root))] = _stat(inner)
        else:
            files[name] = _stat(path)
    return files


def leftovers(before: Snapshot, after: Snapshot) -> list[str]:
    """The paths that appeared, changed or went between the two snapshots, sorted."""
    paths = before.keys() | after.keys()
    return sorted(path for path in paths if before.get(path, "absent") != after.get(path, "absent"))

"""Files the project writes and reads back: writes that never leave a half-written file behind (a temp
file, then a rename), and JSON Lines that survive whatever text a model writes.

JSON Lines here means records separated by b"\n" alone. A reader must not split on anything else:
model text holds U+2028, U+0085, \x1c and other characters that `str.splitlines()` also breaks on,
and JSON keeps them raw inside a string (only \n, \r and the other C0 controls are escaped).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; these files are meant to be read by others
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def utf8_json(value: Any, **dumps_kwargs: Any) -> str:
    """JSON text that can always be written as UTF-8, non-ASCII kept readable. A lone surrogate (text
    cut between the halves of a pair) has no UTF-8 form, so it is written as its JSON escape, which
    json.loads reads back as the same character; only a string can hold one, so the escape is valid.
    (Two that form a high-low pair read back as the one character the pair encodes.)"""
    text = json.dumps(value, ensure_ascii=False, **dumps_kwargs)
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def jsonl_lines(records: Iterable[dict[str, Any]]) -> str:
    """Records as JSON Lines, one line each."""
    return "".join(utf8_json(r) + "\n" for r in records)


def atomic_write_jsonl(path: str | Path, records: Iterable[dict[str, Any]]) -> None:
    atomic_write_text(path, jsonl_lines(records))


def append_jsonl(path: str | Path, records: Iterable[dict[str, Any]]) -> None:
    """Append whole lines and fsync, for logs that grow a step at a time (metrics.jsonl and friends)."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(jsonl_lines(records))
        f.flush()
        os.fsync(f.fileno())


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, Any]]:
    """(line number, value) of every non-blank line of a JSON Lines file, split on b"\\n" only. A line
    that is not UTF-8 or not JSON raises ValueError naming the file and the line."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(f"{path} line {number}: not UTF-8 (byte {e.start})") from None
            if not text.strip():
                continue
            try:
                yield number, json.loads(text)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path} line {number}: not JSON ({e.msg})") from None


def read_jsonl(path: str | Path) -> list[Any]:
    return [value for _, value in iter_jsonl(path)]


@contextmanager
def atomic_dir(out_dir: str | Path, force: bool = False) -> Iterator[Path]:
    """Yield a fresh temp dir next to `out_dir`; on success it is renamed into `out_dir`'s place.

    A crash while writing leaves `out_dir` as it was. A non-empty `out_dir` is an error unless `force`.
    """
    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()) and not force:
        raise FileExistsError(f"{out_dir} exists and is not empty")
    tmp = out_dir.with_name(f".{out_dir.name}.tmp-{os.getpid()}")
    old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
    for stale in (tmp, old):  # left by a crashed earlier run with the same pid
        shutil.rmtree(stale, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if out_dir.exists():
        os.replace(out_dir, old)
        os.replace(tmp, out_dir)
        shutil.rmtree(old)
    else:
        os.replace(tmp, out_dir)

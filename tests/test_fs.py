"""Atomic writes: readers never see a half-written file or directory."""

import os
import stat

import pytest

from verl.utils.fs import atomic_dir, atomic_write_text


def test_atomic_write_text_replaces_whole_and_is_world_readable(tmp_path):
    path = tmp_path / "sub" / "a.txt"
    atomic_write_text(path, "one")
    atomic_write_text(path, "two")
    assert path.read_text() == "two" and [p.name for p in path.parent.iterdir()] == ["a.txt"]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644


def test_atomic_dir_keeps_the_old_contents_when_writing_fails(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("old")
    with pytest.raises(RuntimeError), atomic_dir(out, force=True) as tmp:
        (tmp / "new.txt").write_text("half")
        raise RuntimeError("crash while writing")
    assert [p.name for p in out.iterdir()] == ["old.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    with pytest.raises(FileExistsError, match="not empty"), atomic_dir(out):
        pass

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


def test_atomic_write_text_replaces_the_file_instead_of_rewriting_it(tmp_path):
    # a reader that opened the old file keeps reading the whole old file: the new text goes to a new file
    # that is renamed over the path, never into the old one (a truncate-and-write would show "two" here)
    path = tmp_path / "a.txt"
    atomic_write_text(path, "one")
    with open(path, encoding="utf-8") as reader:
        atomic_write_text(path, "two")
        assert reader.read() == "one"
    assert path.read_text() == "two"


@pytest.mark.parametrize("failure", ["unencodable text", "path is a directory"])
def test_a_failed_atomic_write_leaves_the_old_file_and_no_temp_file(tmp_path, failure):
    path = tmp_path / "a.txt"
    if failure == "unencodable text":
        atomic_write_text(path, "one")
        with pytest.raises(UnicodeEncodeError):
            atomic_write_text(path, "half \ud800")  # a lone surrogate has no UTF-8 form: encoding it raises
        assert path.read_text() == "one"
    else:
        path.mkdir()
        with pytest.raises(OSError):  # the rename onto a directory fails, after the temp file was written
            atomic_write_text(path, "one")
        assert path.is_dir()
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]


def test_atomic_dir_swaps_in_the_new_contents_and_leaves_nothing_behind(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("old")
    with atomic_dir(out, force=True) as tmp:
        assert tmp != out and not (tmp / "old.txt").exists()  # a fresh directory, not the old one
        (tmp / "new.txt").write_text("new")
        assert [p.name for p in out.iterdir()] == ["old.txt"]  # untouched until the block succeeds
    assert [p.name for p in out.iterdir()] == ["new.txt"] and (out / "new.txt").read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no temp or old copy left next to it
    with atomic_dir(tmp_path / "fresh") as tmp:  # no directory yet: created by the rename
        (tmp / "x.txt").write_text("x")
    assert [p.name for p in (tmp_path / "fresh").iterdir()] == ["x.txt"]

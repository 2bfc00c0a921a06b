"""The session check of tests/conftest.py: a test that leaves a file in the repository (new, changed or
removed, ignored by git or not) fails the run, a developer's own uncommitted edits do not, and outside a
git checkout nothing is checked. On throwaway git repositories, with real git and pytest-xdist."""

import subprocess
import sys
from pathlib import Path

from tests.clean_tree import leftovers, snapshot
from tests.e2e_utils import HANG_S

TESTS = Path(__file__).resolve().parent


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root, check=True,
                   capture_output=True)  # fmt: skip


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def repository(root: Path, files: dict[str, str]) -> Path:
    """A git repository at `root` with `files` committed."""
    write(root, files)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "start")
    return root


def test_leftovers_are_what_changed_since_the_first_snapshot(tmp_path):
    files = {".gitignore": "outputs/\n", "a.txt": "a", "b.txt": "b", "c.txt": "c"}
    repo = repository(tmp_path / "repo", files)
    (repo / "b.txt").write_text("a developer's edit")  # present before: not the tests' doing
    (repo / "notes.txt").write_text("a developer's untracked file")
    (repo / "outputs" / "old").mkdir(parents=True)
    (repo / "outputs" / "old" / "run.log").write_text("an earlier run's output")
    before = snapshot(repo)
    assert set(before) == {"b.txt", "notes.txt", "outputs/old/run.log"}
    assert leftovers(before, snapshot(repo)) == []

    (repo / "a.txt").write_text("changed by a test")  # a clean tracked file
    (repo / "b.txt").write_text("changed again, by a test")  # an already edited one
    (repo / "c.txt").unlink()
    (repo / "new.log").write_text("left by a test")
    (repo / "outputs" / "old" / "second.log").write_text("written into an ignored folder")
    for tool_dir in ("__pycache__", ".pytest_cache", ".hypothesis"):  # tools' own caches are not counted
        (repo / "sub" / tool_dir).mkdir(parents=True)
        (repo / "sub" / tool_dir / "x").write_text("cache")
    left = ["a.txt", "b.txt", "c.txt", "new.log", "outputs/old/second.log"]
    assert leftovers(before, snapshot(repo)) == left


def test_nothing_is_compared_outside_a_git_checkout(tmp_path):
    assert snapshot(tmp_path) is None
    repo = repository(tmp_path / "repo", {"a.txt": "a"})
    (repo / "sub").mkdir()
    assert snapshot(repo / "sub") is None  # inside a checkout but not its top: not the repository


def suite(writes_inside: bool) -> dict[str, str]:
    """This suite's conftest (and what it imports) with one test that writes inside its repository, or not."""
    copied = ("__init__.py", "conftest.py", "clean_tree.py")
    files = {f"tests/{name}": (TESTS / name).read_text() for name in copied}
    target = 'Path(__file__).resolve().parents[1] / "left.log"' if writes_inside else "tmp_path / 'x.log'"
    files["tests/test_writes.py"] = (
        "from pathlib import Path\n\n\n"
        f"def test_writes(tmp_path):\n    ({target}).write_text('x')\n\n\n"
        "def test_nothing():\n    assert True\n"
    )
    return files


def run_suite(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider", "tests"],
        cwd=root, capture_output=True, text=True, timeout=HANG_S,
    )  # fmt: skip


def test_a_suite_whose_test_writes_inside_the_repository_fails(tmp_path):
    repo = repository(tmp_path / "repo", suite(writes_inside=True))
    done = run_suite(repo)
    assert done.returncode == 1, done.stdout[-2000:]
    assert "2 passed" in done.stdout
    assert f"tests wrote inside the repository ({repo}): left.log; write to tmp_path instead" in done.stdout


def test_a_clean_suite_passes_over_a_developers_own_edits(tmp_path):
    repo = repository(tmp_path / "repo", suite(writes_inside=False))
    (repo / "tests" / "test_writes.py").write_text((repo / "tests" / "test_writes.py").read_text() + "\n")
    (repo / "draft.txt").write_text("uncommitted work")
    done = run_suite(repo)
    assert done.returncode == 0, done.stdout[-2000:]
    assert "tests wrote inside" not in done.stdout


def test_outside_a_git_checkout_the_check_is_skipped(tmp_path):
    plain = write(tmp_path / "plain", suite(writes_inside=True))
    done = run_suite(plain)
    assert done.returncode == 0, done.stdout[-2000:]
    assert f"repository left as found: not checked ({plain} is not a git checkout)" in done.stdout
    assert (plain / "left.log").is_file()  # the test did write: only the check was off

"""The floors of verl/ (docs/ARCHITECTURE.md) hold: `lint-imports` keeps the contracts in pyproject.toml,
and the same contracts catch an import that runs up a floor."""

import shutil
import subprocess
import sys
from pathlib import Path

from tests.e2e_utils import HANG_S

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(tree: Path) -> subprocess.CompletedProcess:
    # grimp finds `verl` on the path; put `tree`'s copy first so it is the one analysed
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=tree,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )


def test_the_repository_keeps_its_import_contracts():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 kept, 0 broken" in result.stdout


def _copy_package(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "verl", tmp_path / "verl", ignore=shutil.ignore_patterns("__pycache__", "*.yaml"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_an_import_up_a_floor_breaks_the_layers_contract(tmp_path):
    tree = _copy_package(tmp_path)
    fs = tree / "verl" / "utils" / "fs.py"
    fs.write_text(fs.read_text() + "\nfrom verl.trainer import resume  # noqa\n")
    result = lint_imports(tree)
    assert result.returncode != 0
    assert "verl.utils is not allowed to import verl.trainer" in result.stdout


def test_a_circle_inside_a_package_breaks_the_acyclic_contract(tmp_path):
    tree = _copy_package(tmp_path)
    trimmers = tree / "verl" / "core" / "trimmers.py"  # core.delethink imports trimmers; close the circle
    trimmers.write_text(trimmers.read_text() + "\nfrom verl.core import delethink  # noqa\n")
    result = lint_imports(tree)
    assert result.returncode != 0
    assert "no import circle inside any package BROKEN" in result.stdout


def test_a_circle_between_two_folders_breaks_the_acyclic_contract(tmp_path):
    """The folders of verl/ are siblings too: an engine importing the worker groups above it closes a
    circle between verl/workers/ and verl/single_controller/, whichever modules it goes through."""
    tree = _copy_package(tmp_path)
    sampler = tree / "verl" / "workers" / "rollout" / "sampler.py"
    sampler.write_text(sampler.read_text() + "\nfrom verl.single_controller import placement  # noqa\n")
    result = lint_imports(tree)
    assert result.returncode != 0
    assert "No cycles are allowed in verl.\n" in result.stdout
    assert "- .workers -> .single_controller (1 import)" in result.stdout

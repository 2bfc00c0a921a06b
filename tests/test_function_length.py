"""No function in verl/, recipes/ or benchmarks/ runs over MAX_LINES lines: a longer one mixes concerns
(reading, computing, deciding, writing, plotting) and is split by them. main_sft.py, the SFT entry point,
stays under MAIN_SFT_LINES: what it drives lives in verl/trainer/sft/."""

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FOLDERS = ("verl", "recipes", "benchmarks")
MAX_LINES = 80  # a function's lines from its `def` to its last line, nested functions included
MAIN_SFT_LINES = 380


def long_functions(root: Path, folders: tuple[str, ...], max_lines: int) -> list[str]:
    """`path:line name (N lines)` of every function or method longer than `max_lines` under `folders`."""
    found = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    lines = node.end_lineno - node.lineno + 1
                    if lines > max_lines:
                        found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_is_longer_than_the_limit():
    assert long_functions(REPO, FOLDERS, MAX_LINES) == []


def test_the_check_finds_a_long_function_and_a_long_method(tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_LINES - 1))  # with its `def`: MAX_LINES lines
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text(
        f"def fits():\n{body}\n\nasync def over():\n{body}    return 0\n\n\n"
        f"class C:\n    def method(self):\n{body.replace('    ', '        ')}        return 0\n"
    )
    assert long_functions(tmp_path, ("pkg",), MAX_LINES) == [
        f"pkg/mod.py:{MAX_LINES + 3} over ({MAX_LINES + 1} lines)",
        f"pkg/mod.py:{2 * MAX_LINES + 7} method ({MAX_LINES + 1} lines)",
    ]


def test_main_sft_stays_short():
    lines = len((REPO / "verl" / "trainer" / "main_sft.py").read_text().splitlines())
    assert lines < MAIN_SFT_LINES

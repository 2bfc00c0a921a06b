"""`make mutants`: mutation testing of the modules in pyproject.toml's [tool.mutmut] only_mutate (the pure
core, checkpoint retention, the Delethink agent loop, the results pages and their picture, the data and
tasks, the evaluation's config, statistics and entry, and the Markovian testbed's settings and verdicts)
with the fast tests named there.

mutmut changes one thing at a time in a copy of verl/ and recipes/markovian_testbed/ under mutants/ (an
operator, a constant, a comparison) and runs the tests that reach the changed function; a mutant that no
test notices survives. Each survivor needs a test that kills it, or a line in
benchmarks/mutants_equivalent.json saying why no test can: the mutant changes nothing observable (its
mutated line is stored with it, so an entry that no longer names the same change counts as a survivor
again).

One worker process, module by module (the machine is shared). Writes its results record,
docs/results/mutants.yaml (docs/results/README.md; `make results` puts it on docs/RESULTS.md): per
module the mutants, killed (a failing test, a crash or a hang), equivalent, survived, not run, the
killed share of the mutants less the equivalent and the not run ones; prints a summary with each
survivor's diff; exits 1 while a mutant survives or was not run, or an entry names no surviving mutant.

  python benchmarks/mutants.py                          # every module, from scratch
  python benchmarks/mutants.py --modules verl.core.trimmers --keep
  python benchmarks/mutants.py --report                 # the results in mutants/ again (after a new
                                                        # entry in mutants_equivalent.json)
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from verl.tools.results import Record, Table, provenance, write_record

REPO = Path(__file__).resolve().parents[1]
EQUIVALENT = REPO / "benchmarks" / "mutants_equivalent.json"
OUT = REPO / "docs" / "results" / "mutants.yaml"
KILLED = ("killed", "timeout", "segfault")  # a mutant that crashes or hangs the tests is noticed


def target_modules(only_mutate: list[str], source_paths: list[Path]) -> list[str]:
    """Dotted names of the files under source_paths (verl/ and the recipe's folder: mutmut names a module by
    its path, recipes/markovian_testbed/report.py `recipes.markovian_testbed.report`) that only_mutate's
    patterns match, in path order."""
    found = {p.relative_to(REPO).as_posix() for folder in source_paths for p in (REPO / folder).rglob("*.py")}
    files = sorted(found)
    chosen = [f for f in files if any(fnmatch.fnmatch(f, pattern) for pattern in only_mutate)]
    return [f.removesuffix(".py").removesuffix("/__init__").replace("/", ".") for f in chosen]


def run_module(module: str) -> float:
    """Run every mutant of `module` (one worker); returns the wall seconds. mutmut names a mutant
    `<module>.x_<function>__mutmut_<n>` (a method: `<module>.xǁ<class>ǁ<method>__mutmut_<n>`)."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "mutmut", "run", "--max-children", "1", f"{module}.x*"],
        cwd=REPO, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    if done.returncode != 0 and exit_codes(module):  # none: mutmut found no mutant of it, nothing ran
        raise subprocess.CalledProcessError(done.returncode, done.args)
    return time.perf_counter() - start


def meta_path(module: str) -> Path:
    """Where mutmut keeps `module`'s results: beside its copy in mutants/ (a package's, its __init__.py's)."""
    path = REPO / "mutants" / module.replace(".", "/")
    package = path / "__init__.py.meta"
    return package if package.is_file() else path.with_name(path.name + ".py.meta")


def exit_codes(module: str) -> dict[str, int | None]:
    meta = meta_path(module)
    return json.loads(meta.read_text())["exit_code_by_key"] if meta.is_file() else {}


def mutation_of(name: str, module: str) -> tuple[str, str]:
    """(the diff of mutant `name`, its added lines: what benchmarks/mutants_equivalent.json stores)."""
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    diff = get_diff_for_mutant(name, path=module.replace(".", "/") + ".py")
    added = [line for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    return diff, "\n".join(added)


def summarise(modules: list[str], wall: dict[str, float], equivalent: dict[str, dict]) -> dict:
    from mutmut.stats import status_by_exit_code

    per_module, survivors, named, stale = {}, [], [], []
    for module in modules:
        codes = exit_codes(module)
        if not codes:  # nothing to mutate (dataclasses, abstract methods)
            continue
        counts = dict.fromkeys(("mutants", "killed", "equivalent", "survived", "not_run"), 0)
        for name, code in sorted(codes.items()):
            status = status_by_exit_code[code]
            counts["mutants"] += 1
            if status in KILLED:
                counts["killed"] += 1
                continue
            if status == "not checked":
                counts["not_run"] += 1
                continue
            diff, added = mutation_of(name, module)
            entry = equivalent.get(name)
            if status == "survived" and entry is not None and entry["mutation"] == added:
                counts["equivalent"] += 1
                named.append({"name": name, "why": entry["why"]})
                continue
            if entry is not None:
                stale.append(name)
            counts["survived"] += 1
            survivors.append({"name": name, "status": status, "diff": diff})
        judged = counts["mutants"] - counts["equivalent"] - counts["not_run"]
        counts["killed_share"] = round(counts["killed"] / judged, 4) if judged else None
        counts["wall_s"] = round(wall[module], 1) if module in wall else None
        per_module[module] = counts
    unused = unused_entries(equivalent, list(per_module), {n["name"] for n in named} | set(stale))
    return {
        "modules": per_module, "survivors": survivors, "equivalent": named, "stale_equivalent": stale,
        "unused_equivalent": unused,
    }  # fmt: skip


def unused_entries(equivalent: dict[str, dict], modules: list[str], matched: set[str]) -> list[str]:
    """The entries of `modules` that no surviving mutant matched (`matched`: the survivors they name): the
    mutant is killed now, or gone (its function renamed or moved, or renumbered by an edit above it). An
    entry of a module not run stays: that module's next run needs it."""
    prefixes = tuple(f"{module}.x" for module in modules)
    return sorted(name for name in equivalent if name.startswith(prefixes) and name not in matched)


def record(summary: dict, version: str, wall_s: float | None, argv: list[str]) -> Record:
    """The run as a results record (docs/results/README.md): a row per module. The survivors are printed
    with their diffs, not recorded: `mutmut results` lists them again. wall_s None: nothing ran (--report)."""
    columns = ["module", "mutants", "killed", "equivalent", "survived", "not run", "killed share", "wall s"]
    rows = []
    for module, c in summary["modules"].items():
        share = "not run" if c["killed_share"] is None else f"{c['killed_share']:.1%}"
        wall = "" if c["wall_s"] is None else f"{c['wall_s']:.0f}"
        counts = [f"{c[key]}" for key in ("mutants", "killed", "equivalent", "survived", "not_run")]
        rows.append([f"`{module.replace('.', '/')}.py`", *counts, share, wall])
    caption = f"mutmut {version}, one worker, the tests of pyproject.toml's [tool.mutmut] at that commit" + (
        "." if wall_s is None else f"; {wall_s:.0f} s of wall time."
    )
    tables = [Table(columns, rows, caption)]
    notes = []
    if stale := summary["stale_equivalent"]:
        notes.append(f"Named equivalent with another mutation (check again): {', '.join(stale)}.")
    if unused := summary["unused_equivalent"]:
        notes.append(f"Named equivalent, no surviving mutant (remove): {', '.join(unused)}.")
    command = "make mutants" if not argv else f"python benchmarks/mutants.py {shlex.join(argv)}"
    return Record(
        "mutants", "Mutation testing (`make mutants`)", "suite", **provenance(), command=command,
        method="benchmarks/README.md", tables=tables, notes=" ".join(notes),
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--modules", nargs="*", help="run these dotted module names only (default: every one)"
    )
    parser.add_argument("--keep", action="store_true", help="keep mutants/: its test map and earlier results")
    parser.add_argument("--report", action="store_true", help="run nothing: report the results in mutants/")
    args = parser.parse_args()
    os.chdir(REPO)  # mutmut works in the repository root
    from mutmut.configuration import config

    cfg = config()  # pyproject.toml's [tool.mutmut], read from the working directory
    targets = target_modules(cfg.only_mutate, cfg.source_paths)
    if not (args.keep or args.report):
        shutil.rmtree(REPO / "mutants", ignore_errors=True)
    for module in [] if args.report else targets:
        if (REPO / "mutants").is_dir() and not meta_path(module).is_file():
            # not in only_mutate when mutants/ was made: mutmut copied it unmutated, and keeps a copy newer
            # than its source as it is; without the copy it writes the module's mutants. Its test map knows
            # no test of the module (the copy had no trampolines to record them): it is made again.
            for copy in (module.replace(".", "/") + ".py", module.replace(".", "/") + "/__init__.py"):
                (REPO / "mutants" / copy).unlink(missing_ok=True)
            (REPO / "mutants" / "mutmut-stats.json").unlink(missing_ok=True)
    wall = {}
    for module in [] if args.report else args.modules or targets:
        # the first run writes every target's mutants; a module with none is not run (it would run every
        # test), one without a .meta yet (named in only_mutate since mutants/ was made) is: its run writes it
        if meta_path(module).is_file() and not exit_codes(module):
            continue
        wall[module] = run_module(module)
    equivalent = json.loads(EQUIVALENT.read_text())
    import mutmut

    result = summarise(targets, wall, equivalent)
    wall_s = sum(wall.values()) if wall else None
    write_record(OUT, record(result, mutmut.__version__, wall_s, sys.argv[1:]))
    print(f"{'module':36} {'mutants':>7} {'killed':>6} {'equiv':>5} {'surv':>4} {'share':>6} {'wall':>6}")
    for module, c in result["modules"].items():
        share = "not run" if c["killed_share"] is None else f"{c['killed_share']:.1%}"
        took = "" if c["wall_s"] is None else f"{c['wall_s']:.0f}s"
        counts = f"{c['mutants']:7} {c['killed']:6} {c['equivalent']:5} {c['survived']:4}"
        print(f"{module:36} {counts} {share:>6} {took:>6}")
    for s in result["survivors"]:
        print(f"\nsurvived ({s['status']}): {s['name']}\n{s['diff']}")
    for name in result["stale_equivalent"]:
        print(f"stale: {name} is in {EQUIVALENT.name} with another mutation; check it again")
    for name in result["unused_equivalent"]:
        print(f"unused: {name} is in {EQUIVALENT.name} but names no surviving mutant; remove it")
    not_run = sum(c["not_run"] for c in result["modules"].values())
    print(f"\n{OUT.relative_to(REPO)}: {len(result['survivors'])} survivors, {not_run} mutants not run"
          + ("" if wall_s is None else f"; {wall_s:.0f} s"))  # fmt: skip
    sys.exit(1 if result["survivors"] or not_run or result["unused_equivalent"] else 0)


if __name__ == "__main__":
    main()

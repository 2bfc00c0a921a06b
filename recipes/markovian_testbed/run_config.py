"""What run.sh checks before it runs a stage: the SEEDS list, and that an output directory is only ever
continued with the settings that started it; and those settings read back, for the report.

    python recipes/markovian_testbed/run_config.py seeds "1 2 3"         # prints: 1 2 3
    python recipes/markovian_testbed/run_config.py check [--force] OUT SIZE=demo SEED=1 STEPS=20 ...

`seeds` prints the seeds, or exits 2 with one line naming SEEDS when one is not an integer >= 0, the list is
empty or a seed repeats. `check` writes OUT/run_config.json on a directory's first run; later runs must
pass the same values (run.sh's variables and every value settings.py gives the size), since run.sh skips
every stage whose output exists and would otherwise mix stages made with different settings: a changed or
unrecorded value exits 2 with one line naming the variable. `--force` (FORCE=1) writes the new values
instead. `saved` reads recorded values back (report.py: B, C, m and I).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from verl.utils.fs import atomic_write_text

CONFIG_FILE = "run_config.json"


def parse_seeds(text: str) -> list[int]:
    """The whitespace-separated seeds (integers >= 0) of SEEDS; a ValueError naming what is wrong."""
    words = text.split()
    if not words:
        raise ValueError('SEEDS is empty: give one or more integer seeds, e.g. SEEDS="1 2 3"')
    bad = [w for w in words if not (w.isascii() and w.isdigit())]
    if bad:
        raise ValueError(f"SEEDS={text!r}: {bad[0]!r} is not an integer >= 0")
    seeds = [int(w) for w in words]
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:
        raise ValueError(f"SEEDS={text!r}: seed {repeated[0]} is given more than once")
    return seeds


def changed_values(saved: dict[str, str], given: dict[str, str]) -> list[str]:
    """`NAME was 'old', now 'new'` for every variable whose value differs (a missing one reads '')."""
    return [
        f"{name} was {saved.get(name, '')!r}, now {given.get(name, '')!r}"
        for name in sorted(set(saved) | set(given))
        if saved.get(name, "") != given.get(name, "")
    ]


def check(out: Path, given: dict[str, str], force: bool) -> None:
    """Record `given` in out/run_config.json, or refuse (ValueError) values that differ from the record."""
    path = out / CONFIG_FILE
    if path.is_file() and not force:
        saved = json.loads(path.read_text())
        unrecorded = sorted(set(given) - set(saved))
        if unrecorded:  # a directory from before these values were recorded: what it ran with is unknown
            raise ValueError(
                f"{out}/{CONFIG_FILE} has no record of {', '.join(unrecorded)}, so its finished stages may "
                "have run with other values. Use another OUT, or FORCE=1 to redo it all"
            )
        changes = changed_values(saved, given)
        if changes:
            raise ValueError(
                f"{out} was started with other settings ({'; '.join(changes)}): its finished stages would "
                "be reused with the new ones. Use the old values, another OUT, or FORCE=1 to redo it all"
            )
        return
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(given, indent=1, sort_keys=True) + "\n")


def saved(out: Path, names: tuple[str, ...]) -> dict[str, str]:
    """The recorded values of `names` in out/run_config.json; a ValueError naming the file and the first
    missing one."""
    path = out / CONFIG_FILE
    if not path.is_file():
        raise ValueError(f"{path}: no such file (run.sh writes the run's settings there when it starts it)")
    record = json.loads(path.read_text())
    missing = [name for name in names if name not in record]
    if missing:
        raise ValueError(
            f"{path} has no {missing[0]}: it was written before run.sh recorded it; rerun run.sh on this "
            "directory with FORCE=1"
        )
    return {name: record[name] for name in names}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("seeds").add_argument("text", help="the value of SEEDS")
    checker = sub.add_parser("check")
    checker.add_argument("out", type=Path)
    checker.add_argument("values", nargs="*", metavar="NAME=VALUE")
    checker.add_argument("--force", action="store_true", help="record the given values (FORCE=1)")
    args = parser.parse_args(argv)
    try:
        if args.command == "seeds":
            print(" ".join(str(s) for s in parse_seeds(args.text)))
        else:
            check(args.out, dict(v.partition("=")[::2] for v in args.values), args.force)
    except ValueError as err:
        print(f"run.sh: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()

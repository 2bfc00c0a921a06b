"""Results as data: one record per experiment in docs/results/<name>.yaml, and the pages made from them.

    python -m verl.tools.results            # (make results) the results pages, the README's demo table and
                                            # its summary picture
    python -m verl.tools.results --check    # exit 1, naming the page, if one differs from its records

A record holds one experiment's latest measurement: its title, the page section it belongs to, date,
commit, machine, command, where its method is described, and its numbers, as tables of text cells and,
for a Markovian-testbed run over seeds, each claim's verdict seed by seed, with notes that explain them
(docs/results/README.md has the format). Commands that measure write their own record (`write_record`,
`provenance`): recipes/markovian_testbed/aggregate.py, recipes/scaling/benchmark.py --record,
benchmarks/shared_prefix.py --record and benchmarks/microbatch_throughput.py --record. The pages are a
pure function of the records, so tests/test_results.py can check the committed ones: docs/RESULTS.md, an
index of every entry by section, a page per section, docs/results/<section>.md, holding its entries whole
(a section grows without another's notes being cut to fit one page), and the README's demo table and
summary picture (verl/tools/summary_picture.py), of the seed the record with `readme` names.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import os
import platform
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from verl.tools import summary_picture
from verl.tools.summary_picture import SummaryPicture
from verl.utils.fs import atomic_write_text

REPO = Path(__file__).resolve().parents[2]
RECORDS = "docs/results"  # the records, relative to the repository
PAGE = "docs/RESULTS.md"  # the index
SECTION_PAGE = "docs/results/{}.md"  # a section's entries
README = "README.md"
# the README's demo table sits between these lines
README_START = "<!-- results: the demo table, written by `make results` from the record with `readme` -->"
README_END = "<!-- /results -->"
README_PICTURE = "docs/demo_summary.png"  # the summary picture of that seed, drawn from the same record

# section key -> (its heading on the page, where its methods are described); the page follows this order
SECTIONS = {
    "testbed": ("The Markovian testbed", "recipes/markovian_testbed/README.md"),
    "suite": ("The test suite", "Makefile"),
    "scaling": ("Cost against thinking length", "recipes/scaling/README.md"),
    "engine": ("The CPU rollout engine", "benchmarks/README.md"),
    "actor": ("The actor", "benchmarks/README.md"),
    "rewards": ("Rewards", "benchmarks/README.md"),
    "viewer": ("The rollout viewer", "benchmarks/README.md"),
    "pretrained": ("A real pretrained model", "docs/TRAINING.md"),
    "gpu": ("The CUDA path on one GPU", "docs/GPU.md"),
}


class RecordError(ValueError):
    """A record that does not hold what the format asks; the message names the file and the key."""


@dataclass(frozen=True)
class Table:
    columns: list[str]
    rows: list[list[str]]  # each row one text cell per column, as it is shown
    caption: str = ""  # a line above the table: what it holds


@dataclass(frozen=True)
class Claim:
    claim: str
    target: str
    measured: list[str]  # per seed, as the testbed's report printed it
    held: list[bool | None]  # per seed; None: not measured


@dataclass(frozen=True)
class Verdicts:
    """A Markovian-testbed run over seeds: each claim of the report, seed by seed (aggregate.py)."""

    seeds: list[int]
    claims: list[Claim]


@dataclass(frozen=True)
class Record:
    name: str  # the file's stem: the entry's anchor on the page
    title: str
    section: str  # a key of SECTIONS
    date: str  # YYYY-MM-DD: when the measurement ended
    commit: str  # the code that measured it
    machine: str  # what it ran on, and how loaded
    command: str  # what to run to measure it again
    method: str = ""  # where the method is described, when not the section's page
    verdicts: Verdicts | None = None
    tables: list[Table] = field(default_factory=list)
    notes: str = ""  # Markdown: what the numbers say, and what they do not
    readme: int | None = None  # the seed whose verdicts are the README's demo table
    picture: SummaryPicture | None = None  # that seed's summary picture (README_PICTURE), with `readme`


# -- the record, in and out ---------------------------------------------------------------------------


def held_in(held: list[bool | None]) -> str:
    """'N of M' over the seeds that measured a claim, and how many did not."""
    measured = [h for h in held if h is not None]
    missing = len(held) - len(measured)
    return f"{sum(measured)} of {len(measured)}" + (f" ({missing} not measured)" if missing else "")


def verdict_cell(held: bool | None) -> str:
    return "not measured" if held is None else ("held" if held else "**not held**")


def _text(where: str, value: Any, key: str, *, optional: bool = False) -> str:
    if isinstance(value, datetime.date):  # an unquoted YAML date
        value = value.isoformat()
    if optional and value is None:
        return ""
    if not isinstance(value, str) or not (value.strip() or optional):
        raise RecordError(
            f"{where}: {key} must be {'a' if optional else 'a non-empty'} string, got {value!r}"
        )
    return value


def _cells(where: str, key: str, values: Any, width: int | None) -> list[str]:
    if not isinstance(values, list) or (width is not None and len(values) != width):
        raise RecordError(f"{where}: {key} must be a list of {width or 'some'} text cells, got {values!r}")
    bad = [v for v in values if not isinstance(v, str)]
    if bad:
        raise RecordError(f"{where}: {key} holds {bad[0]!r}, not text: quote it, a cell is shown as written")
    return values


def _table(where: str, raw: Any) -> Table:
    if not isinstance(raw, dict) or set(raw) - {"columns", "rows", "caption"}:
        raise RecordError(f"{where}: a table has columns, rows and an optional caption, got {raw!r:.120}")
    columns = _cells(where, "columns", raw.get("columns"), None)
    rows = raw.get("rows")
    if not isinstance(rows, list) or not rows:
        raise RecordError(f"{where}: rows must be a non-empty list of rows")
    rows = [_cells(where, f"rows[{i}]", row, len(columns)) for i, row in enumerate(rows)]
    return Table(columns, rows, _text(where, raw.get("caption"), "caption", optional=True))


def _verdicts(where: str, raw: Any) -> Verdicts:
    seeds = raw.get("seeds") if isinstance(raw, dict) else None
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) for s in seeds):
        raise RecordError(f"{where}: verdicts.seeds must be a non-empty list of seeds, got {seeds!r}")
    claims = []
    for i, c in enumerate(raw.get("claims") or []):
        at = f"{where}: verdicts.claims[{i}]"
        if not isinstance(c, dict) or set(c) != {"claim", "target", "measured", "held"}:
            raise RecordError(f"{at} must have claim, target, measured and held, got {c!r:.120}")
        held = c["held"]
        if (
            not isinstance(held, list)
            or len(held) != len(seeds)
            or any(h not in (True, False, None) for h in held)
        ):
            raise RecordError(
                f"{at}.held must be one of true, false, null per seed ({len(seeds)}), got {held!r}"
            )
        claims.append(
            Claim(_text(at, c["claim"], "claim"), _text(at, c["target"], "target", optional=True),
                  _cells(at, "measured", c["measured"], len(seeds)), held)
        )  # fmt: skip
    if not claims:
        raise RecordError(f"{where}: verdicts.claims must list at least one claim")
    return Verdicts(seeds, claims)


def _picture(where: str, raw: Any) -> SummaryPicture:
    try:
        return summary_picture.picture_from_dict(raw, f"{where}: picture")
    except ValueError as err:
        raise RecordError(str(err)) from None


def parse_record(name: str, raw: Any, where: str) -> Record:
    """A Record from a record file's YAML; a RecordError naming `where` and the key when it is not one."""
    if name in SECTIONS:  # both are anchors on the page
        raise RecordError(f"{where}: a record may not be named like a section ({list(SECTIONS)})")
    required = ("title", "section", "date", "commit", "machine", "command")
    allowed = {*required, "method", "verdicts", "tables", "notes", "readme", "picture"}
    if not isinstance(raw, dict):
        raise RecordError(f"{where}: a record is a mapping of {', '.join(required)}, ..., got {raw!r:.80}")
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise RecordError(f"{where}: unknown key {unknown[0]!r}; a record has {', '.join(sorted(allowed))}")
    text = {key: _text(where, raw.get(key), key) for key in required}
    if text["section"] not in SECTIONS:
        raise RecordError(f"{where}: section {text['section']!r} is not one of {list(SECTIONS)}")
    verdicts = _verdicts(where, raw["verdicts"]) if raw.get("verdicts") is not None else None
    readme = raw.get("readme")
    if readme is not None and (verdicts is None or readme not in verdicts.seeds):
        raise RecordError(f"{where}: readme={readme!r} must be one of the seeds of its verdicts")
    if (readme is None) != (raw.get("picture") is None):
        raise RecordError(f"{where}: readme (a seed) and picture (its summary picture's numbers) go together")
    picture = None if readme is None else _picture(where, raw["picture"])
    tables = raw.get("tables") or []
    if not isinstance(tables, list):
        raise RecordError(f"{where}: tables must be a list of tables")
    return Record(
        name=name, **text, method=_text(where, raw.get("method"), "method", optional=True), verdicts=verdicts,
        tables=[_table(f"{where}: tables[{i}]", t) for i, t in enumerate(tables)],
        notes=_text(where, raw.get("notes"), "notes", optional=True).strip(), readme=readme, picture=picture,
    )  # fmt: skip


def load_record(path: Path) -> Record:
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise RecordError(f"{path}: not YAML: {e}") from None
    return parse_record(path.stem, raw, str(path))


def load_records(folder: Path) -> list[Record]:
    """Every record in `folder`, in page order: by section, newest first, then by name."""
    records = [load_record(path) for path in sorted(folder.glob("*.yaml"))]  # by name
    by_date = sorted(records, key=lambda r: r.date, reverse=True)
    return sorted(by_date, key=lambda r: list(SECTIONS).index(r.section))


class _Dumper(yaml.SafeDumper):
    """Multi-line text as YAML blocks, so a record reads as it will show."""


_Dumper.add_representer(
    str,
    lambda dumper, value: dumper.represent_scalar(
        "tag:yaml.org,2002:str", value, style="|" if "\n" in value else None
    ),
)


def record_yaml(record: Record) -> str:
    raw: dict[str, Any] = {
        key: getattr(record, key) for key in ("title", "section", "date", "commit", "machine", "command")
    }
    if record.method:
        raw["method"] = record.method
    if record.readme is not None:
        raw["readme"] = record.readme
        raw["picture"] = summary_picture.picture_dict(record.picture)
    if record.verdicts is not None:
        raw["verdicts"] = {
            "seeds": record.verdicts.seeds,
            "claims": [vars(c) for c in record.verdicts.claims],
        }
    if record.tables:
        raw["tables"] = [
            {**({"caption": t.caption} if t.caption else {}), "columns": t.columns, "rows": t.rows}
            for t in record.tables
        ]
    if record.notes:
        raw["notes"] = record.notes + "\n"
    return yaml.dump(
        raw, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=110, default_flow_style=None
    )


def write_record(path: Path, record: Record) -> None:
    """Write `record` as YAML to `path` (checked by reading it back first, so what is written loads; the
    file's name, not `record.name`, is the entry's name)."""
    text = record_yaml(record)
    parse_record(path.stem, yaml.safe_load(text), str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)


def provenance() -> dict[str, str]:
    """What a record says of where it was measured: today's date (UTC), the checkout's commit (marked
    `-dirty` when tracked files have changes) and the machine: its cores, its GPU and its load now."""
    git = ["git", "-C", str(REPO)]
    try:
        commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                check=True).stdout.strip()  # fmt: skip
        dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, check=True).stdout.strip()  # fmt: skip
        commit += "-dirty" if dirty else ""
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown (not a git checkout)"
    gpu = "no GPU"
    if importlib.util.find_spec("torch") is not None:
        import torch

        if torch.cuda.is_available():
            gpu = f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    machine = (
        f"{cores}-core {platform.machine()} CPU, {gpu}, load average {os.getloadavg()[0]:.1f} at the end"
    )
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
        "commit": commit,
        "machine": machine,
    }


# -- the pages -----------------------------------------------------------------------------------------


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def markdown_table(columns: list[str], rows: list[list[str]]) -> list[str]:
    return [_row(columns), "|" + "---|" * len(columns), *(_row(r) for r in rows)]


def verdict_rows(verdicts: Verdicts) -> list[str]:
    """Each claim with its target, what every seed measured (bold where it did not hold) and the count."""
    columns = ["claim", "target", *(f"seed {s}" for s in verdicts.seeds), "held in"]
    rows = []
    for c in verdicts.claims:
        cells = [f"**{m}**" if h is False else m for m, h in zip(c.measured, c.held, strict=True)]
        rows.append([c.claim, c.target, *cells, held_in(c.held)])
    return markdown_table(columns, rows)


def readme_record(records: list[Record]) -> Record:
    """The one record with `readme`: its seed's verdicts and summary picture are the README's."""
    chosen = [r for r in records if r.readme is not None]
    if len(chosen) != 1:
        raise RecordError(f"exactly one record must name the README's seed (readme: N); {len(chosen)} do")
    return chosen[0]


def readme_table(records: list[Record]) -> list[str]:
    """The README's demo table, the claims of the readme record for its seed, then its summary picture."""
    record = readme_record(records)
    i = record.verdicts.seeds.index(record.readme)
    rows = [[c.claim, c.target, c.measured[i], verdict_cell(c.held[i])] for c in record.verdicts.claims]
    picture = f"![seed {record.readme}'s held-out accuracy and RL step cost]({README_PICTURE})"
    return [*markdown_table(["claim", "target", "measured", "verdict"], rows), "", picture]


def _link(path: str) -> str:
    """A link from a section page (docs/results/) to a path of the repository (an anchor may follow it)."""
    return f"[{path}](../../{path})"


def render_entry(record: Record) -> list[str]:
    """One record on its section's page: its heading, a line of where and when, where the method is
    described (the record's `method`, else its section's page) and a one-line command, then a longer
    command, its tables and its notes."""
    meta = [record.date, f"commit {record.commit}", record.machine]
    meta.append(f"method: {_link(record.method or SECTIONS[record.section][1])}")
    meta.append(f"[record]({record.name}.yaml)")
    command = record.command.strip().splitlines()
    inline = len(command) == 1 and "`" not in command[0]
    meta += [f"`{command[0]}`"] if inline else []
    lines = [f'### <a id="{record.name}"></a>{record.title}', "", " · ".join(meta), ""]
    lines += [] if inline else ["```", *command, "```", ""]
    if record.verdicts is not None:
        lines += [*verdict_rows(record.verdicts), ""]
    for table in record.tables:
        lines += [table.caption, ""] if table.caption else []
        lines += [*markdown_table(table.columns, table.rows), ""]
    return lines + ([record.notes, ""] if record.notes else [])


PAGE_HEAD = """# Results

<!-- Generated by `make results` (verl/tools/results.py) from docs/results/*.yaml: edit those, not this. -->

Every measurement in this repository, the latest per experiment, with the date, commit, machine and
command that produced it, on a page per section below. Each entry is a record, `docs/results/<name>.yaml`
([the format](results/README.md)); its earlier figures are in that file's git history. On a shared
machine read ratios measured inside one process, alternating, not absolute times: those grow with load."""

GENERATED = PAGE_HEAD.splitlines()[2]  # the line that says a page is written from the records


def _sections(records: list[Record]) -> list[str]:
    return [key for key in SECTIONS if any(r.section == key for r in records)]


def render_index(records: list[Record]) -> str:
    """docs/RESULTS.md: each section with its entries, newest first, each linked on its section's page."""
    lines = [PAGE_HEAD, ""]
    for key in _sections(records):
        page = Path(SECTION_PAGE.format(key)).name
        lines += [f'## <a id="{key}"></a>[{SECTIONS[key][0]}](results/{page})', ""]
        lines += [f"- [{r.title}](results/{page}#{r.name}) · {r.date}" for r in records if r.section == key]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def render_section(records: list[Record], key: str) -> str:
    """docs/results/<key>.md: the section's entries whole, newest first."""
    method = _link(SECTIONS[key][1])
    lines = [
        f"# {SECTIONS[key][0]}",
        "",
        GENERATED,
        "",
        f"[All results](../RESULTS.md) · method: {method}",
        "",
    ]
    for record in (r for r in records if r.section == key):
        lines += render_entry(record)
    return "\n".join(lines).rstrip() + "\n"


def with_readme_table(readme: str, table: list[str]) -> str:
    """`readme` with the lines between README_START and README_END replaced by `table`."""
    lines = readme.splitlines()
    if lines.count(README_START) != 1 or lines.count(README_END) != 1:
        raise RecordError(f"{README} must hold the line {README_START!r} once, and {README_END!r} after it")
    start, end = lines.index(README_START), lines.index(README_END)
    if end < start:
        raise RecordError(f"{README}: {README_END!r} comes before {README_START!r}")
    return "\n".join([*lines[: start + 1], *table, *lines[end:]]) + "\n"


def pages(root: Path) -> dict[Path, str]:
    """Each generated page of the repository at `root` and the text its records give it."""
    records = load_records(root / RECORDS)
    readme = (root / README).read_text()
    sections = {root / SECTION_PAGE.format(key): render_section(records, key) for key in _sections(records)}
    return {
        root / PAGE: render_index(records),
        **sections,
        root / README: with_readme_table(readme, readme_table(records)),
    }


def pictures(root: Path) -> dict[Path, SummaryPicture]:
    """Each generated picture of the repository at `root` and the numbers its records give it."""
    return {root / README_PICTURE: readme_record(load_records(root / RECORDS)).picture}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page is stale")
    parser.add_argument("--root", type=Path, default=REPO, help="the repository (default: this checkout)")
    args = parser.parse_args(argv)
    try:
        wanted, drawn = pages(args.root), pictures(args.root)
    except RecordError as e:
        print(f"results: {e}", file=sys.stderr)
        return 2
    stale = [path for path, text in wanted.items() if not path.is_file() or path.read_text() != text]
    fingerprint, drawn_from = summary_picture.fingerprint, summary_picture.drawn_from
    stale += [path for path, picture in drawn.items() if drawn_from(path) != fingerprint(picture)]
    if args.check:
        for path in stale:
            print(f"{path} differs from its records: run `make results`", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        if path in drawn:
            summary_picture.save(drawn[path], path)
        else:
            atomic_write_text(path, wanted[path])  # README.md too: a failed write must not cut it short
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

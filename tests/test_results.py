"""Results as data (verl/tools/results.py): the committed pages are what their records give, a record
renders as its numbers, and a record that does not hold what the format asks is refused by name."""

import datetime
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from verl.tools import results, summary_picture
from verl.tools.results import Claim, Record, RecordError, Table, Verdicts
from verl.tools.summary_picture import SummaryPicture

REPO = Path(__file__).resolve().parents[1]
PICTURE = SummaryPicture(256, {"longcot": [0.5, 0.02, 0.6, 0.02]}, [256, 512], {"longcot": [19.0, 44.5]})

RECORD = {
    "title": "A benchmark",
    "section": "engine",
    "date": "2026-01-02",
    "commit": "abc1234",
    "machine": "2-core CPU",
    "command": "python benchmarks/x.py",
    "tables": [
        {"caption": "Two cases.", "columns": ["case", "tok/s"], "rows": [["a|b", "1,000"], ["c", "0.30"]]}
    ],
    "notes": "What it shows.\n",
}


def test_the_readme_table_is_of_the_seed_make_demo_runs():
    """The README's demo table comes from one seed of a record: the one `make demo` (examples/quickstart.sh,
    then run.sh without SEED) runs, so the command the README gives prints the table it shows."""
    (default_seed,) = re.findall(
        r"^SEED=\$\{SEED:-(\d+)\}$", (REPO / "recipes/markovian_testbed/run.sh").read_text(), re.M
    )
    quickstart = (REPO / "examples/quickstart.sh").read_text()
    assert "recipes/markovian_testbed/run.sh" in quickstart and not re.search(
        r"^[^#]*\bSEED=", quickstart, re.M
    )
    (shown,) = [r.readme for r in results.load_records(REPO / results.RECORDS) if r.readme is not None]
    assert shown == int(default_seed)


def test_the_committed_pages_are_what_their_records_give():
    for path, text in results.pages(REPO).items():
        assert path.read_text() == text, f"{path} is stale: run `make results`"
    for path, picture in results.pictures(REPO).items():
        assert summary_picture.drawn_from(path) == summary_picture.fingerprint(picture), f"{path} is stale"


def anchors_of(path: Path) -> set[str]:
    return set(re.findall(r'<a id="(\w+)"></a>', path.read_text()))


def link_sources() -> list[Path]:
    """The files that link into the results pages: the READMEs, the docs, and the code's comments."""
    found = [REPO / "README.md", *(REPO / "docs").glob("*.md"), REPO / "docs" / "results" / "README.md"]
    for folder in ("recipes", "benchmarks", "examples", "verl"):
        found += [p for ext in ("*.md", "*.sh", "*.py") for p in (REPO / folder).rglob(ext)]
    return found


def test_every_link_into_the_results_pages_names_an_entry_or_section_they_have():
    index = anchors_of(REPO / results.PAGE)
    missing, seen = [], set()
    for path in link_sources():
        text, where = path.read_text(), path.relative_to(REPO).as_posix()
        for anchor in re.findall(r"RESULTS\.md#([\w-]+)", text):  # the index: a section
            seen.add((where, "RESULTS", anchor))
            if anchor not in index:
                missing.append((where, "RESULTS", anchor))
        for section, anchor in re.findall(r"results/(\w+)\.md#([\w-]+)", text):  # a section page: an entry
            seen.add((where, section, anchor))
            page = REPO / results.SECTION_PAGE.format(section)
            if not page.is_file() or anchor not in anchors_of(page):
                missing.append((where, section, anchor))
    assert missing == []
    assert ("README.md", "testbed", "demo") in seen


def test_every_results_page_stays_short():
    for path in results.pages(REPO):
        if path.name != "README.md":
            assert len(path.read_text().splitlines()) < 500, path


def test_a_record_renders_its_meta_line_tables_and_notes():
    record = results.parse_record("bench", RECORD, "bench.yaml")
    assert results.render_entry(record) == [
        '### <a id="bench"></a>A benchmark',
        "",
        "2026-01-02 · commit abc1234 · 2-core CPU · method: [benchmarks/README.md]"
        "(../../benchmarks/README.md) · [record](bench.yaml) · `python benchmarks/x.py`",
        "",
        "Two cases.",
        "",
        "| case | tok/s |",
        "|---|---|",
        "| a\\|b | 1,000 |",  # a cell's | would end it
        "| c | 0.30 |",
        "",
        "What it shows.",
        "",
    ]


def test_verdicts_show_each_seed_with_misses_in_bold_and_the_readme_table_one_seed():
    claims = [
        Claim("(a) ratio", ">= 0.95x", ["1.03x", "0.79x", "not measured: no report"], [True, False, None])
    ]
    record = Record("demo", "Demo", "testbed", "2026-01-02", "abc", "cpu", "run.sh\nreport.py",
                    verdicts=Verdicts([1, 2, 3], claims), readme=2, picture=PICTURE)  # fmt: skip
    lines = results.render_entry(record)
    assert lines[4:7] == ["```", "run.sh", "report.py"]  # a command of several lines gets a block
    assert (
        "| (a) ratio | >= 0.95x | 1.03x | **0.79x** | not measured: no report | 1 of 2 (1 not measured) |"
        in lines
    )
    assert results.readme_table([record]) == [
        "| claim | target | measured | verdict |",
        "|---|---|---|---|",
        "| (a) ratio | >= 0.95x | 0.79x | **not held** |",
        "",
        "![seed 2's held-out accuracy and RL step cost](docs/demo_summary.png)",
    ]
    with pytest.raises(RecordError, match="exactly one record must name the README's seed"):
        results.readme_table([record, record])


def test_the_index_lists_each_section_and_its_entries_and_a_section_page_holds_them():
    def record(name: str, section: str) -> Record:
        return Record(name, name, section, "2026-01-01", "abc", "cpu", "x")

    records = [record("g1", "gpu"), record("e1", "engine"), record("e2", "engine")]
    index = results.render_index(records)
    assert re.findall(r'^## <a id="(\w+)">', index, flags=re.M) == ["engine", "gpu"]
    assert re.findall(r"^- \[(\w+)\]\(results/(\w+)\.md#(\w+)\)", index, flags=re.M) == [
        ("e1", "engine", "e1"), ("e2", "engine", "e2"), ("g1", "gpu", "g1")
    ]  # fmt: skip
    engine = results.render_section(records, "engine")
    assert re.findall(r'^### <a id="(\w+)">', engine, flags=re.M) == ["e1", "e2"]
    assert "[All results](../RESULTS.md)" in engine
    assert "[benchmarks/README.md](../../benchmarks/README.md)" in engine


def test_records_load_in_page_order(tmp_path):
    dated = {"b": ("engine", "2026-01-01"), "a": ("gpu", "2026-03-01"), "c": ("engine", "2026-02-01"),
             "d": ("engine", "2026-02-01")}  # fmt: skip
    for name, (section, date) in dated.items():
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump({**RECORD, "section": section, "date": date}))
    assert [r.name for r in results.load_records(tmp_path)] == ["c", "d", "b", "a"]


@pytest.mark.parametrize(
    "change, message",
    [
        ({"title": ""}, "bench.yaml: title must be a non-empty string, got ''"),
        ({"section": "misc"}, r"bench.yaml: section 'misc' is not one of \['testbed', "),
        ({"speed": "fast"}, "bench.yaml: unknown key 'speed'"),
        ({"commit": None}, "bench.yaml: commit must be a non-empty string, got None"),
        (
            {"tables": [{"columns": ["a", "b"], "rows": [["1"]]}]},
            r"tables\[0\]: rows\[0\] must be a list of 2 text",
        ),
        (
            {"tables": [{"columns": ["a"], "rows": [[0.3]]}]},
            r"tables\[0\]: rows\[0\] holds 0.3, not text: quote it",
        ),
        ({"tables": [{"columns": ["a"], "rows": []}]}, r"tables\[0\]: rows must be a non-empty list"),
        ({"readme": 1}, "readme=1 must be one of the seeds of its verdicts"),
        ({"picture": {"budget": 256, "accuracy": {}}}, r"readme \(a seed\) and picture .* go together"),
        (
            {
                "readme": 3,
                "verdicts": {
                    "seeds": [1, 2],
                    "claims": [{"claim": "c", "target": "t", "measured": ["x", "y"], "held": [True, None]}],
                },
            },
            "readme=3 must be one of the seeds of its verdicts",
        ),
        (
            {
                "readme": 1,
                "verdicts": {
                    "seeds": [1],
                    "claims": [{"claim": "c", "target": "t", "measured": ["x"], "held": [True]}],
                },
            },
            r"readme \(a seed\) and picture .* go together",
        ),
        (
            {
                "readme": 1,
                "picture": {"budget": 256, "accuracy": {"longcot": [0.5]}},
                "verdicts": {
                    "seeds": [1],
                    "claims": [{"claim": "c", "target": "t", "measured": ["x"], "held": [True]}],
                },
            },
            r"bench.yaml: picture: accuracy.longcot: \[warm start, error, after RL, error\], not \[0.5\]",
        ),
        (
            {
                "verdicts": {
                    "seeds": [1, 2],
                    "claims": [{"claim": "c", "target": "t", "measured": ["x", "y"], "held": [True]}],
                }
            },
            r"verdicts.claims\[0\].held must be one of true, false, null per seed \(2\)",
        ),
    ],
)
def test_a_bad_record_is_refused_naming_its_file_and_key(change, message):
    with pytest.raises(RecordError, match=message):
        results.parse_record("bench", {**RECORD, **change}, "bench.yaml")


def test_a_record_may_not_take_a_section_anchor_and_an_unquoted_date_is_read_as_text(tmp_path):
    with pytest.raises(RecordError, match="may not be named like a section"):
        results.parse_record("gpu", RECORD, "gpu.yaml")
    path = tmp_path / "bench.yaml"
    path.write_text(yaml.safe_dump(RECORD).replace("'2026-01-02'", "2026-01-02"))
    assert yaml.safe_load(path.read_text())["date"] == datetime.date(2026, 1, 2)
    assert results.load_record(path).date == "2026-01-02"


def test_a_written_record_loads_back_as_it_was(tmp_path):
    record = Record(
        "run", "A run", "testbed", "2026-01-02", "abc", "cpu", "line one\nline two", method="docs/GPU.md",
        verdicts=Verdicts([1], [Claim("c", ">= 0.5", ["0.50"], [None])]), readme=1, picture=PICTURE,
        tables=[Table(["a"], [["1.00"]], "cap")], notes="- a note\n- another",
    )  # fmt: skip
    results.write_record(tmp_path / "run.yaml", record)
    assert results.load_record(tmp_path / "run.yaml") == record
    assert "command: |" in (tmp_path / "run.yaml").read_text()  # several lines: a YAML block


def test_the_readme_table_goes_between_its_markers_and_nowhere_else():
    readme = f"intro\n{results.README_START}\nold row\n{results.README_END}\nafter\n"
    assert results.with_readme_table(readme, ["| new |"]) == (
        f"intro\n{results.README_START}\n| new |\n{results.README_END}\nafter\n"
    )
    with pytest.raises(RecordError, match="must hold the line"):
        results.with_readme_table("no markers\n", ["| new |"])
    with pytest.raises(RecordError, match="comes before"):  # the table would swallow the lines between
        results.with_readme_table(f"{results.README_END}\nkept\n{results.README_START}\n", ["| new |"])


def test_a_command_with_a_backtick_goes_in_a_block_not_the_meta_line():
    # inside `...` a backtick of the command would end the code span
    record = results.parse_record("bench", {**RECORD, "command": "X=`date` python x.py"}, "bench.yaml")
    lines = results.render_entry(record)
    assert lines[2].endswith("[record](bench.yaml)")
    assert lines[4:7] == ["```", "X=`date` python x.py", "```"]


def test_provenance_names_today_the_checkout_and_the_machine():
    found = results.provenance()
    assert found["date"] == datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    if head.returncode == 0:  # a source tree without git says so instead
        assert found["commit"].split("-")[0] == head.stdout.strip()
    assert re.fullmatch(r"\d+-core \S+ CPU, .+, load average \d+\.\d at the end", found["machine"])


def test_the_cli_checks_rewrites_and_reports_a_stale_page(tmp_path):
    root = tmp_path / "repo"
    shutil.copytree(REPO / results.RECORDS, root / results.RECORDS)
    (root / results.README).write_text((REPO / results.README).read_text())
    command = [sys.executable, "-m", "verl.tools.results", "--root", str(root)]
    stale = subprocess.run([*command, "--check"], capture_output=True, text=True, cwd=REPO)
    assert stale.returncode == 1 and "RESULTS.md differs from its records" in stale.stderr  # no page yet
    assert subprocess.run(command, capture_output=True, text=True, cwd=REPO).returncode == 0
    assert (root / results.PAGE).read_text() == (REPO / results.PAGE).read_text()
    assert subprocess.run([*command, "--check"], cwd=REPO).returncode == 0
    (root / results.RECORDS / "demo.yaml").write_text("title: [")
    broken = subprocess.run([*command, "--check"], capture_output=True, text=True, cwd=REPO)
    assert broken.returncode == 2 and "demo.yaml: not YAML" in broken.stderr

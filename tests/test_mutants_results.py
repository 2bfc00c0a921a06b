"""verl/tools/results.py to the letter: the exact refusal of each malformed record, the exact text of a
record's YAML and of the pages, the command line's exit codes and output, and where a record says it was
measured. Written for `make mutants`: each test pins what tests/test_results.py checks loosely."""

import datetime
import hashlib
import os
import platform
import re
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from verl.tools import results, summary_picture
from verl.tools.results import Claim, Record, RecordError, Table, Verdicts
from verl.tools.summary_picture import SummaryPicture

RECORD = {
    "title": "A benchmark",
    "section": "engine",
    "date": "2026-01-02",
    "commit": "abc1234",
    "machine": "2-core CPU",
    "command": "python benchmarks/x.py",
}
CLAIM = {"claim": "c", "target": "t", "measured": ["x", "y"], "held": [True, None]}
PICTURE = {"budget": 256, "accuracy": {"delethink": [0.25, 0.5, 0.75, 1.0]}}


def refusal(change: dict) -> str:
    with pytest.raises(RecordError) as caught:
        results.parse_record("bench", {**RECORD, **change}, "bench.yaml")
    return str(caught.value)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"tables": {"columns": ["a"]}}, "bench.yaml: tables must be a list of tables"),
        (
            {"tables": [{"columns": ["a"], "rows": [["1"]], "colour": "red"}]},
            "bench.yaml: tables[0]: a table has columns, rows and an optional caption, got "
            "{'columns': ['a'], 'rows': [['1']], 'colour': 'red'}",
        ),
        (
            {"tables": [{"columns": "a", "rows": [["1"]]}]},
            "bench.yaml: tables[0]: columns must be a list of some text cells, got 'a'",
        ),
        (
            {"tables": [{"columns": ["a"], "rows": [["1"]], "caption": 3}]},
            "bench.yaml: tables[0]: caption must be a string, got 3",
        ),
        ({"method": 3}, "bench.yaml: method must be a string, got 3"),
        ({"notes": ["a"]}, "bench.yaml: notes must be a string, got ['a']"),
        (
            {"speed": "fast"},
            "bench.yaml: unknown key 'speed'; a record has command, commit, date, machine, method, notes, "
            "picture, readme, section, tables, title, verdicts",
        ),
    ],
)
def test_a_bad_table_or_text_key_is_refused_with_this_exact_message(change, message):
    assert refusal(change) == message


@pytest.mark.parametrize(
    "verdicts, message",
    [
        ([1, 2], "bench.yaml: verdicts.seeds must be a non-empty list of seeds, got None"),
        (
            {"seeds": [], "claims": [CLAIM]},
            "bench.yaml: verdicts.seeds must be a non-empty list of seeds, got []",
        ),
        (
            {"seeds": 5, "claims": [CLAIM]},
            "bench.yaml: verdicts.seeds must be a non-empty list of seeds, got 5",
        ),
        ({"seeds": [1, 2], "claims": []}, "bench.yaml: verdicts.claims must list at least one claim"),
        (
            {"seeds": [1, 2], "claims": [{"claim": "c", "target": "t", "measured": ["x", "y"]}]},
            "bench.yaml: verdicts.claims[0] must have claim, target, measured and held, got "
            "{'claim': 'c', 'target': 't', 'measured': ['x', 'y']}",
        ),
        (
            {"seeds": [1, 2], "claims": [{**CLAIM, "held": [True, "yes"]}]},
            "bench.yaml: verdicts.claims[0].held must be one of true, false, null per seed (2), "
            "got [True, 'yes']",
        ),
        (
            {"seeds": [1, 2], "claims": [{**CLAIM, "claim": ""}]},
            "bench.yaml: verdicts.claims[0]: claim must be a non-empty string, got ''",
        ),
        (
            {"seeds": [1, 2], "claims": [{**CLAIM, "target": 3}]},
            "bench.yaml: verdicts.claims[0]: target must be a string, got 3",
        ),
        (
            {"seeds": [1, 2], "claims": [{**CLAIM, "measured": ["x"]}]},
            "bench.yaml: verdicts.claims[0]: measured must be a list of 2 text cells, got ['x']",
        ),
    ],
)
def test_bad_verdicts_are_refused_with_this_exact_message(verdicts, message):
    assert refusal({"section": "testbed", "verdicts": verdicts}) == message


def test_a_record_that_is_not_a_mapping_is_refused_naming_the_keys_it_needs():
    with pytest.raises(RecordError) as caught:
        results.parse_record("bench", [1, 2], "bench.yaml")
    assert str(caught.value) == (
        "bench.yaml: a record is a mapping of title, section, date, commit, machine, command, ..., got [1, 2]"
    )


def test_optional_text_may_be_left_out_and_verdicts_take_false_and_a_missing_target():
    claim = {"claim": "c", "target": None, "measured": ["x", "y", "z"], "held": [True, False, None]}
    record = results.parse_record(
        "bench",
        {
            **RECORD,
            "verdicts": {"seeds": [1, 2, 3], "claims": [claim]},
            "tables": [{"columns": ["a"], "rows": [["1"]]}],
        },
        "bench.yaml",
    )
    assert record.method == "" and record.notes == ""
    assert record.tables == [Table(["a"], [["1"]], "")]
    assert record.verdicts == Verdicts([1, 2, 3], [Claim("c", "", ["x", "y", "z"], [True, False, None])])


def test_held_in_counts_the_seeds_that_measured_and_names_the_rest_only_when_some_did_not():
    assert results.held_in([True, False]) == "1 of 2"
    assert results.held_in([True, None, True]) == "2 of 2 (1 not measured)"


def test_a_record_file_that_is_not_yaml_or_not_a_record_is_refused_naming_the_file(tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("title: [")
    with pytest.raises(RecordError, match=rf"^{re.escape(str(broken))}: not YAML: "):
        results.load_record(broken)
    untitled = tmp_path / "untitled.yaml"
    untitled.write_text(yaml.safe_dump({**RECORD, "title": ""}))
    with pytest.raises(RecordError) as caught:
        results.load_record(untitled)
    assert str(caught.value) == f"{untitled}: title must be a non-empty string, got ''"


def test_a_record_is_written_as_this_yaml_in_the_format_s_key_order(tmp_path):
    # 101 letters then words: `title: ` and the letters end at column 108, so the width of 110 breaks
    # after "bb" (111 would keep "cc"); é stays é, and a list of cells is one flow line
    record = Record(
        "run", "a" * 101 + " bb cc dd", "engine", "2026-01-02", "abc", "cpu é", "x",
        tables=[Table(["a", "b"], [["1", "2"]])], notes="one\ntwo",
    )  # fmt: skip
    results.write_record(tmp_path / "deep" / "er" / "run.yaml", record)
    assert (tmp_path / "deep" / "er" / "run.yaml").read_text() == (
        f"title: {'a' * 101} bb\n  cc dd\n"
        "section: engine\ndate: '2026-01-02'\ncommit: abc\nmachine: cpu é\ncommand: x\n"
        "tables:\n- columns: [a, b]\n  rows:\n  - ['1', '2']\n"
        "notes: |\n  one\n  two\n"
    )


def test_a_record_that_would_not_load_back_is_not_written(tmp_path):
    with pytest.raises(RecordError) as caught:
        results.write_record(tmp_path / "gpu.yaml", Record("run", "t", "engine", "2026-01-02", "a", "m", "x"))
    assert str(caught.value).startswith(f"{tmp_path / 'gpu.yaml'}: a record may not be named like a section")
    with pytest.raises(RecordError) as caught:
        results.write_record(tmp_path / "run.yaml", Record("run", "t", "misc", "2026-01-02", "a", "m", "x"))
    assert str(caught.value).startswith(f"{tmp_path / 'run.yaml'}: section 'misc' is not one of")
    assert list(tmp_path.iterdir()) == []


def test_an_entry_without_a_caption_or_notes_ends_at_its_table_and_a_long_command_gets_a_block():
    record = Record("plain", "Plain", "engine", "2026-01-02", "abc", "cpu", "run.sh\nreport.py",
                    tables=[Table(["a"], [["1"]])])  # fmt: skip
    assert results.render_entry(record) == [
        '### <a id="plain"></a>Plain',
        "",
        "2026-01-02 · commit abc · cpu · method: [benchmarks/README.md](../../benchmarks/README.md)"
        " · [record](plain.yaml)",
        "",
        "```",
        "run.sh",
        "report.py",
        "```",
        "",
        "| a |",
        "|---|",
        "| 1 |",
        "",
    ]


def test_an_entry_with_verdicts_shows_them_under_the_meta_line_then_its_notes():
    claims = [Claim("c", "t", ["0.5", "0.4"], [True, False])]
    record = Record("v", "V", "testbed", "2026-01-02", "abc", "cpu", "x", method="docs/GPU.md",
                    verdicts=Verdicts([1, 2], claims), notes="n")  # fmt: skip
    assert results.render_entry(record) == [
        '### <a id="v"></a>V',
        "",
        "2026-01-02 · commit abc · cpu · method: [docs/GPU.md](../../docs/GPU.md) · [record](v.yaml) · `x`",
        "",
        "| claim | target | seed 1 | seed 2 | held in |",
        "|---|---|---|---|---|",
        "| c | t | 0.5 | **0.4** | 1 of 2 |",
        "",
        "n",
        "",
    ]


def test_a_claim_whose_measured_and_held_differ_in_length_is_an_error_not_a_short_row():
    with pytest.raises(ValueError):
        results.verdict_rows(Verdicts([1, 2], [Claim("c", "t", ["a", "b"], [True, True, True])]))


def test_the_readme_table_says_held_or_not_measured_for_the_chosen_seed():
    claims = [Claim("a", "t", ["1", "2"], [False, True]), Claim("b", "u", ["3", "4"], [True, None])]
    record = Record("r", "R", "testbed", "2026-01-02", "abc", "cpu", "x", verdicts=Verdicts([7, 8], claims),
                    readme=8, picture=summary_picture.picture_from_dict(PICTURE, "p"))  # fmt: skip
    assert results.readme_table([record]) == [
        "| claim | target | measured | verdict |",
        "|---|---|---|---|",
        "| a | t | 2 | held |",
        "| b | u | 4 | not measured |",
        "",
        "![seed 8's held-out accuracy and RL step cost](docs/demo_summary.png)",
    ]
    assert results.readme_record([plain("x", "X", "engine", "2026-01-01"), record]) is record
    with pytest.raises(RecordError) as caught:
        results.readme_record([plain("x", "X", "engine", "2026-01-01")])
    assert str(caught.value) == "exactly one record must name the README's seed (readme: N); 0 do"


def test_a_readme_with_its_start_marker_twice_is_refused():
    readme = f"{results.README_START}\n{results.README_START}\nrow\n{results.README_END}\n"
    with pytest.raises(RecordError, match="must hold the line"):
        results.with_readme_table(readme, ["| new |"])


def plain(name: str, title: str, section: str, date: str) -> Record:
    return Record(name, title, section, date, "abc", "cpu", "x")


INDEX = (
    results.PAGE_HEAD + "\n\n"
    '## <a id="testbed"></a>[The Markovian testbed](results/testbed.md)\n\n'
    "- [T one](results/testbed.md#t1) · 2026-01-03\n\n"
    '## <a id="engine"></a>[The CPU rollout engine](results/engine.md)\n\n'
    "- [E one](results/engine.md#e1) · 2026-01-02\n"
)
ENGINE = (
    "# The CPU rollout engine\n\n"
    "<!-- Generated by `make results` (verl/tools/results.py) from docs/results/*.yaml: "
    "edit those, not this. -->\n\n"
    "[All results](../RESULTS.md) · method: [benchmarks/README.md](../../benchmarks/README.md)\n\n"
    '### <a id="e1"></a>E one\n\n'
    "2026-01-02 · commit abc · cpu · method: [benchmarks/README.md](../../benchmarks/README.md)"
    " · [record](e1.yaml) · `x`\n"
)


def test_the_index_and_a_section_page_are_this_text():
    records = [plain("t1", "T one", "testbed", "2026-01-03"), plain("e1", "E one", "engine", "2026-01-02")]
    assert results.render_index(records) == INDEX
    assert results.render_section(records, "engine") == ENGINE


def repository(tmp_path: Path) -> Path:
    """A repository with a testbed record (the README's seed 1) and an engine record, no pages yet."""
    root = tmp_path / "repo"
    claim = {"claim": "c", "target": "t", "measured": ["0.9"], "held": [True]}
    testbed = {**RECORD, "title": "T one", "section": "testbed", "date": "2026-01-03", "command": "x",
               "commit": "abc", "machine": "cpu", "verdicts": {"seeds": [1], "claims": [claim]},
               "readme": 1, "picture": PICTURE}  # fmt: skip
    engine = {**RECORD, "title": "E one", "command": "x", "commit": "abc", "machine": "cpu"}
    (root / results.RECORDS).mkdir(parents=True)
    (root / results.RECORDS / "t1.yaml").write_text(yaml.safe_dump(testbed))
    (root / results.RECORDS / "e1.yaml").write_text(yaml.safe_dump(engine))
    (root / results.README).write_text(f"intro\n{results.README_START}\nold\n{results.README_END}\n")
    return root


README = (
    f"intro\n{results.README_START}\n| claim | target | measured | verdict |\n|---|---|---|---|\n"
    "| c | t | 0.9 | held |\n\n![seed 1's held-out accuracy and RL step cost](docs/demo_summary.png)\n"
    f"{results.README_END}\n"
)


def test_the_pages_of_a_repository_are_its_index_each_section_and_the_readme(tmp_path):
    root = repository(tmp_path)
    found = results.pages(root)
    sections = [root / "docs/results/testbed.md", root / "docs/results/engine.md"]
    assert list(found) == [root / "docs/RESULTS.md", *sections, root / "README.md"]
    assert found[root / "docs/RESULTS.md"] == INDEX
    assert found[root / "docs/results/engine.md"] == ENGINE
    assert found[root / "docs/results/testbed.md"].startswith("# The Markovian testbed\n")
    assert "| c | t | 0.9 | 1 of 1 |" in found[root / "docs/results/testbed.md"]
    assert found[root / "README.md"] == README
    assert results.pictures(root) == {root / "docs/demo_summary.png": SummaryPicture(**PICTURE)}


def test_the_cli_names_each_stale_page_writes_them_and_then_finds_none(tmp_path, capsys):
    root = repository(tmp_path)
    pages = [root / "docs/RESULTS.md", root / "docs/results/testbed.md", root / "docs/results/engine.md"]
    written = [*pages, root / "README.md", root / "docs/demo_summary.png"]
    assert results.main(["--root", str(root), "--check"]) == 1
    stale = [f"{p} differs from its records: run `make results`" for p in written]
    assert capsys.readouterr() == ("", "\n".join(stale) + "\n")
    assert not pages[0].exists() and not written[-1].exists()  # --check writes nothing
    assert results.main(["--root", str(root)]) == 0
    assert capsys.readouterr() == ("".join(f"wrote {p}\n" for p in written), "")
    assert pages[0].read_text() == INDEX and pages[2].read_text() == ENGINE
    assert (root / "README.md").read_text() == README
    assert summary_picture.drawn_from(written[-1]) == summary_picture.fingerprint(SummaryPicture(**PICTURE))
    assert results.main(["--root", str(root), "--check"]) == 0
    assert results.main(["--root", str(root)]) == 0  # nothing stale: nothing written
    assert capsys.readouterr() == ("", "")
    pages[2].write_text("edited by hand")
    assert results.main(["--root", str(root), "--check"]) == 1
    assert capsys.readouterr().err == f"{pages[2]} differs from its records: run `make results`\n"
    # the record's numbers change: the picture drawn from the old ones is stale, and drawn again
    record = root / results.RECORDS / "t1.yaml"
    record.write_text(record.read_text().replace("budget: 256", "budget: 512"))
    assert results.main(["--root", str(root)]) == 0
    # the page edited by hand above, and the picture (the pages do not show the picture's numbers)
    assert capsys.readouterr().out == f"wrote {pages[2]}\nwrote {written[-1]}\n"
    assert summary_picture.drawn_from(written[-1]) == summary_picture.fingerprint(
        SummaryPicture(**{**PICTURE, "budget": 512})
    )


def test_the_cli_exits_2_naming_a_broken_record_and_writes_nothing(tmp_path, capsys):
    root = repository(tmp_path)
    (root / results.RECORDS / "e1.yaml").write_text("title: [")
    for argv in (["--check"], []):
        assert results.main(["--root", str(root), *argv]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.startswith(f"results: {root / results.RECORDS / 'e1.yaml'}: not YAML: ")
    assert not (root / "docs/RESULTS.md").exists()


def test_the_cli_defaults_to_this_checkout(tmp_path, monkeypatch, capsys):
    root = repository(tmp_path)
    monkeypatch.setattr(results, "REPO", root)  # read when main is called: the default of --root
    assert results.main(["--check"]) == 1
    assert capsys.readouterr().err.startswith(f"{root / 'docs/RESULTS.md'} differs")


def test_the_cli_help_says_what_it_does_and_what_each_option_does(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "200")  # one line per option
    with pytest.raises(SystemExit) as stopped:
        results.main(["--help"])
    assert stopped.value.code == 0
    out = capsys.readouterr().out
    assert "Results as data: one record per experiment in docs/results/<name>.yaml, and the pages made" in out
    assert re.search(r"\n  --check +write nothing; exit 1 if a page is stale\n", out)
    assert re.search(r"\n  --root ROOT +the repository \(default: this checkout\)\n", out)


def git(repo: Path, *args: str) -> str:
    command = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip()


def committed(repo: Path) -> Path:
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "a.txt").write_text("a")
    git(repo, "add", "a.txt")
    git(repo, "commit", "-qm", "first")
    return repo


def test_the_commit_is_marked_dirty_for_a_changed_tracked_file_only(tmp_path, monkeypatch):
    repo = committed(tmp_path / "repo")
    monkeypatch.setattr(results, "REPO", repo)
    head = git(repo, "rev-parse", "--short", "HEAD")
    assert results.provenance()["commit"] == head
    (repo / "new.txt").write_text("untracked")
    assert results.provenance()["commit"] == head
    (repo / "a.txt").write_text("changed")
    assert results.provenance()["commit"] == f"{head}-dirty"


def test_the_commit_is_unknown_outside_a_checkout_before_a_commit_and_with_a_broken_index(
    tmp_path, monkeypatch
):
    unborn = tmp_path / "unborn"  # rev-parse fails, status works
    unborn.mkdir()
    git(unborn, "init", "-q")
    broken = committed(tmp_path / "broken")  # rev-parse works, status fails
    (broken / ".git" / "index").write_text("garbage")
    for repo in (tmp_path, unborn, broken):
        monkeypatch.setattr(results, "REPO", repo)
        assert results.provenance()["commit"] == "unknown (not a git checkout)", repo


def machine_with_load(found: dict) -> tuple[str, str]:
    before_after = re.fullmatch(r"(.*), load average (\d+\.\d) at the end", found["machine"])
    assert before_after is not None, found["machine"]
    return before_after[1], before_after[2]


def test_the_machine_is_its_cores_arch_gpu_and_one_minute_load(monkeypatch):
    import torch

    # no GPU here: torch.cuda is told of two, to check how a GPU is named (the first one's name)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: f"Card {i}")
    before = os.getloadavg()
    machine, load = machine_with_load(results.provenance())
    after = os.getloadavg()
    cores = len(os.sched_getaffinity(0))
    assert machine == f"{cores}-core {platform.machine()} CPU, 2 x Card 0"
    # the 1-minute load, read between these two reads (the 5-minute one differs from it but rarely)
    assert load in {f"{before[0]:.1f}", f"{after[0]:.1f}"}


def test_the_cores_are_those_the_process_may_run_on():
    import torch

    gpu = (
        f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}"
        if torch.cuda.is_available()
        else "no GPU"
    )
    cpus = os.sched_getaffinity(0)
    if len(cpus) < 2:
        pytest.skip("one CPU: restricting to one would not change the count")
    os.sched_setaffinity(0, {min(cpus)})
    try:
        machine, _ = machine_with_load(results.provenance())
    finally:
        os.sched_setaffinity(0, cpus)
    assert machine == f"1-core {platform.machine()} CPU, {gpu}"


@pytest.mark.parametrize("zone", ["Etc/GMT-14", "Etc/GMT+12"])
def test_the_date_is_today_in_utc_whatever_the_local_time_zone(zone, monkeypatch):
    # at any instant one of UTC+14 and UTC-12 is on another day than UTC
    monkeypatch.setenv("TZ", zone)
    time.tzset()
    try:
        found = results.provenance()["date"]
        utc = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    finally:
        monkeypatch.undo()
        time.tzset()
    assert found == utc


# --- verl/tools/summary_picture.py: the numbers, their fingerprint, the file -----------------------------


@pytest.mark.parametrize(
    "raw, message",
    [
        ([1], "p: a mapping of budget, accuracy, budgets, step_ms (the last two optional), got [1]"),
        (None, "p: a mapping of budget, accuracy, budgets, step_ms (the last two optional), got None"),
        ({"budget": 256}, "p: a mapping of budget, accuracy, budgets, step_ms (the last two optional), got "
                          "{'budget': 256}"),
        ({**PICTURE, "colour": "red"}, "p: unknown key 'colour'; one of budget, accuracy, budgets, step_ms"),
        ({**PICTURE, "accuracy": {"cot": [0, 0, 0, 0]}},
         "p: accuracy: unknown environment 'cot'; one of ['longcot', 'delethink']"),
        ({**PICTURE, "step_ms": {"cot": []}},
         "p: step_ms: unknown environment 'cot'; one of ['longcot', 'delethink']"),
        ({**PICTURE, "accuracy": {"longcot": [0.5, 0.1, 0.6]}},
         "p: accuracy.longcot: [warm start, error, after RL, error], not [0.5, 0.1, 0.6]"),
        ({**PICTURE, "budgets": [256, 512], "step_ms": {"longcot": [1.0]}},
         "p: step_ms.longcot: 1 values for 2 budgets"),
        ({**PICTURE, "budget": "B"}, "p: invalid literal for int() with base 10: 'B'"),
        ({**PICTURE, "accuracy": [0.5]}, "p: 'list' object has no attribute 'items'"),
    ],
)  # fmt: skip
def test_bad_picture_numbers_are_refused_with_this_exact_message(raw, message):
    with pytest.raises(ValueError) as caught:
        summary_picture.picture_from_dict(raw, "p")
    assert str(caught.value) == message


def test_the_picture_numbers_read_back_as_they_were_written_and_their_fingerprint_follows_every_number():
    raw = {"budget": 256, "accuracy": {"longcot": [0.5, 0.1, 0.625, 0.1]}, "budgets": [256, 512],
           "step_ms": {"longcot": [19.0, 44.5], "delethink": [28.0, 57.5]}}  # fmt: skip
    picture = summary_picture.picture_from_dict(raw, "p")
    assert summary_picture.picture_dict(picture) == raw
    assert summary_picture.picture_from_dict(PICTURE, "p") == SummaryPicture(256, PICTURE["accuracy"], [], {})
    # sha256 of the sorted JSON, its first 16 hex digits
    text = '{"accuracy": {"delethink": [0.25, 0.5, 0.75, 1.0]}, "budget": 256, "budgets": [], "step_ms": {}}'
    assert (
        summary_picture.fingerprint(SummaryPicture(**PICTURE))
        == hashlib.sha256(text.encode()).hexdigest()[:16]
    )
    changed = [
        {**raw, "budget": 512},
        {**raw, "accuracy": {"longcot": [0.5, 0.1, 0.625, 0.2]}},
        {**raw, "step_ms": {"longcot": [19.0, 44.5], "delethink": [28.0, 57.0]}},
    ]
    prints = {summary_picture.fingerprint(summary_picture.picture_from_dict(r, "p")) for r in [raw, *changed]}
    assert len(prints) == 4


def test_a_saved_picture_carries_its_fingerprint_and_a_png_drawn_otherwise_none(tmp_path):
    import matplotlib
    import matplotlib.pyplot as plt

    picture = SummaryPicture(**PICTURE)
    path = tmp_path / "docs" / "p.png"  # its folder made on the way
    with matplotlib.rc_context({"savefig.format": "svg"}):  # a PNG whatever a user's matplotlibrc says
        summary_picture.save(picture, path)
    assert path.read_bytes().startswith(b"\x89PNG") and (path.stat().st_mode & 0o777) == 0o644
    assert summary_picture.drawn_from(path) == summary_picture.fingerprint(picture)
    assert b"Software" not in path.read_bytes()  # no matplotlib version in the file
    assert [p.name for p in path.parent.iterdir()] == ["p.png"]  # no temp file left
    assert summary_picture.drawn_from(tmp_path / "none.png") is None
    fig = plt.figure()
    fig.savefig(tmp_path / "other.png")
    plt.close(fig)
    assert summary_picture.drawn_from(tmp_path / "other.png") is None
    assert plt.get_fignums() == []  # save closed its figure

"""The rollout viewer end to end on a hand-made run: the rows the trainer and main_eval write are read
back, the page embeds the expected pieces, the CLI writes one self-contained file, and (when Chromium
is installed) a real browser filters, opens a trajectory and takes a screenshot."""

import json
import re
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.chromium_cdp import Chromium, chromium_binary
from tests.e2e_utils import HANG_S
from verl.core.delethink import DelethinkParams
from verl.core.trajectory import PromptItem, Trajectory, Turn
from verl.eval.evaluate import EvalRun, sample_records
from verl.models.tiny import build_tokenizer
from verl.tools.viewer.__main__ import main
from verl.tools.viewer.page import build_page
from verl.tools.viewer.runs import read_run
from verl.tools.viewer.tokens import byte_level_token_bytes, find_tokenizer
from verl.trainer.ppo.rollout_records import chunk_records, trajectory_record
from verl.utils.fs import atomic_write_jsonl
from verl.workers.reward_manager.naive import RewardResult

KEEP = {"keep_head": 2, "keep_tail": 3}


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def trajectories(tokenizer):
    """A Delethink trace of two chunks (carry-over: head "ab", tail "hij") that answers 3, and a
    one-chunk trace cut at its budget."""
    enc = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    prompt = enc("<|user|>a1 b2<|assistant|><think>")
    first = enc("abcdefghij")
    second = enc("kl</think>\\boxed{3}") + [tokenizer.eos_token_id]
    carried = prompt + first[:2] + first[-3:]
    two = Trajectory([Turn(prompt, first, [0.0] * 10, "length"), Turn(carried, second, [0.0] * 13, "stop")])
    other = enc("<|user|>a5<|assistant|><think>")
    one = Trajectory([Turn(other, enc("xyz"), [0.0] * 3, "length")])
    items = [PromptItem(prompt, "synthetic/running_sum", "3"), PromptItem(other, "synthetic/other", "5")]
    return items, [two, one], [1.0, 0.0]


def write_trainer_run(run_dir: Path, tokenizer) -> None:
    """What dump_rollouts (step 1) and the validation log (step 0) write, tokenizer in a checkpoint."""
    items, trajs, scores = trajectories(tokenizer)
    records, chunks, generations = [], [], []
    for i, (item, traj, score) in enumerate(zip(items, trajs, scores, strict=True)):
        solution = tokenizer.decode(traj.response_ids)
        records.append({**trajectory_record(1, i, item, traj, solution, score, tokenizer.decode, KEEP)})
        chunks += chunk_records(1, i, traj, tokenizer.decode)
        generations.append(
            {
                **trajectory_record(0, i, item, traj, solution, score, tokenizer.decode, KEEP),
                "chunks": chunk_records(0, i, traj, tokenizer.decode),
            }
        )
    atomic_write_jsonl(run_dir / "rollouts" / "step_1.jsonl", records)
    atomic_write_jsonl(run_dir / "rollouts" / "step_1_chunks.jsonl", chunks)
    atomic_write_jsonl(run_dir / "val_generations.jsonl", generations)
    tokenizer.save_pretrained(run_dir / "global_step_1" / "actor" / "huggingface")


@pytest.fixture
def run_dir(tmp_path, tokenizer):
    write_trainer_run(tmp_path / "run", tokenizer)
    return tmp_path / "run"


def embedded(html: str, element_id: str):
    match = re.search(rf'<script type="application/json" id="{element_id}">(.*?)</script>', html, re.S)
    assert match, element_id
    return json.loads(match.group(1))


DELETHINK_SEGS = [
    ["ab", 0, [1], [], []],
    ["cdefg", 0, [], [], []],
    ["hij", 0, [], [1], []],
    ["kl", 1, [], [], []],
    ["</think>", 1, [], [], ["think_end"]],
    ["\\boxed{", 1, [], [], []],
    ["3", 1, [], [], ["answer"]],
    ["}<|end|>", 1, [], [], []],
]


def test_trainer_rows_read_back_as_traces(run_dir):
    groups = read_run(run_dir)
    assert list(groups) == ["train step 1", "val step 0"]
    two, one = groups["train step 1"]
    # thinking: 10 tokens, then kl (2) + </think> (1) + \boxed{3} (9) + EOS (1)
    assert (two.score, two.answer, two.has_eos, two.thinking_tokens, len(two.chunks)) == (
        1.0,
        "3",
        True,
        23,
        2,
    )
    assert (two.keep_head, two.keep_tail) == (2, 3)
    assert two.chunks[1].prompt_tokens == two.chunks[0].prompt_tokens + 2 + 3  # question + head + tail
    assert (one.score, one.answer, one.chunks[0].finish_reason) == (0.0, None, "length")
    assert groups["val step 0"][0].pair_key == two.pair_key  # same prompt and position: paired
    assert list(read_run(run_dir, step=0)) == ["val step 0"]


def test_page_embeds_carry_overs_and_marks(run_dir, tokenizer):
    groups = read_run(run_dir)
    html = build_page([("run", groups, byte_level_token_bytes(tokenizer))], "run")
    manifest = embedded(html, "manifest")
    groups = [
        {"name": "train step 1", "id": "s0g0", "count": 2},
        {"name": "val step 0", "id": "s0g1", "count": 2},
    ]
    assert manifest == [{"name": "run", "groups": groups}]
    assert [r["score"] for r in embedded(html, "s0g0")] == [1.0, 0.0]
    detail = embedded(html, "s0g0t0")
    assert detail["segs"] == DELETHINK_SEGS
    assert detail["carry"] and detail["keep"] == [2, 3]
    assert embedded(html, "s0g0t1")["segs"] == [["xyz", 0, [], [], []]]


def test_page_without_a_tokenizer_shows_chunks_from_their_text(run_dir):
    html = build_page([("run", read_run(run_dir), None)], "run")
    segs = embedded(html, "s0g0t0")["segs"]
    assert [s[0] for s in segs] == ["abcdefghij", "kl", "</think>", "\\boxed{", "3", "}<|end|>"]
    assert not any(s[2] or s[3] for s in segs)


def test_trace_text_cannot_close_the_script_element(tmp_path, tokenizer):
    items, trajs, _ = trajectories(tokenizer)
    evil = "</script><script>alert(1)</script><!--"
    row = trajectory_record(1, 0, items[1], trajs[1], "xyz", 0.0, lambda ids: evil, KEEP)
    atomic_write_jsonl(tmp_path / "r" / "rollouts" / "step_1.jsonl", [row])
    atomic_write_jsonl(
        tmp_path / "r" / "rollouts" / "step_1_chunks.jsonl", chunk_records(1, 0, trajs[1], str)
    )
    html = build_page([("r", read_run(tmp_path / "r"), None)], "r")
    assert html.count("</script>") == html.count("<script")  # every element closes once, at its own end
    assert embedded(html, "s0g0t0")["question"] == evil


def test_eval_samples_group_by_run_and_pair_by_seed(tmp_path, tokenizer):
    items, trajs, scores = trajectories(tokenizer)
    config = SimpleNamespace(sampling=SimpleNamespace(n=1, seed=0))
    params = DelethinkParams(chunk_size=10, keep_head=2, keep_tail=3, max_chunks=2)
    records = []
    for run in (EvalRun("longcot", 22), EvalRun("delethink", 17, params)):
        results = [
            RewardResult(s, tokenizer.decode(t.response_ids)) for s, t in zip(scores, trajs, strict=True)
        ]
        records += sample_records(run, config, items, trajs, results, tokenizer)
    atomic_write_jsonl(tmp_path / "samples.jsonl", records)
    groups = read_run(tmp_path)
    assert list(groups) == ["longcot_B22", "delethink_I2"]
    longcot, delethink = groups["longcot_B22"], groups["delethink_I2"]
    assert [t.pair_key for t in longcot] == [t.pair_key for t in delethink]
    assert (longcot[0].keep_head, delethink[0].keep_head, delethink[0].keep_tail) == (None, 2, 3)
    html = build_page([("eval", groups, byte_level_token_bytes(tokenizer))], "eval")
    assert embedded(html, "s0g1t0")["segs"] == DELETHINK_SEGS


def test_a_bad_row_names_its_file_and_line(run_dir):
    chunk_file = run_dir / "rollouts" / "step_1_chunks.jsonl"
    lines = chunk_file.read_text().splitlines()
    row = json.loads(lines[1])
    del row["finish_reason"]
    lines[1] = json.dumps(row)
    chunk_file.write_text("\n".join(lines) + "\n")
    with pytest.raises(
        ValueError, match=rf"{re.escape(str(chunk_file))} line 2: missing key 'finish_reason'"
    ):
        read_run(run_dir)
    with pytest.raises(ValueError, match="no trajectories for step 7"):
        read_run(run_dir, step=7)
    (run_dir / "val_generations.jsonl").write_text("[1, 2]\n")
    with pytest.raises(ValueError, match="val_generations.jsonl line 1: expected a JSON object, got list"):
        read_run(run_dir, step=0)


def test_cli_writes_one_self_contained_file(run_dir, tmp_path, capsys):
    assert find_tokenizer(run_dir) == run_dir / "global_step_1" / "actor" / "huggingface"
    out = tmp_path / "view.html"
    assert main([str(run_dir), "--compare", str(run_dir), "--out", str(out)]) == 0
    html = out.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)  # nothing fetched from anywhere
    assert embedded(html, "s1g0t0")["segs"] == DELETHINK_SEGS
    assert main([str(tmp_path / "nowhere")]) == 2
    assert "nowhere: not a directory" in capsys.readouterr().err


@pytest.mark.skipif(chromium_binary() is None, reason="headless Chromium is not installed")
def test_chromium_filters_opens_a_trajectory_and_screenshots(run_dir, tmp_path):
    out = tmp_path / "view.html"
    assert main([str(run_dir), "--out", str(out)]) == 0
    browser = Chromium(chromium_binary(), tmp_path / "profile")
    try:
        browser.open(out.as_uri())
        rows = "document.querySelectorAll('tr.row').length"
        assert browser.js(rows) == 2
        browser.click("#f-score")  # the score filter: focus it, then the key a user presses
        browser.key("Escape", 27)
        browser.key("ArrowDown", 40)
        assert browser.js("document.getElementById('f-score').value") == "pos"
        assert browser.js(rows) == 1
        browser.click("tr.row")
        detail = "document.getElementById('detail')"
        assert "a1 b2" in browser.js(f"{detail}.querySelector('.question').textContent")
        texts = "[...{}.querySelectorAll('.chunk span.{}')].map(s => s.textContent)"
        assert browser.js(texts.format(detail, "head")) == ["ab"]
        assert browser.js(texts.format(detail, "tail")) == ["hij"]
        assert browser.js(f"{detail}.querySelector('.chunk span.answer').textContent") == "3"
        browser.click(".trace .chunk-head + .chunk + .chunk-head")  # chunk 2's header: its carry-over only
        assert browser.js(texts.format(detail, "focus")) == ["ab", "hij"]
        shot = tmp_path / "viewer.png"
        browser.screenshot(shot)
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
        requested = [
            e["params"]["request"]["url"]
            for e in browser.events
            if e.get("method") == "Network.requestWillBeSent"
        ]
        assert requested and all(url.startswith("file://") for url in requested)
    finally:
        browser.close()


def test_trace_texts_follow_the_script_so_the_list_shows_before_they_are_read(run_dir):
    html = build_page([("run", read_run(run_dir), None)], "run")
    script = html.index("<script>\n")
    assert html.index('id="manifest"') < html.index('id="s0g1"') < script  # the lists: read first
    assert script < html.index('id="s0g0t0"') < html.index('id="s0g1t1"')


def write_long_step(run_dir: Path, tokenizer, count: int) -> None:
    """Training step 1 with `count` trajectories (the two hand-made ones in turn), validation step 0
    with the two."""
    write_trainer_run(run_dir, tokenizer)
    items, trajs, scores = trajectories(tokenizer)
    records, chunks = [], []
    for i in range(count):
        item, traj, score = items[i % 2], trajs[i % 2], scores[i % 2]
        solution = tokenizer.decode(traj.response_ids)
        records.append(trajectory_record(1, i, item, traj, solution, score, tokenizer.decode, KEEP))
        chunks += chunk_records(1, i, traj, tokenizer.decode)
    atomic_write_jsonl(run_dir / "rollouts" / "step_1.jsonl", records)
    atomic_write_jsonl(run_dir / "rollouts" / "step_1_chunks.jsonl", chunks)


def wait_until(browser: Chromium, expression: str, timeout: float = HANG_S) -> None:
    """The list draws more rows from an IntersectionObserver callback, after the event that scrolled."""
    deadline = time.monotonic() + timeout
    while not browser.js(expression):
        assert time.monotonic() < deadline, f"still false after {timeout} s: {expression}"
        time.sleep(0.02)


@pytest.mark.skipif(chromium_binary() is None, reason="headless Chromium is not installed")
def test_chromium_parses_and_draws_only_what_is_asked_for(tmp_path, tokenizer):
    """What keeps a 1024 x 24K step usable (benchmarks/viewer_scale.py): a step's list is parsed
    when the step is picked, a trace's text when it is opened, and rows are drawn 200 at a time."""
    write_long_step(tmp_path / "run", tokenizer, 500)
    out = tmp_path / "view.html"
    assert main([str(tmp_path / "run"), "--out", str(out)]) == 0
    browser = Chromium(chromium_binary(), tmp_path / "profile")
    parsed = "[...cache.keys()]"  # viewer.js's cache of parsed JSON elements, by element id
    rows = "document.querySelectorAll('tr.row').length"
    chunks = "document.querySelectorAll('#detail .chunk').length"
    try:
        browser.open(out.as_uri())
        assert browser.js(parsed) == ["manifest", "s0g0"]  # not val step 0's list, no trace text
        assert browser.js("document.getElementById('count').textContent") == "500 of 500 shown"
        assert (browser.js(rows), browser.js(chunks)) == (200, 0)
        browser.js("document.getElementById('list').scrollTop = 1e9")
        wait_until(browser, f"{rows} === 400")
        browser.click("#rows tr.row:nth-child(2)")  # trajectory 1: the one-chunk trace
        assert browser.js(parsed) == ["manifest", "s0g0", "s0g0t1"]
        assert browser.js(chunks) == 1
        browser.click("#group-0")
        browser.key("Escape", 27)
        browser.key("ArrowDown", 40)  # val step 0
        assert browser.js(parsed) == ["manifest", "s0g0", "s0g0t1", "s0g1"]
        assert (browser.js(rows), browser.js(chunks)) == (2, 0)
        # a trace the browser has not read yet (here: never will) is announced, not drawn from nothing
        browser.js("document.getElementById('s0g1t0').remove()")
        browser.click("#rows tr.row")
        assert "Still reading" in browser.js("document.getElementById('detail').textContent")
        assert "s0g1t0" not in browser.js(parsed)
    finally:
        browser.close()

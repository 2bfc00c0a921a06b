"""Does the rollout viewer stay usable at the size issue 15 names: one step of 1024 Delethink trajectories
of ~24K tokens each? Prints numbers; not a test.

    nice -n 19 .venv/bin/python benchmarks/viewer_scale.py [--traces 1024] [--out DIR]

1. Writes a synthetic run directory the way the trainer does (rollout_records rows): `train step 1`
   with a few trajectories and `train step 2` with --traces of them. Each trace is Delethink's
   C = 8192, keep_head = 100, keep_tail = 3996: a first chunk of 8192 tokens, then up to four chunks of
   4096 more, each prompted with the question and the carry-over cut from the thinking so far.
2. Builds the page with `python -m verl.tools.viewer` (the tokenizer is found in the run's checkpoint).
3. Opens it in headless Chromium and times what a reader does: load, switch to step 2, open a
   trajectory, apply a filter; each time runs from the input event to the next painted frame.

The tokenizer is the tiny model's byte tokenizer plus about a hundred word tokens, so that a token holds
about as many bytes as in a real model's reasoning (~4) and the page is as large as a real run's.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from tokenizers import AddedToken

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/ is not installed; the Chromium driver lives there

from tests.chromium_cdp import Chromium, chromium_binary  # noqa: E402
from verl.core.trajectory import (  # noqa: E402
    PromptItem,  # noqa: E402
    Trajectory,
    Turn,
)
from verl.core.trimmers import progressive_trim  # noqa: E402
from verl.models.tiny import build_tokenizer  # noqa: E402
from verl.tools.viewer.__main__ import main as viewer_main  # noqa: E402
from verl.trainer.ppo.rollout_records import chunk_records, trajectory_record  # noqa: E402

CHUNK, HEAD, TAIL, MAX_CHUNKS = 8192, 100, 3996, 5
CARRY = {"keep_head": HEAD, "keep_tail": TAIL}
SOURCES = ["math/aime24", "math/amc23", "math/math500"]

# Word tokens of made-up reasoning; the weights fall with the position (common words first).
WORDS = (
    " the", " we", " is", " =", " to", " of", " so", " a", ",", ".", "\n\n", " and", " that", " x", " +",
    " let", " it", " 2", " 1", " 3", " this", " be", " for", " in", " -", " can", " which", " then", " but",
    " wait", " check", " number", " value", " sum", " each", " term", " equation", " compute", " gives",
    " square", " root", " times", " divided", " by", " integer", " prime", " factor", " case", " again",
    " hmm", " maybe", " actually", " since", " therefore", " answer", " should", " means", " have", " if",
    " \\frac{", "}{", "}", " ^", "(", ")", " y", " n", " k", " mod", " remainder", " total", " possible",
    " first", " second", " next", " step", " now", " consider", " suppose", " both", " sides", " product",
    " \\sqrt{", " \\cdot", " \\le", " \\ge", " triangle", " angle", " area", " circle", " radius",
    " probability", " expected", " sequence", " digits", " correct", " mistake", " recompute", " Let",
    " So", " Wait", " Then", " Alternatively", " 0", " 4", " 5", " 6", " 7", " 8", " 9", " 10", " 12",
)  # fmt: skip


def word_tokenizer():
    """The tiny tokenizer (token id == byte value) with WORDS as added tokens, and each id's bytes."""
    tokenizer = build_tokenizer()
    tokenizer.add_tokens([AddedToken(w, special=False, normalized=False) for w in WORDS])
    table = [bytes([i]) for i in range(256)] + [b""] * (len(tokenizer) - 256)
    for i, t in tokenizer.added_tokens_decoder.items():
        table[i] = t.content.encode("utf-8")
    return tokenizer, table


class Synth:
    def __init__(self, tokenizer, table: list[bytes], seed: int) -> None:
        self.tokenizer, self.table = tokenizer, table
        self.rng = np.random.default_rng(seed)
        self.word_ids = np.array(tokenizer.convert_tokens_to_ids(list(WORDS)))
        weights = 1.0 / np.arange(1, len(WORDS) + 1) ** 0.8
        self.p = weights / weights.sum()

    def decode(self, ids: list[int]) -> str:
        return b"".join(self.table[i] for i in ids).decode("utf-8", errors="replace")

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def thinking(self, n: int) -> list[int]:
        return self.word_ids[self.rng.choice(len(WORDS), size=n, p=self.p)].tolist()

    def trajectory(self, index: int) -> tuple[PromptItem, Trajectory, float]:
        """A Delethink trajectory as the loop makes it: most run all MAX_CHUNKS chunks (half of those
        are cut at the budget, half close </think> and answer), a few answer in chunk 3 or 4."""
        truth = str(int(self.rng.integers(1, 1000)))
        question = self.encode(f"<|user|>Problem {index}: find the value; it is {truth}.<|assistant|><think>")
        n_chunks = MAX_CHUNKS if self.rng.random() < 0.9 else int(self.rng.integers(3, MAX_CHUNKS))
        answers = n_chunks < MAX_CHUNKS or self.rng.random() < 0.5
        right = answers and self.rng.random() < 0.5
        turns, written = [], []
        for k in range(n_chunks):
            budget = CHUNK if k == 0 else CHUNK - HEAD - TAIL
            prompt = question + progressive_trim(written, HEAD, TAIL) if k else question
            if k < n_chunks - 1 or not answers:
                ids, finish = self.thinking(budget), "length"
            else:
                guess = truth if right else str(int(truth) + 1)
                close = self.encode(f"</think> The answer is \\boxed{{{guess}}}.")
                close.append(self.tokenizer.eos_token_id)
                ids = self.thinking(int(self.rng.integers(budget // 2, budget - len(close)))) + close
                finish = "stop"
            turns.append(Turn(prompt, ids, [], finish))
            written += ids
        item = PromptItem(question, SOURCES[index % len(SOURCES)], truth)
        return item, Trajectory(turns), 1.0 if right else 0.0


def write_step(run_dir: Path, step: int, count: int, synth: Synth) -> tuple[int, int]:
    """rollouts/step_N.jsonl and step_N_chunks.jsonl; returns the thinking's tokens and bytes."""
    tokens = size = 0
    rollouts = run_dir / "rollouts"
    rollouts.mkdir(parents=True, exist_ok=True)
    # a row at a time: a whole step of rows would take gigabytes as Python objects
    with (
        open(rollouts / f"step_{step}.jsonl", "w") as rows,
        open(rollouts / f"step_{step}_chunks.jsonl", "w") as chunks,
    ):
        for i in range(count):
            item, traj, score = synth.trajectory(i)
            solution = synth.decode(traj.response_ids)
            row = trajectory_record(step, i, item, traj, solution, score, synth.decode, CARRY)
            rows.write(json.dumps(row) + "\n")
            for r in chunk_records(step, i, traj, synth.decode):
                chunks.write(json.dumps(r) + "\n")
            tokens += traj.thinking_tokens
            size += len(solution.encode())
    return tokens, size


def seconds_since(start: float) -> str:
    return f"{time.perf_counter() - start:.2f} s"


COUNT = "document.getElementById('count').textContent"
ROWS = "document.querySelectorAll('tr.row').length"


class Page:
    """Headless Chromium on the page, with the measurements the report prints."""

    FRAME = "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(0))))"

    def __init__(self, profile: Path) -> None:
        binary = chromium_binary()
        if binary is None:
            raise SystemExit("headless Chromium is not installed (Debian: apt-get install chromium)")
        self.browser = Chromium(binary, profile)
        self.browser.send("Performance.enable", page=True)

    def frame(self) -> None:
        """Returns once the page has painted twice: everything queued before it has run and been drawn."""
        params = {"expression": self.FRAME, "awaitPromise": True}
        self.browser.send("Runtime.evaluate", params, page=True)

    def timed(self, action) -> float:
        start = time.perf_counter()
        action()
        self.frame()
        return time.perf_counter() - start

    def pick(self, selector: str) -> float:
        """Focus a <select> and time the key press that picks its next option, as a reader would."""
        self.browser.click(selector)
        self.browser.key("Escape", 27)
        return self.timed(lambda: self.browser.key("ArrowDown", 40))

    def load(self, url: str) -> tuple[float, float]:
        """Seconds from navigating to the first row of the list on screen, and to the load event (the
        whole file read)."""
        self.browser.events = [e for e in self.browser.events if e.get("method") != "Page.loadEventFired"]
        start = time.perf_counter()
        self.browser.send("Page.navigate", {"url": url}, page=True)
        while True:
            try:  # the old document may answer, or none while the new one starts: ask again
                if self.browser.js(ROWS):
                    break
            except RuntimeError:
                pass
            if time.perf_counter() - start > 120:
                raise SystemExit("no row of the list on screen after 120 s")
            time.sleep(0.005)
        self.frame()
        rows = time.perf_counter() - start
        self.browser.wait_for("Page.loadEventFired")
        self.frame()
        return rows, time.perf_counter() - start

    def renderer_memory(self) -> int:
        """Private resident bytes (RssAnon: not the shared libraries) of the page's renderer process(es),
        the descendants of Chromium that run with --type=renderer."""
        children: dict[int, list[int]] = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # the process ended while we looked
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
        todo, rss = [self.browser.proc.pid], 0
        while todo:
            pid = todo.pop()
            todo += children.get(pid, [])
            try:
                if b"--type=renderer" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    status = Path(f"/proc/{pid}/status").read_text()
                    rss += int(status.split("RssAnon:")[1].split()[0]) * 1024
            except (OSError, IndexError):
                continue
        return rss

    def memory(self) -> str:
        self.browser.send("HeapProfiler.collectGarbage", page=True)
        heap = self.browser.send("Runtime.getHeapUsage", page=True)
        metrics = self.browser.send("Performance.getMetrics", page=True)["metrics"]
        nodes = next(m["value"] for m in metrics if m["name"] == "Nodes")
        return (
            f"JS heap {heap['usedSize'] / 2**20:.1f} MiB used, {int(nodes)} DOM nodes, "
            f"renderer memory {self.renderer_memory() / 2**20:.0f} MiB"
        )


def drive(html: Path, profile: Path) -> None:
    page = Page(profile)
    js = page.browser.js
    try:
        rows, load = page.load(html.as_uri())
        print(f"open the file: the list on screen after {rows:.2f} s, the whole file read (load event) "
              f"after {load:.2f} s")  # fmt: skip
        print(f"  after load: {page.memory()}")
        print(f"switch to step 2: {page.pick('#group-0'):.3f} s")
        assert js("document.getElementById('group-0').value") == "1", "the step picker did not move to step 2"
        print(f"  {js(COUNT)}, {js(ROWS)} rows drawn; {page.memory()}")
        scroll = "(() => { const l = document.getElementById('list'); l.scrollTop = l.scrollHeight; })()"
        print(f"scroll the list to its end: {page.timed(lambda: js(scroll)):.3f} s, "
              f"{js(ROWS)} rows drawn")  # fmt: skip
        row = "#rows tr.row:nth-child(3)"
        print(f"open a trajectory: {page.timed(lambda: page.browser.click(row)):.3f} s")
        text = js("[...document.querySelectorAll('#detail .chunk')].map(c => c.textContent.length)")
        assert text and sum(text) > 0, "the trajectory did not open"
        print(f"  {len(text)} chunks, {sum(text)} characters shown; {page.memory()}")
        print(f"filter score > 0: {page.pick('#f-score'):.3f} s")
        assert js("document.getElementById('f-score').value") == "pos"
        print(f"  {js(COUNT)}; {page.memory()}")
    finally:
        page.browser.close()


def write_run(run_dir: Path, traces: int) -> None:
    start = time.perf_counter()
    tokenizer, table = word_tokenizer()
    synth = Synth(tokenizer, table, seed=0)
    write_step(run_dir, 1, 8, synth)
    tokens, size = write_step(run_dir, 2, traces, synth)
    tokenizer.save_pretrained(run_dir / "global_step_2" / "actor" / "huggingface")
    files = sum(p.stat().st_size for p in (run_dir / "rollouts").iterdir())
    print(f"wrote {run_dir} in {seconds_since(start)}: step 2 holds {traces} traces of "
          f"{tokens / traces:.0f} thinking tokens on average ({size / tokens:.1f} bytes a token); "
          f"rollout files {files / 2**20:.0f} MiB")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=1024, help="trajectories in step 2")
    parser.add_argument("--out", type=Path, help="where the run directory goes (default: a temporary one)")
    parser.add_argument(
        "--reuse", action="store_true", help="--out holds a run from before: only build the page and time it"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = args.out or Path(tmp) / "run"
        if not args.reuse:
            write_run(run_dir, args.traces)
        start = time.perf_counter()
        html = run_dir / "viewer.html"
        viewer_main([str(run_dir), "--out", str(html)])
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        print(f"built the page: {html.stat().st_size / 2**20:.0f} MiB of HTML in {seconds_since(start)} "
              f"(this process's peak RSS {rss:.1f} GiB)")  # fmt: skip
        drive(html, Path(tmp) / "profile")


if __name__ == "__main__":
    main()

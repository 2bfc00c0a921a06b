"""Math answer scoring with math-verify, as the paper's reference implementation scores it.

A trace has an answer only once its thinking is closed (`boxed.strip_thinking`): the text after the
first `</think>` goes to math-verify's LaTeX extraction, which takes the rightmost `\\boxed{}` first
(`boxed_match_priority=0`; two boxes a few words apart are read together, as the set of both), then
"final answer is ..." or "answer: ..." followed by LaTeX, then any LaTeX math (`$...$`, `\\[...\\]`).
Only the best-ranked match is tried, with no plain-string fallback. The gold answer is wrapped as
display math (`gold_as_latex`) and parsed the same way. math-verify's own limits are the reference's:
1 s per parse, 2 s per comparison.

Those limits are `signal.alarm`s, which raise ValueError anywhere but the main thread (thread pools,
threaded or async Ray actors), and which cannot cut a long C call short (Python runs signal handlers
between bytecodes; sympy's big-integer power in `9^{9^{9^{9}}}` never returns). So parse/verify run
on the main thread of one persistent worker process per scoring process, and the parent enforces
`timeout_s` per item on top: an item that overruns gets 0.0 and the worker is killed and restarted.
A batch goes to the worker in one message and the results stream back one by one, so the IPC cost
is paid once per batch while every item still gets its own limit.

The worker is a fresh interpreter (fork + exec, like multiprocessing's "spawn", so it is safe inside
threaded Ray actors) started with subprocess rather than multiprocessing, because multiprocessing
re-imports the caller's `__main__` in the child: that breaks scripts without a main guard and makes
every restart pay for importing the whole trainer.

Usable as a custom reward: `custom_reward_function.path=verl/utils/reward_score/math_verify.py`.
"""

from __future__ import annotations

import atexit
import faulthandler
import logging
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from verl.utils.reward_score.boxed import strip_thinking

DEFAULT_TIMEOUT_S = 5.0  # per item, enforced by the parent; legitimate answers verify in well under 0.1 s
# math-verify's own limits inside the worker, the reference's values (whole seconds: signal.alarm)
PARSE_TIMEOUT_S = 1
VERIFY_TIMEOUT_S = 2
_WORKER_START_TIMEOUT_S = 120.0  # a fresh python importing sympy; generous for a loaded 2-core box
_READY = "ready"
_ORPHAN_GRACE_S = 1.0  # a worker stuck this long past the limit has lost its parent: it exits itself
# the directory holding the `verl` package, so the worker imports the same code even when verl is not
# installed and runs from another working directory (Ray actors)
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[3])


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> float:
    """1.0 if the answer math-verify extracts after the first </think> equals `ground_truth`, else 0.0.

    Never raises on any solution string and spends at most `timeout_s` verifying it; the only error is
    a worker process that cannot start at all (math-verify missing).
    """
    return compute_scores([solution_str], [ground_truth], timeout_s=timeout_s)[0]


def compute_scores(
    solution_strs: Sequence[str], ground_truths: Sequence[Any], timeout_s: float = DEFAULT_TIMEOUT_S
) -> list[float]:
    """`compute_score` for many items in one round trip to the worker; at most `timeout_s` per item."""
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0 seconds, got {timeout_s!r}")
    if len(solution_strs) != len(ground_truths):
        raise ValueError(f"got {len(solution_strs)} solution strings but {len(ground_truths)} ground truths")
    scores = [0.0] * len(solution_strs)
    to_verify: list[int] = []
    pairs: list[tuple[str, str]] = []
    for i, (solution, truth) in enumerate(zip(solution_strs, ground_truths, strict=True)):
        answer_part = strip_thinking(solution) if isinstance(solution, str) else None
        if answer_part is not None:
            to_verify.append(i)
            pairs.append((gold_as_latex(str(truth)), answer_part))
    for i, score in zip(to_verify, _verify_in_worker(pairs, timeout_s), strict=True):
        scores[i] = score
    return scores


def gold_as_latex(answer: str) -> str:
    """`answer` as LaTeX display math `\\[...\\]`, kept as it is when already in math mode.

    math-verify's LaTeX extraction only reads math it can delimit, so a bare `x=5` or `\\frac12` would
    not be found; an answer that already carries `$...$`, `\\(...\\)` or `\\[...\\]` would break if
    wrapped again.
    """
    text = answer.strip()
    dollars = len(text) > 1 and text.startswith("$") and text.endswith("$")
    delimited = ("\\[" in text and "\\]" in text) or ("\\(" in text and "\\)" in text)
    return text if dollars or delimited else f"\\[{text}\\]"


# ---- worker side: runs on the main thread of the worker process ----


def _serve(conn_fd: int) -> None:
    conn = Connection(conn_fd)

    from math_verify import LatexExtractionConfig, parse, verify

    # its warnings are its timeouts, each printing the whole answer text; the 0.0 score says enough
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    # boxed first, then the anchored forms, then any LaTeX math; math-verify's default normalisation,
    # which is what the reference's config amounts to (docs/PAPER_CONFIGS.md)
    latex_only = [LatexExtractionConfig(boxed_match_priority=0)]

    def extract(latex: str) -> list:
        return parse(
            latex,
            extraction_config=latex_only,
            fallback_mode="no_fallback",  # an unparseable match scores 0, not as a raw string
            extraction_mode="first_match",  # only the best-ranked match is tried
            parsing_timeout=PARSE_TIMEOUT_S,
        )

    def verify_pair(gold_latex: str, answer_part: str) -> float:
        try:
            return float(verify(extract(gold_latex), extract(answer_part), timeout_seconds=VERIFY_TIMEOUT_S))
        except Exception:  # sympy raises all sorts (RecursionError, TypeError, ...) on odd input
            return 0.0

    # The parent kills us when an item overruns. If the parent itself is gone, a stuck item would run
    # forever: sympy's big-integer arithmetic holds the GIL, so no Python thread could end it, but
    # faulthandler's watchdog is a C thread that exits the process regardless. (Idle, we exit when
    # recv sees the parent's end close.)
    watchdog_log = open(os.devnull, "w")  # faulthandler writes here; it must stay open
    conn.send(_READY)
    while True:
        try:
            timeout_s, pairs = conn.recv()
        except EOFError:
            return
        for gold, answer in pairs:
            faulthandler.dump_traceback_later(timeout_s + _ORPHAN_GRACE_S, exit=True, file=watchdog_log)
            score = verify_pair(gold, answer)
            faulthandler.cancel_dump_traceback_later()
            conn.send(score)


# ---- parent side ----


class _Worker:
    def __init__(self) -> None:
        parent_sock, child_sock = socket.socketpair()
        code = f"from verl.utils.reward_score.math_verify import _serve; _serve({child_sock.fileno()})"
        python_path = os.pathsep.join(filter(None, [_PACKAGE_ROOT, os.environ.get("PYTHONPATH")]))
        self.process = subprocess.Popen(
            [sys.executable, "-c", code],
            pass_fds=[child_sock.fileno()],
            env={**os.environ, "PYTHONPATH": python_path},
        )
        child_sock.close()
        self.conn = Connection(parent_sock.detach())
        if not self.conn.poll(_WORKER_START_TIMEOUT_S) or self._recv_or_none() != _READY:
            self.kill()
            raise RuntimeError(
                f"the math-verify worker process did not start within {_WORKER_START_TIMEOUT_S:.0f} s "
                f"(exit code {self.process.returncode}; its stderr is above); is math-verify installed?"
            )

    def _recv_or_none(self) -> Any:
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            return None

    def verify(self, pairs: list[tuple[str, str]], timeout_s: float) -> list[float]:
        """Scores of a prefix of `pairs`, shorter than `pairs` if the next item hung or killed the worker."""
        try:
            self.conn.send((timeout_s, pairs))
        except OSError:  # the worker died between calls (killed from outside)
            return []
        scores: list[float] = []
        for _ in pairs:
            score = self._recv_or_none() if self.conn.poll(timeout_s) else None
            if score is None:
                return scores
            scores.append(score)
        return scores

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()
        self.conn.close()


_worker: _Worker | None = None
_lock = threading.Lock()  # one worker per process: callers on several threads take turns


def _verify_in_worker(pairs: list[tuple[str, str]], timeout_s: float) -> list[float]:
    global _worker
    scores: list[float] = []
    with _lock:
        while len(scores) < len(pairs):
            if _worker is None or _worker.process.poll() is not None:
                _worker = _Worker()
            remaining = pairs[len(scores) :]
            done = _worker.verify(remaining, timeout_s)
            scores += done
            if len(done) < len(remaining):
                # the worker is stuck on (or died of) the next item: that item scores 0.0
                _worker.kill()
                _worker = None
                scores.append(0.0)
    return scores


def _shutdown_worker() -> None:
    global _worker
    if _worker is not None:
        _worker.kill()
        _worker = None


def _forget_worker_after_fork() -> None:
    # the forked child must not talk over its parent's pipe, nor inherit a lock some thread held
    global _worker, _lock
    _worker = None
    _lock = threading.Lock()


atexit.register(_shutdown_worker)
os.register_at_fork(after_in_child=_forget_worker_after_fork)

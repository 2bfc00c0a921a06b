"""Inputs the math-scoring tests share (test_reward_score.py, test_process_pool.py)."""

import psutil

# sympy tries to evaluate this power tower, and math-verify gives up only at its own verify limit
# (VERIFY_TIMEOUT_S, 60 s under the tests' time scale): an answer that outlasts every shorter limit the
# tests give, however crowded the machine
PATHOLOGICAL = "</think>\\boxed{9^{9^{9^{9}}}}"
# A limit for batches that hold PATHOLOGICAL beside well-formed answers, which it must not cut. It counts from
# an item's hand-off to a started process (no start-up is in it), and from there a well-formed answer is
# back within 0.01 s, 0.2 s with four busy loops crowding the two cores; the batch waits it out once.
BATCH_LIMIT_S = 5.0


def boxed(answer) -> str:
    return f"<think>Let me think about it.</think> The answer is \\boxed{{{answer}}}"


def cpu_seconds(pid: int) -> float:
    """CPU time process `pid` has used: a scoring process that works on an item is busy, an idle one not."""
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system

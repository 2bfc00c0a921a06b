"""The math scoring pool: a pathological answer costs its own time limit and nobody else's."""

import os
import signal
import threading
import time

import pytest

from tests.e2e_utils import HANG_S
from tests.scoring_inputs import BATCH_LIMIT_S, PATHOLOGICAL, boxed, cpu_seconds
from verl.config import ConfigError, compose_config
from verl.data.tasks import normalise_answer, read_task_rows
from verl.trainer.config_loader import load_config
from verl.utils.math_data import VENDORED_MATH_DIR
from verl.utils.reward_score import math_verify
from verl.utils.reward_score.math_verify import compute_score, compute_scores
from verl.utils.reward_score.process_pool import default_size

MATH500 = VENDORED_MATH_DIR / "math500.jsonl"


@pytest.fixture
def pool_of_two():
    math_verify.set_pool_size(2)
    math_verify.warm_up_pool()  # start-up (a second or more) must not count in the waits below
    yield math_verify._pool
    math_verify.set_pool_size(None)


def test_a_pathological_answer_does_not_delay_well_formed_ones(pool_of_two):
    stuck: dict[str, float] = {}

    def score_pathological() -> None:
        # a limit no well-formed answer gets near: the test ends the stuck process itself, below
        stuck["score"] = compute_score("m", PATHOLOGICAL, "1", timeout_s=600)

    before = {pid: cpu_seconds(pid) for pid in pool_of_two.pids()}
    thread = threading.Thread(target=score_pathological)
    thread.start()
    # it has a process once one of them burns CPU (a safety net against a hang, not a measurement)
    deadline = time.monotonic() + HANG_S
    while not (busy := [pid for pid in before if cpu_seconds(pid) - before[pid] > 0.3]):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    scores = compute_scores([boxed(a) for a in (3, "\\frac{1}{2}", 7, 11)], ["3", "0.5", "7", "12"])
    # with one process behind a lock these would have waited for the pathological answer's limit
    assert thread.is_alive()
    assert scores == [1.0, 1.0, 1.0, 0.0]
    os.kill(busy[0], signal.SIGKILL)  # its process gone, the pathological answer scores 0 at once
    thread.join()
    assert stuck["score"] == 0.0


def test_a_process_past_the_limit_is_killed_and_replaced(pool_of_two):
    before = set(pool_of_two.pids())
    assert len(before) == 2
    solutions = [boxed(2), PATHOLOGICAL, boxed(3), boxed(5)]
    scores = compute_scores(solutions, ["2", "1", "3", "4"], timeout_s=BATCH_LIMIT_S)
    assert scores == [1.0, 0.0, 1.0, 0.0]
    killed = before - set(pool_of_two.pids())
    assert len(killed) == 1
    with pytest.raises(ProcessLookupError):
        os.kill(killed.pop(), 0)
    # the pool goes on, replacing the killed process and never holding more than its size
    scores = compute_scores([PATHOLOGICAL, boxed(4), boxed(9)], ["1", "4", "9"], timeout_s=BATCH_LIMIT_S)
    assert scores == [0.0, 1.0, 1.0]
    assert len(pool_of_two.pids()) <= 2


def test_results_equal_one_process_on_real_answers():
    rows = read_task_rows(str(MATH500))[:31]
    solutions = ["</think>" + r["solution"] for r in rows[:-1]]
    answers = [normalise_answer(r["answer"]) for r in rows]
    # each solution against its own answer and against the next problem's: ones and zeros
    truths = answers[:-1] + answers[1:]
    try:
        math_verify.set_pool_size(1)
        one = compute_scores(solutions * 2, truths, timeout_s=HANG_S)  # a safety net: real answers finish
        math_verify.set_pool_size(4)
        pooled = compute_scores(solutions * 2, truths, timeout_s=HANG_S)
    finally:
        math_verify.set_pool_size(None)
    assert pooled == one
    assert sum(one[:30]) == 30 and sum(one[30:]) < 5


def test_the_pool_size_is_validated_naming_the_key():
    key = "reward_model.scoring_processes"
    for bad, shown in (("0", "0"), ("-2", "-2")):
        with pytest.raises(ConfigError, match=rf"{key}={shown}: must be null .* or >= 1"):
            load_config(compose_config("tiny_longcot", [f"{key}={bad}"]), check_paths=False)
    with pytest.raises(ConfigError, match=rf"{key}='many': must be an integer"):
        load_config(compose_config("tiny_longcot", [f"{key}=many"]), check_paths=False)
    config = load_config(compose_config("tiny_longcot", [f"{key}=3"]), check_paths=False)
    assert config.reward_model.scoring_processes == 3
    default = load_config(compose_config("tiny_longcot"), check_paths=False)
    assert default.reward_model.scoring_processes is None
    with pytest.raises(ValueError, match="size must be None .* or an int >= 1, got 0"):
        math_verify.set_pool_size(0)
    math_verify.set_pool_size(None)
    assert math_verify._pool.size == default_size() == min(32, len(os.sched_getaffinity(0)) + 4)


def test_a_forked_child_scores_with_processes_of_its_own():
    compute_score("m", boxed(1), "1")
    parent_pids = set(math_verify._pool.pids())
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without running the parent's exit handlers
        ok = False
        try:
            ok = compute_score("m", boxed(5), "5") == 1.0 and not parent_pids & set(math_verify._pool.pids())
        finally:
            os.write(write_end, b"1" if ok else b"0")
            os._exit(0)
    os.close(write_end)
    assert os.read(read_end, 1) == b"1"
    os.waitpid(pid, 0)
    assert set(math_verify._pool.pids()) == parent_pids  # the parent's processes are untouched
    assert compute_score("m", boxed(6), "6") == 1.0

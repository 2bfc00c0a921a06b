import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.e2e_utils import HANG_S
from tests.scoring_inputs import BATCH_LIMIT_S, PATHOLOGICAL, boxed, cpu_seconds
from verl.utils.math_data import VENDORED_MATH_DIR
from verl.utils.reward_score import (
    default_compute_score,
    default_compute_scores,
    load_reward_function,
    math_verify,
)
from verl.utils.reward_score.math_verify import compute_score, compute_scores

REPO = Path(__file__).resolve().parents[1]
# The limit of the item a worker is busy on when its parent is killed, below. The parent kills a worker
# stuck this long itself, so the test kills the parent first, once it sees the worker busy on the item
# (under a second, even on a crowded machine); the orphaned worker's watchdog then ends it at this limit
# plus a second.
ORPHANED_ITEM_LIMIT_S = 5.0


def reference_answers(name: str) -> list:
    return [json.loads(line)["answer"] for line in (VENDORED_MATH_DIR / f"{name}.jsonl").open()]


@pytest.mark.parametrize("name", ["aime24", "aime25", "amc23"])
def test_every_reference_answer_scores_one_and_a_wrong_one_zero(name):
    answers = reference_answers(name)
    assert len(answers) >= 30
    # the files hold zero-padded strings ("025"), ints and floats (27.0); the reward gets them as strings
    truths = [str(a) for a in answers]
    assert compute_scores([boxed(a) for a in answers], truths) == [1.0] * len(answers)
    wrong = [boxed(int(float(a)) + 1) for a in answers]
    assert compute_scores(wrong, truths) == [0.0] * len(answers)


@pytest.mark.parametrize(
    "solution, truth, expected",
    [
        (boxed("25"), "025", 1.0),
        (boxed("27"), "27.0", 1.0),
        (boxed("0.5"), "\\frac{1}{2}", 1.0),
        (boxed("\\dfrac{3}{4}"), "0.75", 1.0),
        (boxed("2^{1/2}"), "\\sqrt{2}", 1.0),
        (boxed("\\frac{1}{3}"), "0.5", 0.0),
        ("<think>maybe 7</think> The answer is 7.", "7", 0.0),  # no boxed answer
        ("<think>so \\boxed{7}</think> I am not sure.", "7", 0.0),  # boxed only inside the thinking
        ("<think>first \\boxed{5}</think> finally \\boxed{7}", "7", 1.0),  # the answer after </think> wins
        ("<think>first \\boxed{5}</think> finally \\boxed{7}", "5", 0.0),
        # thinking never closed (a truncated trace): no answer, whatever it boxed
        ("no thinking block, just \\boxed{5} then \\boxed{8}", "8", 0.0),
        ("<think>so far \\boxed{8} and still going", "8", 0.0),
        ("\\boxed{\\frac{12}{16}}", "3/4", 0.0),
        ("</think>\\boxed{\\frac{12}{16}}", "3/4", 1.0),
        # the answer part starts at the FIRST </think>; its last box is the answer
        ("a</think> \\boxed{5} then</think> \\boxed{8}", "8", 1.0),
        ("a</think> \\boxed{5} then</think> no box", "5", 1.0),
        # math-verify's LaTeX extraction (the reference's): without a box, other LaTeX math is read
        ("<think>hm</think> The answer is $7$.", "7", 1.0),
        ("<think>hm</think> The answer is \\[\\frac{1}{2}\\]", "0.5", 1.0),
        ("<think>hm</think> The answer is \\(x = 5\\).", "5", 1.0),
        # ... but a box outranks any other math, wherever it stands
        ("</think>So \\boxed{5}, since $x = 3$ fails.", "5", 1.0),
        ("</think>So \\boxed{5}, since $x = 3$ fails.", "3", 0.0),
        # two different boxes are read as the set of both: neither alone is the answer
        ("</think>First \\boxed{3}. Hmm, no: \\boxed{4}", "4", 0.0),
        ("</think>First \\boxed{3}. Hmm, no: \\boxed{4}", "\\{3, 4\\}", 1.0),
        ("</think>\\boxed{4} and again \\boxed{4}", "4", 1.0),
        # gold answers already in math mode are read as they are
        (boxed("0.5"), "$\\frac{1}{2}$", 1.0),
        (boxed("0.5"), "\\(\\frac{1}{2}\\)", 1.0),
    ],
)
def test_compute_score(solution, truth, expected):
    assert compute_score("math", solution, truth) == expected


@pytest.mark.parametrize(
    "gold, latex",
    [
        ("5", "\\[5\\]"),
        ("  x=5 ", "\\[x=5\\]"),
        ("\\frac{1}{2}", "\\[\\frac{1}{2}\\]"),
        ("$5$", "$5$"),
        ("\\(5\\)", "\\(5\\)"),
        ("\\[5\\]", "\\[5\\]"),
        ("$", "\\[$\\]"),  # one dollar sign does not open and close math
        ("\\$5", "\\[\\$5\\]"),  # an escaped dollar (money) is not math mode either
    ],
)
def test_gold_as_latex(gold, latex):
    assert math_verify.gold_as_latex(gold) == latex


@pytest.mark.parametrize(
    "solution",
    [
        "",
        "\\boxed{}",
        "\\boxed{{{{",
        "\\boxed{\\frac{1}{0}}",
        "\\boxed{\\sqrt{}}",
        "\\boxed{\\left(}",
        "\\boxed{\x00\x01}",
        "</think>",
        "\\boxed{\\begin{pmatrix}1&2\\end{pmatrix}}",
        "\\boxed{nan}",
    ],
)
def test_odd_answers_score_zero_without_raising(solution):
    # after a closed thinking, so every odd answer reaches math-verify
    assert compute_score("math", "</think>" + solution, "1") == 0.0


def test_batch_keeps_order_and_skips_unboxed_items():
    solutions = ["no answer", boxed(3), boxed(4), "still none", boxed("\\frac{1}{2}")]
    assert compute_scores(solutions, ["1", "3", "5", "2", "0.5"]) == [0.0, 1.0, 0.0, 0.0, 1.0]
    assert compute_scores([], []) == []
    with pytest.raises(ValueError, match="2 solution strings but 1 ground truths"):
        compute_scores(["a", "b"], ["1"])
    with pytest.raises(ValueError, match="timeout_s must be > 0 seconds, got 0"):
        compute_scores([boxed(1)], ["1"], timeout_s=0)


def test_safe_from_a_thread_pool():
    # math-verify's own signal-based timeouts raise ValueError here; ours must not
    solutions = [boxed(i) for i in range(24)]
    truths = [str(i if i % 3 else i + 1) for i in range(24)]  # every third one is wrong
    with ThreadPoolExecutor(max_workers=4) as pool:
        scores = list(pool.map(lambda st: compute_score("math", *st), zip(solutions, truths, strict=True)))
    assert scores == [0.0 if i % 3 == 0 else 1.0 for i in range(24)]


def test_the_time_scale_multiplies_every_limit_and_is_checked(monkeypatch):
    def limits(scale: str | None) -> list[str]:
        """The limits as a fresh process (a scoring child) computes them under VERL_SCORING_TIME_SCALE."""
        env = {k: v for k, v in os.environ.items() if k != "VERL_SCORING_TIME_SCALE"}
        code = "from verl.utils.reward_score import math_verify as m\n"
        code += "print(m.DEFAULT_TIMEOUT_S, m.PARSE_TIMEOUT_S, m.VERIFY_TIMEOUT_S)"
        env |= {} if scale is None else {"VERL_SCORING_TIME_SCALE": scale}
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, timeout=HANG_S
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout.split()

    assert limits(None) == ["5.0", "1", "2"]  # the reference's, unless asked
    assert limits("3") == ["15.0", "3", "6"]
    for bad in ("0", "-1", "fast"):
        monkeypatch.setenv("VERL_SCORING_TIME_SCALE", bad)
        with pytest.raises(ValueError, match=f"VERL_SCORING_TIME_SCALE='{bad}': must be a number > 0"):
            math_verify.time_scale()


def test_a_pathological_answer_is_cut_off_and_its_process_killed():
    math_verify.warm_up_pool(1)
    before = set(math_verify._pool.pids())
    start = time.perf_counter()
    assert compute_score("math", PATHOLOGICAL, "1", timeout_s=1.0) == 0.0  # not done before VERIFY_TIMEOUT_S
    # cut at its own limit, not at the default's (DEFAULT_TIMEOUT_S, 150 s under the tests' time scale)
    assert 1.0 <= time.perf_counter() - start < math_verify.DEFAULT_TIMEOUT_S
    killed = before - set(math_verify._pool.pids())
    assert len(killed) == 1
    with pytest.raises(ProcessLookupError):  # the stuck process was killed
        os.kill(killed.pop(), 0)
    # in a batch the items on either side of the pathological one are scored normally
    solutions = [boxed(2), PATHOLOGICAL, boxed(3), boxed(5)]
    assert compute_scores(solutions, ["2", "1", "3", "4"], timeout_s=BATCH_LIMIT_S) == [1.0, 0.0, 1.0, 0.0]
    assert compute_score("math", boxed("\\frac{1}{2}"), "0.5") == 1.0


def test_processes_killed_from_outside_are_replaced():
    compute_score("math", boxed(1), "1")
    for pid in math_verify._pool.pids():
        os.kill(pid, signal.SIGKILL)
        while Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z":  # dead, not yet reaped
            time.sleep(0.01)
    assert compute_score("math", boxed(7), "7") == 1.0


def run_scoring_script(body: str) -> subprocess.Popen:
    script = "from verl.utils.reward_score import math_verify as mv\n"
    return subprocess.Popen(
        [sys.executable, "-c", script + textwrap.dedent(body)], stdout=subprocess.PIPE, text=True
    )


def wait_until_gone(pid: int, seconds: float) -> bool:
    """Whether process `pid` ends within `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.slow
def test_the_worker_exits_with_its_parent():
    # a normal exit (atexit), no main guard needed in the calling script
    parent = run_scoring_script("""
        print(mv.compute_score("m", "</think>\\\\boxed{1}", "1"), *mv._pool.pids(), flush=True)
    """)
    out, _ = parent.communicate(timeout=HANG_S)
    score, *worker_pids = out.split()
    assert score == "1.0" and worker_pids
    assert all(wait_until_gone(int(pid), HANG_S) for pid in worker_pids)  # at once; a safety net

    # the parent killed (no atexit) while its worker is stuck on a pathological answer
    parent = run_scoring_script(f"""
        mv.compute_score("m", "</think>\\\\boxed{{1}}", "1")
        print(*mv._pool.pids(), flush=True)
        mv.compute_score("m", {PATHOLOGICAL!r}, "1", timeout_s={ORPHANED_ITEM_LIMIT_S})
    """)
    worker_pids = [int(pid) for pid in parent.stdout.readline().split()]
    # killed only once a worker is busy on the pathological answer (an idle one uses no CPU): before that,
    # an idle worker would see the parent's end close and exit without the watchdog
    before = {pid: cpu_seconds(pid) for pid in worker_pids}
    deadline = time.monotonic() + HANG_S  # a safety net against a hang, not a measurement
    while not any(cpu_seconds(pid) - before[pid] > 0.05 for pid in worker_pids):
        assert time.monotonic() < deadline and parent.poll() is None
        time.sleep(0.02)
    parent.kill()
    parent.wait()
    # sympy holds the GIL there, so only a watchdog outside Python ends it, at limit + grace. Without it,
    # only math-verify's own verify limit would end the item, VERIFY_TIMEOUT_S after it began (60 s under
    # the tests' time scale): the wait stops halfway there, far past limit + grace.
    assert all(wait_until_gone(pid, math_verify.VERIFY_TIMEOUT_S / 2) for pid in worker_pids)


@pytest.mark.slow
def test_inside_ray_actors(ray_session):  # the session's Ray instance, from conftest.py
    ray = ray_session

    class Scorer:
        def score(self, solutions, truths):
            return compute_scores(solutions, truths)

        def score_with_limit(self, solution, truth, timeout_s):
            return compute_score("m", solution, truth, timeout_s=timeout_s)

    class AsyncScorer:
        async def score(self, solutions, truths):
            return [compute_score("m", s, t) for s, t in zip(solutions, truths, strict=True)]

    solutions = [boxed("025"), boxed(26), boxed("\\frac{1}{2}")]
    truths = ["25", "25", "0.5"]
    plain = ray.remote(num_cpus=0)(Scorer).remote()
    threaded = ray.remote(num_cpus=0, max_concurrency=4)(Scorer).remote()
    asynchronous = ray.remote(num_cpus=0)(AsyncScorer).remote()
    calls = [plain.score.remote(solutions, truths), asynchronous.score.remote(solutions, truths)]
    calls += [threaded.score.remote(solutions, truths) for _ in range(4)]
    assert ray.get(calls, timeout=HANG_S) == [[1.0, 0.0, 1.0]] * 6  # a safety net against a hang
    # the limit works there too, and a fresh process scores the next call
    assert ray.get(threaded.score_with_limit.remote(PATHOLOGICAL, "1", 1.0), timeout=HANG_S) == 0.0
    assert ray.get(threaded.score_with_limit.remote(boxed(4), "4", BATCH_LIMIT_S), timeout=HANG_S) == 1.0


def test_load_reward_function_default_and_from_a_file(tmp_path, monkeypatch):
    assert load_reward_function(None, "compute_score") is default_compute_score
    (tmp_path / "my_reward.py").write_text(
        textwrap.dedent("""
            from __future__ import annotations
            from dataclasses import dataclass

            @dataclass
            class Weights:  # a dataclass needs its module in sys.modules while it is built
                per_char: float = 1.0

            def length_reward(data_source, solution_str, ground_truth, extra_info=None):
                return Weights().per_char * len(solution_str)

            NOT_A_FUNCTION = 3
        """)
    )
    monkeypatch.chdir(tmp_path)
    reward = load_reward_function("my_reward.py", "length_reward")
    assert reward("m", "abcd", "1") == 4.0

    with pytest.raises(ValueError, match=r"custom_reward_function\.path='missing\.py': no such file"):
        load_reward_function("missing.py", "length_reward")
    with pytest.raises(
        ValueError, match=r"custom_reward_function\.name='reward': my_reward\.py defines no such"
    ):
        load_reward_function("my_reward.py", "reward")
    with pytest.raises(
        ValueError, match=r"custom_reward_function\.name='NOT_A_FUNCTION'.*an? int, not a function"
    ):
        load_reward_function("my_reward.py", "NOT_A_FUNCTION")
    (tmp_path / "broken.py").write_text("import no_such_module_anywhere\n")
    with pytest.raises(ValueError, match=r"custom_reward_function\.path='broken\.py': importing it failed"):
        load_reward_function("broken.py", "compute_score")


def test_math_verify_module_loads_as_a_custom_reward_file(monkeypatch):
    monkeypatch.chdir(REPO)
    reward = load_reward_function("verl/utils/reward_score/math_verify.py", "compute_score")
    assert reward is not compute_score  # a second copy of the module, with its own process pool
    assert reward("m", boxed("025"), "25") == 1.0
    assert reward("m", boxed("26"), "25") == 0.0


def test_default_dispatch_by_data_source():
    assert default_compute_score("aime24", boxed("025"), "25") == 1.0
    assert default_compute_score("math500", boxed("0.5"), "\\frac{1}{2}") == 1.0
    assert default_compute_scores(["a", "b"], [boxed(1), boxed(2)], ["1", "3"]) == [1.0, 0.0]
    # synthetic sources go to the synthetic task's exact string match, where "07" is not "7"
    assert default_compute_score("synthetic/running_sum", boxed("07"), "7") == 0.0
    assert default_compute_score("synthetic/running_sum", boxed("7"), "7") == 1.0
    assert default_compute_score("math", boxed("07"), "7") == 1.0
    sources = ["synthetic/running_sum", "math", "synthetic/running_sum", "math"]
    solutions = [boxed("07"), boxed("07"), boxed(3), "none"]
    assert default_compute_scores(sources, solutions, ["7", "7", "3", "1"]) == [0.0, 1.0, 1.0, 0.0]
    with pytest.raises(ValueError, match="2 data sources, 1 solution strings and 2 ground truths"):
        default_compute_scores(["a", "b"], [boxed(1)], ["1", "3"])

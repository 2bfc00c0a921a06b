"""recipes/markovian_testbed/settings.py to the letter: every rule on a value at its edge with its exact
message, the NAME=VALUE lines run.sh declares (in this process, so that mutmut sees which tests reach
them; tests/test_markovian_testbed.py reads them back through bash) and the command line's refusals.
Written for `make mutants`."""

import dataclasses

import pytest

from recipes.markovian_testbed import settings

SMOKE = settings.SIZES["smoke"]
BUDGET_RULE = (
    "must be a multiple of 8 and >= 80, so that C = B/4 and m = C/2 are whole and keep_tail = C/2 - 9 is at "
    "least 1"
)


def refusal(**change) -> str:
    """The message TestbedSettings refuses the smoke size with `change` applied by."""
    with pytest.raises(ValueError) as refused:
        dataclasses.replace(SMOKE, **change)
    return str(refused.value)


@pytest.mark.parametrize(
    "change, problem",
    [
        ({"sft_target": True}, "sft_target=True: must be a number in [0, 1]"),
        ({"cont_prob": "0.5"}, "cont_prob='0.5': must be a number in [0, 1]"),
        ({"zero_prob": -0.01}, "zero_prob=-0.01: must be a number in [0, 1]"),
        ({"zero_prob": 1.01}, "zero_prob=1.01: must be a number in [0, 1]"),
        ({"check_both": 1}, "check_both=1: must be True or False"),
        ({"sweeps": None}, "sweeps=None: must be True or False"),
        ({"rl_lr": True}, "rl_lr=True: must be a number > 0"),
        ({"rl_lr": "1e-5"}, "rl_lr='1e-5': must be a number > 0"),
        ({"rl_lr": 0.0}, "rl_lr=0.0: must be a number > 0"),
        ({"sft_steps": True}, "sft_steps=True: must be an integer >= 1"),
        ({"sft_steps": 1.0}, "sft_steps=1.0: must be an integer >= 1"),
        ({"val_size": 0}, "val_size=0: must be an integer >= 1"),
        ({"budget": 72}, f"budget=72: {BUDGET_RULE}"),
        ({"budget": 100}, f"budget=100: {BUDGET_RULE}"),
        ({"cont_prob": 0.75, "long_start": 0.5},
         "long_start=0.5: must be <= 1 - cont_prob = 0.25 (the shares of SFT examples that are not whole "
         "traces)"),
        ({"prompts": 3}, "prompts=3: must be even (each RL step updates in two mini-batches)"),
    ],
)  # fmt: skip
def test_a_bad_value_is_refused_with_its_field_its_value_and_the_rule(change, problem):
    assert refusal(**change) == f"TestbedSettings: {problem}"


@pytest.mark.parametrize(
    "change",
    [{"zero_prob": 0}, {"zero_prob": 1}, {"answer_cuts": 1.0}, {"sweeps": False}, {"rl_lr": 1},
     {"rl_lr": 1e-9}, {"val_size": 1}, {"budget": 80}, {"budget": 88},
     {"cont_prob": 0.75, "long_start": 0.25}, {"prompts": 4}],
)  # fmt: skip
def test_a_value_at_the_edge_of_its_rule_passes(change):
    # budget 80: C = 20, m = 10, keep_tail = 1; budget 88 is a multiple of 8 but not of 9 (C = 22)
    assert dataclasses.asdict(dataclasses.replace(SMOKE, **change)) == {**dataclasses.asdict(SMOKE), **change}


def test_every_bad_field_is_named_in_field_order_and_the_rules_between_fields_only_when_each_is_good():
    assert refusal(zero_prob=2, sft_steps=0) == (
        "TestbedSettings: sft_steps=0: must be an integer >= 1; zero_prob=2: must be a number in [0, 1]"
    )
    assert refusal(sft_steps=0, prompts=3) == "TestbedSettings: sft_steps=0: must be an integer >= 1"
    assert refusal(budget=100, prompts=3) == (
        f"TestbedSettings: budget=100: {BUDGET_RULE}; prompts=3: must be even (each RL step updates in two "
        "mini-batches)"
    )


def test_a_value_is_written_as_run_sh_reads_it():
    assert [settings.shell_word(v) for v in (True, False, (128, 192), (), 0.5, 1e-05, 3)] == [
        "1", "0", "128,192", "", "0.5", "1e-05", "3"
    ]  # fmt: skip


def test_the_chunks_for_a_budget_add_c_minus_m_tokens_each_after_the_first():
    # the smoke size: C = 32, m = 16, so I chunks hold 32 + 16 (I - 1) thinking tokens
    assert [SMOKE.chunks_for(b) for b in (32, 48, 128, 192)] == [1, 2, 7, 11]


# The smoke size, worked by hand: B = 128, C = 32, keep_head = one step (9 tokens), keep_tail = 16 - 9,
# m = 16, I = 1 + (128 - 32) / 16 = 7; the fields in their order; RL problems of 128 // 9 - 1 = 13 steps at
# most and a quarter of that at least, continuation problems up to 4B (512 // 9 - 1 = 55 steps); the sweeps
# B, 1.5B, 2B (sweep_to 2) at I = 7, 11, 15; 2 x 2 timing problems at B and 2B (timing_to 2)
SMOKE_LINES = """\
B=128
C=32
HEAD=9
TAIL=7
M=16
I=7
SFT_STEPS=4
SFT_TARGET=0.0
SFT_CHECK_EVERY=2
CONT_PROB=0.5
ZERO_PROB=0.5
ANSWER_CUTS=0.2
CHECK_BOTH=1
LONG_START=0.1
SWEEPS=1
SFT_MICRO=1
SFT_EVAL=4
STEPS_DEFAULT=1
RL_LR=1e-05
PROMPTS=2
SAMPLES=2
HELDOUT=4
HELDOUT_N=2
EVAL_N=1
PER_GROUP=2
TIMING_REPEATS=1
TIMING_TO=2
TIMING_THREADS=1
SWEEP_TO=2
VAL_SIZE=4
MIN_STEPS=3
MAX_STEPS=13
CONT_MAX_STEPS=55
SWEEP_BUDGETS=128,192,256
SWEEP_CHUNKS=7,11,15
TIMING=4
TIMING_BUDGETS=128,256
"""


def test_a_size_prints_each_run_sh_variable_as_a_name_value_line(capsys):
    settings.main(["smoke"])
    assert capsys.readouterr() == (SMOKE_LINES, "")


def test_an_unknown_size_exits_2_with_one_line_naming_the_sizes(capsys):
    with pytest.raises(SystemExit) as stopped:
        settings.main(["huge"])
    assert stopped.value.code == 2
    assert capsys.readouterr() == ("", "SIZE must be one of full, demo, smoke, got 'huge'\n")


def test_the_help_gives_the_modules_first_line_and_the_sizes(capsys):
    with pytest.raises(SystemExit) as stopped:
        settings.main(["--help"])
    assert stopped.value.code == 0
    words = " ".join(capsys.readouterr().out.split())  # argparse wraps its lines at the terminal's width
    assert words.startswith("usage: ") and words.endswith(
        "The Markovian testbed's settings: each size's values, what follows from them, and the claims' "
        "targets. positional arguments: size full, demo or smoke (run.sh's SIZE) options: -h, --help show "
        "this help message and exit"
    )

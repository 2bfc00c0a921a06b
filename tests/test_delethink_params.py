"""DelethinkParams: its rules, its derived numbers against hand counts, and that training, evaluation,
SFT and the gym context manager build the same object from their configs under the same field names."""

import dataclasses

import pytest
from hydra import compose, initialize_config_dir
from transformers import AutoTokenizer

from verl.config import CONFIG_DIR, DelethinkConfig, compose_config
from verl.core.delethink import DelethinkParams, DelethinkParamsError, delethink_param_problems
from verl.envs import make_context_manager
from verl.eval.config import load_eval_config
from verl.trainer import main_sft
from verl.trainer.config_loader import load_config
from verl.trainer.sft.continuation import delethink_cuts

TINY = {"chunk_size": 32, "keep_head": 4, "keep_tail": 12, "max_chunks": 7}  # tiny_delethink's values


def test_tiny_budget_by_hand():
    p = DelethinkParams(**TINY)
    assert p.carry == 4 + 12 == 16
    assert p.intermediate_max_new_tokens is None  # null: derived
    assert p.derived_intermediate == p.intermediate_budget == 32 - 16 == 16
    assert p.thinking_budget == 32 + (7 - 1) * 16 == 128  # tiny_longcot's B


@pytest.mark.parametrize(
    "fields, budget",
    [
        ({}, 8192 + 4 * 4096),  # the defaults: the paper's 24K setting
        ({"max_chunks": 23}, 8192 + 22 * 4096),  # 96K
        ({"max_chunks": 1}, 8192),  # one chunk: C, like LongCoT with B = C
        ({**TINY, "intermediate_max_new_tokens": 8}, 32 + 6 * 8),  # explicit: C + (I-1) * 8
        ({**TINY, "intermediate_max_new_tokens": 32}, 32 + 6 * 32),
    ],
)
def test_thinking_budget_formula(fields, budget):
    assert DelethinkParams(**fields).thinking_budget == budget


@pytest.mark.parametrize("budget, chunks", [(128, 1), (512, 7), (768, 11), (2048, 31)])
def test_for_budget_finds_the_chunks_that_fill_the_budget(budget, chunks):
    params = DelethinkParams.for_budget(budget, 128, 9, 55)  # C = 128, m = 64: 128 + (I - 1) * 64
    assert params.max_chunks == chunks
    assert params.thinking_budget == budget
    assert (params.chunk_size, params.keep_head, params.keep_tail) == (128, 9, 55)


@pytest.mark.parametrize("budget", [500, 127])
def test_for_budget_refuses_a_budget_no_whole_chunk_count_fills(budget):
    message = f"thinking_budget={budget}: must be C = 128 plus whole chunks of C - m = 64 tokens"
    with pytest.raises(DelethinkParamsError, match=message):
        DelethinkParams.for_budget(budget, 128, 9, 55)


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"keep_head": -1}, "keep_head=-1: must be >= 0"),
        ({"keep_tail": 0}, "keep_tail=0: must be >= 1 (carry over the latest thinking)"),
        ({"chunk_size": 0}, "chunk_size=0: must be >= 1"),
        ({"max_chunks": 0}, "max_chunks=0: must be >= 1"),
        ({**TINY, "chunk_size": 16}, "keep_tail=12: keep_head + keep_tail = 4 + 12 must be < chunk_size=16"),
        ({**TINY, "intermediate_max_new_tokens": 0}, "intermediate_max_new_tokens=0: must be null"),
        ({**TINY, "intermediate_max_new_tokens": 33}, "or in [1, chunk_size=32]"),
        ({"trimmer": "middle"}, "trimmer='middle': must be one of ['progressive'"),
        ({"keep_tail": 1.5}, "keep_tail=1.5: must be an integer"),
        ({"max_chunks": True}, "max_chunks=True: must be an integer"),
    ],
)
def test_bad_values_raise_a_value_error_naming_the_field(fields, message):
    with pytest.raises(ValueError) as error:
        DelethinkParams(**fields)
    assert message in str(error.value)


@pytest.mark.parametrize(
    "fields, problems",
    [
        ({"keep_head": -1, "max_chunks": 0}, ["keep_head=-1: must be >= 0", "max_chunks=0: must be >= 1"]),
        ({"chunk_size": 0}, ["chunk_size=0: must be >= 1"]),
        ({"keep_tail": 0}, ["keep_tail=0: must be >= 1 (carry over the latest thinking)"]),
        # the rules between fields wait until every integer is one: 100 + 1.5 >= 4 is not reported
        ({"chunk_size": 4, "keep_tail": 1.5}, ["keep_tail=1.5: must be an integer"]),
        (
            {**TINY, "chunk_size": 16},
            ["keep_tail=12: keep_head + keep_tail = 4 + 12 must be < chunk_size=16 (the chunk size C): the "
             "carry-over must leave room to think"],
        ),
        *[
            (
                {**TINY, "intermediate_max_new_tokens": value},
                [f"intermediate_max_new_tokens={value!r}: must be null (C - keep_head - keep_tail) or in "
                 "[1, chunk_size=32]"],
            )
            for value in (0, 33, "8")
        ],
    ],
)  # fmt: skip
def test_each_rule_word_for_word(fields, problems):
    with pytest.raises(DelethinkParamsError) as error:
        DelethinkParams(**fields)
    assert error.value.problems == problems and str(error.value) == "; ".join(problems)


def test_the_smallest_values_each_rule_allows():
    # C = 2 holds a carry-over of 0 + 1 and one new token; a later chunk may write 1 token
    p = DelethinkParams(chunk_size=2, keep_head=0, keep_tail=1, max_chunks=1, intermediate_max_new_tokens=1)
    assert (p.carry, p.intermediate_budget, p.thinking_budget) == (1, 1, 2)
    assert DelethinkParams(**{**TINY, "intermediate_max_new_tokens": 1}).thinking_budget == 32 + 6 * 1


def test_every_problem_is_reported_at_once():
    with pytest.raises(DelethinkParamsError) as error:
        DelethinkParams(keep_head=-1, max_chunks=0, trimmer="middle")
    keys = [p.split(":")[0] for p in error.value.problems]
    assert keys == ["keep_head=-1", "max_chunks=0", "trimmer='middle'"]
    assert delethink_param_problems(keep_head=-1, max_chunks=0, trimmer="middle") == error.value.problems
    assert delethink_param_problems(**TINY) == []


def test_frozen_and_the_carry_over_uses_its_trimmer():
    p = DelethinkParams(**TINY)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.chunk_size = 64
    thinking = list(range(40))
    assert p.carry_over(thinking) == [0, 1, 2, 3, *range(28, 40)]  # first 4 + last 12
    assert p.carry_over(thinking[:10]) == thinking[:10]  # shorter than m: kept whole


def test_training_defaults_are_the_objects_defaults():
    required = ["data.train_files=t", "data.val_files=v", "actor_rollout_ref.model.path=o/m"]
    base = load_config(compose_config("policy_iteration", required), check_paths=False)
    assert dataclasses.asdict(DelethinkConfig()) == dataclasses.asdict(DelethinkParams())
    assert base.delethink_params == DelethinkParams()


def test_training_eval_sft_and_context_manager_build_the_same_object(tiny_assets, tmp_path):
    training = load_config(compose_config("tiny_delethink"), check_paths=False).delethink_params
    assert training == DelethinkParams(**TINY)

    overrides = [f"model_path={tiny_assets / 'model'}", f"data_files=[{tiny_assets / 'data' / 'val.jsonl'}]"]
    overrides += ["mode=delethink", "delethink.max_chunks=[7,14]"]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        eval_config = load_eval_config(compose(config_name="eval", overrides=overrides))
        sft_config = main_sft.load_sft_config(
            compose(
                config_name="sft_tiny",
                overrides=[f"model.path={tiny_assets / 'model'}", f"output_dir={tmp_path / 'sft'}"],
            )
        )
    assert eval_config.delethink.sweep() == [training, dataclasses.replace(training, max_chunks=14)]

    # SFT has no I (its examples resume from every boundary); the rest is training's object
    sft = sft_config.task.continuation.params
    assert sft == dataclasses.replace(training, max_chunks=DelethinkParams.max_chunks)
    assert delethink_cuts(80, sft) == [32, 48, 64]  # after C, then every C - m

    # the context manager takes training's algorithm.delethink section as its ctx_config, key for key
    tokenizer = AutoTokenizer.from_pretrained(tiny_assets / "model")
    ctx_config = {"name": "delethink", **dataclasses.asdict(DelethinkConfig(**TINY))}
    assert make_context_manager(ctx_config, tokenizer).params == training
    assert make_context_manager({"name": "delethink"}, tokenizer).params == DelethinkParams()


@pytest.mark.parametrize("later, longest", [(None, 32), (10, 32), (16, 32), (17, 33), (32, 48)])
def test_the_longest_chunk_is_c_or_a_later_chunks_carry_plus_its_new_tokens(later, longest):
    # TINY: C = 32, m = 4 + 12 = 16; a later chunk holds 16 carried + `later` new (C - m = 16 unset)
    assert DelethinkParams(**TINY, intermediate_max_new_tokens=later).longest_chunk == longest

"""verl/data/ to the letter: the exact message of each data file or row that cannot become a prompt, what
a prompt row's columns become, how a task's answers and rows are read, and the generated tasks' files.
Written for `make mutants`: each test pins what the modules' own test files check loosely.

The tiny tokenizer's chat template is `<|user|>{content}<|assistant|><think>`, three special tokens
around one token per byte: a prompt of k bytes is k + 3 tokens."""

import dataclasses
import json
import logging
import math
import random
import re
from pathlib import Path

import pytest
from tokenizers import processors

from verl.config import ConfigError, TaskConfig, compose_config
from verl.core.trajectory import PromptItem
from verl.data import shift_register as sr
from verl.data import synthetic
from verl.data.rl_dataset import DataError, DataOrder, encode_prompt, load_prompts, read_rows
from verl.data.tasks import (
    BadRow,
    load_split,
    load_task,
    normalise_answer,
    read_task_rows,
    without_duplicates,
)
from verl.envs import CONTEXT_MANAGERS, ENVS
from verl.models.tiny import EOS, build_tokenizer
from verl.trainer.config_loader import load_config


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def refusal(call, *args, error=DataError, **kwargs) -> str:
    with pytest.raises(error) as caught:
        call(*args, **kwargs)
    return str(caught.value)


# --- rl_dataset: files ---------------------------------------------------------------------------------


def test_a_row_that_is_not_an_object_is_named_with_its_repr_cut_after_57_characters(tmp_path):
    path = tmp_path / "r.jsonl"
    for text, shown in [("a" * 58, repr("a" * 58)), ("a" * 59, repr("a" * 59)[:57] + "...")]:
        path.write_text(f'{{"prompt": "x"}}\n\n{json.dumps(text)}\n')  # repr of 60, then 61 characters
        assert refusal(read_rows, str(path)) == f"{path}:3: a row must be a JSON object, got str {shown}"


def test_bytes_that_are_not_utf8_are_named_by_line_and_byte_in_either_format(tmp_path):
    lines = tmp_path / "r.jsonl"
    lines.write_bytes(b'{"prompt": "x"}\n{"p": "\xff"}\n')
    assert refusal(read_rows, str(lines)) == f"{lines}:2: not valid UTF-8 (byte 0xff at byte 8 of the line)"
    whole = tmp_path / "r.json"
    whole.write_bytes(b'[\n {"p": "\xff"}]')
    assert refusal(read_rows, str(whole)) == f"{whole}:2: not valid UTF-8 (byte 0xff at byte 9 of the line)"
    # a newline at byte 0 counts as a line, and the column counts from the last newline before the byte
    whole.write_bytes(b'\n["\xff"]')
    assert refusal(read_rows, str(whole)) == f"{whole}:2: not valid UTF-8 (byte 0xff at byte 3 of the line)"
    whole.write_bytes(b'\n[1,\n"\xff"]')
    assert refusal(read_rows, str(whole)) == f"{whole}:3: not valid UTF-8 (byte 0xff at byte 2 of the line)"


def test_a_json_file_must_be_a_list_of_objects(tmp_path):
    path = tmp_path / "r.json"
    path.write_text('[{"a": 1},\n oops]')
    assert refusal(read_rows, str(path)) == f"{path}:2: not valid JSON (Expecting value)"
    path.write_text('{"a": 1}')
    assert refusal(read_rows, str(path)) == f"{path}: expected a JSON list of rows, got dict"
    path.write_text('[{"a": 1}, 3]')
    assert refusal(read_rows, str(path)) == f"{path} row 1: a row must be a JSON object, got int 3"
    path.write_text("[]")
    assert refusal(read_rows, str(path)) == f"{path}: no rows (the file is empty)"


def test_a_parquet_file_that_is_not_one_is_named(tmp_path):
    path = tmp_path / "r.parquet"
    path.write_text("not parquet")
    assert refusal(read_rows, str(path)).startswith(f"{path}: not a readable parquet file (")


# --- rl_dataset: rows ----------------------------------------------------------------------------------


def one_row(tokenizer, tmp_path, row: dict, **kwargs):
    path = jsonl(tmp_path / "r.jsonl", [row])
    return load_prompts([path], tokenizer, "prompt", kwargs.pop("limit", 64), True, **kwargs)


def row_refusal(tokenizer, tmp_path, row: dict) -> str:
    message = refusal(one_row, tokenizer, tmp_path, row)
    where = f"{tmp_path / 'r.jsonl'} row 0: "
    assert message.startswith(where)
    return message.removeprefix(where)


GOOD = {"prompt": "a3", "reward_model": {"ground_truth": "3"}}


@pytest.mark.parametrize(
    "change, message",
    [
        ({"extra_info": [1]}, "extra_info must be a JSON object, got list [1]"),
        ({"reward_model": "3"}, "reward_model must be a JSON object with a ground_truth, got '3'"),
        (
            {"reward_model": {"ground_truth": [1, 2]}},
            "reward_model.ground_truth must be a string or a finite number, got list [1, 2]",
        ),
        (
            {"reward_model": {"ground_truth": True}},
            "reward_model.ground_truth must be a string or a finite number, got bool True",
        ),
        (
            {"reward_model": {"ground_truth": math.nan}},
            "reward_model.ground_truth must be a string or a finite number, got float nan",
        ),
        (
            {"prompt": [{"role": "user"}]},
            "'prompt' (data.prompt_key) must be a non-empty string or a list of {role, content} messages, "
            "got [{'role': 'user'}]",
        ),
        (
            {"prompt": [{"content": "a3"}]},
            "'prompt' (data.prompt_key) must be a non-empty string or a list of {role, content} messages, "
            "got [{'content': 'a3'}]",
        ),
        (
            {"prompt": ["a3"]},
            "'prompt' (data.prompt_key) must be a non-empty string or a list of {role, content} messages, "
            "got ['a3']",
        ),
        (
            {"prompt": []},
            "'prompt' (data.prompt_key) must be a non-empty string or a list of {role, content} messages, "
            "got []",
        ),
        (
            {"env_config": "{oops"},
            "column 'env_config' is not valid JSON (Expecting property name enclosed in double quotes)",
        ),
    ],
)  # fmt: skip
def test_a_bad_row_is_refused_with_this_exact_message(change, message, tokenizer, tmp_path):
    assert row_refusal(tokenizer, tmp_path, {**GOOD, **change}) == message


def test_a_gym_column_must_name_a_registered_env_or_context_manager(tokenizer, tmp_path):
    assert row_refusal(tokenizer, tmp_path, {**GOOD, "env_config": {"name": "nope"}}) == (
        f"column 'env_config' unknown env name 'nope'; registered: {sorted(ENVS)} "
        "(plugins come from external_plugins)"
    )
    # a context manager is looked up among the context managers, under its own word
    assert row_refusal(tokenizer, tmp_path, {**GOOD, "ctx_config": {"name": "math"}}) == (
        f"column 'ctx_config' unknown context manager name 'math'; registered: {sorted(CONTEXT_MANAGERS)} "
        "(plugins come from external_plugins)"
    )
    assert row_refusal(tokenizer, tmp_path, {**GOOD, "ctx_config": '["delethink"]'}) == (
        "column 'ctx_config' must be a dict like {'name': <context manager name>, ...}, got list "
        "(plugins come from external_plugins)"
    )


def test_a_row_naming_its_env_needs_no_answer_and_keeps_its_gym_columns(tokenizer, tmp_path):
    row = {"prompt": "a3", "env_config": '{"name": "math"}', "ctx_config": {"name": "delethink", "keep": 2}}
    (item,) = one_row(tokenizer, tmp_path, row)
    assert item.ground_truth == "" and item.data_source == "unknown" and item.extra_info == {}
    assert item.env_config == {"name": "math"}  # its JSON text, parsed
    assert item.ctx_config == {"name": "delethink", "keep": 2}
    assert item.messages == [{"role": "user", "content": "a3"}]
    assert len(item.prompt_ids) == 5


def test_a_row_with_an_answer_has_no_gym_columns_and_its_own_data_source(tokenizer, tmp_path):
    messages = [{"role": "user", "content": "a3", "name": "kept"}]
    row = {
        "prompt": messages,
        "reward_model": {"ground_truth": 3},
        "data_source": "mine",
        "extra_info": {"k": 1},
    }
    (item,) = one_row(tokenizer, tmp_path, row)
    assert (item.ground_truth, item.data_source, item.extra_info) == ("3", "mine", {"k": 1})
    assert item.env_config is None and item.ctx_config is None
    assert item.messages == messages


def test_a_missing_prompt_column_names_the_entry_points_key_and_row_0s_columns(tokenizer, tmp_path):
    path = jsonl(tmp_path / "q.jsonl", [{"question": "a3", "reward_model": {}}, {"prompt": "a3"}])
    for section, key in [("data", "data.prompt_key"), ("", "prompt_key")]:
        assert refusal(
            load_prompts, [path], tokenizer, "prompt", 64, True, section=section, error=ConfigError
        ) == (f"{key}='prompt': {path} has no such column (row 0 has ['question', 'reward_model'])")


def test_an_overlong_prompt_names_the_limit_its_key_and_the_switch_that_drops_it(tokenizer, tmp_path):
    path = jsonl(tmp_path / "r.jsonl", [GOOD, {**GOOD, "prompt": "a3 b5"}])
    for section, prefix in [("data", "data."), ("", "")]:
        message = refusal(load_prompts, [path], tokenizer, "prompt", 7, False, section=section)
        assert message == (
            f"{path} row 1: prompt has 8 tokens, more than the 7 allowed ({prefix}max_prompt_length minus "
            f"any Delethink carry-over); set {prefix}filter_overlong_prompts=true to drop such rows"
        )


def test_dropped_prompts_are_counted_in_the_log_and_dropping_all_names_the_shortest(
    tokenizer, tmp_path, caplog
):
    path = jsonl(tmp_path / "r.jsonl", [GOOD, {**GOOD, "prompt": "a3 b5"}, {**GOOD, "prompt": "a3 b"}])
    with caplog.at_level(logging.WARNING, logger="verl.data.rl_dataset"):
        assert len(load_prompts([path], tokenizer, "prompt", 5, True)) == 1
    assert caplog.messages == [f"dropped 2 prompts longer than 5 tokens from {[path]}"]
    for section, key in [("data", "data.max_prompt_length"), ("", "max_prompt_length")]:
        message = refusal(
            load_prompts, [path], tokenizer, "prompt", 4, True, section=section, error=ConfigError
        )
        assert message == (
            f"{key}: all 3 prompts of {[path]} are longer than the 4 tokens allowed ({key} minus any "
            "Delethink carry-over); the shortest has 5"
        )


def test_the_data_order_without_shuffling_runs_through_the_items_in_order_across_epochs():
    order = DataOrder(num_items=3, batch_size=2, seed=0, shuffle=False)
    assert [order.batch_indices(step) for step in range(3)] == [[0, 1], [2, 0], [1, 2]]


def test_a_prompt_gets_no_special_tokens_beyond_its_chat_template():
    # a tokenizer that puts a token before every text, as Llama's puts its BOS: the chat template already
    # wrote the prompt's special tokens, so none is added when it is tokenised
    tokenizer = build_tokenizer()
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{EOS} $A", special_tokens=[(EOS, tokenizer.eos_token_id)]
    )
    assert tokenizer("a3")["input_ids"][0] == tokenizer.eos_token_id
    assert tokenizer.decode(encode_prompt(tokenizer, "a3")) == "<|user|>a3<|assistant|><think>"


# --- shift_register, synthetic: the generated tasks' files and command lines ------------------------------


def cli_help(main, capsys, monkeypatch) -> str:
    monkeypatch.setenv("COLUMNS", "200")  # no help text wrapped
    with pytest.raises(SystemExit) as stopped:
        main(["--help"])
    assert stopped.value.code == 0
    return capsys.readouterr().out


def test_the_shift_register_cli_says_what_each_option_does(capsys, monkeypatch):
    out = cli_help(sr.main, capsys, monkeypatch)
    assert "\nWrite the shift-register task as train/val JSONL.\n" in out
    for option, text in [
        ("--out OUT", "output directory"),
        ("--min-steps MIN_STEPS", "fewest steps n of a training problem"),
        ("--max-steps MAX_STEPS", r"most steps n \(55: fits 512 tokens\)"),
        ("--val-min-steps VAL_MIN_STEPS", "default: --min-steps"),
        ("--val-max-steps VAL_MAX_STEPS", "default: --max-steps"),
    ]:
        assert re.search(rf"\n  {option}\s+{text}\n", out), option  # a long option: help on its next line


def test_the_shift_register_cli_needs_an_out_and_defaults_to_the_recipe_sizes(tmp_path, capsys):
    with pytest.raises(SystemExit):
        sr.main([])
    assert "the following arguments are required: --out" in capsys.readouterr().err
    sr.main(["--out", str(tmp_path / "cli")])
    assert capsys.readouterr().out == f"wrote 2000 train and 64 val problems to {tmp_path / 'cli'}\n"
    sr.write_dataset(tmp_path / "lib", 2000, 64, 8, 55, 0)  # the defaults: 2000, 64, 8..55, seed 0
    for split in ("train.jsonl", "val.jsonl"):
        assert (tmp_path / "cli" / split).read_text() == (tmp_path / "lib" / split).read_text()


def test_shift_register_sizes_may_be_zero_and_steps_reach_the_counter_s_largest(tmp_path):
    sr.write_dataset(tmp_path / "none", 0, 0, 1, 1, 0)
    assert (
        (tmp_path / "none" / "train.jsonl").read_text() == "" == (tmp_path / "none" / "val.jsonl").read_text()
    )
    sr.write_dataset(tmp_path / "long", 1, 1, 999, 999, 0)
    (row,) = [json.loads(line) for line in (tmp_path / "long" / "val.jsonl").open()]
    assert row["extra_info"] == {"index": 0, "split": "val", "num_steps": 999, "thinking_tokens": 9000}


@pytest.mark.parametrize(
    "sizes, message",
    [
        ((-1, 0, 1, 1), "sizes must be >= 0, got train_size=-1, val_size=0"),
        ((0, -1, 1, 1), "sizes must be >= 0, got train_size=0, val_size=-1"),
        ((1, 1, 1, 1000), "need 1 <= min_steps <= max_steps <= 999, got 1, 1000"),
    ],
)
def test_shift_register_sizes_are_refused_with_this_message(sizes, message, tmp_path):
    assert refusal(sr.write_dataset, tmp_path, *sizes, 0, error=ValueError) == message


def test_a_bad_validation_range_is_named_by_its_own_keys(tmp_path):
    message = refusal(sr.write_dataset, tmp_path, 1, 1, 1, 5, 0, 6, 3, error=ValueError)
    assert message == "need 1 <= val_min_steps <= val_max_steps <= 999, got 6, 3"


def test_a_shift_register_row_names_its_source_index_split_and_lengths():
    problem = sr.solve("8153", 1)
    assert sr.row(problem, 3, "val", data_source="synthetic/shift_register/x") == {
        "data_source": "synthetic/shift_register/x",
        "prompt": [{"role": "user", "content": "001:8153"}],
        "reward_model": {"style": "rule", "ground_truth": "1539"},
        "extra_info": {"index": 3, "split": "val", "num_steps": 1, "thinking_tokens": 18},
    }


def test_a_question_in_another_layout_is_refused_naming_it():
    assert refusal(sr.parse_question, "8153 n=005", error=ValueError) == (
        "not a shift-register question (NNN:WWWW): '8153 n=005'"
    )


def test_written_shift_register_rows_are_numbered_within_their_split(tmp_path):
    sr.write_dataset(tmp_path, 2, 2, 1, 1, 0)
    for split in ("train", "val"):
        rows = [json.loads(line) for line in (tmp_path / f"{split}.jsonl").open()]
        assert [(r["extra_info"]["index"], r["extra_info"]["split"]) for r in rows] == [
            (0, split),
            (1, split),
        ]


def test_a_start_digit_is_zero_only_when_its_draw_falls_below_zero_prob():
    # zero_prob set to the very draw the first digit gets: not below it, so that digit is drawn uniformly
    draw = random.Random(0).random()
    assert sr.make_problem(random.Random(0), 1, draw).question[4] != "0"


def test_the_running_sum_cli_says_what_each_option_does(capsys, monkeypatch):
    out = cli_help(synthetic.main, capsys, monkeypatch)
    assert "\nWrite the running-sum task as train/val JSONL.\n" in out
    assert re.search(r"\n  --out OUT\s+output directory\n", out)
    assert re.search(r"\n  --labels LABELS\s+label alphabet, cycled \(default a..z\)\n", out)


def test_the_running_sum_cli_needs_an_out_and_defaults_to_2000_and_64_problems_of_4_to_12_terms(
    tmp_path, capsys
):
    with pytest.raises(SystemExit):
        synthetic.main([])
    assert "the following arguments are required: --out" in capsys.readouterr().err
    synthetic.main(["--out", str(tmp_path / "cli")])
    assert capsys.readouterr().out == f"wrote 2000 train and 64 val problems to {tmp_path / 'cli'}\n"
    synthetic.write_dataset(tmp_path / "lib", 2000, 64, 4, 12, 0)
    for split in ("train.jsonl", "val.jsonl"):
        assert (tmp_path / "cli" / split).read_text() == (tmp_path / "lib" / split).read_text()


def test_the_running_sum_cli_seed_is_a_number(tmp_path, capsys):
    # random.Random("3") is another stream than random.Random(3)
    synthetic.main(["--out", str(tmp_path / "cli"), "--train-size", "5", "--val-size", "2", "--seed", "3"])
    synthetic.write_dataset(tmp_path / "lib", 5, 2, 4, 12, 3)
    assert (tmp_path / "cli" / "train.jsonl").read_text() == (tmp_path / "lib" / "train.jsonl").read_text()


# --- tasks: answers, duplicates, splits -------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, marker, kind, detail",
    [
        (None, None, "missing answer", "the answer is missing (null or no such key)"),
        (True, None, "answer of wrong type", "the answer has type bool, not str, int or float"),
        ([1], None, "answer of wrong type", "the answer has type list, not str, int or float"),
        (18, "####", "answer of wrong type", "expected a solution ending in '####', got a number"),
        ("so 18", "####", "no answer marker", "the solution has no '####' before its answer"),
        (math.inf, None, "answer of wrong type", "the answer is inf, not a finite number"),
        (" ", None, "empty answer", "the answer is an empty string"),
    ],
)
def test_an_answer_that_cannot_be_scored_is_a_bad_row_of_its_kind_with_this_detail(
    value, marker, kind, detail
):
    with pytest.raises(BadRow) as bad:
        normalise_answer(value, marker)
    assert (bad.value.kind, bad.value.detail, str(bad.value)) == (kind, detail, detail)


@pytest.mark.parametrize(
    "value, marker, expected",
    [
        ("#### 1,234.5", "####", "1234.5"),  # thousands separators go, the decimals stay
        ("#### -1,000", "####", "-1000"),
        ("#### 1,23", "####", "1,23"),  # not thousands: kept as written
        ("a ## 7 ## 0,5", "##", "0,5"),  # after the last marker
        (0.1, None, "0.1"),
        (-2.0, None, "-2"),
        (" +007 ", None, "7"),
    ],
)
def test_an_answer_is_normalised_to_this_text(value, marker, expected):
    assert normalise_answer(value, marker) == expected


def prompt(answer: str = "1", **changes) -> PromptItem:
    return PromptItem([1, 2], changes.pop("data_source", "s"), answer, **changes)


def test_repeated_prompts_are_counted_and_dropped_only_when_asked(caplog):
    items = [
        prompt(), prompt(extra_info={"index": 9}),  # the same problem: extra_info is not what is judged
        prompt("2"), prompt(val_n=4), prompt(data_source="t"), prompt(env_config={"name": "math"}),
        prompt(ctx_config={"name": "delethink"}), prompt(),
    ]  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="verl.data.tasks"):
        assert without_duplicates(items, "train", drop=True) == [items[0], *items[2:7]]
        assert without_duplicates(items, "val", drop=False) == items
    assert caplog.messages == [
        "train: 2 of 8 prompts repeat an earlier one (same prompt, answer and data_source); dropped",
        "val: 2 of 8 prompts repeat an earlier one (same prompt, answer and data_source); kept "
        "(data.drop_duplicates=true drops them)",
    ]
    caplog.clear()
    assert without_duplicates(items[:2] + items[2:3], "train", drop=False) == items[:3]
    assert caplog.messages == [
        "train: 1 of 3 prompts repeat an earlier one (same prompt, answer and data_source); kept "
        "(data.drop_duplicates=true drops them)"
    ]
    caplog.clear()
    without_duplicates(items[2:5], "train", drop=True)
    assert caplog.messages == []


def test_gym_columns_are_the_same_whatever_their_key_order_or_value_type():
    a = prompt(env_config={"name": "math", "tools": Path("/x")}, ctx_config={"b": 1, "a": 2})
    b = prompt(env_config={"tools": "/x", "name": "math"}, ctx_config={"a": 2, "b": 1})
    assert without_duplicates([a, b], "train", drop=True) == [a]


def test_running_sum_redraws_keep_the_given_labels(tmp_path):
    # one-term questions over the labels "xyz": 10 of them, so 9 validation ones force redraws, and so do
    # nearly all training draws (they must avoid those 9)
    synthetic.write_dataset(
        tmp_path, train_size=20, val_size=9, min_terms=1, max_terms=1, seed=0, labels="xyz"
    )
    for split in ("train", "val"):
        questions = [
            json.loads(line)["prompt"][0]["content"] for line in (tmp_path / f"{split}.jsonl").open()
        ]
        assert {q[0] for q in questions} == {"x"}, split


def test_a_running_sum_needs_a_term_and_digits_0_to_9():
    assert refusal(synthetic.solve, [], error=ValueError) == "a problem has at least 1 term, got 0"
    assert refusal(synthetic.solve, [3, 10], error=ValueError) == "terms must be digits 0..9, got [3, 10]"
    assert synthetic.solve([9, 0]).answer == "9"


# --- tasks: files, the hub, splits -----------------------------------------------------------------------


def rows_file(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_a_task_file_is_read_through_a_cache_that_is_gone_afterwards(tmp_path, monkeypatch):
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf")  # where a cache would go
    path = rows_file(tmp_path / "t.jsonl", [{"problem": "p", "answer": 1}])
    assert read_task_rows(path) == [{"problem": "p", "answer": 1}]
    assert not (tmp_path / "hf").exists() and [p.name for p in tmp_path.iterdir()] == ["t.jsonl"]
    assert refusal(read_task_rows, str(tmp_path / "no.jsonl"), error=FileNotFoundError) == (
        f"task file {tmp_path / 'no.jsonl'} does not exist"
    )


def test_a_task_file_that_is_not_utf8_is_named_under_its_task(tokenizer, tmp_path):
    (tmp_path / "t.jsonl").write_bytes(b'{"problem": "\xff", "answer": 1}\n')
    task = TaskConfig(path=str(tmp_path / "t.jsonl"), data_source="s")
    assert refusal(load_task, "t", task, tokenizer, 64) == (
        f"task t: {tmp_path / 't.jsonl'}:1: not valid UTF-8 (byte 0xff at byte 14 of the line)"
    )


def test_a_template_with_bare_braces_is_refused_saying_how_to_write_them(tokenizer, tmp_path):
    path = rows_file(tmp_path / "t.jsonl", [{"problem": "p", "answer": 1}])
    task = TaskConfig(path=path, data_source="s", prompt_template="{problem} \\boxed{}")
    assert refusal(load_task, "t", task, tokenizer, 64, error=ConfigError) == (
        "task t: prompt_template '{problem} \\\\boxed{}' is not a valid format string (Replacement index 0 "
        "out of range for positional args tuple); name columns as {problem} and write literal braces "
        "doubled, as in \\boxed{{}}"
    )


def test_a_hub_set_is_loaded_with_a_log_line_and_its_failure_names_the_first_line_of_the_error(
    tokenizer, tmp_path, caplog
):
    rows_file(
        tmp_path / "test.jsonl", [{"problem": "p", "answer": 1}]
    )  # a local folder laid out as on the hub
    task = TaskConfig(data_source="s", hf_dataset=str(tmp_path), hf_split="test")
    with caplog.at_level(logging.INFO, logger="verl.data.tasks"):
        assert [it.ground_truth for it in load_task("t", task, tokenizer, 64)] == ["1"]
    assert f"task t: loading {tmp_path} (split test) from the Hugging Face hub" in caplog.messages
    wrong = dataclasses.replace(task, hf_split="validation")
    assert "(ValueError: Unknown split \"validation\". Should be one of ['test'].); save it" in refusal(
        load_task, "t", wrong, tokenizer, 64
    )
    (tmp_path / "test.jsonl").write_text("")  # datasets raises a StopIteration without a message
    assert (
        f"cannot load {tmp_path} (split test) from the Hugging Face hub (StopIteration: ); save it"
        in refusal(load_task, "t", task, tokenizer, 64)
    )


def test_a_limit_that_drops_every_task_prompt_names_trainings_key_by_default(tokenizer, tmp_path):
    path = rows_file(tmp_path / "t.jsonl", [{"problem": "ab", "answer": 1}])  # 2 + 3 tokens
    assert refusal(
        load_task, "t", TaskConfig(path=path, data_source="s"), tokenizer, 3, error=ConfigError
    ) == (
        f"data.max_prompt_length: all 1 prompts of task t ({path}) are longer than the 3 tokens allowed "
        "(data.max_prompt_length less any Delethink carry-over); the shortest has 5"
    )


def test_the_training_split_is_its_files_then_its_tasks_with_repeats_dropped_and_logged(
    tokenizer, tmp_path, caplog
):
    row = {"prompt": "a1", "reward_model": {"ground_truth": "1"}, "data_source": "f"}
    files = rows_file(tmp_path / "train.jsonl", [row, row, {**row, "prompt": "x" * 30}])  # 33 tokens: dropped
    task = TaskConfig(
        path=rows_file(tmp_path / "t.jsonl", [{"problem": "t1", "answer": 2}]), data_source="task"
    )
    cfg = compose_config("tiny_longcot", [f"data.train_files=[{files}]", "data.drop_duplicates=true"])
    config = dataclasses.replace(load_config(cfg, check_paths=False), train_tasks={"mine": task})
    with caplog.at_level(logging.WARNING, logger="verl.data.tasks"):
        items = load_split(config, "train", tokenizer, 20)
    assert [(it.data_source, it.extra_info.get("task")) for it in items] == [("f", None), ("task", "mine")]
    assert caplog.messages == [
        f"dropped 1 prompts longer than 20 tokens from {[files]}",  # the file's overlong row: filtered
        "train: 1 of 3 prompts repeat an earlier one (same prompt, answer and data_source); dropped",
    ]


def test_a_task_row_becomes_its_messages_and_its_answer_after_the_marker(tokenizer, tmp_path):
    path = rows_file(tmp_path / "t.jsonl", [{"problem": "ab", "answer": "so 2 #### 1,000"}])  # 5 tokens
    task = TaskConfig(path=path, data_source="s", answer_marker="####", prompt_template="{problem}")
    (item,) = load_task("t", task, tokenizer, 5)  # a prompt of exactly the limit is kept
    assert (item.ground_truth, item.messages) == ("1000", [{"role": "user", "content": "ab"}])


def test_bad_task_rows_are_counted_in_one_line_or_named_with_how_to_drop_them(tokenizer, tmp_path, caplog):
    path = rows_file(tmp_path / "t.jsonl", [{"problem": "p", "answer": None}, {"problem": "q", "answer": 1}])
    with caplog.at_level(logging.WARNING, logger="verl.data.tasks"):
        load_task("t", TaskConfig(path=path, data_source="s"), tokenizer, 64)
    assert caplog.messages == [f"task t: dropped 1 rows of {path}: 1 missing answer"]
    strict = TaskConfig(path=path, data_source="s", bad_rows="error")
    assert refusal(load_task, "t", strict, tokenizer, 64) == (
        f"task t: {path} row 0: the answer is missing (null or no such key) (bad_rows: error; bad_rows: "
        "filter drops such rows)"
    )
    other_column = TaskConfig(path=path, data_source="s", answer_key="a")
    assert refusal(load_task, "t", other_column, tokenizer, 64, error=ConfigError) == (
        f"task t: {path} has no column 'a' (answer_key); columns: ['problem', 'answer']"
    )


def test_a_task_of_a_thousand_rows_shows_its_progress_and_clears_it(tokenizer, tmp_path, capsys):
    for count, shown in ((999, False), (1000, True)):
        path = rows_file(tmp_path / f"{count}.jsonl", [{"problem": "p", "answer": 1}] * count)
        assert len(load_task("t", TaskConfig(path=path, data_source="s"), tokenizer, 64)) == count
        # after datasets' own bar (a line of its own): ours, redrawn in place and cleared, never a newline
        last = capsys.readouterr().err.rsplit("\n", 1)[-1]
        assert ("task t:" in last and f"/{count} [" in last and "row/s" in last) is shown, last[-200:]

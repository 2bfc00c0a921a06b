"""Math tasks: the problem sets stored in the package load through their config-group YAMLs with
normalised answers, templates and sampling options apply, every kind of bad row is dropped with a logged
count or fails naming file, row and reason, and selecting several group options merges them. The sets
too large to store load from a local path, or from the hub; offline, start-up says how to get them."""

import dataclasses
import json
import logging
import logging.handlers
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.e2e_utils import HANG_S
from verl.config import ConfigError, TaskConfig, compose_config
from verl.data.tasks import BadRow, load_split, load_task, normalise_answer, read_task_rows
from verl.models.tiny import build_tokenizer
from verl.trainer.config_loader import load_config
from verl.utils.math_data import VENDORED_MATH_DIR as MATH_DIR

NO_LIMIT = 100_000  # tokens: the byte-level tiny tokenizer makes long prompts (5167 tokens at most here)

# rows per task as in verl/data/math/SOURCES.md; math_train drops its 4 rows without an answer
ROWS = {
    "aime24": 30, "aime25": 30, "amc23": 40, "math500": 500, "gsm8k": 1319, "deepscaler_val": 30,
    "deepscaler_head": 803, "deepscaler_aime": 975, "math_train": 7470, "gsm8k_rest": 1319 - 200,
}  # fmt: skip
VAL_TASKS = ["aime24", "aime25", "amc23", "math500", "gsm8k", "deepscaler_val"]
TRAIN_TASKS = ["deepscaler_head", "deepscaler_aime", "math_train", "gsm8k_rest"]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


@pytest.fixture(scope="module")
def stored_tasks():
    """Every stored task of both config groups, composed from the YAMLs with their default folder."""
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("MATH_DATA_DIR", raising=False)
        cfg = compose_config(
            "tiny_longcot", [f"val_tasks=[{','.join(VAL_TASKS)}]", f"train_tasks=[{','.join(TRAIN_TASKS)}]"]
        )
        config = load_config(cfg, check_paths=False)
    return {**config.val_tasks, **config.train_tasks}


@pytest.fixture(scope="module")
def loaded_and_logged(stored_tasks, tokenizer):
    """The prompts of every stored task, loaded once, and the warnings the loader logged meanwhile."""
    handler = logging.handlers.BufferingHandler(capacity=100)
    logging.getLogger("verl.data.tasks").addHandler(handler)
    try:
        loaded = {name: load_task(name, task, tokenizer, NO_LIMIT) for name, task in stored_tasks.items()}
    finally:
        logging.getLogger("verl.data.tasks").removeHandler(handler)
    return loaded, [record.getMessage() for record in handler.buffer]


@pytest.fixture(scope="module")
def loaded(loaded_and_logged):
    return loaded_and_logged[0]


def raw_answers(task: TaskConfig) -> list:
    return [row[task.answer_key] for row in read_task_rows(task.path)]


# --- the stored files --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(ROWS))
def test_every_stored_task_loads(name, stored_tasks, loaded):
    task, items = stored_tasks[name], loaded[name]
    assert Path(task.path).parent == MATH_DIR and Path(task.path).is_file()
    assert len(items) == ROWS[name]
    assert {it.data_source for it in items} == {task.data_source}
    assert task.data_source == name or (name, task.data_source) == ("gsm8k_rest", "gsm8k")  # scored as GSM8K
    assert all(isinstance(it.ground_truth, str) and it.ground_truth for it in items)
    if task.shuffle_seed is None:
        first = task.skip_rows
        assert [it.extra_info["index"] for it in items[:3]] == [first, first + 1, first + 2]  # file order
    assert {it.val_n for it in items} == {task.n}


def test_only_math_train_has_bad_rows_its_four_without_an_answer(stored_tasks, loaded_and_logged):
    path = stored_tasks["math_train"].path
    assert loaded_and_logged[1] == [
        f"task math_train: dropped 4 rows of {path}: 2 empty answer, 2 missing answer"
    ]


def test_aime24_zero_padded_strings_lose_their_zeros(stored_tasks, loaded):
    raw = raw_answers(stored_tasks["aime24"])
    assert raw[7] == "025" and loaded["aime24"][7].ground_truth == "25"
    assert [it.ground_truth for it in loaded["aime24"]] == [str(int(a)) for a in raw]


def test_aime25_ints_and_amc23_floats_become_integer_strings(stored_tasks, loaded):
    aime25 = raw_answers(stored_tasks["aime25"])
    assert all(type(a) is int for a in aime25)
    assert [it.ground_truth for it in loaded["aime25"]] == [str(a) for a in aime25]
    amc = raw_answers(stored_tasks["amc23"])
    assert amc[0] == 27.0 and loaded["amc23"][0].ground_truth == "27"
    assert [it.ground_truth for it in loaded["amc23"]] == [str(int(a)) for a in amc]


def test_latex_answers_are_unchanged(stored_tasks, loaded):
    raw = raw_answers(stored_tasks["math500"])
    assert raw[0] == "\\left( 3, \\frac{\\pi}{2} \\right)"
    assert [it.ground_truth for it in loaded["math500"]] == raw  # no MATH-500 answer has padding or zeros
    assert loaded["deepscaler_head"][0].ground_truth == "-\\frac{2}{3}"


def test_gsm8k_answer_is_the_number_after_the_marker(loaded):
    truths = [it.ground_truth for it in loaded["gsm8k"]]
    assert truths[0] == "18"  # "... $18 every day at the farmer's market.\n#### 18"
    assert "1450000" in truths and not any("," in t for t in truths)  # "#### 1,450,000"


def test_template_wraps_the_problem_for_the_chat(stored_tasks, loaded, tokenizer):
    row = read_task_rows(stored_tasks["aime25"].path)[0]
    text = tokenizer.decode(loaded["aime25"][0].prompt_ids)
    expected = (
        f"<|user|>{row['problem']}\n\nPlease reason step by step, and put your final answer within "
        "\\boxed{}.<|assistant|><think>"  # the paper's reference wording
    )
    assert text == expected
    gsm = read_task_rows(stored_tasks["gsm8k"].path)[0]
    assert tokenizer.decode(loaded["gsm8k"][0].prompt_ids).startswith(f"<|user|>{gsm['question']}\n\n")


# --- options --------------------------------------------------------------------------------------------


def aime24(**changes) -> TaskConfig:
    return TaskConfig(path=str(MATH_DIR / "aime24.jsonl"), data_source="aime24", **changes)


def test_system_prompt_comes_first(tokenizer):
    task = aime24(system_prompt="Be brief.", prompt_template="Q: {problem}", max_samples=1)
    [item] = load_task("a", task, tokenizer, NO_LIMIT)
    problem = read_task_rows(str(MATH_DIR / "aime24.jsonl"))[0]["problem"]
    assert tokenizer.decode(item.prompt_ids) == f"<|system|>Be brief.<|user|>Q: {problem}<|assistant|><think>"


def test_max_samples_and_shuffle_seed_are_deterministic(tokenizer):
    def indices(**changes):
        return [it.extra_info["index"] for it in load_task("a", aime24(**changes), tokenizer, NO_LIMIT)]

    assert indices(max_samples=4) == [0, 1, 2, 3]
    shuffled = indices(shuffle_seed=3)
    assert sorted(shuffled) == list(range(30)) and shuffled != list(range(30))
    assert indices(shuffle_seed=3) == shuffled
    assert indices(shuffle_seed=3, max_samples=5) == shuffled[:5]  # shuffle first, then take
    assert indices(shuffle_seed=4) != shuffled


def test_skip_rows_holds_the_first_rows_out_before_the_shuffle(tokenizer):
    def indices(**changes):
        return [it.extra_info["index"] for it in load_task("a", aime24(**changes), tokenizer, NO_LIMIT)]

    assert indices(skip_rows=27) == [27, 28, 29]  # the file's row numbers
    shuffled = indices(skip_rows=20, shuffle_seed=3)
    assert sorted(shuffled) == list(range(20, 30)) and shuffled != list(range(20, 30))
    assert indices(skip_rows=20, shuffle_seed=3, max_samples=4) == shuffled[:4]
    with pytest.raises(ValueError, match=r"task a: skip_rows=30 leaves none of the 30 rows of .*aime24"):
        indices(skip_rows=30)
    assert TaskConfig(data_source="s", path="p", skip_rows=-1).problems("val_tasks.a") == [
        "val_tasks.a.skip_rows=-1: must be >= 0"
    ]


def test_val_n_and_extra_info(tokenizer):
    items = load_task("aime", aime24(n=8, max_samples=2), tokenizer, NO_LIMIT)
    assert [it.val_n for it in items] == [8, 8]
    assert items[1].extra_info == {"task": "aime", "index": 1}


def test_json_and_parquet_load_like_jsonl(tokenizer, tmp_path):
    rows = [{"problem": "one plus one", "answer": 2}, {"problem": "half", "answer": "\\frac{1}{2}"}]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "t.json").write_text(json.dumps(rows))
    as_strings = [{"problem": r["problem"], "answer": str(r["answer"])} for r in rows]  # parquet: one type
    pq.write_table(pa.Table.from_pylist(as_strings), tmp_path / "t.parquet")
    loads = [load_task("t", TaskConfig(path=str(tmp_path / f"t.{ext}"), data_source="t"), tokenizer, NO_LIMIT)
             for ext in ("jsonl", "json", "parquet")]  # fmt: skip
    for items in loads:
        assert [(it.prompt_ids, it.ground_truth) for it in items] == [
            (it.prompt_ids, it.ground_truth) for it in loads[0]
        ]
    assert [it.ground_truth for it in loads[0]] == ["2", "\\frac{1}{2}"]


def test_an_answer_column_of_mixed_types_keeps_its_meaning(tokenizer, tmp_path):
    # HF datasets reads a column of mixed types as JSON values: "025" -> 25, "1.50" -> 1.5 (same meaning);
    # the known loss: "[-2, 7]" (an interval) comes back as a list and the row is dropped
    answers = ["025", 25, "\\frac{1}{2}", 27.0, "(0, 1]", "1.50", "[-2, 7]"]
    path = tmp_path / "mixed.jsonl"
    path.write_text(
        "".join(json.dumps({"problem": f"p{i}", "answer": a}) + "\n" for i, a in enumerate(answers))
    )
    items = load_task("m", TaskConfig(path=str(path), data_source="m"), tokenizer, NO_LIMIT)
    assert [it.ground_truth for it in items] == ["25", "25", "\\frac{1}{2}", "27", "(0, 1]", "1.5"]


# --- bad rows --------------------------------------------------------------------------------------------

LONG = "x" * 200  # one token per byte: with <|user|>, <|assistant|> and <think>, 203 prompt tokens
BAD_ROWS = {  # reason -> (row, what the error says)
    "missing answer": ({"problem": "p"}, "the answer is missing"),
    "empty answer": ({"problem": "p", "answer": "  "}, "the answer is an empty string"),
    "null answer": ({"problem": "p", "answer": None}, "the answer is missing"),
    "answer of wrong type": (
        {"problem": "p", "answer": [1, 2]},
        "the answer has type list, not str, int or float",
    ),
    "problem of wrong type": ({"problem": 5, "answer": "1"}, "the problem has type int, not str"),
    "missing problem": ({"answer": "1"}, "the problem ('problem') is missing"),
    "empty problem": ({"problem": "", "answer": "1"}, "the problem is an empty string"),
    "overlong prompt": (
        {"problem": LONG, "answer": "1"},
        "the prompt has 203 tokens, more than the 100 allowed",
    ),
}
GOOD = {"problem": "two", "answer": "2"}


def write_rows(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_filter_drops_every_bad_row_and_logs_the_counts(tokenizer, tmp_path, caplog):
    path = write_rows(tmp_path / "bad.jsonl", [GOOD, *(row for row, _ in BAD_ROWS.values()), GOOD])
    with caplog.at_level(logging.WARNING, logger="verl.data.tasks"):
        items = load_task("mytask", TaskConfig(path=path, data_source="s"), tokenizer, max_prompt_tokens=100)
    assert [it.extra_info["index"] for it in items] == [0, 9]
    assert f"task mytask: dropped 8 rows of {path}: " in caplog.text
    assert (
        "1 answer of wrong type, 1 empty answer, 1 empty problem, 2 missing answer, 1 missing problem, "
        "1 overlong prompt, 1 problem of wrong type" in caplog.text
    )


@pytest.mark.parametrize("reason", list(BAD_ROWS))
def test_error_names_the_task_file_row_and_reason(reason, tokenizer, tmp_path):
    row, says = BAD_ROWS[reason]
    path = write_rows(tmp_path / "bad.jsonl", [GOOD, GOOD, row, GOOD])
    task = TaskConfig(path=path, data_source="s", bad_rows="error")
    with pytest.raises(ValueError) as error:
        load_task("mytask", task, tokenizer, max_prompt_tokens=100)
    assert str(error.value).startswith(f"task mytask: {path} row 2: {says}")
    # the same row in filter mode is dropped, and the good rows stay
    assert len(load_task("mytask", dataclasses.replace(task, bad_rows="filter"), tokenizer, 100)) == 3


def test_every_row_bad_is_an_error_even_when_filtering(tokenizer, tmp_path):
    path = write_rows(tmp_path / "bad.jsonl", [{"problem": "p", "answer": ""}])
    with pytest.raises(ValueError, match=f"task t: no usable rows in {path}"):
        load_task("t", TaskConfig(path=path, data_source="s"), tokenizer, 100)


@pytest.mark.parametrize(("section", "key"), [("data", "data.max_prompt_length"), ("", "max_prompt_length")])
def test_a_limit_that_drops_every_prompt_names_the_entry_points_key(section, key, tokenizer, tmp_path):
    # training keeps the limit at data.max_prompt_length, main_eval at max_prompt_length
    rows = [{"problem": LONG + "x", "answer": "1"}, {"problem": LONG, "answer": "2"}]  # 204 and 203 tokens
    path = write_rows(tmp_path / "long.jsonl", rows)
    with pytest.raises(ConfigError) as error:
        load_task("t", TaskConfig(path=path, data_source="s"), tokenizer, 100, section=section)
    assert str(error.value) == (
        f"{key}: all 2 prompts of task t ({path}) are longer than the 100 tokens allowed ({key} less any "
        "Delethink carry-over); the shortest has 203"
    )


def test_config_mistakes_fail_whatever_bad_rows_says(tokenizer, tmp_path):
    path = write_rows(tmp_path / "t.jsonl", [GOOD])
    with pytest.raises(
        ValueError, match=r"has no column 'question' \(problem_key\); columns: \['problem', 'answer'\]"
    ):
        load_task("t", TaskConfig(path=path, data_source="s", problem_key="question"), tokenizer, 100)
    with pytest.raises(ValueError, match="prompt_template names column 'topic'"):
        load_task(
            "t", TaskConfig(path=path, data_source="s", prompt_template="{topic}: {problem}"), tokenizer, 100
        )
    with pytest.raises(ValueError, match=r"write literal braces doubled, as in \\boxed\{\{\}\}"):
        load_task(
            "t", TaskConfig(path=path, data_source="s", prompt_template="{problem} \\boxed{}"), tokenizer, 100
        )
    with pytest.raises(FileNotFoundError, match="task t: task file .*nope.jsonl does not exist$"):
        load_task("t", TaskConfig(path=str(tmp_path / "nope.jsonl"), data_source="s"), tokenizer, 100)


def test_deepscaler_val_is_a_fixed_slice_of_the_stored_rows(stored_tasks, loaded):
    picked = [it.extra_info["index"] for it in loaded["deepscaler_val"]]
    assert len(set(picked)) == 30 and picked != list(range(30))  # shuffled with seed 42, not the head
    rows = read_task_rows(stored_tasks["deepscaler_val"].path)
    assert [it.ground_truth for it in loaded["deepscaler_val"]] == [
        normalise_answer(rows[i]["answer"]) for i in picked
    ]


# --- sets too large to store: a local copy, or the Hugging Face hub -------------------------------------

HUB_SETS = {  # task -> (group, Hugging Face dataset, split)
    "deepscaler": ("train_tasks", "agentica-org/DeepScaleR-Preview-Dataset", "train"),
    "openmath": ("train_tasks", "McGill-NLP/openmath-filtered", "test"),
    "openmath_val": ("val_tasks", "MathMindsAGI/OpenMathReasoning_ready", "test"),
}
SUMS = [{"problem": f"What is {i} + {i}?", "answer": str(2 * i), "source": "x"} for i in range(40)]


def hub_task(name: str, *overrides: str) -> TaskConfig:
    group = HUB_SETS[name][0]
    config = load_config(compose_config("tiny_longcot", [f"{group}=[{name}]", *overrides]), check_paths=False)
    return getattr(config, group)[name]


@pytest.mark.parametrize("name", list(HUB_SETS))
def test_a_set_too_large_to_store_names_its_hub_dataset_and_no_file(name):
    _, dataset, split = HUB_SETS[name]
    task = hub_task(name)
    assert (task.path, task.hf_dataset, task.hf_split) == (None, dataset, split)


@pytest.mark.parametrize("name", list(HUB_SETS))
def test_a_local_copy_given_as_path_is_read_instead_of_the_hub(name, tokenizer, tmp_path):
    group = HUB_SETS[name][0]
    path = write_rows(tmp_path / "copy.jsonl", SUMS)
    task = hub_task(name, f"{group}.{name}.path={path}")
    items = load_task(name, task, tokenizer, NO_LIMIT)
    assert len(items) == (30 if name == "openmath_val" else 40)  # the validation slice takes 30
    assert {it.data_source for it in items} == {name}
    assert all(it.ground_truth == str(2 * it.extra_info["index"]) for it in items)


def test_a_hub_set_loads_through_datasets_by_its_id(tokenizer, tmp_path):
    # no network here: datasets.load_dataset reads a local folder by the same call that fetches a hub id,
    # so the task's own code path (path null -> load_dataset(hf_dataset, split=hf_split)) runs for real
    write_rows(tmp_path / "test.jsonl", SUMS)  # a file named after its split, as hub datasets lay them out
    task = dataclasses.replace(hub_task("openmath"), hf_dataset=str(tmp_path))
    items = load_task("openmath", task, tokenizer, NO_LIMIT)
    assert [it.ground_truth for it in items] == [str(2 * i) for i in range(40)]
    wrong_split = dataclasses.replace(task, hf_split="validation")
    with pytest.raises(ValueError) as error:
        load_task("openmath", wrong_split, tokenizer, NO_LIMIT)
    assert str(error.value).startswith(
        f"task openmath: cannot load {tmp_path} (split validation) from the Hugging Face hub (ValueError: "
    )
    assert str(error.value).endswith(
        'save it where there is network access, python -c "import datasets; datasets.load_dataset('
        f"'{tmp_path}', split='validation').to_json('openmath.jsonl')\", and give that file as the task's "
        "path"
    )


def test_a_missing_local_copy_is_named_with_the_hub_alternative(tokenizer, tmp_path):
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(FileNotFoundError, match=f"^task openmath: task file {missing} does not exist$"):
        load_task("openmath", hub_task("openmath", f"train_tasks.openmath.path={missing}"), tokenizer, 100)
    cfg = compose_config("tiny_longcot", ["train_tasks=[openmath]", f"train_tasks.openmath.path={missing}"])
    with pytest.raises(ConfigError) as error:
        load_config(cfg)
    assert (
        f"train_tasks.openmath.path='{missing}': no such file; train_tasks.openmath.path=null loads "
        "McGill-NLP/openmath-filtered from the Hugging Face hub"
    ) in str(error.value)


def test_a_task_with_neither_file_nor_hub_dataset_is_refused():
    cfg = compose_config("tiny_longcot", ["train_tasks=[openmath]", "train_tasks.openmath.hf_dataset=null"])
    with pytest.raises(ConfigError) as error:
        load_config(cfg, check_paths=False)
    assert str(error.value) == (
        "train_tasks.openmath.path=None: is null and so is hf_dataset: name a file, or a Hugging Face "
        "dataset to load"
    )


def offline_line(key: str, name: str, dataset: str, split: str, reason: str) -> str:
    """The start-up line for a hub set with no local copy when the hub cannot be reached."""
    return (
        f"config error: {key}: no local file ({key}.path is null) and the Hugging Face hub cannot give "
        f"{dataset} (split {split}) ({reason}); where there is network access save it, python -c "
        f"\"import datasets; datasets.load_dataset('{dataset}', split='{split}').to_json('{name}.jsonl')\", "
        f"then pass {key}.path=/path/to/{name}.jsonl\n"
    )


def test_offline_a_hub_set_stops_training_at_start_up_in_one_line(tiny_assets, tmp_path):
    # HF_HUB_OFFLINE is huggingface_hub's own switch: the metadata request fails at once, as on a
    # machine set up without network; launched from tmp_path, far from the repository
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "verl.trainer.main_policy_iteration", "--config-name=tiny_longcot",
         f"actor_rollout_ref.model.path={tiny_assets / 'model'}",
         f"data.train_files=[{tiny_assets / 'data' / 'train.jsonl'}]",
         f"data.val_files=[{tiny_assets / 'data' / 'val.jsonl'}]", "train_tasks=[openmath]",
         f"hydra.run.dir={tmp_path / 'hydra'}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=HANG_S,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    reason = (
        "https://huggingface.co gave OfflineModeIsEnabled: Cannot reach "
        "https://huggingface.co/api/datasets/McGill-NLP/openmath-filtered: offline mode is enabled. "
        "To disable it, please unset the `HF_HUB_OFFLINE` environment variable."
    )
    assert result.stderr == offline_line(
        "train_tasks.openmath", "openmath", "McGill-NLP/openmath-filtered", "test", reason
    )


def test_a_hub_that_refuses_the_connection_stops_evaluation_at_start_up_in_one_line(tiny_assets, tmp_path):
    # a real connection to a port nobody listens on: what an offline machine's requests meet
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}
    env["HF_ENDPOINT"] = f"http://127.0.0.1:{port}"
    result = subprocess.run(
        [sys.executable, "-m", "verl.trainer.main_eval", f"model_path={tiny_assets / 'model'}",
         "val_tasks@tasks=[openmath_val]", f"output_dir={tmp_path / 'out'}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=HANG_S,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    reason = f"http://127.0.0.1:{port} gave ConnectError: [Errno 111] Connection refused"
    assert result.stderr == offline_line(
        "tasks.openmath_val", "openmath_val", "MathMindsAGI/OpenMathReasoning_ready", "test", reason
    )
    assert not (tmp_path / "out").exists()


# --- answer normalisation (hand-written cases) --------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("025", "25"), ("-007", "-7"), (" 7 ", "7"), (25, "25"), (-3, "-3"), (27.0, "27"), (0.5, "0.5"),
        (1e20, "100000000000000000000"), ("3.0", "3.0"), ("\\frac{1}{2}", "\\frac{1}{2}"), ("2,125", "2,125"),
        ("[-2, 7]", "[-2, 7]"),
    ],
)  # fmt: skip
def test_normalise_answer(value, expected):
    assert normalise_answer(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [("so 9 eggs.\n#### 18", "18"), ("#### 1,450,000", "1450000"), ("a #### 1 #### 2,5", "2,5")],
)
def test_normalise_answer_after_a_marker(value, expected):
    assert normalise_answer(value, marker="####") == expected


@pytest.mark.parametrize(
    ("value", "marker", "kind"),
    [
        (None, None, "missing answer"), ("", None, "empty answer"), (True, None, "answer of wrong type"),
        ({"a": 1}, None, "answer of wrong type"), (math.nan, None, "answer of wrong type"),
        ("18", "####", "no answer marker"), (18, "####", "answer of wrong type"),
        ("#### ", "####", "empty answer"),
    ],
)  # fmt: skip
def test_normalise_answer_rejects(value, marker, kind):
    with pytest.raises(BadRow) as bad:
        normalise_answer(value, marker)
    assert bad.value.kind == kind


# --- config groups and load_split ---------------------------------------------------------------------------


def tasks_of(config_name: str, *overrides: str) -> tuple[list[str], list[str]]:
    cfg = compose_config(config_name, list(overrides))
    return list(cfg.train_tasks), list(cfg.val_tasks)


def test_selecting_several_options_of_a_group_merges_them():
    assert tasks_of("tiny_longcot") == ([], [])  # none selected: both stay {}
    assert tasks_of("tiny_longcot", "val_tasks=[aime24,amc23]") == ([], ["aime24", "amc23"])
    assert tasks_of("tiny_longcot", "train_tasks=[deepscaler,math_train]", "val_tasks=[math500]") == (
        ["deepscaler", "math_train"], ["math500"]
    )  # fmt: skip
    # the paper's configs select their tasks in the defaults list; the command line replaces or clears them
    assert tasks_of("r1d-1.5b_deepscaler_delethink_24k") == (
        ["deepscaler"], ["aime24", "aime25", "deepscaler_val"]
    )  # fmt: skip
    assert tasks_of("r1d-1.5b_deepscaler_longcot_8k", "val_tasks=[math500]", "train_tasks=[]") == (
        [],
        ["math500"],
    )
    assert tasks_of("r1d-1.5b_openmath_delethink_96k") == (["openmath"], ["aime24", "aime25", "openmath_val"])
    cfg = compose_config("tiny_longcot", ["val_tasks=[aime24]", "val_tasks.aime24.n=4"])
    assert cfg.val_tasks.aime24.n == 4 and cfg.val_tasks.aime24.data_source == "aime24"


def test_load_split_puts_data_files_before_tasks(tokenizer, tmp_path, monkeypatch):
    monkeypatch.delenv("MATH_DATA_DIR", raising=False)
    val_file = tmp_path / "val.jsonl"
    val_file.write_text(
        json.dumps({"data_source": "mine", "prompt": "q", "reward_model": {"ground_truth": "1"}}) + "\n"
    )
    cfg = compose_config(
        "tiny_longcot",
        [f"data.val_files=[{val_file}]", "val_tasks=[aime24,amc23]", "val_tasks.amc23.max_samples=3"],
    )
    config = load_config(cfg, check_paths=False)
    items = load_split(config, "val", tokenizer, NO_LIMIT)
    assert [it.data_source for it in items] == ["mine"] + ["aime24"] * 30 + ["amc23"] * 3
    assert [items[0].val_n, items[1].val_n, items[-1].val_n] == [None, 32, 32]
    tasks_only = dataclasses.replace(config, data=dataclasses.replace(config.data, val_files=[]))
    assert len(load_split(tasks_only, "val", tokenizer, NO_LIMIT)) == 33
    nothing = dataclasses.replace(tasks_only, val_tasks={})
    with pytest.raises(ValueError, match="no val prompts: data.val_files and val_tasks are both empty"):
        load_split(nothing, "val", tokenizer, NO_LIMIT)
    with pytest.raises(ValueError, match="split must be 'train' or 'val'"):
        load_split(config, "test", tokenizer, NO_LIMIT)

"""Prompt loading (formats, bad rows, overlong prompts) and the resumable data order."""

import json

import pytest

from verl.data.rl_dataset import DataOrder, encode_prompt, load_prompts, read_rows
from verl.models.tiny import build_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def row(question, answer="7", source="synthetic/running_sum"):
    return {
        "data_source": source,
        "prompt": [{"role": "user", "content": question}],
        "reward_model": {"ground_truth": answer},
        "extra_info": {"q": question},
    }


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_prompts_are_chat_templated_once(tokenizer, tmp_path):
    f = write_jsonl(tmp_path / "a.jsonl", [row("a3 b5"), row("a1", answer=3)])
    items = load_prompts([f], tokenizer, "prompt", max_prompt_tokens=64, filter_overlong=True)
    assert [it.ground_truth for it in items] == ["7", "3"]  # answers become strings
    assert tokenizer.decode(items[0].prompt_ids) == "<|user|>a3 b5<|assistant|><think>"
    assert items[0].extra_info == {"q": "a3 b5"} and items[0].data_source == "synthetic/running_sum"
    # a plain-string prompt is the same as a single user message
    assert encode_prompt(tokenizer, "a3 b5") == items[0].prompt_ids


def test_json_and_parquet_read_like_jsonl(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [row("a3"), row("b4")]
    (tmp_path / "r.json").write_text(json.dumps(rows))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "r.parquet")
    assert read_rows(str(tmp_path / "r.json")) == rows
    assert read_rows(str(tmp_path / "r.parquet")) == rows
    (tmp_path / "r.csv").write_text("x")
    with pytest.raises(ValueError, match="unsupported file type '.csv'"):
        read_rows(str(tmp_path / "r.csv"))


def test_bad_rows_name_file_and_row(tokenizer, tmp_path):
    f = write_jsonl(tmp_path / "bad.jsonl", [row("a3"), {"prompt": "a4", "reward_model": {}}])
    with pytest.raises(ValueError, match=r"bad.jsonl row 1: missing reward_model.ground_truth"):
        load_prompts([f], tokenizer, "prompt", 64, True)
    f = write_jsonl(
        tmp_path / "noprompt.jsonl", [row("a3"), {"question": "a3", "reward_model": {"ground_truth": "3"}}]
    )
    with pytest.raises(
        ValueError, match=r"noprompt.jsonl row 1: 'prompt' \(data.prompt_key\) must be a non-empty"
    ):
        load_prompts([f], tokenizer, "prompt", 64, True)
    (tmp_path / "broken.jsonl").write_text('{"prompt": "a"}\n{oops\n')
    with pytest.raises(ValueError, match=r"broken.jsonl:2: not valid JSON"):
        read_rows(str(tmp_path / "broken.jsonl"))
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        read_rows(str(tmp_path / "missing.jsonl"))


def test_overlong_prompts_dropped_or_rejected(tokenizer, tmp_path):
    short, long = row("a3"), row("a3 " * 30)
    f = write_jsonl(tmp_path / "mixed.jsonl", [short, long, short])
    limit = len(encode_prompt(tokenizer, "a3"))
    assert len(load_prompts([f], tokenizer, "prompt", limit, filter_overlong=True)) == 2
    with pytest.raises(ValueError, match=r"mixed.jsonl row 1: prompt has \d+ tokens, more than the"):
        load_prompts([f], tokenizer, "prompt", limit, filter_overlong=False)


def test_data_order_is_a_permutation_per_epoch_and_a_function_of_step():
    order = DataOrder(num_items=5, batch_size=2, seed=3, shuffle=True)
    first_epoch = order.batch_indices(0) + order.batch_indices(1) + order.batch_indices(2)[:1]
    assert sorted(first_epoch) == [0, 1, 2, 3, 4]
    # a fresh object (a resumed run) gives the same batches for the same steps
    again = DataOrder(num_items=5, batch_size=2, seed=3, shuffle=True)
    assert [again.batch_indices(s) for s in range(6)] == [order.batch_indices(s) for s in range(6)]
    assert DataOrder(20, 20, seed=4, shuffle=True).batch_indices(0) != DataOrder(
        20, 20, 3, True
    ).batch_indices(0)
    assert DataOrder(5, 2, seed=3, shuffle=False).batch_indices(2) == [4, 0]  # wraps into the next epoch

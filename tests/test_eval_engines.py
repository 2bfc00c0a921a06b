"""Evaluation through SGLang (`engine=sglang`) against the HF engine: the same greedy traces, chunk by
chunk, in LongCoT and Delethink at equal budgets, and the same scores where the traces agree."""

from __future__ import annotations

import pytest
import transformers

from tests.engine_agreement import assert_samples_agree, evaluate_on_both_engines, save_ending_policy
from tests.test_eval import compose
from verl.config import ConfigError
from verl.eval.config import load_eval_config
from verl.eval.evaluate import load_items

# not marked compares_runs: `make test` reruns SGLang against the HF engine on plain kernels in
# tests/test_sglang_engine.py, through the same near-tie rule (tests/engine_agreement.py)


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory):
    return save_ending_policy(tmp_path_factory.mktemp("ending_policy"))


def test_greedy_evaluation_through_sglang_equals_the_hf_engines(policy_dir, tiny_assets, tmp_path):
    # greedy LongCoT and Delethink at equal total budgets (C = 24, m = 10, I = 3: 24 + 2 x 14 = 52)
    overrides = [
        f"model_path={policy_dir}",
        f"data_files=[{tiny_assets / 'data' / 'val.jsonl'}]",
        "mode=probe",
        "sampling.temperature=0",
        "delethink.chunk_size=24",
        "delethink.keep_head=4",
        "delethink.keep_tail=6",
        "delethink.max_chunks=[3]",
        "num_threads=1",
        "max_num_seqs=8",
    ]
    samples, config = evaluate_on_both_engines(overrides, tmp_path)
    tokenizer = transformers.AutoTokenizer.from_pretrained(policy_dir)
    questions = [item.prompt_ids for item in load_items(config, tokenizer)]
    assert len(questions) == 8 and len(samples["hf"]) == 2 * 8  # both runs, every problem
    model = transformers.AutoModelForCausalLM.from_pretrained(policy_dir).eval()
    whole_traces_equal, chunks_compared = assert_samples_agree(
        model, config, questions, samples["sglang"], samples["hf"]
    )
    assert whole_traces_equal >= 8  # most traces agree whole; a tie may part a few
    assert chunks_compared > len(samples["hf"])  # Delethink traces of more than one chunk were compared


def test_an_unknown_engine_is_refused_before_any_model_loads(tiny_assets, tmp_path):
    overrides = [
        f"model_path={tiny_assets / 'model'}",
        f"data_files=[{tiny_assets / 'data' / 'val.jsonl'}]",
        f"output_dir={tmp_path}",
        "engine=vllm",
    ]
    with pytest.raises(ConfigError, match=r"engine='vllm': must be one of \['hf', 'sglang'\]"):
        load_eval_config(compose(overrides))

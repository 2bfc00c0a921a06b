"""verl/eval/evaluate.py's moving parts, each against values worked by hand: the requests a run sends
(`generate`), the run loop (`run_all`), the engine it builds (`build_engine`), what `evaluate` hands the
engine and the scorer, and the messages and guards of loading and recording. A scripted engine stands in
for the model where none is needed, so that a mutant dies in milliseconds; the tiny model runs where the
code loads one itself. Written for `make mutants` (tests/test_mutants_eval.py holds the pure parts: the
planned runs, the records, the summaries)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

import verl.eval.evaluate as evaluate_module
from tests.engine_agreement import save_ending_policy
from tests.test_mutants_eval import with_
from verl.config import ConfigError, TaskConfig
from verl.core.engine import GenerateOutput, RolloutEngine, SamplingParams
from verl.core.trajectory import PromptItem, Trajectory, Turn
from verl.eval.config import DelethinkEvalConfig, EvalConfig, EvalSamplingConfig, LongCoTEvalConfig
from verl.eval.evaluate import EvalRun, build_engine, evaluate, generate, load_items, run_all, sample_records
from verl.models.tiny import build_tokenizer
from verl.utils.seeding import derive_seed
from verl.workers.reward_manager import DelethinkRewardManager, RewardResult
from verl.workers.rollout.hf_engine import HFRolloutEngine

FIRST_REPLY = 100  # the scripted engine answers its k-th request with the one token FIRST_REPLY + k


class ReplyEngine(RolloutEngine):
    """Records every request and answers the k-th with the single token FIRST_REPLY + k, so a trajectory
    names the request that made it. `stop`: the reply ends with EOS (else it ran out of budget)."""

    def __init__(self, stop: bool = True) -> None:
        self.requests: list[tuple[list[int], SamplingParams]] = []
        self.stop = stop

    async def generate(self, prompt_ids, sampling_params):
        self.requests.append((list(prompt_ids), sampling_params))
        return GenerateOutput(
            [FIRST_REPLY + len(self.requests) - 1], [-0.5], "stop" if self.stop else "length"
        )

    def update_weights(self, named_tensors):
        raise NotImplementedError


class LoopBoundEngine(ReplyEngine):
    """Answers only on its own event loop, as SGLang's engine does (it exposes the loop as `event_loop`)."""

    def __init__(self) -> None:
        super().__init__()
        self.event_loop = asyncio.new_event_loop()

    async def generate(self, prompt_ids, sampling_params):
        assert asyncio.get_running_loop() is self.event_loop, "served on another event loop"
        return await super().generate(prompt_ids, sampling_params)


def scripted_config(**sampling) -> EvalConfig:
    """Only the fields generate and run_all read: the paths are never opened."""
    return EvalConfig(model_path="unused", output_dir="unused", sampling=EvalSamplingConfig(**sampling))


def two_problems() -> list[PromptItem]:
    return [PromptItem([1, 2], "src", "7", {"want": 0.25}), PromptItem([3], "src", "8", {"want": 0.75})]


def test_each_sample_is_requested_with_the_runs_budget_the_sampling_settings_and_its_own_seed():
    config = scripted_config(n=2, seed=7, temperature=0.5, top_p=0.9, top_k=3, ignore_eos=True)
    a, b = two_problems()
    engine = ReplyEngine()
    trajectories = generate(EvalRun("longcot", 5), config, engine, [a, a, b, b])
    # entry i is sample i % 2 of problem i // 2, whatever order the engine saw the requests in
    sent = [engine.requests[t.response_ids[0] - FIRST_REPLY] for t in trajectories]
    assert sent == [
        (prompt, SamplingParams(5, 0.5, 0.9, 3, seed=derive_seed(7, p, j), ignore_eos=True))
        for p, prompt in enumerate(([1, 2], [3]))
        for j in (0, 1)
    ]


def test_a_delethink_run_sends_its_first_chunk_with_c_tokens_and_the_trajectorys_seed():
    params = DelethinkEvalConfig(chunk_size=8, keep_head=2, keep_tail=2, max_chunks=[3]).sweep()[0]
    engine = ReplyEngine(stop=False)  # never ends: three chunks each, 8 then 4 tokens asked for
    generate(EvalRun("delethink", 16, params), scripted_config(seed=7), engine, two_problems()[:1])
    assert [(r[1].max_new_tokens, r[1].seed) for r in engine.requests] == [
        (8, derive_seed(7, 0, 0)), (4, derive_seed(derive_seed(7, 0, 0), 1)),
        (4, derive_seed(derive_seed(7, 0, 0), 2)),
    ]  # fmt: skip


def test_an_engine_with_its_own_event_loop_is_driven_on_that_loop():
    engine = LoopBoundEngine()
    try:
        trajectories = generate(EvalRun("longcot", 5), scripted_config(), engine, two_problems())
    finally:
        engine.event_loop.close()
    assert [t.response_ids for t in trajectories] == [[FIRST_REPLY], [FIRST_REPLY + 1]]


def test_an_overlong_file_or_task_is_refused_under_main_evals_own_key_and_a_tasks_items_carry_its_name(
    tmp_path,
):
    tokenizer = build_tokenizer()
    # "<|user|>" + 100 bytes + "<|assistant|><think>": 103 tokens, past max_prompt_length=96
    long = tmp_path / "long.jsonl"
    long.write_text(json.dumps({"prompt": "x" * 100, "reward_model": {"ground_truth": "1"}}) + "\n")
    with pytest.raises(ConfigError) as file_refused:
        load_items(with_(scripted_config(), data_files=[str(long)]), tokenizer)
    assert str(file_refused.value) == (
        f"max_prompt_length: all 1 prompts of ['{long}'] are longer than the 96 tokens allowed "
        "(max_prompt_length minus any Delethink carry-over); the shortest has 103"
    )
    rows = tmp_path / "t.jsonl"
    rows.write_text(json.dumps({"problem": "x" * 100, "answer": "2"}) + "\n")
    task = TaskConfig(path=str(rows), data_source="task", prompt_template="{problem}")
    with pytest.raises(ConfigError) as task_refused:
        load_items(with_(scripted_config(), tasks={"t": task}), tokenizer)
    assert str(task_refused.value) == (
        f"max_prompt_length: all 1 prompts of task t ({rows}) are longer than the 96 tokens allowed "
        "(max_prompt_length less any Delethink carry-over); the shortest has 103"
    )
    rows.write_text(json.dumps({"problem": "q", "answer": "2"}) + "\n")
    items = load_items(with_(scripted_config(), tasks={"t": task}), tokenizer)
    assert [it.extra_info for it in items] == [{"task": "t", "index": 0}]


def test_a_trajectory_without_its_score_is_refused_not_dropped():
    tokenizer = build_tokenizer()
    trajectories = [Trajectory([Turn([113], [97], [0.0], "stop")])] * 2
    with pytest.raises(ValueError, match=r"^zip\(\) argument 2 is shorter than argument 1$"):
        sample_records(EvalRun("longcot", 4), scripted_config(n=2), two_problems()[:1], trajectories,
                       [RewardResult(1.0, "a")], tokenizer)  # fmt: skip


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from verl.models.tiny import save_tiny

    path = tmp_path_factory.mktemp("tiny") / "model"
    save_tiny(path, seed=0)
    return path


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    return AutoTokenizer.from_pretrained(tiny_model)


def wanted(data_source, solution_str, ground_truth, extra_info=None) -> float:
    """A reward that reads the data source, the ground truth and the extra info it is handed."""
    assert (data_source, ground_truth) in {("src", "7"), ("src", "8")}
    return extra_info["want"]


def test_every_run_is_generated_scored_by_its_samples_and_reported_as_it_ends(tokenizer, capsys):
    config = with_(scripted_config(n=2), **{"longcot.budgets": [5, 6]})
    scorer = DelethinkRewardManager(tokenizer, wanted)
    records, summaries = run_all(config, ReplyEngine(), two_problems(), scorer, tokenizer)
    # each run: problem 0's two samples, then problem 1's; every sample scored with its problem's info
    assert [(r["run"], r["problem_index"], r["sample_index"], r["score"]) for r in records] == [
        (run, p, j, want) for run in ("longcot_B5", "longcot_B6") for p, want in ((0, 0.25), (1, 0.75))
        for j in (0, 1)
    ]  # fmt: skip
    assert [s["label"] for s in summaries] == ["longcot_B5", "longcot_B6"]
    assert [s["metrics"]["all"]["mean@2"] for s in summaries] == [0.5, 0.5]  # (0.25 + 0.75) / 2
    assert all(0 <= s["wall_time_s"] < 60 for s in summaries)  # the run's own seconds, from its start
    out, err = capsys.readouterr()
    # a line per run (one-token traces, each ended by EOS), and tqdm's bar over the runs on stderr
    assert [line.split(" (")[0] for line in out.splitlines()] == [
        f"longcot_B{b}: mean@2=0.500 thinking=1.0 chunks=1.00 eos=1.00" for b in (5, 6)
    ]
    assert "budgets: 100%" in err and "2/2" in err and "run/s]" in err


def engine_config(tmp_path: Path, **changes) -> EvalConfig:
    return with_(EvalConfig(model_path="unused", output_dir=str(tmp_path)), **changes)


def test_the_hf_engine_serves_the_model_in_float32_with_the_rows_seed_and_end_tokens_asked_for(
    tiny_model, tokenizer, tmp_path
):
    engine = build_engine(engine_config(tmp_path, **{"sampling.seed": 5}), tiny_model, tokenizer, 3, 40)
    assert type(engine) is HFRolloutEngine and engine.model.dtype == torch.float32
    assert (engine.max_num_seqs, engine.pad_token_id) == (3, tokenizer.pad_token_id)
    assert engine._seed_generator.initial_seed() == 5  # the seed of requests that bring none
    assert engine.eos_token_ids.tolist() == [tokenizer.eos_token_id]  # 256 in both config files


def test_end_tokens_come_from_the_generation_config_and_without_one_from_the_models_config(
    tiny_model, tokenizer, tmp_path
):
    import shutil

    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    generation = json.loads((model / "generation_config.json").read_text())
    (model / "generation_config.json").write_text(json.dumps({**generation, "eos_token_id": [7, 8]}))
    config = engine_config(tmp_path)
    assert build_engine(config, model, tokenizer, 1, 40).eos_token_ids.tolist() == [7, 8, 256]
    (model / "generation_config.json").unlink()
    config_json = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config_json, "eos_token_id": 9}))
    assert build_engine(config, model, tokenizer, 1, 40).eos_token_ids.tolist() == [9, 256]


def test_sglang_is_started_on_the_cpu_in_float32_with_a_kv_pool_of_the_rows_at_the_longest_request(
    tiny_model, tokenizer, tmp_path, monkeypatch
):
    # the project's own launcher stands in for SGLang's processes: what matters here is what they get
    from verl.workers.rollout import sglang_engine

    launched = {}

    def launch(**server_args):
        launched.update(server_args)
        return None, []

    monkeypatch.setattr(sglang_engine, "_launch_sglang", launch)
    config = engine_config(tmp_path, engine="sglang", **{"sampling.seed": 5})
    engine = build_engine(config, tiny_model, tokenizer, 3, 40)
    assert type(engine) is sglang_engine.SGLangRolloutEngine and engine.eos_token_ids == [256]
    assert launched == {
        "device": "cpu", "model_path": str(tiny_model), "tp_size": 1, "mem_fraction_static": 0.5,
        "dtype": "float32", "random_seed": 5, "max_running_requests": 3, "skip_tokenizer_init": True,
        "enable_memory_saver": False, "enable_deterministic_inference": False, "disable_cuda_graph": True,
        "max_total_tokens": 3 * 40, "log_level": "error",
    }  # fmt: skip


REWARD = """\
def closed_first(data_source, solution_str, ground_truth, extra_info=None):
    return float(solution_str.startswith("</think>"))
"""


@pytest.fixture(scope="module")
def ending_model(tmp_path_factory) -> Path:
    return save_ending_policy(tmp_path_factory.mktemp("ending") / "model")


def test_evaluation_sizes_the_engine_to_its_requests_and_scores_with_the_configured_reward(
    ending_model, tmp_path, monkeypatch
):
    built = []

    def spy(config, model_dir, tokenizer, rows, longest_request):
        built.append((rows, longest_request))
        return build_engine(config, model_dir, tokenizer, rows, longest_request)

    monkeypatch.setattr(evaluate_module, "build_engine", spy)
    (tmp_path / "reward.py").write_text(REWARD)
    data = tmp_path / "val.jsonl"
    rows = [{"prompt": q, "reward_model": {"ground_truth": "1"}} for q in ("a1", "b22")]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = EvalConfig(
        model_path=str(ending_model), output_dir=str(tmp_path / "out"), data_files=[str(data)],
        longcot=LongCoTEvalConfig(budgets=[6, 4]), sampling=EvalSamplingConfig(n=2, temperature=0.0),
        max_num_seqs=3,
    )  # fmt: skip
    config = with_(config, **{"reward.path": str(tmp_path / "reward.py"), "reward.name": "closed_first"})
    threads = torch.get_num_threads()
    untagged = evaluate(with_(config, **{"reward.thinking_tags": False}))
    assert torch.get_num_threads() == threads  # num_threads=0: torch's own count left alone
    # 2 problems x 2 samples = 4 rows, at most 3; the longest request: "<|user|>b22<|assistant|><think>"
    # (6 tokens) and the larger budget, 6
    assert built == [(3, 6 + 6)]
    assert untagged["plot"] == str(tmp_path / "out" / "accuracy_vs_budget.png")  # two runs make a figure
    samples = [json.loads(line) for line in (tmp_path / "out" / "samples.jsonl").open()]
    # greedy, this policy ends "b22"'s traces on its own and runs "a1"'s to the budget
    ended = [s["chunks"][-1]["finish_reason"] == "stop" for s in samples]
    assert ended == [False, False, True, True] * 2
    # without thinking tags a trace that ended is scored as if "</think>" came first
    assert [s["score"] for s in samples] == [float(e) for e in ended]
    evaluate(with_(config, output_dir=str(tmp_path / "tagged"), max_num_seqs=8))
    assert built[1] == (4, 6 + 6)
    tagged = [json.loads(line) for line in (tmp_path / "tagged" / "samples.jsonl").open()]
    assert [s["score"] for s in tagged] == [0.0] * 8  # with them no trace starts with "</think>"

"""SFT on data files (`data.source=files`): rows to examples, loss on the response only, an end-to-end
run on a dozen real-looking jsonl rows (validation loss, checkpoints, from_pretrained, resume), bad
input, Delethink continuation examples checked against the real loop, micro-batching/packing, and LoRA
(model.lora_rank: only the adapters train; the output and every checkpoint hold the merged model and
peft's adapter files; a resume ends on the same adapters)."""

import asyncio
import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from hydra import compose, initialize_config_dir
from peft import PeftModel
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from tests.e2e_utils import HANG_S
from tests.test_sft import ReplayEngine
from tests.tolerances import (
    assert_forward_close,
    assert_gradients_close,
    assert_same_adam_steps,
    metric_approx,
)
from verl.agent_loop.delethink import DelethinkAgentLoop
from verl.config import ConfigError
from verl.config.sft import DataConfig, DelethinkExamplesConfig
from verl.core.engine import SamplingParams
from verl.core.trajectory import PromptItem
from verl.data.rl_dataset import DataError, encode_prompt
from verl.models.tiny import build_model, build_tokenizer, save_tiny
from verl.trainer import main_sft
from verl.trainer.sft import batches
from verl.trainer.sft.continuation import delethink_cuts
from verl.trainer.sft.demo_rows import math_row, write_rows
from verl.trainer.sft.files import Example, load_examples, training_example
from verl.trainer.sft.parallel import SINGLE, init_ranks, local_gpu
from verl.trainer.sft.run import run as run_sft
from verl.utils.checkpoint import ResumeError
from verl.utils.fs import read_jsonl

CONFIG_DIR = Path(main_sft.__file__).parent / "config"
CONTINUATION = [
    "data.continuation.chunk_size=64",
    "data.continuation.keep_head=8",
    "data.continuation.keep_tail=24",
]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("sft_files")
    save_tiny(root / "init")
    write_rows(root / "train.jsonl", [math_row(i) for i in range(12)])
    write_rows(root / "val.jsonl", [math_row(i) for i in range(12, 16)])
    return root


@pytest.fixture
def keep_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def sft_config(files: Path, *overrides: str) -> main_sft.SFTConfig:
    base = [
        f"model.path={files / 'init'}", f"data.train_files={files / 'train.jsonl'}",
        f"data.val_files=[{files / 'val.jsonl'}]", "train.steps=6", "train.batch_size=4", "train.lr=3e-3",
        "train.warmup_steps=0", "train.micro_batches=2", "num_threads=1", "data.max_length=1024",
    ]  # fmt: skip
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return main_sft.load_sft_config(compose(config_name="sft", overrides=base + list(overrides)))


def resume_from_checkpoint(config, step_dir, tmp_path):
    """main_sft as an interrupted run resumes: in tmp_path/resumed, a run directory holding only
    `step_dir`, writing its output to tmp_path/out2. Returns the trainer section it ran with."""
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(step_dir, resumed / step_dir.name)
    (resumed / "latest_checkpointed_iteration.txt").write_text(f"{step_dir.name.split('_')[-1]}\n")
    trainer = dataclasses.replace(config.trainer, default_local_dir=str(resumed))
    run_sft(dataclasses.replace(config, output_dir=str(tmp_path / "out2"), trainer=trainer))
    return trainer


def test_rows_become_the_rl_prompt_and_the_response_with_eos(tokenizer, tmp_path):
    row = math_row(0)
    chat = {
        "messages": [
            {"role": "user", "content": row["prompt"]},
            {"role": "assistant", "content": row["response"]},
        ]
    }
    a = load_examples([str(write_rows(tmp_path / "a.jsonl", [row]))], tokenizer, DataConfig())
    b = load_examples([str(write_rows(tmp_path / "b.jsonl", [chat]))], tokenizer, DataConfig())
    pq.write_table(pa.Table.from_pylist([chat]), tmp_path / "c.parquet")
    c = load_examples([str(tmp_path / "c.parquet")], tokenizer, DataConfig())
    assert a == b == c
    (example,) = a
    assert example.prompt == encode_prompt(tokenizer, row["prompt"])  # what RL and the Delethink loop send
    assert example.prompt[-1] == tokenizer.convert_tokens_to_ids("<think>")
    thinking, answer = row["response"].split("</think>")
    think_end = tokenizer.convert_tokens_to_ids("</think>")
    assert example.target == [*thinking.encode(), think_end, *answer.encode(), tokenizer.eos_token_id]
    assert example.thinking == len(thinking)  # bytes are tokens


def test_only_response_tokens_carry_loss(tokenizer):
    model = build_model(tokenizer, seed=0)
    prompt, target = [5, 6, 7], [8, 9, tokenizer.eos_token_id]
    batch = batches.collate([(prompt, target)], tokenizer.pad_token_id)
    assert batch["labels"].tolist() == [[-100, -100, -100, 8, 9, tokenizer.eos_token_id]]
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"]).logits[0]
        # by hand: positions 2, 3, 4 predict the three response tokens; the prompt predicts nothing
        manual = torch.nn.functional.cross_entropy(logits[2:5], torch.tensor(target))
        assert batches.sft_loss(model, batch).item() == pytest.approx(manual.item(), rel=1e-5)
        assert batches.num_targets(batch) == 3


def test_jsonl_run_logs_validation_saves_a_loadable_model_and_resumes_to_the_same_weights(
    files, tmp_path, keep_threads
):
    run = tmp_path / "run"
    config = sft_config(
        files, f"output_dir={tmp_path / 'out'}", f"trainer.default_local_dir={run}", "trainer.test_freq=3",
        "trainer.save_freq=3", "trainer.logger=[jsonl]", "data.continuation.prob=0.5", *CONTINUATION,
    )  # fmt: skip
    run_sft(config)
    metrics = read_jsonl(run / "metrics.jsonl")
    losses = [m["train/loss"] for m in metrics]
    assert [m["step"] for m in metrics] == list(range(1, 7))
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < 0.85 * losses[0]
    val = [(m["step"], m["val/loss"]) for m in metrics if "val/loss" in m]
    assert [s for s, _ in val] == [3, 6] and val[1][1] < val[0][1]
    assert json.loads((tmp_path / "out" / "sft_metrics.json").read_text())["val"]["val/loss"] == val[1][1]
    assert sorted(p.name for p in run.glob("global_step_*")) == ["global_step_3", "global_step_6"]
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    saved = AutoModelForCausalLM.from_pretrained(run / "global_step_6" / "actor" / "huggingface")
    initial = AutoModelForCausalLM.from_pretrained(files / "init")
    name = "model.layers.0.mlp.up_proj.weight"
    assert torch.equal(model.state_dict()[name], saved.state_dict()[name])
    assert not torch.equal(model.state_dict()[name], initial.state_dict()[name])

    # a run interrupted after its step-3 checkpoint, resumed: the same data, draws and final weights
    trainer = resume_from_checkpoint(config, run / "global_step_3", tmp_path)
    resumed = tmp_path / "resumed"
    first, second = (
        load_file(tmp_path / "out" / "model.safetensors"),
        load_file(tmp_path / "out2" / "model.safetensors"),
    )
    assert all(torch.equal(first[k], second[k]) for k in first)
    assert [m["train/loss"] for m in read_jsonl(resumed / "metrics.jsonl")] == losses[3:]
    # a resume must be the same run: a key that defines it may not change
    other_lr = dataclasses.replace(config.train, lr=1e-3)
    with pytest.raises(ResumeError, match=r"differ from its saved config:\n  train.lr: 0.003 -> 0.001\n"):
        run_sft(dataclasses.replace(config, trainer=trainer, train=other_lr))


def bad(tmp_path: Path, rows: list[dict], **data) -> str:
    path = write_rows(tmp_path / "bad.jsonl", rows)
    with pytest.raises(DataError) as error:
        load_examples([str(path)], build_tokenizer(), DataConfig(**data))
    return str(error.value)


def test_bad_rows_name_the_file_the_row_and_the_key(tmp_path):
    good = math_row(0)
    assert "bad.jsonl row 1: 'response' (data.response_key) must be a non-empty string, got None" in bad(
        tmp_path, [good, {"prompt": "q"}]
    )
    assert "row 1: 'response' (data.response_key) must be a non-empty string" in bad(
        tmp_path, [good, {"prompt": "q", "response": "  "}]
    )
    assert "bad.jsonl: needs a 'messages' column (data.messages_key) or 'question' and 'response'" in bad(
        tmp_path, [good], prompt_key="question"
    )
    assert (
        "row 0: 'messages' (data.messages_key) must be a list of {role, content} messages ending in"
        in bad(
            tmp_path,
            [{"messages": [{"role": "assistant", "content": "a"}, {"role": "user", "content": "q"}]}],
        )
    )
    too_long = bad(tmp_path, [good, good], max_length=100)
    assert (
        "bad.jsonl row 0: " in too_long
        and "more than data.max_length=100; set data.truncation=right" in too_long
    )
    cut = load_examples(
        [str(tmp_path / "bad.jsonl")], build_tokenizer(), DataConfig(max_length=100, truncation="right")
    )
    assert [len(e.prompt) + len(e.target) for e in cut] == [100, 100]


def test_bad_input_stops_the_cli_before_training_with_exit_code_2(files, tmp_path):
    write_rows(tmp_path / "t.jsonl", [math_row(0), {"prompt": "What is 2 + 2?", "response": ""}])
    cli = [sys.executable, "-m", "verl.trainer.main_sft", "--config-name=sft", f"model.path={files / 'init'}",
           f"output_dir={tmp_path / 'out'}", f"trainer.default_local_dir={tmp_path / 'run'}"]  # fmt: skip
    result = subprocess.run(
        [*cli, f"data.train_files={tmp_path / 't.jsonl'}"], capture_output=True, text=True, timeout=HANG_S
    )
    assert result.returncode == 2
    assert result.stderr.startswith(
        f"data error: {tmp_path / 't.jsonl'} row 1: 'response' (data.response_key)"
    )
    assert "Traceback" not in result.stderr and not (tmp_path / "run").exists()
    with pytest.raises(ConfigError) as error:
        sft_config(files, f"output_dir={tmp_path / 'o'}", f"data.train_files=[{tmp_path / 'missing.jsonl'}]")
    assert f"data.train_files[0]='{tmp_path / 'missing.jsonl'}': no such file" in str(error.value)


def test_file_continuation_prompts_are_the_prompts_the_delethink_loop_sends(tokenizer, tmp_path):
    row = math_row(3)
    cfg = DelethinkExamplesConfig(prob=1.0, chunk_size=64, keep_head=8, keep_tail=24)
    (example,) = load_examples([str(write_rows(tmp_path / "r.jsonl", [row]))], tokenizer, DataConfig())
    assert example.thinking > cfg.chunk_size  # long enough to be cut
    engine = ReplayEngine(example.target, tokenizer.eos_token_id)
    loop = DelethinkAgentLoop(engine, dataclasses.replace(cfg.params, max_chunks=50))
    item = PromptItem(encode_prompt(tokenizer, row["prompt"]), "math", "x")
    asyncio.run(loop.run(item, SamplingParams(max_new_tokens=cfg.chunk_size, seed=0)))
    cuts = delethink_cuts(len(example.target), cfg.params)
    assert len(engine.prompts) == len(cuts) + 1 >= 3
    seen = set()
    for position in range(200):  # every example of the row is one of the loop's chunks, each cut drawn
        prompt, target = training_example(example, cfg, seed=0, position=position)
        k = engine.prompts.index(prompt)
        assert k >= 1 and target == example.target[cuts[k - 1] : cuts[k - 1] + cfg.params.intermediate_budget]
        seen.add(k)
    assert seen == set(range(1, len(cuts) + 1))
    short = Example(example.prompt, example.target[:40], thinking=40)  # thinking within one chunk: whole
    assert training_example(short, cfg, 0, 0) == (short.prompt, short.target)
    half = [
        training_example(example, dataclasses.replace(cfg, prob=0.5), 0, p)[0] == example.prompt
        for p in range(200)
    ]
    assert 70 <= sum(half) <= 130


@pytest.mark.compares_runs
def test_token_budget_and_packing_give_the_one_batch_loss_and_gradient(tokenizer, tmp_path):
    rows = [math_row(i) for i in range(6)] + [{"prompt": "1+1?", "response": "2</think>\\boxed{2}"}]
    pairs = [
        (e.prompt, e.target)
        for e in load_examples([str(write_rows(tmp_path / "r.jsonl", rows))], tokenizer, DataConfig())
    ]

    def step(pieces):
        model = build_model(tokenizer, seed=0)
        loss = batches.backward_mean_loss(model, pieces)
        return loss, {name: p.grad for name, p in model.named_parameters()}

    whole_loss, whole_grad = step([batches.collate(pairs, tokenizer.pad_token_id)])
    budget = batches.local_micro_batches(pairs, SINGLE, tokenizer.pad_token_id, 1, max_tokens=400)
    assert len(budget) >= 3 and all(b["attention_mask"].sum() <= 400 for b in budget)
    packed = batches.local_micro_batches(pairs, SINGLE, tokenizer.pad_token_id, 2, packed=True)
    assert [b["input_ids"].shape[0] for b in packed] == [1, 1]  # one unpadded sequence per piece
    for pieces in (budget, packed):
        loss, grad = step(pieces)
        assert loss == metric_approx(whole_loss)
        assert_gradients_close(grad, whole_grad)


@pytest.mark.slow
@pytest.mark.compares_runs
def test_two_ranks_take_the_steps_of_one_process(files, tmp_path, keep_threads):
    common = [
        f"model.path={files / 'init'}", f"data.train_files={files / 'train.jsonl'}",
        f"data.val_files=[{files / 'val.jsonl'}]", "train.steps=4", "train.batch_size=4", "train.lr=3e-3",
        "train.warmup_steps=0", "num_threads=1", "data.max_length=1024", "trainer.logger=[jsonl]",
        "trainer.test_freq=2", "data.continuation.prob=0.5", *CONTINUATION,
        "trainer.device=cpu",  # the files' default, auto, takes a GPU per rank where there is one
    ]  # fmt: skip
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        one = [f"output_dir={tmp_path / 'one'}", f"trainer.default_local_dir={tmp_path / 'one_run'}"]
        run_sft(main_sft.load_sft_config(compose(config_name="sft", overrides=common + one)))
    # two FSDP2 ranks (gloo), cut differently: a token budget per forward, packed rows
    two = [f"output_dir={tmp_path / 'two'}", f"trainer.default_local_dir={tmp_path / 'two_run'}",
           "train.max_tokens_per_micro_batch=300", "train.use_remove_padding=true"]  # fmt: skip
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    result = subprocess.run(
        [*torchrun, "-m", "verl.trainer.main_sft", "--config-name=sft", *common, *two],
        capture_output=True, text=True, timeout=HANG_S,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]

    def logged(run: str) -> list[tuple[int, str, float]]:
        rows = read_jsonl(tmp_path / run / "metrics.jsonl")
        return [(m["step"], k, m[k]) for m in rows for k in ("train/loss", "val/loss") if k in m]

    one_logged, two_logged = logged("one_run"), logged("two_run")
    assert [(s, k) for s, k, _ in two_logged] == [(s, k) for s, k, _ in one_logged]
    # summed in another order (tests/tolerances.py); the later steps' losses at weights that may differ
    # where a rounding-sized gradient stepped either way (they barely move a loss: their gradients are ~0)
    for (_, key, two_value), (_, _, one_value) in zip(two_logged, one_logged, strict=True):
        assert two_value == metric_approx(one_value), key
    first, second = (load_file(tmp_path / out / "model.safetensors") for out in ("one", "two"))
    initial = load_file(files / "init" / "model.safetensors")
    assert_same_adam_steps(second, first, lr=3e-3, steps=4)  # train.lr, train.steps
    assert not torch.allclose(first["model.norm.weight"], initial["model.norm.weight"], atol=1e-3)


def test_a_rank_takes_the_gpu_of_its_local_rank_and_a_node_short_of_gpus_is_refused_on_every_rank():
    assert local_gpu({"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}, gpus=2, device="auto") == 1
    assert local_gpu({}, gpus=1, device="cuda") == 0  # torchrun without the variables: one rank
    for local_rank in ("0", "1"):  # rank 0 too: it would wait for rank 1 in the process group
        with pytest.raises(ConfigError) as error:
            local_gpu({"LOCAL_RANK": local_rank, "LOCAL_WORLD_SIZE": "2"}, gpus=1, device="auto")
        assert str(error.value) == (
            "trainer.device=auto: torchrun starts 2 ranks on this node and torch sees 1 GPU(s); use "
            "--nproc_per_node=1 or trainer.device=cpu"
        )


@pytest.mark.skipif(torch.cuda.is_available(), reason="asks for CUDA where there is none")
def test_asking_for_cuda_without_a_gpu_stops_before_the_model_loads():
    assert init_ranks("auto") == SINGLE and init_ranks("cpu") == SINGLE
    with pytest.raises(ConfigError, match=r"^trainer.device=cuda: torch sees no CUDA device here"):
        init_ranks("cuda")


def test_the_task_source_resumes_to_the_same_weights_too(files, tmp_path, keep_threads):
    overrides = [
        f"model.path={files / 'init'}", "train.steps=4", "train.warmup_steps=1", "train.batch_size=4",
        "train.stop_at_accuracy=null", "eval.num_problems=0", "num_threads=1", "trainer.save_freq=2",
        "task.continuation.prob=0.5",
    ]  # fmt: skip

    def config(name: str) -> main_sft.SFTConfig:
        run = f"trainer.default_local_dir={tmp_path / (name + '_run')}"
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            cfg = compose(
                config_name="sft_tiny", overrides=[*overrides, f"output_dir={tmp_path / name}", run]
            )
        return main_sft.load_sft_config(cfg)

    run_sft(config("whole"))
    (tmp_path / "resumed_run").mkdir()
    shutil.copytree(tmp_path / "whole_run" / "global_step_2", tmp_path / "resumed_run" / "global_step_2")
    (tmp_path / "resumed_run" / "latest_checkpointed_iteration.txt").write_text("2\n")
    run_sft(config("resumed"))
    first, second = (load_file(tmp_path / out / "model.safetensors") for out in ("whole", "resumed"))
    assert all(torch.equal(first[k], second[k]) for k in first)
    metrics = [json.loads((tmp_path / out / "sft_metrics.json").read_text()) for out in ("whole", "resumed")]
    assert metrics[0]["losses"] == metrics[1]["losses"] and len(metrics[0]["losses"]) == 4


SFT_LORA = ("model.lora_rank=4", "model.lora_alpha=8", "train.steps=4", "train.lr=1e-2")


def test_lora_keys_are_checked(files, tmp_path):
    out = f"output_dir={tmp_path / 'out'}"
    with pytest.raises(ConfigError) as error:
        sft_config(files, out, "model.lora_rank=-2", "model.target_modules=[]")
    assert "model.lora_rank=-2: must be >= 0" in str(error.value)
    assert "model.target_modules=[]: must name at least one module" in str(error.value)
    with pytest.raises(ConfigError, match=r"model.target_modules=\['q_proj', 'qkv'\]: 'qkv' is not a module"):
        sft_config(files, out, "model.lora_rank=4", "model.target_modules=[q_proj,qkv]")


@pytest.mark.slow
@pytest.mark.compares_runs
def test_lora_sft_trains_adapters_exports_merged_and_resumes_to_the_same_adapters(
    files,
    tmp_path,
    keep_threads,
):
    run = tmp_path / "run"
    config = sft_config(
        files, *SFT_LORA, f"output_dir={tmp_path / 'out'}", f"trainer.default_local_dir={run}",
        "trainer.save_freq=2",
    )  # fmt: skip
    run_sft(config)
    out = tmp_path / "out"
    merged = AutoModelForCausalLM.from_pretrained(out)
    initial = AutoModelForCausalLM.from_pretrained(files / "init")
    peft_model = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(files / "init"), out / "lora_adapter"
    )
    ids = torch.tensor([[60, 61, 62, 63]])
    with torch.no_grad():
        assert_forward_close(merged(ids).logits, peft_model(ids).logits)
        assert (merged(ids).logits - initial(ids).logits).abs().max() > 1e-4  # the adapters learned
    # untargeted weights are the initial ones: only adapters trained
    for name in ("model.norm.weight", "model.embed_tokens.weight"):
        assert torch.equal(merged.state_dict()[name], initial.state_dict()[name])
    assert (run / "global_step_2" / "actor" / "lora_adapter" / "adapter_model.safetensors").is_file()

    resume_from_checkpoint(config, run / "global_step_2", tmp_path)
    first, second = (
        (p / "lora_adapter" / "adapter_model.safetensors").read_bytes() for p in (out, tmp_path / "out2")
    )
    assert first == second

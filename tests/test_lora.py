"""LoRA (peft) in the colocated worker, in-process: only the adapters train, the reference policy is the
actor with its adapters off, the HF engine samples from the merged adapters, and a checkpoint holds
peft's adapter files and a merged HF model that resume and `from_pretrained` read back."""

import asyncio
from types import SimpleNamespace

import pytest
import torch
from peft import PeftModel
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, Qwen2ForCausalLM

from tests.e2e_utils import tiny_config
from tests.tolerances import assert_forward_close
from verl.core.batch import collate_rows, trajectory_rows
from verl.core.engine import SamplingParams
from verl.core.trajectory import PromptItem
from verl.models import lora
from verl.models.tiny import build_model, build_tokenizer
from verl.single_controller.fsdp_workers import ActorRolloutRefWorker

pytestmark = pytest.mark.slow

LORA = (
    "actor_rollout_ref.model.lora_rank=4",
    "actor_rollout_ref.model.lora_alpha=8",
    "actor_rollout_ref.actor.use_kl_loss=true",
    "actor_rollout_ref.actor.optim.lr=1e-2",
    "data.max_response_length=12",
)


def lora_worker(assets, run_dir) -> ActorRolloutRefWorker:
    worker = ActorRolloutRefWorker(tiny_config("tiny_longcot", assets, run_dir, *LORA))
    worker.init_model()
    return worker


@pytest.fixture(scope="module")
def worker(tiny_assets, tmp_path_factory):
    w = lora_worker(tiny_assets, tmp_path_factory.mktemp("lora_worker"))
    yield w
    w.shutdown()


def sample_batch(worker, seed=0) -> dict[str, torch.Tensor]:
    prompt = worker.tokenizer("<|user|>a3 b5<|assistant|><think>", add_special_tokens=False)["input_ids"]
    params = [SamplingParams(max_new_tokens=12, temperature=1.0, seed=seed + i) for i in range(4)]
    trajectories = asyncio.run(worker.generate([PromptItem(prompt, "test", "0")] * 4, params))
    return collate_rows(trajectory_rows(trajectories, [1.0, -1.0, 0.5, -0.5]), worker.tokenizer.pad_token_id)


def base_log_probs(worker, batch) -> torch.Tensor:
    """Log-probs of the batch's responses under the model at model.path, loaded on its own."""
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    base = AutoModelForCausalLM.from_pretrained(
        worker.config.actor_rollout_ref.model.path, dtype=torch.float32
    )
    plain = DataParallelPPOActor(base.eval(), None, worker.config.actor_rollout_ref.actor, 1.0, 12)
    return plain.compute_log_prob(batch, 8)


def weights(worker) -> dict[str, torch.Tensor]:
    """A copy: one unsharded rank's full state dict holds the model's own tensors."""
    return {k: v.clone() for k, v in worker.full_state_dict().items()}


def update(worker, batch) -> dict[str, float]:
    batch["old_log_probs"] = worker.compute_log_prob(batch)
    batch["ref_log_prob"] = worker.compute_ref_log_prob(batch)
    return worker.update_actor(batch, num_mini_batches=1)


def test_adapters_start_from_the_seed_whatever_the_global_rng():
    """Every FSDP2 rank draws its own copy of A: the copies must agree, and a rerun must start alike."""
    from types import SimpleNamespace

    from verl.models.tiny import build_model, build_tokenizer

    keys = SimpleNamespace(lora_rank=4, lora_alpha=8.0, target_modules=["all-linear"])

    def adapters(global_seed: int, seed: int) -> dict[str, torch.Tensor]:
        model = build_model(build_tokenizer(), seed=0)
        torch.manual_seed(global_seed)
        wrapped = lora.add_adapters(model, keys, lora.CAUSAL_LM, seed=seed)
        return {n: p.detach() for n, p in wrapped.named_parameters() if p.requires_grad}

    first, second, other = adapters(1, seed=7), adapters(2, seed=7), adapters(1, seed=8)
    assert all(torch.equal(first[k], second[k]) for k in first)
    assert any(not torch.equal(first[k], other[k]) for k in first if ".lora_A." in k)


@pytest.mark.compares_runs
def test_only_adapters_train_and_the_engine_and_reference_follow(worker):
    trainable = lora.trainable_names(worker.model)
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    optimized = {id(p) for group in worker.optimizer.param_groups for p in group["params"]}
    assert optimized == {id(p) for p in lora.trainable_parameters(worker.model)}
    before = weights(worker)

    batch = sample_batch(worker)
    metrics = update(worker, batch)
    assert metrics["actor/grad_norm"] > 0
    after = weights(worker)
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and changed <= trainable  # the base weights did not move; the adapters did
    assert any(".lora_A." in k for k in changed) and any(".lora_B." in k for k in changed)

    # the engine samples from the updated policy: the actor recomputes the log-probs it reported
    batch = sample_batch(worker, seed=100)
    mask = batch["response_mask"].bool()
    actor = worker.compute_log_prob(batch)
    assert_forward_close(actor[mask], batch["rollout_log_probs"][mask])
    # the reference is the base model (adapters off), which the update moved the actor away from
    ref = worker.compute_ref_log_prob(batch)
    assert_forward_close(ref[mask], base_log_probs(worker, batch)[mask])
    assert (ref[mask] - actor[mask]).abs().max() > 1e-3


@pytest.mark.compares_runs
def test_checkpoint_holds_peft_adapters_and_a_merged_model_and_resumes_exactly(worker, tiny_assets, tmp_path):
    update(worker, sample_batch(worker, seed=200))
    out = tmp_path / "actor"
    worker.save_checkpoint(str(out))
    assert (out / "lora_adapter" / "adapter_model.safetensors").is_file()
    assert (out / "lora_adapter" / "adapter_config.json").is_file()

    batch = sample_batch(worker, seed=300)
    mask = batch["response_mask"].bool()
    actor = worker.compute_log_prob(batch)
    model_path = worker.config.actor_rollout_ref.model.path
    ids = batch["input_ids"][:1]
    # peft's loader on the base, and the merged HF export, compute the actor's policy
    peft_model = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(model_path), out / "lora_adapter"
    )
    merged = AutoModelForCausalLM.from_pretrained(out / "huggingface")
    with torch.no_grad():
        assert_forward_close(merged(ids).logits, peft_model(ids).logits)
    assert not any(".lora_" in k for k in merged.state_dict())

    # a new worker resumes bit for bit: weights and optimizer state, then the same next update
    resumed = lora_worker(tiny_assets, tmp_path / "resumed")
    try:
        resumed.load_checkpoint(str(out))
        for k, v in worker.full_state_dict().items():
            assert torch.equal(resumed.full_state_dict()[k], v), k
        torch.testing.assert_close(resumed.compute_log_prob(batch)[mask], actor[mask], atol=0, rtol=0)
        update(worker, dict(batch))
        update(resumed, dict(batch))
        for k, v in worker.full_state_dict().items():
            assert torch.equal(resumed.full_state_dict()[k], v), k
    finally:
        resumed.shutdown()


def adapter_bytes(checkpoint) -> dict[str, bytes]:
    return {
        part: (checkpoint / part / "lora_adapter" / "adapter_model.safetensors").read_bytes()
        for part in ("actor", "critic")
    }


def test_lora_run_with_a_lora_critic_resumes_bit_identically(tiny_assets, tmp_path):
    """Actor and critic both LoRA (gae, KL loss): 2 steps, resume to 3, against 3 steps straight: the same
    rollouts and byte-identical adapter files; the checkpoint's merged models load with from_pretrained
    and compute what peft computes on the base; main_eval evaluates the checkpoint and the viewer draws
    the run."""
    from peft import PeftModel
    from transformers import AutoModelForTokenClassification

    from tests.e2e_utils import ONE_PROCESS, tiny_config
    from tests.test_eval import base_overrides, run_eval
    from verl.trainer.launch import run
    from verl.utils.fs import read_jsonl

    keys = (
        "data.max_response_length=16", "actor_rollout_ref.model.lora_rank=4",
        "actor_rollout_ref.actor.use_kl_loss=true", "algorithm.adv_estimator=gae", "critic.optim.lr=1e-3",
        "critic.model.lora_rank=2", "critic.model.target_modules=[q_proj,v_proj]", "trainer.save_freq=1",
        ONE_PROCESS,
    )  # fmt: skip
    resumed, straight = tmp_path / "resumed", tmp_path / "straight"
    run(tiny_config("tiny_longcot", tiny_assets, resumed, *keys, "trainer.total_training_steps=2"))
    run(tiny_config("tiny_longcot", tiny_assets, resumed, *keys, "trainer.total_training_steps=3"))
    run(tiny_config("tiny_longcot", tiny_assets, straight, *keys, "trainer.total_training_steps=3"))
    metrics = read_jsonl(resumed / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2, 3]
    assert all(m["actor/grad_norm"] > 0 and m["critic/grad_norm"] > 0 for m in metrics)
    assert read_jsonl(resumed / "rollouts" / "step_3.jsonl") == read_jsonl(
        straight / "rollouts" / "step_3.jsonl"
    )
    assert adapter_bytes(resumed / "global_step_3") == adapter_bytes(straight / "global_step_3")
    assert adapter_bytes(resumed / "global_step_2") != adapter_bytes(resumed / "global_step_3")

    critic_dir = resumed / "global_step_3" / "critic"
    merged = AutoModelForTokenClassification.from_pretrained(critic_dir / "huggingface", num_labels=1)
    base = AutoModelForTokenClassification.from_pretrained(tiny_assets / "model", num_labels=1)
    peft_critic = PeftModel.from_pretrained(base, critic_dir / "lora_adapter")
    ids = torch.tensor([[60, 61, 62, 63, 64]])
    with torch.no_grad():
        assert_forward_close(merged(ids).logits, peft_critic(ids).logits)

    summary = run_eval(
        base_overrides(tiny_assets, tmp_path / "eval")[1:]
        + [f"model_path={resumed / 'global_step_3'}", "mode=longcot", "longcot.budgets=[8]"]
    )
    assert summary  # the merged export is a model main_eval runs
    # the viewer finds the run's tokenizer in the merged export and draws its rollouts
    from verl.tools.viewer.__main__ import main as viewer
    from verl.tools.viewer.tokens import find_tokenizer

    assert find_tokenizer(resumed) == resumed / "global_step_3" / "actor" / "huggingface"
    assert viewer([str(resumed), "--step", "3", "--out", str(tmp_path / "viewer.html")]) == 0
    assert "\\u003c|user|>" in (tmp_path / "viewer.html").read_text()  # a prompt, "<" escaped in <script>


@pytest.mark.parametrize("tied", [True, False])
def test_a_gathered_state_with_its_own_lm_head_copy_saves_the_files_of_the_model_itself(tmp_path, tied):
    config = build_model(build_tokenizer(), seed=0).config  # the tiny model, its head tied or not below
    config.tie_word_embeddings = tied
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    gathered = {name: t.clone() for name, t in model.state_dict().items()}  # an FSDP2 gather: own storage
    assert "lm_head.weight" in gathered
    for out, state in (("own", model.state_dict()), ("gathered", gathered)):
        lora.save_model(tmp_path / out, tmp_path / "adapters", model, state, SimpleNamespace(lora_rank=0),
                        lora.CAUSAL_LM, lambda: Qwen2ForCausalLM(config))  # fmt: skip
    own, saved = (load_file(tmp_path / out / "model.safetensors") for out in ("own", "gathered"))
    # a tied head is the embedding's tensor, saved once; an untied one is a tensor of its own
    assert saved.keys() == own.keys() and ("lm_head.weight" in saved) == (not tied)
    assert all(torch.equal(saved[k], own[k]) for k in own)

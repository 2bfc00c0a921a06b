"""RL from the real pretrained model (SmolLM2-135M-Instruct, tests/test_real_model.py's conversion) with
LoRA in each environment, at a size the suite affords: the configs examples/real_model_rl.sh runs
(smollm2_gsm8k_{longcot,delethink}.yaml) with small batches and budgets, one process, and the dense digit
reward (the model solves no GSM8K problem, so the math reward would give GRPO nothing to follow).

The LongCoT run trains two steps; the Delethink run one, then resumes from its checkpoint for a second;
one prompt of two samples a step.
Each is read back: the metrics
(reward, KL, the engine's log-probs against the actor's), the merged export (base + scaled B A, loadable
with from_pretrained, the model main_eval evaluates), wandb's table of the model's own text, the viewer.
"""

import json
import runpy
import statistics
from pathlib import Path

import pytest
import torch
import transformers
from peft import PeftModel

from tests.tolerances import FORWARD_ULPS, reordered_atol
from verl.config import compose_config
from verl.models import from_gguf
from verl.tools.viewer.__main__ import main as viewer
from verl.tools.viewer.runs import read_run
from verl.trainer.config_loader import load_config
from verl.trainer.launch import run
from verl.utils.fs import read_jsonl

pytestmark = pytest.mark.slow

DIGIT_REWARD = Path(__file__).parent / "assets" / "digit_reward.py"
SIZES = {
    # LongCoT B = 32; Delethink C = 16, m = 8, I = 3: 16 + 2 * 8 = 32
    "longcot": ["data.max_response_length=32"],
    "delethink": [
        "algorithm.delethink.chunk_size=16",
        "algorithm.delethink.keep_head=4",
        "algorithm.delethink.keep_tail=4",
        "algorithm.delethink.max_chunks=3",
    ],
}


@pytest.fixture(scope="module")
def checkpoint():
    path = from_gguf.packaged_gguf()
    return from_gguf.convert(path, from_gguf.default_out(path))


def train(environment: str, checkpoint: Path, run_dir: Path, steps: int) -> None:
    overrides = [
        f"actor_rollout_ref.model.path={checkpoint}",
        f"trainer.default_local_dir={run_dir}",
        f"custom_reward_function.path={DIGIT_REWARD}",
        f"trainer.total_training_steps={steps}",
        "trainer.save_freq=2",
        "trainer.test_freq=2",
        "trainer.launcher=local",
        "trainer.logger=[jsonl,wandb]",
        "trainer.log_val_generations=2",
        "val_tasks.gsm8k.max_samples=2",
        "data.train_batch_size=1",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=1",
        "actor_rollout_ref.actor.optim.lr=1e-3",  # the adapters move visibly in two steps
        *SIZES[environment],
    ]
    run(load_config(compose_config(f"smollm2_gsm8k_{environment}", overrides)))


@pytest.mark.parametrize(("environment", "runs"), [("longcot", [2]), ("delethink", [1, 2])])
def test_lora_rl_on_the_real_model_trains_checkpoints_resumes_and_exports(
    environment, runs, checkpoint, tmp_path, monkeypatch
):
    monkeypatch.setenv("WANDB_MODE", "offline")
    run_dir = tmp_path / environment
    for steps in runs:  # a second run resumes from the first one's last checkpoint
        train(environment, checkpoint, run_dir, steps)
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    last = runs[-1]
    assert [m["step"] for m in metrics] == list(range(last + 1))  # validation at 0, then each step once
    validated = [m["step"] for m in metrics if "val/gsm8k/mean@1" in m]
    # before training, every test_freq (2) steps and after each run's last step
    assert validated == sorted({0, *runs, *range(2, last + 1, 2)})
    trained = metrics[1:]
    for m in trained:
        assert m["train/score_mean"] > 0  # the digit reward of GSM8K text
        assert m["perf/peak_rss_gib"] > 1.0  # two float32 copies of 135 M parameters: actor and engine
        # the HF engine's copy (adapters merged in) samples what the actor computes, to float32 rounding
        atol = reordered_atol(m["rollout_corr/training_log_ppl"], FORWARD_ULPS)
        assert (
            max(abs(m["rollout_corr/log_ppl_diff_max"]), abs(m["rollout_corr/log_ppl_diff_min"])) <= 50 * atol
        )
    assert trained[0]["actor/grad_norm"] > 0
    assert trained[0]["actor/kl_loss"] == pytest.approx(0, abs=1e-6)  # the first step's policy is the base
    assert trained[-1]["actor/kl_loss"] > 1e-6  # the adapters have moved it since
    if environment == "delethink":
        assert max(m["train/num_turns_mean"] for m in trained) > 1  # traces went past a boundary

    # the merged export: base + (alpha / r) B A, as peft merges the checkpoint's adapter
    final = run_dir / f"global_step_{last}" / "actor"
    merged = transformers.AutoModelForCausalLM.from_pretrained(final / "huggingface").eval()
    base = transformers.AutoModelForCausalLM.from_pretrained(checkpoint).eval()
    with_adapter = PeftModel.from_pretrained(base, final / "lora_adapter").eval()
    ids = torch.tensor(
        [transformers.AutoTokenizer.from_pretrained(final / "huggingface")("12 + 7 =")["input_ids"]]
    )
    with torch.no_grad():
        want = with_adapter(ids).logits
        got = merged(ids).logits
        plain = with_adapter.get_base_model()
        with with_adapter.disable_adapter():
            untrained = plain(ids).logits
    torch.testing.assert_close(got, want, atol=50 * reordered_atol(want, FORWARD_ULPS), rtol=0)
    assert (got - untrained).abs().max() > 1e-3  # training changed the policy

    # the model's own text in wandb's table and the viewer
    generations = read_jsonl(run_dir / "val_generations.jsonl")
    assert {g["step"] for g in generations} == set(validated)
    assert all(g["chunks"][0]["response"] for g in generations)
    (table,) = run_dir.glob("wandb/offline-run-*/files/media/table/val/generations_0_*.table.json")
    written = json.loads(table.read_text(encoding="utf-8"))
    assert generations[0]["chunks"][0]["response"] in written["data"][0][4]

    # the viewer: every step's traces, a Delethink trace cut at its chunk boundaries
    groups = read_run(run_dir)
    assert {f"train step {n}" for n in range(1, last + 1)} <= set(groups)
    chunked = [t for n in range(1, last + 1) for t in groups[f"train step {n}"] if len(t.chunks) > 1]
    assert bool(chunked) == (environment == "delethink")
    assert all(t.keep_head == 4 and t.keep_tail == 4 for t in chunked)
    page = tmp_path / "viewer.html"
    assert viewer([str(run_dir), "--tokenizer", str(checkpoint), "--out", str(page)]) == 0
    assert "train step 1" in page.read_text(encoding="utf-8")

    # examples/real_model_rl.sh's record reads the run back
    record = runpy.run_path(str(Path(__file__).parents[1] / "recipes" / "real_model" / "record.py"))
    figures = record["summarise"](run_dir)
    assert figures["steps"] == last and figures["score"] == pytest.approx(
        statistics.fmean(m["train/score_mean"] for m in trained)
    )
    assert figures["step_s"] >= figures["gen_s"] > 0 and figures["peak_rss_gib"] > 1.0
    assert (
        figures["before"] == metrics[0]["val/gsm8k/mean@1"]
        and figures["after"] == metrics[-1]["val/gsm8k/mean@1"]
    )
    caption = record["setting"](record["run_config"](run_dir))
    assert (
        caption
        == "GRPO with LoRA (rank 16) on GSM8K, 1 prompt x 2 samples a step, thinking budget 32 in both"
    )

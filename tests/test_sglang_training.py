"""RL with rollout.name=sglang on CPU: tiny LongCoT and Delethink runs train through SGLang's engine under
Ray and under the one-process launcher, resume from their checkpoints under the other launcher, and the
rollout-correction metrics show the engine's log-probs and the actor's agree to float32 rounding."""

import psutil
import pytest
import torch

from tests.e2e_utils import DELETHINK, tiny_config
from tests.tolerances import FORWARD_ULPS, reordered_atol
from verl.trainer.launch import run
from verl.utils.fs import read_jsonl

pytestmark = pytest.mark.slow

# the engine computes in float32 like the actor; its memory saver needs a GPU
SGLANG = ("actor_rollout_ref.rollout.name=sglang", "actor_rollout_ref.rollout.free_cache_engine=false")
MODES = {"tiny_longcot": ("data.max_response_length=24",), "tiny_delethink": DELETHINK}


def assert_the_engine_left_only_its_own_processes(ray_session) -> None:
    """A one-process run hosts SGLang's engine here, beside Ray's processes (the session's fixture): its
    shutdown stops the engine's scheduler and detokenizer, and no other child of this process."""
    names = [child.name() for child in psutil.Process().children(recursive=True)]
    assert not [name for name in names if name.startswith("sglang")], names
    assert ray_session.get(ray_session.put(7)) == 7  # Ray's processes still serve this driver


def assert_engine_and_actor_agree(metrics: dict) -> None:
    """Each trace's mean log-prob under the engine and under the actor's recomputation differ by float32
    rounding alone: the same weights, the same float32 forward, sums in another order."""
    # log p = z - logsumexp(z): for the tiny model's small logits, in ulps of |log p| ~ log(vocabulary)
    atol = reordered_atol(metrics["rollout_corr/training_log_ppl"], FORWARD_ULPS)
    for key in ("log_ppl_diff_max", "log_ppl_diff_min", "log_ppl_abs_diff", "kl"):
        assert abs(metrics[f"rollout_corr/{key}"]) <= atol, (key, metrics[f"rollout_corr/{key}"], atol)
    assert metrics["rollout_corr/ppl_ratio"] == pytest.approx(1.0, abs=2 * atol)


@pytest.mark.parametrize(
    "name, first, then", [("tiny_delethink", "ray", "local"), ("tiny_longcot", "local", "ray")]
)
def test_a_run_through_sglang_trains_and_resumes_under_the_other_launcher(
    name, first, then, tiny_assets, ray_session, tmp_path
):
    run_dir = tmp_path / name
    common = (*MODES[name], *SGLANG, "trainer.save_freq=1")
    run(
        tiny_config(
            name, tiny_assets, run_dir, *common, "trainer.total_training_steps=2", f"trainer.launcher={first}"
        )
    )
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2]
    assert_the_engine_left_only_its_own_processes(ray_session)
    for m in metrics:
        assert torch.isfinite(torch.tensor(m["actor/pg_loss"]))
        assert_engine_and_actor_agree(m)
    assert metrics[0]["actor/grad_norm"] > 0
    if name == "tiny_delethink":
        assert metrics[0]["delethink/num_turns_max"] > 1  # an untrained model rarely stops

    # resumed from step 2's checkpoint: the engine starts from the trained weights, not the model path
    run(
        tiny_config(
            name, tiny_assets, run_dir, *common, "trainer.total_training_steps=3", f"trainer.launcher={then}"
        )
    )
    assert_the_engine_left_only_its_own_processes(ray_session)
    resumed = read_jsonl(run_dir / "metrics.jsonl")
    assert [m["step"] for m in resumed] == [1, 2, 3]
    assert_engine_and_actor_agree(resumed[-1])
    assert (run_dir / "latest_checkpointed_iteration.txt").read_text().strip() == "3"

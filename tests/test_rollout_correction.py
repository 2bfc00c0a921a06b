"""The rollout/training mismatch: its metrics and corrections as pure functions against hand-computed
numbers, their config rules, and on real CPU runs in both environments: the engine sampling in bfloat16
against the actor in float32 shows a mismatch, float32 against float32 about none, and a correction that
rejects every row leaves no gradient."""

import json
import math
import time
from pathlib import Path

import pytest
import torch
from wandb.proto import wandb_internal_pb2

from tests.e2e_utils import DELETHINK, HANG_S, ONE_PROCESS, tiny_config, tiny_longcot_with
from tests.test_checkpoint_retention import _entry_point
from tests.test_local_launcher import assert_refused
from verl.config import ConfigError
from verl.core.rollout_correction import (
    rejected_rows,
    rollout_mismatch_metrics,
    row_weights,
    sequence_is_weights,
    token_log_ratios,
)
from verl.trainer.launch import run
from verl.utils.fs import read_jsonl

# Two rows of three tokens; the third token of row 0 is not trained (masked), and its ratio would
# trip every bound. Token ratios r = pi_old / pi_rollout:
#   row 0: 0.5 / 0.4 = 1.25, 0.25 / 0.25 = 1              (masked: 0.01 / 0.9)
#   row 1: 0.2 / 0.1 = 2,    0.4 / 0.5 = 0.8,  0.9 / 0.9 = 1
OLD = torch.tensor([[0.5, 0.25, 0.01], [0.2, 0.4, 0.9]], dtype=torch.float64).log()
ROLLOUT = torch.tensor([[0.4, 0.25, 0.9], [0.1, 0.5, 0.9]], dtype=torch.float64).log()
MASK = torch.tensor([[1, 1, 0], [1, 1, 1]])


def test_mismatch_metrics_over_trained_tokens():
    metrics = rollout_mismatch_metrics(OLD, ROLLOUT, MASK)
    # |p_old - p_rollout|: 0.1, 0, 0.1, 0.1, 0
    assert metrics["train/rollout_prob_diff_mean"] == pytest.approx(0.3 / 5)
    assert metrics["train/rollout_prob_diff_max"] == pytest.approx(0.1)
    # k3 = r - 1 - log r: 1.25 -> 0.25 - log 1.25, 1 -> 0, 2 -> 1 - log 2, 0.8 -> -0.2 - log 0.8, 1 -> 0
    k3 = (0.25 - math.log(1.25)) + (1 - math.log(2)) + (-0.2 - math.log(0.8))
    assert metrics["train/rollout_kl"] == pytest.approx(k3 / 5)
    # exp(mean(-log r)) = exp(-log(1.25 * 2 * 0.8) / 5) = 2 ** (-1/5): the trainer is surer (< 1)
    assert metrics["train/rollout_ppl_ratio"] == pytest.approx(2 ** (-1 / 5))
    assert rollout_mismatch_metrics(OLD, ROLLOUT, torch.zeros_like(MASK)) == {
        "train/rollout_prob_diff_mean": 0.0, "train/rollout_prob_diff_max": 0.0,
        "train/rollout_kl": 0.0, "train/rollout_ppl_ratio": 1.0,
    }  # fmt: skip
    same = rollout_mismatch_metrics(OLD, OLD, MASK)  # the engine and trainer agree
    assert same["train/rollout_kl"] == 0.0 and same["train/rollout_ppl_ratio"] == 1.0
    with pytest.raises(ValueError, match=r"expected three equal \[rows, T\] shapes"):
        rollout_mismatch_metrics(OLD, ROLLOUT[:, :2], MASK)


def test_sequence_weights_are_the_rows_ratio_capped():
    log_r = token_log_ratios(OLD, ROLLOUT, MASK)
    # row 0: 1.25 x 1 = 1.25; row 1: 2 x 0.8 x 1 = 1.6, capped at 1.5
    torch.testing.assert_close(
        sequence_is_weights(log_r, 1.5), torch.tensor([1.25, 1.5], dtype=torch.float64)
    )
    torch.testing.assert_close(
        sequence_is_weights(log_r, 2.0), torch.tensor([1.25, 1.6], dtype=torch.float64)
    )
    # the ratio is bounded to exp(20) before the cap: no overflow from a long row
    huge = torch.full((1, 3), 30.0, dtype=torch.float64)
    assert sequence_is_weights(huge, float("inf")).item() == pytest.approx(math.exp(20))


def test_rows_out_of_bounds_are_rejected():
    log_r = token_log_ratios(OLD, ROLLOUT, MASK)

    def rejected(*args):
        return rejected_rows(log_r, MASK, *args).tolist()

    # sequence: 1.25 and 1.6 against [1 / 1.5, 1.5]
    assert rejected("sequence", 1.5, None, None) == [False, True]
    assert rejected("sequence", 1.7, 1.3, None) == [True, False]  # 1.25 < the lower bound 1.3
    # geometric: 1.25 ** (1/2) = 1.118 and 1.6 ** (1/3) = 1.170 against [1 / 1.15, 1.15]
    assert rejected("geometric", 1.15, None, None) == [False, True]
    # veto: row 1 holds a token at 0.8 (row 0's masked 0.011 does not count)
    assert rejected(None, None, None, 0.85) == [False, True]
    assert rejected(None, None, None, 0.75) == [False, False]
    # a row without trained tokens is never rejected
    assert rejected_rows(
        log_r, torch.tensor([[0, 0, 0], [1, 1, 1]]), "sequence", 1.5, None, 0.85
    ).tolist() == [
        False,
        True,
    ]


def test_row_weights_combine_the_corrections_and_report_them():
    padded_old = torch.cat([OLD, torch.zeros(1, 3, dtype=torch.float64)])
    padded_rollout = torch.cat([ROLLOUT, torch.zeros(1, 3, dtype=torch.float64)])
    padded_mask = torch.cat([MASK, torch.zeros(1, 3, dtype=MASK.dtype)])  # a padding row
    weights, metrics = row_weights(
        padded_old, padded_rollout, padded_mask, rollout_is="sequence", rollout_is_threshold=1.5,
        rollout_rs="sequence", rollout_rs_threshold=1.5,
    )  # fmt: skip
    # row 0 weighted 1.25; row 1 rejected; the padding row untouched
    assert weights.dtype == torch.float32 and weights.tolist() == [1.25, 0.0, 1.0]
    # over the two rows with tokens: IS weights 1.25 and 1.5 (before the rejection), one of two rejected
    assert metrics == {"train/rollout_is_weight_mean": 1.375, "train/rollout_rejected_rows": 0.5}
    assert row_weights(OLD, ROLLOUT, MASK) == (None, {})  # every correction off
    weights, metrics = row_weights(OLD, ROLLOUT, MASK, rollout_token_veto_threshold=0.85)
    assert weights.tolist() == [1.0, 0.0] and metrics == {"train/rollout_rejected_rows": 0.5}


def test_correction_keys_are_checked(tiny_assets, tmp_path):
    key = "algorithm.rollout_correction"
    cases = {
        f"{key}.rollout_is=token": f"{key}.rollout_is='token': must be one of [None, 'sequence'] (the "
        "token-level weight is actor_rollout_ref.actor.tis_imp_ratio_cap)",
        f"{key}.rollout_is_threshold=0.5": f"{key}.rollout_is_threshold=0.5: must be >= 1: a cap below 1 "
        "would shrink the weight of rows the engine and trainer agree on",
        f"{key}.rollout_rs=token": f"{key}.rollout_rs='token': must be one of "
        "[None, 'sequence', 'geometric']",
        f"{key}.rollout_rs=geometric": f"{key}.rollout_rs_threshold=None: must be set (> 1) with "
        "rollout_rs='geometric'",
        f"{key}.rollout_rs_threshold=0.9": f"{key}.rollout_rs_threshold=0.9: must be null or > 1 (the upper "
        "bound of a row's ratio)",
        f"{key}.rollout_rs_threshold_lower=1.5": f"{key}.rollout_rs_threshold_lower=1.5: must be null (off) "
        "or in (0, 1)",
        f"{key}.rollout_token_veto_threshold=0": f"{key}.rollout_token_veto_threshold=0.0: must be null "
        "(off) or in (0, 1)",
        "actor_rollout_ref.rollout.dtype=int8": "actor_rollout_ref.rollout.dtype='int8': must be null or one "
        "of ['float32', 'bfloat16', 'float16']",
    }
    for override, line in cases.items():
        with pytest.raises(ConfigError) as refused:
            tiny_longcot_with(tiny_assets, override)
        assert str(refused.value) == line
    with pytest.raises(ConfigError) as refused:
        tiny_longcot_with(
            tiny_assets, f"{key}.rollout_is=sequence", "actor_rollout_ref.actor.tis_imp_ratio_cap=2"
        )
    assert str(refused.value) == (
        f"{key}.rollout_is='sequence': weights rows by the same ratios that actor_rollout_ref.actor."
        "tis_imp_ratio_cap=2 weights tokens by (TIS); use one of them"
    )
    # the entry point: exit code 2, one line naming the key, before any model
    done = _entry_point(tiny_assets, tmp_path, f"{key}.rollout_token_veto_threshold=1.5")
    assert_refused(done, f"{key}.rollout_token_veto_threshold")


# -- on real runs -----------------------------------------------------------------------------------

MISMATCH = ("train/rollout_prob_diff_mean", "train/rollout_prob_diff_max", "train/rollout_kl",
            "train/rollout_ppl_ratio")  # fmt: skip
ENVIRONMENTS = {"tiny_longcot": ("data.max_response_length=8",), "tiny_delethink": DELETHINK}


def one_step(name, assets, run_dir, *overrides):
    run(tiny_config(name, assets, run_dir, *ENVIRONMENTS[name], ONE_PROCESS, "trainer.total_training_steps=1",
                    *overrides))  # fmt: skip
    (metrics,) = read_jsonl(run_dir / "metrics.jsonl")
    return metrics


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ENVIRONMENTS))
def test_the_engine_in_bfloat16_shows_a_mismatch_and_float32_none(name, tiny_assets, tmp_path, capsys):
    """Over every trained row (Delethink: all chunk rows). The thresholds sit orders of magnitude from
    both sides: bfloat16 keeps 8 significant bits (log-probs off by ~1e-3 relative), float32 24 (the two
    float32 forwards differ only in how their kernels sum)."""
    exact = one_step(name, tiny_assets, tmp_path / "float32", "actor_rollout_ref.rollout.dtype=float32")
    low = one_step(
        name, tiny_assets, tmp_path / "bfloat16", "actor_rollout_ref.rollout.dtype=bfloat16",
        "trainer.logger=[console,jsonl,wandb]",
    )  # fmt: skip
    assert exact["train/rollout_prob_diff_max"] < 1e-7 and exact["train/rollout_kl"] < 1e-10
    assert abs(exact["train/rollout_ppl_ratio"] - 1) < 1e-6
    assert low["train/rollout_prob_diff_max"] > 1e-6 and low["train/rollout_kl"] > 1e-8
    assert abs(low["train/rollout_ppl_ratio"] - 1) > 1e-6
    assert low["train/rollout_kl"] > 1000 * exact["train/rollout_kl"]
    assert 0 < low["train/rollout_prob_diff_mean"] <= low["train/rollout_prob_diff_max"]
    # the same numbers on the console and in wandb (what the offline run wrote, read back)
    console = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step 1: ")]
    assert len(console) == 1 and all(f"{key}={low[key]:.4g}" in console[0] for key in MISMATCH)
    (logged,) = logged_to_wandb(tmp_path / "bfloat16")
    assert logged["_step"] == 1 and {key: logged[key] for key in MISMATCH} == {
        key: low[key] for key in MISMATCH
    }


def logged_to_wandb(run_dir: Path) -> list[dict]:
    """The history of the offline wandb run in `run_dir`. wandb's service process writes it to the file
    a moment after run.finish() has returned, so this waits for it (HANG_S at most: a safety net)."""
    deadline = time.monotonic() + HANG_S
    while True:
        (run_file,) = (run_dir / "wandb").glob("offline-run-*/run-*.wandb")
        rows = wandb_history(run_file)
        if rows or time.monotonic() > deadline:
            return rows
        time.sleep(0.2)


def wandb_history(path: Path) -> list[dict]:
    """The history rows (one per wandb.log) of an offline run's .wandb file: after its 7-byte header,
    LevelDB's log format, records of protobuf `Record`s in 32 KiB blocks, each record behind a 7-byte
    header (CRC, little-endian length, type: 1 whole, 2 first, 3 middle, 4 last part)."""
    data = path.read_bytes()
    block, pos, pending, rows = 32768, 7, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            if record.WhichOneof("record_type") == "history":
                items = record.history.item
                rows.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in items})
    return rows


@pytest.mark.slow
def test_corrections_reach_the_loss(tiny_assets, tmp_path):
    """The engine in bfloat16 with a sequence bound of 1 +- 1e-6 on each row's ratio: every row is
    rejected, so the step has no gradient; the same step without the bound has one."""
    common = ("actor_rollout_ref.rollout.dtype=bfloat16", "algorithm.rollout_correction.rollout_is=sequence")
    weighted = one_step("tiny_longcot", tiny_assets, tmp_path / "weighted", *common)
    rejected = one_step(
        "tiny_longcot", tiny_assets, tmp_path / "rejected", *common,
        "algorithm.rollout_correction.rollout_rs=sequence",
        "algorithm.rollout_correction.rollout_rs_threshold=1.000001",
    )  # fmt: skip
    assert weighted["actor/grad_norm"] > 0 and weighted["actor/pg_loss"] != 0
    assert "train/rollout_rejected_rows" not in weighted
    assert rejected["train/rollout_rejected_rows"] == 1.0
    assert rejected["actor/grad_norm"] == 0.0 and rejected["actor/pg_loss"] == 0.0
    # bfloat16's per-row ratios sit within a few percent of 1
    assert rejected["train/rollout_is_weight_mean"] == weighted["train/rollout_is_weight_mean"]
    assert 0.9 < weighted["train/rollout_is_weight_mean"] < 1.1

"""The names a config may choose among in verl/core/: advantage estimators, loss aggregation modes, KL
estimators and controllers, rollout-correction levels.

Plain tuples, no torch: the config checks (verl/config/) read them, and a command that only checks or
prints a config (`--cfg job`, a typo, a dry run) answers without paying torch's import.
"""

from __future__ import annotations

ADV_ESTIMATORS: tuple[str, ...] = (
    "grpo",
    "rloo",
    "reinforce_plus_plus",
    "reinforce_plus_plus_baseline",
    "remax",
    "gae",
)
# one advantage per trajectory from the scores alone; the others give each response token its own value
OUTCOME_ESTIMATORS: tuple[str, ...] = ("grpo", "rloo")
KL_CTRL_TYPES: tuple[str, ...] = ("fixed", "adaptive")
LOSS_AGG_MODES: tuple[str, ...] = (
    "token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
    "seq-mean-token-norm-trace-length",
)
# the one mode that is a mean over trajectories: a trajectory's rows (Delethink: its chunks) share its
# trace length, so its row terms add up to its token mean; it alone divides by the trajectory count
TRAJECTORY_MEAN_MODE = "seq-mean-token-norm-trace-length"
KL_PENALTY_TYPES: tuple[str, ...] = ("kl", "abs", "mse", "low_var_kl")

# rollout correction (rollout_correction.py): the importance-weight and rejection levels
IS_LEVELS = (None, "sequence")
RS_LEVELS = (None, "sequence", "geometric")

"""What a run will do, from its validated config alone: the plan `DRY_RUN=1` prints.

No model, data or GPU is touched, so a user can check a cluster recipe on a laptop.
"""

from __future__ import annotations

from verl.agent_loop import agent_loop_class
from verl.config import PolicyIterationConfig
from verl.single_controller.placement import describe_layout


def describe_plan(config: PolicyIterationConfig) -> str:
    data, arr, tr = config.data, config.actor_rollout_ref, config.trainer
    rollout, actor = arr.rollout, arr.actor
    trajectories = config.trajectories_per_step
    rows = [
        ("experiment", f"{tr.project_name}/{tr.experiment_name} (group {tr.group}), trainer {tr.name}"),
        ("model", arr.model.path),
        ("hardware", f"{tr.nnodes} node(s) x {tr.n_gpus_per_node} {tr.device} = {tr.world_size} worker(s), "
                     + ("in this process (launcher local)" if tr.launcher == "local" else "Ray actors")),
        ("placement", "this process" if tr.launcher == "local"
                      else describe_layout(tr.nnodes, tr.n_gpus_per_node, tr.device)),
        ("rollout engine", rollout.name),
        ("steps", f"{tr.total_training_steps}, validate every {tr.test_freq}, save every {tr.save_freq}"),
        ("batch", f"{data.train_batch_size} prompts x {rollout.n} samples = {trajectories} trajectories"),
        ("optimizer", f"{config.num_mini_batches} step(s) per batch, {actor.ppo_micro_batch_size_per_gpu} "
                      f"rows per micro-batch, lr {actor.optim.lr:g}, loss {actor.loss_agg_mode}"
                      + ("" if actor.loss_divisor_rows is None
                         else f" x a mini-batch's rows / {actor.loss_divisor_rows} (loss_divisor_rows)")),
    ]  # fmt: skip
    alg, critic = config.algorithm, config.critic
    advantages = alg.adv_estimator
    if config.uses_critic:
        advantages += (
            f" (gamma {alg.gamma:g}, lam {alg.lam:g}): critic from {config.critic_model_path}, "
            f"lr {critic.optim.lr:g}, cliprange_value {critic.cliprange_value:g}, "
            f"{tr.critic_warmup} warm-up step(s)"
        )
    rows.append(("advantages", advantages))
    rows += agent_loop_class(config).plan_rows(config)  # the environment, its budgets and rows
    rows += [
        ("thinking budget", f"{config.thinking_budget} tokens per trajectory"),
        ("tokens per step", f"at most {trajectories * config.thinking_budget:,} sampled thinking tokens"),
    ]
    return "\n".join(f"{label:<16}{text}" for label, text in rows)

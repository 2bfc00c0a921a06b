"""What a run will do, from its validated config alone: the plan `DRY_RUN=1` prints.

No model, data or GPU is touched, so a user can check a cluster recipe on a laptop.
"""

from __future__ import annotations

from verl.trainer.config_schema import PolicyIterationConfig


def describe_plan(config: PolicyIterationConfig) -> str:
    data, arr, tr = config.data, config.actor_rollout_ref, config.trainer
    rollout, actor = arr.rollout, arr.actor
    trajectories = data.train_batch_size * rollout.n
    mini_batches = actor.fixed_num_optim_steps or data.train_batch_size // actor.ppo_mini_batch_size
    workers = tr.nnodes * tr.n_gpus_per_node
    rows = [
        ("experiment", f"{tr.project_name}/{tr.experiment_name} (group {tr.group}), trainer {tr.name}"),
        ("model", arr.model.path),
        ("hardware", f"{tr.nnodes} node(s) x {tr.n_gpus_per_node} {tr.device} = {workers} worker(s)"),
        ("rollout engine", rollout.name),
        ("steps", f"{tr.total_training_steps}, validate every {tr.test_freq}, save every {tr.save_freq}"),
        ("batch", f"{data.train_batch_size} prompts x {rollout.n} samples = {trajectories} trajectories"),
        ("optimizer", f"{mini_batches} step(s) per batch, {actor.ppo_micro_batch_size_per_gpu} rows per "
                      f"micro-batch, lr {actor.optim.lr:g}, loss {actor.loss_agg_mode}"),
    ]  # fmt: skip
    if config.is_delethink:
        p = config.delethink_params
        rows += [
            ("environment", "Delethink (Markovian thinking)"),
            ("chunk budget", f"first C = {p.chunk_size}, later {p.intermediate_budget}, "
                             f"up to I = {p.max_chunks} chunks"),
            ("carry-over", f"m = keep_head {p.keep_head} + keep_tail {p.keep_tail} = {p.carry} "
                           f"({p.trimmer} trimmer)"),
            ("context", f"<= {data.max_prompt_length} prompt + {p.chunk_size} new per chunk"),
            ("rows per step", f"{trajectories} to {trajectories * p.max_chunks} (one per chunk)"),
        ]  # fmt: skip
    elif rollout.agent.default_agent_loop == "gym":
        gym = rollout.gym
        env = (gym.env_config or {}).get("name", "from each row's env_config")
        ctx = (gym.ctx_config or {}).get("name", "none (or each row's ctx_config)")
        rows += [
            ("environment", f"gym: env {env}, context manager {ctx}"),
            (
                "turns",
                f"up to {rollout.multi_turn.max_assistant_turns} model turns, training on {gym.train_on}",
            ),
            (
                "context",
                f"<= {data.max_prompt_length} prompt + {data.max_response_length} new tokens per turn",
            ),
        ]
    else:
        rows += [
            ("environment", "LongCoT (one response)"),
            ("context", f"<= {data.max_prompt_length} prompt + {data.max_response_length} new tokens"),
            ("rows per step", str(trajectories)),
        ]
    rows += [
        ("thinking budget", f"{config.thinking_budget} tokens per trajectory"),
        ("tokens per step", f"at most {trajectories * config.thinking_budget:,} sampled thinking tokens"),
    ]
    return "\n".join(f"{label:<16}{text}" for label, text in rows)

"""The rules of a typed config that need nothing above this floor: each section's own (its
`problems(key)`), the rules between sections, and the files a run reads."""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
from pathlib import Path
from typing import Any

from verl.config.data import TaskConfig
from verl.config.policy_iteration import PolicyIterationConfig
from verl.config.rules import MAKE_TINY, TINY_DIR, join_key
from verl.models.lora_keys import ALL_LINEAR, BLOCK_LINEAR_LAYERS
from verl.models.model_dir import hf_engine_problem, model_path_problem
from verl.utils.math_data import hub_problem, save_command, vendored_file_problem


def _field(node: Any, name: str) -> Any:
    return node[name] if isinstance(node, dict) else getattr(node, name)


def value_at(c: PolicyIterationConfig, key: str) -> Any:
    return functools.reduce(_field, key.split("."), c)


def section_problems(section: Any, key: str) -> list[str]:
    """`section.problems(key)`, then the same for every section below it (tasks included)."""
    # a section without rules of its own (ActorRolloutRefConfig) has no `problems`
    errors = section.problems(key) if hasattr(section, "problems") else []
    for f in dataclasses.fields(section):
        value, field_key = getattr(section, f.name), join_key(key, f.name)
        if dataclasses.is_dataclass(value):
            errors += section_problems(value, field_key)
        elif isinstance(value, dict):  # train_tasks / val_tasks: a section per name
            for name, child in value.items():
                if dataclasses.is_dataclass(child):
                    errors += section_problems(child, join_key(field_key, name))
    return errors


# (holds, the key a broken rule is reported under, the rule)
Rule = tuple[bool, str, str]
ACTOR, ROLLOUT = "actor_rollout_ref.actor", "actor_rollout_ref.rollout"


def cross_section_problems(c: PolicyIterationConfig) -> list[str]:
    """Rules that tie one section to another, as `key=value: rule` lines. What the agent loop and the
    rollout source need of the rest is theirs to say (their `config_problems`, checked by
    verl/trainer/config_loader.py)."""
    rules = [
        *_data_rules(c), *_estimator_rules(c), *_device_rules(c), *_critic_and_lora_rules(c),
        *_correction_rules(c), *_rank_rules(c),
    ]  # fmt: skip
    return [f"{key}={value_at(c, key)!r}: {rule}" for holds, key, rule in rules if not holds]


def _data_rules(c: PolicyIterationConfig) -> list[Rule]:
    rules = [
        (
            len(getattr(c.data, f"{split}_files")) > 0 or len(getattr(c, f"{split}_tasks")) > 0,
            f"data.{split}_files",
            f"must list at least one file, or name tasks in {split}_tasks",
        )
        for split in ("train", "val")
    ]
    mini_batch = c.actor_rollout_ref.actor.ppo_mini_batch_size
    rules.append((
        mini_batch <= 0 or c.data.train_batch_size % mini_batch == 0,
        "data.train_batch_size",
        f"must be divisible by {ACTOR}.ppo_mini_batch_size={mini_batch} (both count prompts)",
    ))  # fmt: skip
    return rules


def _estimator_rules(c: PolicyIterationConfig) -> list[Rule]:
    estimator, rollout = c.algorithm.adv_estimator, c.actor_rollout_ref.rollout
    return [
        (
            estimator not in ("grpo", "rloo") or rollout.n >= 2,
            f"{ROLLOUT}.n",
            f"must be >= 2 with algorithm.adv_estimator={estimator!r}: a group of one has zero advantage",
        ),
        (
            estimator != "remax" or not rollout.env_manager.enable,
            "algorithm.adv_estimator",
            f"remax generates a greedy baseline per prompt through the worker group; it does not run with "
            f"{ROLLOUT}.env_manager.enable=true",
        ),
    ]


def _device_rules(c: PolicyIterationConfig) -> list[Rule]:
    arr, device = c.actor_rollout_ref, c.trainer.device
    rules = [
        # SGLang 0.5.23 on a CPU: its memory saver and its LoRA layers need CUDA (docs/GPU.md)
        (
            arr.rollout.name != "sglang" or device == "cuda" or not arr.rollout.free_cache_engine,
            f"{ROLLOUT}.free_cache_engine",
            "releases SGLang's memory through torch_memory_saver, which needs a GPU; with "
            "trainer.device=cpu set it to false",
        ),
        (
            arr.rollout.name != "sglang" or device == "cuda" or not arr.model.lora_rank,
            "actor_rollout_ref.model.lora_rank",
            f"SGLang's LoRA layers need a GPU (they pin host memory); with trainer.device=cpu serve a LoRA "
            f"policy with {ROLLOUT}.name=hf",
        ),
        (
            arr.model.attn_implementation != "flash_attention_2" or device == "cuda",
            "actor_rollout_ref.model.attn_implementation",
            f"flash-attention runs on GPU only, but trainer.device={device!r}; use sdpa on CPU",
        ),
    ]
    rules += [
        (
            not value_at(c, f"{section}.{key}") or device == "cuda",
            f"{section}.{key}",
            "offloading moves GPU memory to the CPU; with trainer.device=cpu there is nothing to offload",
        )
        for section in (f"{ACTOR}.fsdp_config", "critic.fsdp_config")
        for key in ("param_offload", "optimizer_offload")
    ]
    return rules


def _critic_and_lora_rules(c: PolicyIterationConfig) -> list[Rule]:
    arr, estimator = c.actor_rollout_ref, c.algorithm.adv_estimator
    # SGLang's LoRA serves a block's linear layers (docs/GPU.md)
    unserved = [m for m in arr.model.target_modules if m not in (ALL_LINEAR, *BLOCK_LINEAR_LAYERS)]
    return [
        (
            c.critic.model.lora_rank == 0 or estimator == "gae",
            "critic.model.lora_rank",
            f"gives the critic adapters, but only algorithm.adv_estimator=gae has a critic (it is "
            f"{estimator!r}); set it to 0",
        ),
        (
            arr.rollout.name != "sglang" or not arr.model.lora_rank or not unserved,
            "actor_rollout_ref.model.target_modules",
            f"SGLang applies LoRA to {ALL_LINEAR} or to {list(BLOCK_LINEAR_LAYERS)} only, not {unserved}",
        ),
        (
            c.trainer.critic_warmup == 0 or estimator == "gae",
            "trainer.critic_warmup",
            f"warms up the critic, which only algorithm.adv_estimator=gae has (it is {estimator!r}); "
            "set it to 0",
        ),
    ]


def _correction_rules(c: PolicyIterationConfig) -> list[Rule]:
    correction, tis_cap = c.algorithm.rollout_correction, c.actor_rollout_ref.actor.tis_imp_ratio_cap
    return [
        (
            correction.rollout_is is None or tis_cap <= 0,
            "algorithm.rollout_correction.rollout_is",
            f"weights trajectories by the same ratios that {ACTOR}.tis_imp_ratio_cap={tis_cap:g} weights "
            "tokens by (TIS); use one of them",
        ),
        (
            not correction.bypass_mode or tis_cap <= 0,
            f"{ACTOR}.tis_imp_ratio_cap",
            "must be <= 0 (off) with algorithm.rollout_correction.bypass_mode=true: the old log-probs are "
            "then the engine's, so every TIS ratio is 1",
        ),
    ]


def _rank_rules(c: PolicyIterationConfig) -> list[Rule]:
    # the delethink trainer's rows vary in number (and so do dynamic-batch rows): only ppo splits evenly
    arr, tr = c.actor_rollout_ref, c.trainer
    mini_rows, world_size = arr.actor.ppo_mini_batch_size * arr.rollout.n, tr.world_size
    return [
        (
            tr.name != "ppo" or arr.actor.use_dynamic_bsz or world_size <= 0 or mini_rows % world_size == 0,
            f"{ACTOR}.ppo_mini_batch_size",
            f"times {ROLLOUT}.n = {mini_rows} rows per mini-batch must split evenly over "
            f"trainer.nnodes x trainer.n_gpus_per_node = {world_size} ranks",
        )
    ]


# ---------------------------------------------------------------------------------------------------
# Paths (relative to the working directory; Hydra does not chdir, see hydra.job.chdir)


def path_problems(c: PolicyIterationConfig) -> list[str]:
    """Every file a run reads exists: the model, data, tasks, reward function, resume point, flash_attn."""
    errors: list[str] = []

    def missing(key: str, path: str, problem: str) -> None:
        hint = ""
        if Path(path).resolve().is_relative_to(TINY_DIR.resolve()):
            hint = f"; make the tiny model and data first: {MAKE_TINY}"
        errors.append(f"{key}={path!r}: {problem}{hint}")

    model_path = c.actor_rollout_ref.model.path
    model_problem = model_path_problem(model_path)
    if model_problem:
        missing("actor_rollout_ref.model.path", model_path, model_problem)
    elif c.actor_rollout_ref.rollout.name == "hf" and Path(model_path).is_dir():
        engine_problem = hf_engine_problem(Path(model_path))
        if engine_problem:
            errors.append(f"actor_rollout_ref.model.path={model_path!r}: {engine_problem} (rollout.name=hf)")
    critic_path = c.critic.model.path
    critic_problem = critic_path and c.algorithm.adv_estimator == "gae" and model_path_problem(critic_path)
    if critic_problem:
        missing("critic.model.path", critic_path, critic_problem)
    errors += lora_target_problems(c)
    for key in ("train_files", "val_files"):
        for i, path in enumerate(getattr(c.data, key)):
            if not Path(path).is_file():
                problem = "a directory, not a data file" if Path(path).is_dir() else "no such file"
                missing(f"data.{key}[{i}]", path, problem)
    for split in ("train", "val"):
        for name, task in getattr(c, f"{split}_tasks").items():
            problem = task_source_problem(f"{split}_tasks.{name}", name, task)
            errors += [problem] if problem else []
    attention = c.actor_rollout_ref.model.attn_implementation
    if attention == "flash_attention_2" and importlib.util.find_spec("flash_attn") is None:
        missing(
            "actor_rollout_ref.model.attn_implementation", attention,
            "the flash_attn package is not installed (pip install -e '.[gpu]', see setup.py)",
        )  # fmt: skip
    reward_path = c.custom_reward_function.path
    if reward_path is not None and not Path(reward_path).is_file():
        missing("custom_reward_function.path", reward_path, "no such file")
    resume_path = c.trainer.resume_from_path
    if c.trainer.resume_mode == "path" and resume_path and not Path(resume_path).exists():
        missing("trainer.resume_from_path", resume_path, "no such checkpoint")
    return errors


def task_source_problem(key: str, name: str, task: TaskConfig) -> str | None:
    """Why the rows of task `name` (at `key` in the entry point's config) cannot be read, in one line naming
    the key: a missing file, a stored file that no longer matches SOURCES.md, or no file and a Hugging
    Face hub that cannot give the dataset; None when they can be read (no file is opened but the stored
    ones' checksums, no row is downloaded)."""
    if task.path is not None:
        if not Path(task.path).is_file():
            hub = task.hf_dataset and f"; {key}.path=null loads {task.hf_dataset} from the Hugging Face hub"
            return f"{key}.path={task.path!r}: no such file{hub or ''}"
        changed = vendored_file_problem(task.path)
        return f"{key}.path={task.path!r}: {changed}" if changed else None
    if not task.hf_dataset:
        return None  # TaskConfig.problems names this one
    unreachable = hub_problem(task.hf_dataset)
    if unreachable is None:
        return None
    file = f"{name}.jsonl"
    return (
        f"{key}: no local file ({key}.path is null) and the Hugging Face hub cannot give {task.source} "
        f"({unreachable}); where there is network access save it, "
        f"{save_command(task.hf_dataset, task.hf_split, file)}, then pass {key}.path=/path/to/{file}"
    )


def lora_target_problems(c: PolicyIterationConfig) -> list[str]:
    """Listed LoRA target modules the model lacks, or that LoRA cannot adapt: read from the model's
    config.json (built on the meta device, no weights), for local model directories that pass their
    own checks (a hub id's config is not fetched: no network before the run)."""
    sections = [
        ("actor_rollout_ref.model", c.actor_rollout_ref.model, c.actor_rollout_ref.model.path, "CAUSAL_LM")
    ]
    if c.uses_critic:
        sections.append(("critic.model", c.critic.model, c.critic_model_path, "TOKEN_CLS"))
    errors = []
    for key, keys, path, task_type in sections:
        if not keys.lora_rank or keys.target_modules == [ALL_LINEAR] or model_path_problem(path) is not None:
            continue
        if Path(path).is_dir():
            from verl.models.lora import target_module_problems  # peft and torch: only when needed

            problems = target_module_problems(path, keys, task_type)
            errors += [f"{key}.target_modules={keys.target_modules!r}: {problem}" for problem in problems]
    return errors

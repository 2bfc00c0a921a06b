"""What the benchmark times: its settings, and each environment's engine and actor with the problems of its
batches, built from the tiny random model (`tiny_setup`) or from two trained checkpoints
(`checkpoint_setup`, the Markovian testbed's timing stage)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch

from verl.config import ActorConfig
from verl.core.delethink import DelethinkParams
from verl.core.trajectory import PromptItem
from verl.models.tiny import build_model, build_tokenizer
from verl.utils.seeding import derive_seed
from verl.workers.actor.dp_actor import DataParallelPPOActor
from verl.workers.rollout.hf_engine import HFRolloutEngine

ENVIRONMENTS = {"longcot": "LongCoT", "delethink": "Delethink"}  # the JSON's keys and the tables' names
QUESTION = "What is 17 + 25? Think step by step."  # the tiny model's one problem


@dataclass(frozen=True)
class BenchConfig:
    """The batches and budgets timed, whatever the models."""

    budgets: tuple[int, ...]  # thinking budgets L, ascending: each C plus whole chunks of C - m
    chunk_size: (
        int  # C: Delethink's first-chunk budget, and the most any chunk's context holds past the question
    )
    keep_head: int  # Delethink's carry-over: the trace's first keep_head thinking tokens
    keep_tail: int  # and its last keep_tail
    prompts: int  # problems per step batch (an RL step's prompts; the tiny model has one)
    samples: int  # samples per problem (an RL step's n)
    repeats: int  # timed repeats of every budget, the environments alternating; the median counts
    seed: int = 0  # sample j of problem p draws with derive_seed(seed, p, j) in both environments

    def __post_init__(self) -> None:
        for name in ("prompts", "samples", "repeats"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name}={getattr(self, name)}; it must be >= 1")
        if not self.budgets:
            raise ValueError("no budgets: give --budgets or --chunks")
        self.delethink  # noqa: B018  (a budget no whole number of chunks fills is refused here, before any load)

    @cached_property
    def delethink(self) -> dict[int, DelethinkParams]:
        """Delethink's parameters at each budget: C, m and the chunks I that fill it exactly."""
        c, head, tail = self.chunk_size, self.keep_head, self.keep_tail
        return {b: DelethinkParams.for_budget(b, c, head, tail) for b in self.budgets}

    @cached_property
    def distinct_rows(self) -> int:
        """Rows of the distinct-problem pass: one sample of each of prompts x samples problems."""
        return self.prompts * self.samples


@dataclass(frozen=True)
class TinyModel:
    """The tiny random model's actor settings (the checkpoints take theirs from the testbed configs)."""

    micro_tokens: int = 16384  # the actor's token budget per micro-batch (use_dynamic_bsz), both environments
    # Delethink's actor computes the prompt prefixes its rows share once (the testbed's Delethink config
    # does; LongCoT's long rows train faster on the padded path's causal kernel, so it stays padded)
    share_prompt_prefix: bool = True

    def __post_init__(self) -> None:
        if self.micro_tokens < 1:
            raise ValueError(f"--micro-tokens={self.micro_tokens}; it must be >= 1")


@dataclass(frozen=True)
class Checkpoints:
    """Two trained models and the problems to time them on."""

    longcot: str  # LongCoT-RL checkpoint (global_step_N/) or HF directory
    delethink: str  # Delethink-RL checkpoint or HF directory
    data: str  # jsonl of distinct problems: the first --prompts form the step batch
    max_question_tokens: int = 64  # longer questions are skipped


@dataclass
class ActorSetup:
    """An environment's actor as the trainer runs its update."""

    actor: DataParallelPPOActor
    num_mini_batches: int  # optimizer steps per batch
    # the token budget of the old log-probs' micro-batches; None: no such forward, the engine's log-probs
    # are the old ones (the trainer's algorithm.rollout_correction.bypass_mode)
    log_prob_max_tokens: int | None


@dataclass
class Environment:
    engine: HFRolloutEngine
    actor: ActorSetup
    kv_bytes_per_token: int  # keys + values of one token in the engine's cache


@dataclass
class Batch:
    """The rows of one rollout: a problem and a sampling seed each."""

    items: list[PromptItem]
    seeds: list[int]

    @classmethod
    def of(cls, problems: list[PromptItem], samples: int, seed: int) -> Batch:
        """Every problem `samples` times; sample j of problem p seeded derive_seed(seed, p, j)."""
        rows = [(p, j) for p in range(len(problems)) for j in range(samples)]
        return cls([problems[p] for p, _ in rows], [derive_seed(seed, p, j) for p, j in rows])


@dataclass
class Setup:
    environments: dict[str, Environment]  # by ENVIRONMENTS key
    step_batch: Batch  # an RL step's batch: prompts x samples
    distinct_batch: Batch | None  # prompts x samples distinct problems, one sample each; None: no such pass
    pad_token_id: int
    trained: bool  # the models were trained: their end-of-sequence is worth honouring once (as in training)


def kv_bytes_per_token(model: torch.nn.Module) -> int:
    cfg = model.config
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    element_size = next(model.parameters()).element_size()
    return 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim * element_size  # 2: keys + values


def tiny_setup(cfg: BenchConfig, tiny: TinyModel) -> Setup:
    """The tiny model as both environments' policy (one engine) and, in a second copy, the actor both
    train (one model and optimizer); every row of the step batch asks QUESTION."""
    tokenizer = build_tokenizer()
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": QUESTION}], add_generation_prompt=True, return_dict=False
    )
    positions = max(1024, len(prompt) + max(cfg.budgets))
    # eos_token_ids=[]: nothing ends a trajectory early, so every one thinks for exactly its budget
    engine = HFRolloutEngine(
        build_model(tokenizer, max_position_embeddings=positions), eos_token_ids=[],
        pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    actor_model = build_model(tokenizer, max_position_embeddings=positions)
    # micro-batches by token budget, as a trainer with rows this uneven in count would use: Delethink's
    # I x B short rows then share forwards, and a LongCoT row of L tokens is not split either way
    actor_config = ActorConfig(
        loss_agg_mode="seq-mean-token-norm-trace-length", use_dynamic_bsz=True,
        ppo_max_token_len_per_gpu=tiny.micro_tokens,
    )  # fmt: skip
    optimizer = torch.optim.AdamW(actor_model.parameters(), lr=1e-6)

    def environment(name: str) -> Environment:
        actor = DataParallelPPOActor(
            actor_model, optimizer, actor_config, temperature=1.0, norm_length=max(cfg.budgets),
            share_prompt_prefix=tiny.share_prompt_prefix and name == "delethink",
        )  # fmt: skip
        return Environment(engine, ActorSetup(actor, 1, None), kv_bytes_per_token(engine.model))

    problems = [PromptItem(prompt, "benchmark", "")]
    return Setup(
        {name: environment(name) for name in ENVIRONMENTS}, Batch.of(problems, cfg.samples, cfg.seed),
        None, tokenizer.pad_token_id, trained=False,
    )  # fmt: skip


def model_dir(path: str, flag: str) -> str:
    from verl.eval.config import resolve_model_dir

    found = resolve_model_dir(path)
    if found is None:
        raise SystemExit(f"--{flag} {path}: no HF model in it (config.json) or in its actor/huggingface/")
    return str(found)


def distinct_problems(ckpt: Checkpoints, tokenizer, needed: int, why: str) -> list[PromptItem]:
    """The first `needed` distinct problems of --data whose questions fit --max-question-tokens. A file
    with fewer is refused in one line that names it, the counts and `why` that many: call before any
    model loads."""
    from verl.data.rl_dataset import load_prompts

    try:
        items = load_prompts([ckpt.data], tokenizer, "prompt", ckpt.max_question_tokens, True)
    except (OSError, ValueError) as e:  # a missing or unreadable file, or every question too long
        raise SystemExit(f"--data {ckpt.data}: {e}") from None
    first_of_each: dict[tuple[int, ...], PromptItem] = {}
    for item in items:
        first_of_each.setdefault(tuple(item.prompt_ids), item)
    if len(first_of_each) < needed:
        raise SystemExit(
            f"--data {ckpt.data}: {len(first_of_each)} distinct problems of at most "
            f"{ckpt.max_question_tokens} tokens (--max-question-tokens), fewer than the {needed} {why}; "
            f"write {needed} (make_eval_data.py --timing-problems)"
        )
    return list(first_of_each.values())[:needed]


def testbed_actor(name: str, path: str, cfg: BenchConfig) -> ActorSetup:
    """The trainer's actor for environment `name` on a copy of the model at `path`, with the update settings
    of testbed_{name}.yaml for this batch's prompts and samples at the first budget."""
    from verl.config import compose_config
    from verl.single_controller.fsdp_workers import load_causal_lm, make_optimizer
    from verl.trainer.config_loader import load_config

    overrides = [
        f"actor_rollout_ref.model.path={path}", f"data.train_batch_size={cfg.prompts}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={max(1, cfg.prompts // 2)}",
        f"actor_rollout_ref.rollout.n={cfg.samples}",
    ]  # fmt: skip
    budget = cfg.budgets[0]
    if name == "delethink":
        p = cfg.delethink[budget]
        overrides += [
            f"algorithm.delethink.chunk_size={p.chunk_size}", f"algorithm.delethink.keep_head={p.keep_head}",
            f"algorithm.delethink.keep_tail={p.keep_tail}", f"algorithm.delethink.max_chunks={p.max_chunks}",
        ]  # fmt: skip
    else:
        overrides.append(f"data.max_response_length={budget}")
    config = load_config(compose_config(f"testbed_{name}", overrides), check_paths=False)
    ref = config.actor_rollout_ref
    model = load_causal_lm(path, ref.model.attn_implementation)
    optimizer, scheduler = make_optimizer(model, ref.actor.optim)
    actor = DataParallelPPOActor(
        model, optimizer, ref.actor, ref.rollout.temperature, config.thinking_budget, lr_scheduler=scheduler,
        use_remove_padding=ref.model.use_remove_padding, share_prompt_prefix=ref.model.share_prompt_prefix,
    )  # fmt: skip
    return ActorSetup(actor, config.num_mini_batches, ref.rollout.log_prob_max_token_len_per_gpu)


def checkpoint_setup(cfg: BenchConfig, ckpt: Checkpoints, distinct: bool) -> Setup:
    """Each checkpoint with an engine of its own and, on a second copy, the testbed trainer's actor; the step
    batch from the first --prompts problems of --data and, with `distinct`, the distinct-problem batch."""
    from transformers import AutoTokenizer

    from verl.single_controller.fsdp_workers import eos_token_ids, load_causal_lm

    dirs = {name: model_dir(getattr(ckpt, name), name) for name in ENVIRONMENTS}
    tokenizer = AutoTokenizer.from_pretrained(dirs["longcot"])
    if distinct:
        why = "of the distinct-problem pass (--prompts x --samples, one row each)"
        problems = distinct_problems(ckpt, tokenizer, cfg.distinct_rows, why)
    else:
        problems = distinct_problems(ckpt, tokenizer, cfg.prompts, "of the step batch (--prompts)")
    environments = {}
    for name, path in dirs.items():
        model = load_causal_lm(path)
        eos = eos_token_ids(model.generation_config, tokenizer)
        engine = HFRolloutEngine(model, eos, tokenizer.pad_token_id)
        environments[name] = Environment(engine, testbed_actor(name, path, cfg), kv_bytes_per_token(model))
    return Setup(
        environments, Batch.of(problems[: cfg.prompts], cfg.samples, cfg.seed),
        Batch.of(problems, 1, cfg.seed) if distinct else None, tokenizer.pad_token_id, trained=True,
    )  # fmt: skip

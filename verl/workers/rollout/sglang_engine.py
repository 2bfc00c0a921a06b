"""The GPU rollout engine: SGLang's offline `sglang.Engine` behind the `RolloutEngine` interface.

Token ids in, token ids + log-probs + finish reason out, exactly as the HF engine does:

- Requests go in as `input_ids` with `return_logprob=True`; the engine never sees text
  (`skip_tokenizer_init=True`), so the trainer trains the very ids that were sampled.
- Log-probs. SGLang's sampler divides the logits by the temperature, takes the softmax and reports
  log(prob) of the sampled token *before* top-k/top-p filtering: log_softmax(logits / T), the
  quantity the actor recomputes. Greedy requests (temperature 0) run as top_k=1 at temperature 1,
  so they report plain log_softmax(logits), like the HF engine. The environment variable
  SGLANG_RETURN_ORIGINAL_LOGPROB switches SGLang to unscaled log-probs; the engine refuses to start
  with it set, since the importance ratios would compare different distributions.
- End of sequence. SGLang stops on the model's EOS ids; we also pass ours as `stop_token_ids`. The
  stop token is part of `output_ids` (SGLang keeps ids "through the stop"), as the contract wants.
- Seeds. SGLang reads a request's `sampling_seed` only when the engine runs with deterministic
  inference (`deterministic=True`); otherwise every request draws from one engine-wide generator
  seeded with `seed`, and a request's tokens depend on what it was batched with.
- LoRA (`lora` keys with lora_rank > 0). SGLang serves the adapters over its own copy of the base
  (server args `enable_lora`, `max_lora_rank`, `lora_target_modules`): after each update the engine
  takes the adapters only, in peft's naming and with peft's config dict, through
  `load_lora_adapter_from_tensors` under a new name (the previous one unloaded first), and every
  request names the current adapter (`lora_path`). The base weights are then never re-sent, so
  `release_memory` keeps them and frees the KV cache and CUDA graphs only.

- CPU (`device="cpu"`): SGLang's own CPU path (SGLANG_USE_CPU_ENGINE=1, torch-native attention, no CUDA
  graphs), made importable by `verl.workers.rollout.sglang_cpu`. Two GPU features have no CPU path in
  SGLang 0.5.23: its memory saver (torch_memory_saver) and its LoRA layers (they pin host memory,
  which a CPU-only torch cannot). Both are refused on CPU with one line, before the engine starts.

SGLang is imported inside the constructor, so the pure request/response functions below run without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import numbers
import os
import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import torch
import transformers

from verl.config import PolicyIterationConfig
from verl.core.engine import FinishReason, GenerateOutput, RolloutEngine, SamplingParams
from verl.models.lora_keys import ALL_LINEAR, BLOCK_LINEAR_LAYERS, LoRAKeys
from verl.workers.rollout import sglang_cpu
from verl.workers.rollout.hf_engine import _check_request

# What SGLang's release/resume_memory_occupation can free, by tag (sglang.srt.constants).
MEMORY_TAGS = ("weights", "kv_cache", "cuda_graph")
ENGINE_DTYPES = ("bfloat16", "float16", "float32")
ENGINE_DEVICES = ("cuda", "cpu")
# SGLang 0.5.23 holds per-request seeds in an int64 tensor; 31 bits fit any signed integer type.
SEED_MODULUS = 2**31


class SGLangGenerationError(RuntimeError):
    """SGLang answered, but not with a finished generation in the expected shape."""


def build_sampling_params(params: SamplingParams, eos_token_ids: Sequence[int]) -> dict[str, Any]:
    """The `sampling_params` dict of one SGLang request.

    SGLang reads temperature 0 as greedy (it runs top_k=1 at temperature 1) and top_k=-1 as the
    whole vocabulary, the same conventions as ours, so both pass through unchanged.
    """
    request: dict[str, Any] = {
        "max_new_tokens": params.max_new_tokens,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_k": params.top_k,
        "stop_token_ids": sorted(set(eos_token_ids)),
    }
    if params.ignore_eos:
        request["ignore_eos"] = True
        del request["stop_token_ids"]
    if params.seed is not None:
        request["sampling_seed"] = params.seed % SEED_MODULUS
    return request


def _parse_token_log_probs(entries: Any, where: str) -> tuple[list[int], list[float]]:
    """SGLang reports each position as (logprob, token_id, text-or-None), or (logprob, token_id)."""
    if not isinstance(entries, (list, tuple)):
        raise SGLangGenerationError(f"{where} is {type(entries).__name__}, expected a list of tuples")
    token_ids, log_probs = [], []
    for position, entry in enumerate(entries):
        if not isinstance(entry, (list, tuple)) or len(entry) not in (2, 3):
            raise SGLangGenerationError(
                f"{where}[{position}] = {entry!r}; expected (logprob, token_id[, text])"
            )
        log_prob, token_id = entry[0], entry[1]
        if log_prob is None:
            # SGLang leaves only the first *prompt* position without a log-prob (nothing predicts it)
            raise SGLangGenerationError(f"{where}[{position}] has no log-prob; every sampled token needs one")
        if not math.isfinite(float(log_prob)):
            raise SGLangGenerationError(f"{where}[{position}] has log-prob {log_prob} for token {token_id}")
        token_ids.append(int(token_id))
        log_probs.append(float(log_prob))
    return token_ids, log_probs


def parse_output(
    output: Mapping[str, Any], eos_token_ids: Sequence[int], max_new_tokens: int
) -> GenerateOutput:
    """Turn one finished SGLang result into a `GenerateOutput`, checking it against the contract.

    `output` is what `Engine.async_generate(input_ids=..., return_logprob=True)` returns:
    {"output_ids": [...], "meta_info": {"finish_reason": {...}, "output_token_logprobs": [...], ...}}.
    Prompt log-probs (`input_token_logprobs`, whose first entry is None) are not part of the result.
    """
    meta = output.get("meta_info")
    if not isinstance(meta, Mapping):
        raise SGLangGenerationError(f"SGLang output has no meta_info dict; keys: {sorted(output)}")
    finish = meta.get("finish_reason")
    if finish is None:
        raise SGLangGenerationError(
            "SGLang output is not finished (finish_reason is None): a streamed partial?"
        )
    if not isinstance(finish, Mapping) or "type" not in finish:
        raise SGLangGenerationError(f"finish_reason = {finish!r}; expected a dict with a 'type'")
    if finish["type"] == "abort":
        raise SGLangGenerationError(f"SGLang aborted the request: {finish.get('message', finish)}")
    if "output_token_logprobs" not in meta:
        raise SGLangGenerationError(
            "meta_info has no output_token_logprobs: the request must be sent with return_logprob=True"
        )
    token_ids, log_probs = _parse_token_log_probs(meta["output_token_logprobs"], "output_token_logprobs")
    if "output_ids" in output and list(output["output_ids"]) != token_ids:
        raise SGLangGenerationError(
            f"output_ids {list(output['output_ids'])[:8]}... disagree with the token ids of "
            f"output_token_logprobs {token_ids[:8]}..."
        )
    if not 1 <= len(token_ids) <= max_new_tokens:
        raise SGLangGenerationError(
            f"SGLang returned {len(token_ids)} tokens; max_new_tokens={max_new_tokens}"
        )

    reason: FinishReason
    if finish["type"] == "length":
        reason = "length"
    elif finish["type"] == "stop":
        matched = finish.get("matched")
        if not isinstance(matched, numbers.Integral) or isinstance(matched, bool):
            raise SGLangGenerationError(
                f"SGLang stopped on {matched!r}; only end-of-sequence token ids may stop a rollout"
            )
        if matched not in eos_token_ids:
            raise SGLangGenerationError(
                f"SGLang stopped on token {matched}, which is not one of the end-of-sequence ids "
                f"{list(eos_token_ids)}"
            )
        if token_ids[-1] != matched:
            raise SGLangGenerationError(
                f"SGLang stopped on token {matched} but the last returned token is {token_ids[-1]}: "
                "the stop token must be part of the response"
            )
        reason = "stop"
    else:
        raise SGLangGenerationError(f"unknown finish_reason type {finish['type']!r} in {finish!r}")
    return GenerateOutput(token_ids, log_probs, reason)


def bucket_named_tensors(
    named_tensors: Iterable[tuple[str, torch.Tensor]], max_bytes: int
) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Group tensors, in order, into buckets of at most `max_bytes`; a bigger tensor gets its own.

    Lazy: a bucket is yielded as soon as the next tensor would overflow it, so a caller that moves
    one bucket at a time to the GPU never holds more than about `max_bytes` there.
    """
    if max_bytes < 1:
        raise ValueError(f"max_bytes={max_bytes}; it must be >= 1")
    bucket: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, tensor in named_tensors:
        nbytes = tensor.numel() * tensor.element_size()
        if bucket and size + nbytes > max_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, tensor))
        size += nbytes
    if bucket:
        yield bucket


def lora_target_modules(keys: LoRAKeys) -> list[str]:
    """The layer names SGLang adapts: peft's all-linear spelled out for a Qwen2-style block."""
    return list(BLOCK_LINEAR_LAYERS) if keys.target_modules == [ALL_LINEAR] else list(keys.target_modules)


def lora_server_args(keys: LoRAKeys) -> dict[str, Any]:
    """SGLang's server arguments for serving one LoRA policy, one adapter per batch."""
    return {
        "enable_lora": True,
        "max_lora_rank": keys.lora_rank,
        "lora_target_modules": lora_target_modules(keys),
        "max_loras_per_batch": 1,
    }


def lora_config_dict(keys: LoRAKeys) -> dict[str, Any]:
    """The adapter config SGLang reads with the tensors: what peft writes to adapter_config.json."""
    return {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": keys.lora_rank, "lora_alpha": keys.lora_alpha,
        "target_modules": lora_target_modules(keys), "lora_dropout": 0.0, "bias": "none",
    }  # fmt: skip


def peft_adapter_names(
    named_tensors: Iterable[tuple[str, torch.Tensor]], adapter_name: str = "default"
) -> Iterator[tuple[str, torch.Tensor]]:
    """The wrapped model's adapter tensors under the names peft saves them with (adapter_model.safetensors,
    what SGLang's loader expects): `...lora_A.default.weight` -> `...lora_A.weight`."""
    infix = f".{adapter_name}."
    for name, tensor in named_tensors:
        yield name.replace(infix, ".", 1), tensor


def _check_answer(result: Any, action: str) -> None:
    """SGLang's scheduler answers a control call with (success, message)."""
    if isinstance(result, (tuple, list)) and len(result) >= 2 and not result[0]:
        raise RuntimeError(f"SGLang could not {action}: {result[1]}")


def _launch_sglang(**server_args: Any) -> tuple[Any, list[int]]:
    """A started `sglang.Engine`, and the processes it started."""
    if server_args["device"] == "cpu":
        # before SGLang is imported: its modules read the switch at import, and its spawned processes
        # inherit it (sglang_cpu prepares them through torch's autoload)
        os.environ[sglang_cpu.CPU_ENGINE_ENV] = "1"
        sglang_cpu.prepare_process()
    try:
        import sglang
    except ImportError as error:
        raise ImportError(
            "rollout.name=sglang needs SGLang, which is not installed: `pip install -e .[gpu]` on a CUDA "
            "machine, `pip install --no-deps -r requirements-sglang-cpu.txt` on a CPU (docs/GPU.md, README)"
        ) from error
    import psutil

    host = psutil.Process()
    before = {child.pid for child in host.children()}
    # SGLang configures logging for the whole host process (`logging.basicConfig(force=True)`: the root
    # logger's handlers replaced, its level set to the engine's log_level); the host keeps its own
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        with _unseeded_module_random():
            engine = sglang.Engine(**server_args)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    return engine, [child.pid for child in host.children() if child.pid not in before]


@contextlib.contextmanager
def _unseeded_module_random() -> Iterator[None]:
    """Python's module-level `random` drawing from fresh entropy inside the block, and the host's state
    given back after it.

    SGLang 0.5.23 draws the port its scheduler binds for torch.distributed (`nccl_port`: gloo's store on
    CPU) from that generator. Two hosts that seeded it alike (`seed_everything(config.trainer.seed)`: two
    test workers, two trainers on one machine) draw the same port, and when their engines start within
    seconds of each other the later scheduler cannot bind it; SGLang answers a failed child by killing
    its host. Left as it was, the host's seeded stream is also not advanced by starting an engine.
    """
    state = random.getstate()
    random.seed()  # from os.urandom
    try:
        yield
    finally:
        random.setstate(state)


def _stop_sglang(engine: Any, own_pids: Sequence[int]) -> None:
    """`Engine.shutdown`, with its last step scoped to the engine's own processes.

    SGLang 0.5.23 ends its shutdown by killing every child process of the process that hosts the engine.
    The host here is a trainer or a test process whose other children are not SGLang's: under the
    one-process launcher they include Ray's own processes when Ray runs beside it, and killing those
    ends the host (Ray's driver exits when its raylet dies). During the shutdown call that kill is
    pointed at the scheduler and detokenizer processes the engine started (and theirs).
    """
    import psutil
    from sglang.srt.entrypoints import engine as engine_module

    blanket_kill = engine_module.kill_process_tree

    def kill_own_processes(parent_pid, include_parent=True, skip_pid=None, wait_timeout=60):
        if parent_pid != os.getpid() or include_parent:
            return blanket_kill(parent_pid, include_parent, skip_pid, wait_timeout)
        processes = []
        for pid in own_pids:
            try:
                process = psutil.Process(pid)
                processes += [process, *process.children(recursive=True)]
            except psutil.NoSuchProcess:
                pass
        for process in processes:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(processes, timeout=wait_timeout)

    engine_module.kill_process_tree = kill_own_processes
    try:
        engine.shutdown()
    finally:
        engine_module.kill_process_tree = blanket_kill


def engine_problems(
    device: str,
    tensor_parallel_size: int,
    mem_fraction_static: float,
    dtype: str,
    max_num_seqs: int,
    update_bucket_bytes: int,
    eos_token_ids: Sequence[int],
    enable_memory_saver: bool,
    lora: LoRAKeys | None,
) -> list[str]:
    """Every reason the constructor's arguments cannot make an engine, found before SGLang starts."""
    problems = []
    if device not in ENGINE_DEVICES:
        problems.append(f"device={device!r} must be one of {ENGINE_DEVICES}")
    if device == "cpu" and lora is not None:
        problems.append(
            "a LoRA policy needs a GPU with SGLang (SGLang 0.5.23's LoRA layers pin host memory, which a "
            "CPU-only torch cannot): on CPU serve it with rollout.name=hf"
        )
    if device == "cpu" and enable_memory_saver:
        problems.append(
            "enable_memory_saver=True needs a GPU (SGLang frees memory through torch_memory_saver, which "
            "is CUDA-only): on CPU build the engine without it (rollout.free_cache_engine=false)"
        )
    if tensor_parallel_size < 1:
        problems.append(f"tensor_parallel_size={tensor_parallel_size} must be >= 1")
    if not 0 < mem_fraction_static <= 1:
        problems.append(f"mem_fraction_static={mem_fraction_static} must be in (0, 1]")
    if dtype not in ENGINE_DTYPES:
        problems.append(f"dtype={dtype!r} must be one of {ENGINE_DTYPES}")
    if max_num_seqs < 1:
        problems.append(f"max_num_seqs={max_num_seqs} must be >= 1")
    if update_bucket_bytes < 1:
        problems.append(f"update_bucket_bytes={update_bucket_bytes} must be >= 1")
    if not eos_token_ids:
        problems.append("eos_token_ids is empty: a rollout could never finish with 'stop'")
    # read the way SGLang reads it
    if os.environ.get("SGLANG_RETURN_ORIGINAL_LOGPROB", "").lower() in ("1", "true"):
        problems.append(
            "SGLANG_RETURN_ORIGINAL_LOGPROB is set: SGLang would report log-probs without the "
            "temperature, but the actor compares against log_softmax(logits / temperature)"
        )
    return problems


class SGLangRolloutEngine(RolloutEngine):
    """One SGLang engine (a scheduler process per tensor-parallel GPU) serving `generate` calls.

    SGLang's tokenizer manager serves every request on the one event loop the engine was built on
    (`event_loop`), and its synchronous calls (`update_weights`, release/resume) run that loop
    themselves: drive generation with `engine.event_loop.run_until_complete(...)` and call the
    synchronous methods only between such runs.
    """

    def __init__(
        self,
        model_path: str,
        eos_token_ids: Sequence[int],
        *,
        device: str = "cuda",
        tensor_parallel_size: int = 1,
        mem_fraction_static: float = 0.5,
        dtype: str = "bfloat16",
        seed: int = 0,
        max_num_seqs: int = 256,
        enable_memory_saver: bool = True,
        deterministic: bool = False,
        update_bucket_bytes: int = 512 * 2**20,
        lora: LoRAKeys | None = None,
        **server_args: Any,
    ):
        problems = engine_problems(
            device, tensor_parallel_size, mem_fraction_static, dtype, max_num_seqs, update_bucket_bytes,
            eos_token_ids, enable_memory_saver, lora,
        )  # fmt: skip
        if problems:
            raise ValueError("SGLangRolloutEngine: " + "; ".join(problems))

        config = transformers.AutoConfig.from_pretrained(model_path)
        self.vocab_size = config.vocab_size
        self.max_positions = server_args.get("context_length") or config.max_position_embeddings
        self.eos_token_ids = list(eos_token_ids)
        self.device = device
        self.update_bucket_bytes = update_bucket_bytes
        self.enable_memory_saver = enable_memory_saver
        # Requests without a seed get one from here, so a deterministic engine never falls back to
        # SGLang's shared default seed (which would give every such request the same tokens).
        self._seed_generator = torch.Generator().manual_seed(seed)
        self._released: set[str] = set()
        self._weights_lost = False  # released and not pushed again since
        self._in_flight = 0
        self.num_prompt_tokens = 0  # prompt tokens of the answered requests
        self.num_reused_prompt_tokens = 0  # of those, the ones SGLang's radix cache held already
        # LoRA: the adapters alone follow each update; the base weights stay loaded
        self.lora = lora
        self.takes_adapters_only = lora is not None
        self._adapter_version = 0
        self._adapter_name: str | None = None  # None: the base model, until the first update
        self._release_tags = MEMORY_TAGS if lora is None else tuple(t for t in MEMORY_TAGS if t != "weights")
        if lora is not None:
            server_args = {**lora_server_args(lora), **server_args}
        if device == "cpu":
            # the KV pool holds every running sequence at full length; SGLang sizes it from a fraction of
            # the machine's free memory otherwise (mem_fraction_static), gigabytes for a tiny model
            cpu_args = {"disable_cuda_graph": True, "max_total_tokens": max_num_seqs * self.max_positions}
            server_args = {**cpu_args, **server_args}
        self._engine, self._engine_pids = _launch_sglang(
            device=device,
            model_path=model_path,
            tp_size=tensor_parallel_size,
            mem_fraction_static=mem_fraction_static,
            dtype=dtype,
            random_seed=seed,
            max_running_requests=max_num_seqs,
            skip_tokenizer_init=True,
            enable_memory_saver=enable_memory_saver,
            enable_deterministic_inference=deterministic,
            **server_args,
        )

    @property
    def event_loop(self) -> asyncio.AbstractEventLoop:
        return self._engine.loop

    async def generate(self, prompt_ids: list[int], sampling_params: SamplingParams) -> GenerateOutput:
        _check_request(prompt_ids, sampling_params, self.vocab_size, self.max_positions)
        if self._released or self._weights_lost:
            raise RuntimeError(
                f"generate called after release_memory (still released: {sorted(self._released)}); call "
                "update_weights() and resume_memory() first"
            )
        if asyncio.get_running_loop() is not self._engine.loop:
            raise RuntimeError(
                "SGLangRolloutEngine.generate must run on engine.event_loop (SGLang serves all requests "
                "on the loop it was built on)"
            )
        if sampling_params.seed is None:
            seed = int(torch.randint(2**62, (), generator=self._seed_generator))
            sampling_params = dataclasses.replace(sampling_params, seed=seed)
        self._in_flight += 1
        try:
            adapter = {"lora_path": self._adapter_name} if self.lora is not None else {}
            output = await self._engine.async_generate(
                input_ids=list(prompt_ids),
                sampling_params=build_sampling_params(sampling_params, self.eos_token_ids),
                return_logprob=True,
                **adapter,
            )
        finally:
            self._in_flight -= 1
        result = parse_output(output, self.eos_token_ids, sampling_params.max_new_tokens)
        self.num_prompt_tokens += len(prompt_ids)
        self.num_reused_prompt_tokens += int(output["meta_info"].get("cached_tokens") or 0)
        return result

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Push new weights bucket by bucket, each moved to this process's GPU first (SGLang's
        scheduler maps CUDA tensors through IPC, without a trip through host memory).

        Released weights are taken back first; the KV cache stays released until `resume_memory`,
        which keeps it out of the update's peak memory."""
        if self._in_flight:
            raise RuntimeError(
                f"update_weights called while {self._in_flight} requests are mid-generation; their KV "
                "caches would mix old and new weights"
            )
        if self.lora is not None:
            self._load_adapter(named_tensors)
            return
        self._resume(["weights"])
        on_gpu = self.device == "cuda" and torch.cuda.is_available()
        device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else None
        # SGLang 0.5.23 takes tensors only inside a weight-update session
        _check_answer(self._engine.begin_weight_update(), "open a weight update")
        previous = None
        try:
            for bucket in bucket_named_tensors(named_tensors, self.update_bucket_bytes):
                if previous is not None:
                    self._send_bucket(previous, device, flush_cache=False)
                previous = bucket
            if previous is not None:
                # Flushing the prefix cache once, after the last bucket, drops every KV entry computed
                # with the old weights.
                self._send_bucket(previous, device, flush_cache=True)
        finally:
            _check_answer(self._engine.end_weight_update(), "close the weight update")
        if previous is not None:
            self._weights_lost = False

    def _load_adapter(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """The new adapters under a new name (SGLang caches by name), the previous one unloaded first so that
        one adapter slot suffices. Adapters are small (a rank-32 adapter of a 1.5B model is 37M
        parameters): they go through host memory."""
        tensors = {name: t.detach().cpu() for name, t in peft_adapter_names(named_tensors)}
        if self._adapter_name is not None:
            self._check_lora_result(self._engine.unload_lora_adapter(self._adapter_name), "unload")
        self._adapter_version += 1
        name = f"policy_v{self._adapter_version}"
        result = self._engine.load_lora_adapter_from_tensors(name, tensors, lora_config_dict(self.lora))
        self._check_lora_result(result, "load")
        self._adapter_name = name

    @staticmethod
    def _check_lora_result(result: Any, action: str) -> None:
        """SGLang answers a LoRA load/unload with an object carrying success and error_message."""
        if not getattr(result, "success", True):
            raise RuntimeError(
                f"SGLang could not {action} the LoRA adapter: {getattr(result, 'error_message', result)}"
            )

    def _send_bucket(
        self, bucket: list[tuple[str, torch.Tensor]], device: torch.device | None, flush_cache: bool
    ) -> None:
        moved = [(name, tensor.detach().to(device) if device else tensor.detach()) for name, tensor in bucket]
        result = self._engine.update_weights_from_tensor(named_tensors=moved, flush_cache=flush_cache)
        _check_answer(result, f"update the weights {[name for name, _ in bucket][:4]}...")

    def release_memory(self) -> None:
        """Free the weights, KV cache and CUDA graphs while the actor trains. Released weights are
        not kept: `update_weights` must run before the next `generate`."""
        if not self.enable_memory_saver:
            raise RuntimeError(
                "release_memory needs the engine built with enable_memory_saver=True, which needs a GPU "
                "(torch_memory_saver); on CPU keep rollout.free_cache_engine=false"
            )
        if self._in_flight:
            raise RuntimeError(f"release_memory called while {self._in_flight} requests are mid-generation")
        to_release = [t for t in self._release_tags if t not in self._released]
        if to_release:
            self._engine.release_memory_occupation(tags=to_release)
            self._released.update(to_release)
            self._weights_lost = "weights" in to_release

    def resume_memory(self) -> None:
        """Take back whatever is still released (after `update_weights`: the KV cache and CUDA graphs)."""
        self._resume(MEMORY_TAGS)

    def _resume(self, tags: Sequence[str]) -> None:
        to_resume = [t for t in tags if t in self._released]
        if to_resume:
            self._engine.resume_memory_occupation(tags=to_resume)
            self._released.difference_update(to_resume)

    def shutdown(self) -> None:
        if self._engine is not None:
            _stop_sglang(self._engine, self._engine_pids)
            self._engine = None

    @classmethod
    def from_config(cls, config: PolicyIterationConfig, eos_token_ids: Sequence[int]) -> SGLangRolloutEngine:
        """The engine a `PolicyIterationConfig` asks for (rollout.name=sglang)."""
        ref = config.actor_rollout_ref
        rollout = ref.rollout
        return cls(
            ref.model.path,
            eos_token_ids,
            device=config.trainer.device,
            tensor_parallel_size=rollout.tensor_model_parallel_size,
            mem_fraction_static=rollout.gpu_memory_utilization,
            dtype=config.engine_dtype,
            seed=config.trainer.seed,
            max_num_seqs=rollout.max_num_seqs,
            enable_memory_saver=rollout.free_cache_engine,
            lora=ref.model if ref.model.lora_rank else None,
        )

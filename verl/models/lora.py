"""LoRA adapters (peft) on the actor, the critic and SFT models: wrapping, what a checkpoint holds, the
merged export and what the rollout engine receives.

A LoRA run trains only the adapters (and, for the critic, the fresh value head, which peft's
token-classification task keeps whole in `modules_to_save`); the base weights stay the ones loaded from
`model.path` for the whole run. So:
- the optimizer, its state and the gradients cover the trainable tensors only (`trainable_parameters`);
- the reference policy is the same module with the adapters switched off (`PeftModel.disable_adapter`);
- a checkpoint holds the adapters in peft's own format (`adapter_model.safetensors` +
  `adapter_config.json`, `PeftModel.from_pretrained` loads them) and, for everything that wants a plain
  model (`main_eval`, the viewer, `from_pretrained`), the merged model: base + scaled B A;
- the HF engine holds its own wrapped copy with the adapters merged into its weights (generation at
  the plain model's speed), re-merged from the actor's weights after every update; SGLang applies the
  adapters itself and receives only them.

`verl/config/checks.py` calls `target_module_problems` before anything loads: it builds the model from its
config.json on the meta device (no weights) and asks peft which modules each name matches.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from peft.tuners.tuners_utils import check_target_module_exists
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
from torch.distributed.tensor import DTensor
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForTokenClassification, PreTrainedModel

from verl.models.lora_keys import ALL_LINEAR, LoRAKeys

ADAPTER_DIR = "lora_adapter"  # beside huggingface/ in a checkpoint's actor/ (or critic/) directory
CAUSAL_LM, TOKEN_CLS = "CAUSAL_LM", "TOKEN_CLS"  # peft task types: the actor / SFT model, the critic


def peft_target_modules(keys: LoRAKeys) -> str | list[str]:
    """peft takes all-linear as a plain string, module names as a list."""
    return ALL_LINEAR if keys.target_modules == [ALL_LINEAR] else list(keys.target_modules)


def lora_config(keys: LoRAKeys, task_type: str) -> LoraConfig:
    """No dropout: the engine samples without it, so the actor's log-probs must not use it either."""
    return LoraConfig(
        r=keys.lora_rank, lora_alpha=keys.lora_alpha, target_modules=peft_target_modules(keys),
        lora_dropout=0.0, task_type=task_type,
    )  # fmt: skip


def add_adapters(model: PreTrainedModel, keys: LoRAKeys, task_type: str, seed: int = 0) -> PeftModel:
    """`model` with fresh adapters (B = 0: the wrapped model computes what `model` did), base frozen.
    A is drawn from `seed`, whatever the global RNG's state: every FSDP2 rank shards its own copy, so
    all ranks must draw the same A, and a run must start from the same A as its rerun. With gradient
    checkpointing the checkpointed blocks' inputs must require grad, or the frozen embeddings would
    cut the adapters' gradient off (transformers' documented remedy)."""
    if model.is_activation_checkpointing:
        model.enable_input_require_grads()
    with torch.random.fork_rng(devices=[]):  # peft initialises the adapters on the CPU, then moves them
        torch.manual_seed(seed)
        return get_peft_model(model, lora_config(keys, task_type))


def trainable_parameters(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """What the optimizer steps: every parameter of a full model, the adapters (and heads) of a LoRA one."""
    return [p for p in model.parameters() if p.requires_grad]


def trainable_names(model: torch.nn.Module) -> set[str]:
    return {name for name, p in model.named_parameters() if p.requires_grad}


def weights_for_engine(model: torch.nn.Module, adapters_only: bool) -> Iterator[tuple[str, torch.Tensor]]:
    """What a rollout engine takes after an update, gathered one tensor at a time (a collective when
    `model` is an FSDP2 shard: every rank walks the same names in the same order). An engine that
    applies a LoRA policy's adapters itself (SGLang) holds the frozen base already and takes only
    the adapters; the HF engine takes every weight, base included, and merges (`engine_model`)."""
    trainable = trainable_names(model) if adapters_only else None
    for name, tensor in model.state_dict().items():
        if trainable is None or name in trainable:
            yield name, tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def engine_model(base: PreTrainedModel, keys: LoRAKeys) -> PeftModel:
    """The HF engine's copy of a LoRA policy: wrapped like the actor, adapters merged into the base
    weights (`base` is consumed). Merged, generation runs at the plain model's speed; unmerged adapters
    cost 1.55x the time per token (benchmarks/lora_engine_sync.py)."""
    model = add_adapters(base, keys, CAUSAL_LM)
    model.merge_adapter()  # fresh adapters: B = 0, so the merged weights are the base weights exactly
    return model


@contextlib.contextmanager
def merged_after_update(model: torch.nn.Module) -> Iterator[None]:
    """Around an engine's weight update: a merged LoRA model (`engine_model`) is unmerged first and
    merged again after. The update writes the base weights too, which undoes the rounding of the
    unmerge, so the engine's weights are always base + (alpha / r) B A computed once, by peft's merge,
    as in the exported checkpoint. A plain model is left alone."""
    if not isinstance(model, PeftModel):
        yield
        return
    model.unmerge_adapter()
    yield
    model.merge_adapter()


def reference_policy(model: torch.nn.Module) -> contextlib.AbstractContextManager:
    """The reference policy of a LoRA actor is the actor with its adapters switched off (no second
    copy of the base weights); any other reference model is itself."""
    return model.disable_adapter() if isinstance(model, PeftModel) else contextlib.nullcontext()


def save_model(
    model_dir: Path,
    adapter_dir: Path,
    model: torch.nn.Module,
    full_state: dict[str, torch.Tensor],
    keys: LoRAKeys,
    task_type: str,
    base: Callable[[], PreTrainedModel],
) -> None:
    """HF files `from_pretrained` loads in `model_dir`, from `full_state`, the full state dict of
    `model` (which may be an FSDP2 shard); `base()` gives an unsharded model of its architecture to
    write them. A LoRA model is written merged (base + (alpha / r) B A, by peft's merge), and its
    adapters in peft's format to `adapter_dir` (peft picks them out of `full_state`). The global RNG
    is left as it was: a checkpoint must not change the run that writes it."""
    with torch.random.fork_rng(devices=[]):
        if not keys.lora_rank:
            # tied weights (lm_head) left out here: save_pretrained drops one only where it shares storage
            # with its source, which an FSDP2 gather's copies do not, so the files would depend on the ranks
            plain = base()
            tied = _tied_names(plain)
            plain.save_pretrained(
                model_dir, state_dict={k: v for k, v in full_state.items() if k not in tied}
            )
            return
        model.save_pretrained(str(adapter_dir), state_dict=full_state)
        wrapped = add_adapters(base(), keys, task_type)
        wrapped.load_state_dict(full_state)
        wrapped.merge_and_unload().save_pretrained(model_dir)


def _tied_names(model: torch.nn.Module) -> set[str]:
    """Names of the parameters that are another, earlier-named parameter (a tied lm_head)."""
    seen: set[int] = set()
    tied = set()
    for name, param in model.named_parameters(remove_duplicate=False):
        if id(param) in seen:
            tied.add(name)
        seen.add(id(param))
    return tied


def load_model(
    model: torch.nn.Module,
    model_dir: Path,
    adapter_dir: Path,
    keys: LoRAKeys,
    base_path: str,
    load: Callable[[str], PreTrainedModel],
) -> None:
    """The weights `save_model` wrote into `model` (any number of FSDP2 ranks: full state dicts). A
    LoRA model keeps the base it was built on and takes its trainable tensors from `adapter_dir`,
    read by peft onto a base `load(base_path)` to get the wrapped model's names; any other model takes
    every weight of `model_dir`."""
    if keys.lora_rank:
        with torch.random.fork_rng(devices=[]):  # the loader's throw-away init must not move the run's RNG
            saved = PeftModel.from_pretrained(load(base_path), str(adapter_dir), is_trainable=True)
        weights = {name: p.detach() for name, p in saved.named_parameters() if p.requires_grad}
    else:
        weights = load(str(model_dir)).state_dict()
    options = StateDictOptions(full_state_dict=True, strict=not keys.lora_rank)
    set_model_state_dict(model, weights, options=options)


def _meta_model(model_path: str, task_type: str) -> torch.nn.Module:
    """The model `model_path`'s config.json describes, on the meta device: its modules, no weights."""
    config = AutoConfig.from_pretrained(model_path, **({"num_labels": 1} if task_type == TOKEN_CLS else {}))
    model_class = AutoModelForTokenClassification if task_type == TOKEN_CLS else AutoModelForCausalLM
    with torch.device("meta"):
        return model_class.from_config(config)


def target_module_problems(model_path: str, keys: LoRAKeys, task_type: str) -> list[str]:
    """Why a listed target module cannot get an adapter in the model at `model_path` (a local directory
    with config.json): it matches no module, only modules LoRA cannot adapt (norms, ...), or an
    embedding the model ties to its output layer (merging the adapter into the one shared tensor would
    change both). peft's own matching rule decides what a name matches."""
    if keys.target_modules == [ALL_LINEAR]:
        return []
    model = _meta_model(model_path, task_type)
    modules = dict(model.named_modules())
    tied = (
        {model.get_input_embeddings(), model.get_output_embeddings()}
        if model.config.get_text_config().tie_word_embeddings
        else set()
    )
    problems = []
    for target in keys.target_modules:
        single = LoraConfig(r=max(keys.lora_rank, 1), target_modules=[target])
        matched = [name for name in modules if check_target_module_exists(single, name)]
        if not matched:
            linear = sorted({n.rsplit(".", 1)[-1] for n, m in modules.items() if type(m) is torch.nn.Linear})
            problems.append(
                f"{target!r} is not a module of this model (its linear layers: {', '.join(linear)})"
            )
        elif any(modules[name] in tied for name in matched):
            problems.append(
                f"{target!r} is one of the model's tied input/output embeddings (tie_word_embeddings): "
                "merged, its adapter would change both"
            )
        else:
            try:
                get_peft_model(_meta_model(model_path, task_type), single)
            except ValueError:
                kind = type(modules[matched[0]]).__name__
                problems.append(f"{target!r} is a {kind} ({matched[0]}), which LoRA cannot adapt")
    return problems

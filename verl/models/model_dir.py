"""Whether a model path can be loaded, checked from its files before anything loads.

`from_pretrained` does not fail where the problem is: a directory without tokenizer files loads as a
1-token tokenizer (every prompt is then empty), one without a chat template fails at the first prompt,
and a local path with a typo that looks like `org/name` is sent to the hub, which fails after a minute
of retries. These checks read file names only (and two small JSON files): no torch, no network.
"""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path

# what the hub accepts as an organisation or repository name
_HUB_NAME = re.compile(r"[A-Za-z0-9][\w.-]*")
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
# any one group is a complete tokenizer: fast (tokenizers), SentencePiece, byte-level BPE
TOKENIZER_FILES = (("tokenizer.json",), ("tokenizer.model",), ("vocab.json", "merges.txt"))


def is_hub_id(path: str) -> bool:
    """`org/name` whose `org` is not a local directory: a path starting at a directory that exists here
    is local (a typo in it must fail here, not go to the hub)."""
    parts = path.split("/")
    return len(parts) == 2 and all(_HUB_NAME.fullmatch(p) for p in parts) and not Path(parts[0]).exists()


def _json_object(path: Path) -> dict | None:
    """The JSON object in `path`, or None when it is unreadable or not an object."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _has_chat_template(model_dir: Path) -> bool:
    """Newer transformers write chat_template.jinja (or .json), older ones a tokenizer_config.json key."""
    if (model_dir / "chat_template.jinja").is_file() or (model_dir / "chat_template.json").is_file():
        return True
    tokenizer_config = _json_object(model_dir / "tokenizer_config.json") or {}
    return bool(tokenizer_config.get("chat_template"))


def model_dir_problems(model_dir: Path) -> list[str]:
    """What `model_dir` lacks to be loaded here as a chat model (weights, tokenizer, chat template);
    empty when nothing. Assumes config.json exists."""
    problems = []
    if _json_object(model_dir / "config.json") is None:
        problems.append("config.json is not a readable JSON object")
    if not any((model_dir / name).is_file() for name in WEIGHT_FILES):
        problems.append(f"no weights ({' or '.join(WEIGHT_FILES[::2])})")
    if not any(all((model_dir / name).is_file() for name in group) for group in TOKENIZER_FILES):
        problems.append("no tokenizer files (tokenizer.json, tokenizer.model or vocab.json + merges.txt)")
    elif not _has_chat_template(model_dir):
        problems.append("no chat template (chat_template.jinja, or chat_template in tokenizer_config.json)")
    return problems


def _close_sibling(path: Path) -> str | None:
    """An existing sibling whose name is close to `path`'s: what a typo most likely meant."""
    parent = path.parent
    if not parent.is_dir():
        return None
    names = [p.name for p in parent.iterdir() if p.is_dir()]
    close = difflib.get_close_matches(path.name, names, n=1)
    return str(parent / close[0]) if close else None


def model_path_problem(path: str) -> str | None:
    """Why `path` (a local model directory or a hub id) cannot be loaded, or None."""
    if is_hub_id(path):
        return None
    model_dir = Path(path)
    if not model_dir.exists():
        parts = path.split("/")
        if len(parts) == 2 and Path(parts[0]).is_dir():
            problem = f"no such model directory ({parts[0]}/ is a local directory, so this is not a hub id)"
        else:
            problem = "no such model directory, and not a hub id like org/name"
        close = _close_sibling(model_dir)
        return f"{problem}; did you mean {close!r}?" if close else problem
    if not (model_dir / "config.json").is_file():
        return "is neither a model directory with config.json nor a hub id like org/name"
    problems = model_dir_problems(model_dir)
    return f"not a complete model directory: {'; '.join(problems)}" if problems else None


def hf_engine_problem(model_dir: Path) -> str | None:
    """Why the HF engine cannot serve the model in `model_dir` (its config.json), or None. The engine
    builds one full-attention mask per step, so layers that attend within a sliding window are refused:
    a mix of layer types (Gemma2) or a model-wide window (Mistral 7B v0.1)."""
    config = _json_object(model_dir / "config.json") or {}
    layer_types = set(config.get("layer_types") or ["full_attention"])
    if layer_types != {"full_attention"}:
        return f"its layers are {sorted(layer_types)}: the HF engine runs full attention only"
    if config.get("sliding_window") and config.get("use_sliding_window", True):
        return (
            f"it attends within a sliding window of {config['sliding_window']} tokens: the HF engine runs "
            "full attention only"
        )
    return None

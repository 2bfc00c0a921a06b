"""The bytes of each token id, so trace spans cut at token boundaries can be decoded exactly.

`tokenizer.decode` of a single token that holds part of a character gives U+FFFD, and decoding every
prefix is quadratic; a byte-level BPE vocabulary (Qwen, R1-Distill, Llama 3, the tiny model) instead
names each token's bytes directly, one ByteLevel symbol per byte. Added tokens (`</think>`, EOS) are
stored as their literal text.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

from verl.models.tiny import byte_symbols

TokenBytes = Callable[[Sequence[int]], list[bytes]]


def byte_level_token_bytes(tokenizer) -> TokenBytes:
    """A function from token ids to their bytes for a byte-level BPE `tokenizer`; it raises naming the
    token when the vocabulary is not byte-level."""
    symbol_byte = {symbol: b for b, symbol in enumerate(byte_symbols())}
    added = {i: t.content.encode("utf-8") for i, t in tokenizer.added_tokens_decoder.items()}
    cache: dict[int, bytes] = {}

    def token_bytes(token_id: int) -> bytes:
        if token_id in added:
            return added[token_id]
        symbols = tokenizer.convert_ids_to_tokens(token_id)
        if symbols is None:
            raise ValueError(f"token id {token_id} is not in the tokenizer's vocabulary")
        try:
            return bytes(symbol_byte[s] for s in symbols)
        except KeyError:
            raise ValueError(
                f"token {token_id} ({symbols!r}) is not a byte-level BPE token: the viewer needs a "
                "byte-level tokenizer (Qwen, R1-Distill, Llama 3, the tiny model)"
            ) from None

    def lookup(ids: Sequence[int]) -> list[bytes]:
        out = []
        for i in ids:
            if i not in cache:
                cache[i] = token_bytes(i)
            out.append(cache[i])
        return out

    return lookup


def find_tokenizer(run_dir: Path) -> Path | None:
    """Where a run's tokenizer is: main_eval's summary.json names its model, a Hydra-launched training
    run its .hydra/config.yaml, and every training checkpoint holds a copy (the newest is taken)."""
    summary = run_dir / "summary.json"
    if summary.exists():
        return Path(json.loads(summary.read_text())["model_dir"])
    hydra_config = run_dir / ".hydra" / "config.yaml"
    if hydra_config.exists():
        from omegaconf import OmegaConf

        return Path(OmegaConf.load(hydra_config).actor_rollout_ref.model.path)
    checkpoints = sorted(run_dir.glob("global_step_*/actor/huggingface"), key=lambda p: int(p.parts[-3][12:]))
    return checkpoints[-1] if checkpoints else None


def load_token_bytes(path: Path) -> TokenBytes:
    from transformers import AutoTokenizer

    return byte_level_token_bytes(AutoTokenizer.from_pretrained(str(path)))

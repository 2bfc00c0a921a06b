"""Analytic FLOPs and KV-cache cost of one reasoning trace in LongCoT vs Delethink.

python -m verl.tools.cost_model --model r1d-1.5b --thinking 98304 --chunk 8192 --carry 4096 --question 1024
python -m verl.tools.cost_model --model r1d-1.5b --chunk 8192 --carry 4096 --sweep

Counting convention. Every position of every sequence the policy produces gets exactly one forward
pass (prompt positions as prefill, generated positions as decode; the last generated token is counted
as if it were fed back, one extra position per sequence, which keeps generation and training over
the same sequences). The position at 0-based index p attends to p + 1 keys (itself included) and costs

    2 * N  +  4 * num_layers * hidden_size * (p + 1)

FLOPs: 2N for the weight matmuls (N = parameters used in a matmul per token, including the LM head),
and 2 * hidden_size * (p + 1) per layer for each of QK^T and AV. Summed exactly in closed form:
positions [a, b) have sum(p + 1) = (b(b + 1) - a(a + 1)) / 2. Training is forward + backward ~ 3x the
forward of the trained sequences, which are the same sequences (the prompt is masked out of the loss
but still has to be run through the network).

LongCoT: one sequence of question + L tokens. Delethink: chunk 1 is question + min(L, C) tokens; every
later chunk re-prefills question + m carried tokens and adds up to C - m new ones, so it is L-linear
and no sequence exceeds question + C.

Against the paper (R1-Distill-1.5B, 96K average thinking, C = 8K, m = 4K: LongCoT-RL ~27 H100-months,
Delethink-RL ~7, ratio ~3.9), this model gives a total-FLOPs ratio of only ~1.4x. We did not tune it.
Reasons the measured cost ratio is larger than the FLOPs ratio:
- Decode is memory-bound, not compute-bound. A decode step reads the whole KV cache, so its wall time
  tracks KV bytes read (quadratic in L for LongCoT), while prefill runs near peak FLOPs; the re-prefill
  of q + m tokens that doubles Delethink's matmul FLOPs costs far less time than its FLOP count
  suggests. The table therefore also prints a decode-only FLOPs ratio (~2.7x at 96K) and the decode
  KV-read ratio (~7x); the paper's 3.9x lies between the three.
- A 100K-token KV cache per trace limits how many traces fit on a GPU at once (batch size), which
  lowers LongCoT's throughput further; FLOPs do not see this.
- The paper's H100-month figures are estimates from its own setup (engine, parallelism, what part of
  the pipeline was counted); we cannot reproduce those choices from FLOPs alone.
The H100-month conversion printed by the CLI is an explicit assumption (peak 989 TFLOP/s bf16 dense,
an MFU you choose, traces = 1000 steps x 128 prompts x 8 samples) and applies one MFU to both
environments, which is exactly what the points above say is not true.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from verl.utils.fs import read_jsonl

TRAIN_TO_FORWARD = 3  # backward ~ 2x forward
H100_BF16_DENSE_FLOPS = 989e12
SECONDS_PER_MONTH = 30 * 24 * 3600
PAPER_TRACES = 1000 * 128 * 8  # steps x prompts per step x samples per prompt
PAPER_THINKING, PAPER_CHUNK, PAPER_CARRY = 98304, 8192, 4096
PAPER_LONGCOT_H100_MONTHS, PAPER_DELETHINK_H100_MONTHS = 27, 7


@dataclass(frozen=True)
class ModelDims:
    num_layers: int
    hidden_size: int  # = num_heads * head_dim, the width of the query in QK^T
    matmul_params: int  # parameters multiplied per token (non-embedding + LM head)
    num_kv_heads: int
    head_dim: int
    bytes_per_value: int = 2  # bf16 KV cache

    def __post_init__(self) -> None:
        for name in (
            "num_layers",
            "hidden_size",
            "matmul_params",
            "num_kv_heads",
            "head_dim",
            "bytes_per_value",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"ModelDims.{name} must be positive, got {getattr(self, name)}")

    @property
    def kv_bytes_per_token(self) -> int:
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.bytes_per_value  # K and V


PRESETS = {
    # Qwen2.5-1.5B (= R1-Distill-Qwen-1.5B): 12 query heads x 128 = 1536, intermediate 8960, vocab 151936.
    # 1,310,340,608 non-embedding params + 233,373,696 for the tied embedding, which costs a matmul
    # per token as the LM head. Biases and norms (<0.01%) are counted as if they were matmuls.
    "r1d-1.5b": ModelDims(
        num_layers=28, hidden_size=1536, matmul_params=1_543_714_304, num_kv_heads=2, head_dim=128
    ),
    # small enough to check by hand
    "tiny": ModelDims(num_layers=2, hidden_size=4, matmul_params=100, num_kv_heads=1, head_dim=2),
}


@dataclass(frozen=True)
class TraceCost:
    num_sequences: int
    prefill_flops: int
    decode_flops: int
    peak_kv_bytes: int  # largest KV cache one trace holds at any moment
    decode_kv_read_bytes: int  # KV bytes read over all decode steps (what memory-bound decode pays)

    @property
    def gen_flops(self) -> int:
        return self.prefill_flops + self.decode_flops

    @property
    def train_flops(self) -> int:
        return TRAIN_TO_FORWARD * self.gen_flops

    @property
    def total_flops(self) -> int:
        return self.gen_flops + self.train_flops


def _check_nonnegative(**values: int) -> None:
    for name, value in values.items():
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")


def _positions_sum(start: int, end: int) -> int:
    """sum of (p + 1) for p in [start, end): the keys attended by those positions."""
    return (end * (end + 1) - start * (start + 1)) // 2


def _span_flops(dims: ModelDims, start: int, end: int) -> int:
    return 2 * dims.matmul_params * (end - start) + 4 * dims.num_layers * dims.hidden_size * _positions_sum(
        start, end
    )


def sequence_cost(dims: ModelDims, prompt_len: int, new_len: int) -> TraceCost:
    """One sequence: prefill prompt_len tokens, then decode new_len tokens on top of them."""
    _check_nonnegative(prompt_len=prompt_len, new_len=new_len)
    end = prompt_len + new_len
    return TraceCost(
        num_sequences=1,
        prefill_flops=_span_flops(dims, 0, prompt_len),
        decode_flops=_span_flops(dims, prompt_len, end),
        peak_kv_bytes=dims.kv_bytes_per_token * end,
        decode_kv_read_bytes=dims.kv_bytes_per_token * _positions_sum(prompt_len, end),
    )


def longcot_cost(dims: ModelDims, question: int, thinking: int) -> TraceCost:
    _check_nonnegative(question=question, thinking=thinking)
    return sequence_cost(dims, question, thinking)


def new_tokens_per_chunk(thinking: int, chunk: int, carry: int) -> list[int]:
    """New thinking tokens generated in each chunk until `thinking` tokens exist."""
    _check_nonnegative(thinking=thinking, carry=carry)
    if chunk <= 0:
        raise ValueError(f"chunk must be positive, got {chunk}")
    if carry >= chunk:
        raise ValueError(
            f"carry (keep_head + keep_tail) must be smaller than chunk, got carry={carry}, "
            f"chunk={chunk}: a later chunk would have no room for new tokens"
        )
    first = min(thinking, chunk)
    rest = thinking - first
    step = chunk - carry
    return [first] + [min(step, rest - i) for i in range(0, rest, step)]


def delethink_cost(dims: ModelDims, question: int, thinking: int, chunk: int, carry: int) -> TraceCost:
    _check_nonnegative(question=question)
    new_tokens = new_tokens_per_chunk(thinking, chunk, carry)
    # after chunk 1 there are >= chunk > carry thinking tokens, so every later prompt carries exactly `carry`
    costs = [sequence_cost(dims, question, new_tokens[0])]
    costs += [sequence_cost(dims, question + carry, n) for n in new_tokens[1:]]
    return TraceCost(
        num_sequences=len(costs),
        prefill_flops=sum(c.prefill_flops for c in costs),
        decode_flops=sum(c.decode_flops for c in costs),
        peak_kv_bytes=max(c.peak_kv_bytes for c in costs),  # chunks run one after another
        decode_kv_read_bytes=sum(c.decode_kv_read_bytes for c in costs),
    )


def qwen2_dims(hf_config, bytes_per_value: int = 4) -> ModelDims:
    """The dims of a Qwen2-style HF config: attention, gated MLP and the LM head per token (float32
    caches by default, as the CPU runs keep them)."""
    h, layers = hf_config.hidden_size, hf_config.num_hidden_layers
    head_dim = h // hf_config.num_attention_heads
    kv = hf_config.num_key_value_heads * head_dim
    per_layer = 2 * h * h + 2 * h * kv + 3 * h * hf_config.intermediate_size
    return ModelDims(
        num_layers=layers,
        hidden_size=h,
        matmul_params=layers * per_layer + hf_config.vocab_size * h,
        num_kv_heads=hf_config.num_key_value_heads,
        head_dim=head_dim,
        bytes_per_value=bytes_per_value,
    )


def logged_run_flops(
    run_dir: Path, dims: ModelDims, count_tokens: Callable[[str], int], delethink: tuple[int, int] | None
) -> float:
    """Generation + training FLOPs of every trajectory a run logged in run_dir/rollouts/ (validation not
    counted), its question's length by `count_tokens`. delethink = (C, m), or None for LongCoT."""
    total, question_len = 0.0, {}
    for path in sorted((Path(run_dir) / "rollouts").glob("step_*[0-9].jsonl")):
        for row in read_jsonl(path):
            prompt = row["prompt"]
            if prompt not in question_len:
                question_len[prompt] = count_tokens(prompt)
            q, thinking = question_len[prompt], row["thinking_tokens"]
            cost = (
                longcot_cost(dims, q, thinking)
                if delethink is None
                else delethink_cost(dims, q, thinking, *delethink)
            )
            total += cost.total_flops
    return total


def h100_months(flops_per_trace: float, traces: int, mfu: float) -> float:
    """Assumption: all FLOPs run at `mfu` of the H100's bf16 dense peak."""
    return flops_per_trace * traces / (H100_BF16_DENSE_FLOPS * mfu) / SECONDS_PER_MONTH


def _row(label: str, longcot: float, delethink: float, fmt: str) -> str:
    ratio = f"{longcot / delethink:8.2f}x" if delethink else "       -"
    return f"{label:<24}{format(longcot, fmt):>14}{format(delethink, fmt):>14}{ratio:>12}"


def format_comparison(longcot: TraceCost, delethink: TraceCost) -> str:
    gib = 2**30
    lines = [
        f"{'':<24}{'LongCoT':>14}{'Delethink':>14}{'LC/DT':>12}",
        _row("sequences per trace", longcot.num_sequences, delethink.num_sequences, "d"),
        _row("gen FLOPs", longcot.gen_flops, delethink.gen_flops, ".3e"),
        _row("  prefill FLOPs", longcot.prefill_flops, delethink.prefill_flops, ".3e"),
        _row("  decode FLOPs", longcot.decode_flops, delethink.decode_flops, ".3e"),
        _row("train FLOPs", longcot.train_flops, delethink.train_flops, ".3e"),
        _row("total FLOPs", longcot.total_flops, delethink.total_flops, ".3e"),
        _row("peak KV (GiB)", longcot.peak_kv_bytes / gib, delethink.peak_kv_bytes / gib, ".3f"),
        _row(
            "decode KV reads (GiB)",
            longcot.decode_kv_read_bytes / gib,
            delethink.decode_kv_read_bytes / gib,
            ".1f",
        ),
    ]
    return "\n".join(lines)


def format_sweep(dims: ModelDims, question: int, chunk: int, carry: int) -> str:
    lines = [
        f"{'thinking':>10}{'chunks':>8}{'total FLOPs':>13}{'decode FLOPs':>14}{'KV reads':>10}"
        f"{'peak KV':>9}   (LongCoT / Delethink)"
    ]
    for multiple in (1, 2, 4, 8, 12):
        thinking = multiple * chunk
        lc = longcot_cost(dims, question, thinking)
        dt = delethink_cost(dims, question, thinking, chunk, carry)
        lines.append(
            f"{thinking:>10}{dt.num_sequences:>8}{lc.total_flops / dt.total_flops:>12.2f}x"
            f"{lc.decode_flops / dt.decode_flops:>13.2f}x"
            f"{lc.decode_kv_read_bytes / dt.decode_kv_read_bytes:>9.2f}x"
            f"{lc.peak_kv_bytes / dt.peak_kv_bytes:>8.2f}x"
        )
    return "\n".join(lines)


def paper_comparison(dims: ModelDims, question: int, traces: int, mfu: float) -> str:
    lc = longcot_cost(dims, question, PAPER_THINKING)
    dt = delethink_cost(dims, question, PAPER_THINKING, PAPER_CHUNK, PAPER_CARRY)
    paper_ratio = PAPER_LONGCOT_H100_MONTHS / PAPER_DELETHINK_H100_MONTHS
    ours = lc.total_flops / dt.total_flops
    return "\n".join(
        [
            f"paper (R1-Distill-1.5B, thinking {PAPER_THINKING}, C={PAPER_CHUNK}, m={PAPER_CARRY}): "
            f"{PAPER_LONGCOT_H100_MONTHS}/{PAPER_DELETHINK_H100_MONTHS} H100-months = {paper_ratio:.2f}x",
            f"this model, same settings: total FLOPs {ours:.2f}x ({ours / paper_ratio:.0%} of the paper's), "
            f"decode FLOPs {lc.decode_flops / dt.decode_flops:.2f}x, "
            f"decode KV reads {lc.decode_kv_read_bytes / dt.decode_kv_read_bytes:.2f}x",
            f"ASSUMPTION ({traces} traces, {mfu:.0%} MFU of {H100_BF16_DENSE_FLOPS / 1e12:.0f} TFLOP/s, "
            f"30-day months): LongCoT {h100_months(lc.total_flops, traces, mfu):.1f} vs Delethink "
            f"{h100_months(dt.total_flops, traces, mfu):.1f} H100-months",
        ]
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=sorted(PRESETS), default="r1d-1.5b")
    parser.add_argument("--question", type=int, default=1024, help="question (prompt) tokens")
    parser.add_argument("--thinking", type=int, default=PAPER_THINKING, help="thinking tokens per trace")
    parser.add_argument("--chunk", type=int, default=PAPER_CHUNK, help="Delethink chunk size C")
    parser.add_argument("--carry", type=int, default=PAPER_CARRY, help="Delethink keep_head + keep_tail")
    parser.add_argument("--sweep", action="store_true", help="ratios for thinking = 1, 2, 4, 8, 12 chunks")
    parser.add_argument("--traces", type=int, default=PAPER_TRACES, help="traces for the H100-month estimate")
    parser.add_argument("--mfu", type=float, default=0.3, help="assumed model FLOPs utilisation (a guess)")
    args = parser.parse_args(argv)
    if not 0 < args.mfu <= 1:
        raise ValueError(f"mfu must be in (0, 1], got {args.mfu}")
    if args.traces <= 0:
        raise ValueError(f"traces must be positive, got {args.traces}")

    dims = PRESETS[args.model]
    longcot = longcot_cost(dims, args.question, args.thinking)
    delethink = delethink_cost(dims, args.question, args.thinking, args.chunk, args.carry)
    print(
        f"model {args.model}  question {args.question}  thinking {args.thinking}  "
        f"chunk {args.chunk}  carry {args.carry}"
    )
    print(format_comparison(longcot, delethink))
    print(f"ratio LongCoT/Delethink total FLOPs: {longcot.total_flops / delethink.total_flops:.2f}x")
    if args.sweep:
        print()
        print(format_sweep(dims, args.question, args.chunk, args.carry))
    print()
    print(paper_comparison(dims, args.question, args.traces, args.mfu))


if __name__ == "__main__":
    main()

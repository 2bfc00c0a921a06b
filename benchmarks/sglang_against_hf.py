"""SGLang's CPU engine against the HF engine: the same model, the same requests, at the testbed's shapes.

    .venv/bin/python benchmarks/sglang_against_hf.py                      # every case, 2 alternating repeats
    .venv/bin/python benchmarks/sglang_against_hf.py --quick              # short cases, a few minutes
    .venv/bin/python benchmarks/sglang_against_hf.py --record docs/results/sglang_against_hf.yaml

Cases (sampled tokens exactly as many as asked: temperature 1, EOS ignored):
- `longcot B` / `longcot 8B`: N requests of P prompt tokens writing B (or 8B) tokens each, the testbed
  demo's LongCoT budget B = 256 and its largest timed budget;
- `delethink 8B`: N Delethink traces through `DelethinkAgentLoop` (C = 64, m = 32, I chunks for 8B
  tokens), the chunk prompts question + carry-over that the testbed times;
- `real NxP+T`: a model of real size (Qwen2 at SmolLM2-135M's dimensions, random weights).

Each case runs on both engines alternately, in one process (SGLang's scheduler is its own process,
given as many threads as the HF engine), so load from other jobs falls on both alike; the ratio is
SGLang's tokens/s over the HF engine's, pair by pair. Where the time goes: each engine first runs the
case's prompts alone (one token each: prefill), its prefix cache emptied before and after, and the
rest of the case's time is decode, reported per decode step.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from verl.agent_loop.delethink import DelethinkAgentLoop
from verl.agent_loop.manager import run_agent_loops
from verl.core.delethink import DelethinkParams
from verl.core.engine import SamplingParams
from verl.core.trajectory import PromptItem
from verl.models.tiny import build_model, build_tokenizer
from verl.workers.rollout.hf_engine import HFRolloutEngine
from verl.workers.rollout.sglang_engine import SGLangRolloutEngine

# the testbed demo's sizes (recipes/markovian_testbed): B = 256, C = 64, m = 32
BUDGET, CHUNK, CARRY = 256, 64, 32
REAL_DIMS = dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                 num_key_value_heads=3, max_position_embeddings=4096)  # fmt: skip


CAPTION = (
    "Tokens/s of sampled tokens (EOS ignored), the two engines alternately in one process, one torch thread "
    "each; ratios pair by pair. Prefill: the case's prompts alone, one token each. Decode per step: the "
    "best run's time less the prefill, over the tokens each request wrote (LongCoT and real cases)."
)


@dataclass
class Case:
    name: str
    model: str  # "tiny" or "real"
    requests: int
    prompt: int
    new_tokens: int  # per request (LongCoT) or per trace (Delethink)
    delethink: bool = False


def cases(quick: bool) -> list[Case]:
    if quick:
        return [
            Case("longcot B", "tiny", 16, 64, BUDGET),
            Case("delethink 2B", "tiny", 16, 64, 2 * BUDGET, True),
            Case("real 8x64+32", "real", 8, 64, 32),
        ]
    return [
        Case("longcot B", "tiny", 16, 64, BUDGET),
        Case("longcot 8B", "tiny", 16, 64, 8 * BUDGET),
        Case("delethink 8B", "tiny", 16, 64, 8 * BUDGET, True),
        Case("real 8x64+64", "real", 8, 64, 64),
        Case("real 32x64+64", "real", 32, 64, 64),
    ]


def write_model(kind: str, root: Path) -> Path:
    """A Qwen2 model directory: the testbed's tiny model (positions for 8B) or one of real size."""
    tokenizer = build_tokenizer()
    dims = {"max_position_embeddings": 4096} if kind == "tiny" else REAL_DIMS
    model = build_model(tokenizer, seed=0, **dims)
    if kind == "real":  # a real vocabulary's size, so the output layer costs what it costs in a real model
        model.resize_token_embeddings(49152, mean_resizing=False)
    path = root / kind
    tokenizer.save_pretrained(path)
    model.save_pretrained(path)
    return path


def prompts(case: Case, vocab: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(len(case.name))
    return torch.randint(0, min(vocab, 256), (case.requests, case.prompt), generator=generator).tolist()


def delethink_params(case: Case) -> DelethinkParams:
    chunks = 1 + (case.new_tokens - CHUNK) // (CHUNK - CARRY)
    return DelethinkParams(chunk_size=CHUNK, keep_head=CARRY // 2, keep_tail=CARRY // 2, max_chunks=chunks)


async def run_case(engine, case: Case, prompt_ids: list[list[int]], max_new_tokens: int) -> int:
    """The case's requests on `engine`; returns the tokens sampled."""
    params = SamplingParams(max_new_tokens, temperature=1.0, ignore_eos=True)
    if case.delethink and max_new_tokens > 1:
        items = [PromptItem(p, "benchmark", "0") for p in prompt_ids]
        seeded = [SamplingParams(CHUNK, temperature=1.0, seed=i, ignore_eos=True) for i in range(len(items))]
        trajectories = await run_agent_loops(
            DelethinkAgentLoop(engine, delethink_params(case)), items, seeded
        )
        return sum(len(t.response_ids) for traj in trajectories for t in traj.turns)
    outputs = await asyncio.gather(*(engine.generate(p, params) for p in prompt_ids))
    return sum(len(o.token_ids) for o in outputs)


class Engines:
    """The two engines on one model: HF in this process, SGLang in its own, as many threads each."""

    def __init__(self, path: Path, threads: int):
        import transformers

        torch.set_num_threads(threads)
        os.environ["OMP_NUM_THREADS"] = str(threads)  # SGLang's scheduler process reads it at start
        self.model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        self.eos = [self.model.generation_config.eos_token_id]
        self.sglang = SGLangRolloutEngine(
            str(path), self.eos, device="cpu", dtype="float32", max_num_seqs=64, enable_memory_saver=False,
            mem_fraction_static=0.5, log_level="error",
        )  # fmt: skip

    def fresh_hf(self) -> HFRolloutEngine:
        return HFRolloutEngine(self.model, self.eos, pad_token_id=0, max_num_seqs=64)

    def timed(self, which: str, case: Case, prompt_ids, max_new_tokens: int) -> tuple[float, int]:
        if which == "sglang":
            self.sglang._engine.flush_cache()  # no prompt cached from an earlier pass
            loop = self.sglang.event_loop
            start = time.perf_counter()
            tokens = loop.run_until_complete(run_case(self.sglang, case, prompt_ids, max_new_tokens))
        else:
            engine = self.fresh_hf()
            start = time.perf_counter()
            tokens = asyncio.run(run_case(engine, case, prompt_ids, max_new_tokens))
        return time.perf_counter() - start, tokens


def measure(engines: Engines, case: Case, repeats: int) -> dict:
    prompt_ids = prompts(case, engines.model.config.vocab_size)
    steps = case.new_tokens if not case.delethink else None
    result = {"case": case, "pairs": [], "prefill": {}, "seconds": {}}
    for which in ("hf", "sglang"):  # the prompts alone first: each engine's prefill
        result["prefill"][which] = engines.timed(which, case, prompt_ids, 1)[0]
    for _ in range(repeats):
        pair = {}
        for which in ("hf", "sglang"):
            seconds, tokens = engines.timed(which, case, prompt_ids, case.new_tokens)
            pair[which] = tokens / seconds
            result["seconds"].setdefault(which, []).append(seconds)
            result["tokens"] = tokens
        result["pairs"].append(pair)
    result["decode_ms_per_step"] = {
        which: None if steps is None else 1000 * (min(s) - result["prefill"][which]) / steps
        for which, s in result["seconds"].items()
    }
    return result


def table(results: list[dict]) -> tuple[list[str], list[list[str]]]:
    columns = ["case", "tokens", "HF tok/s (best)", "SGLang tok/s (best)", "SGLang / HF (pairs)",
               "prefill s HF / SGLang", "decode ms/step HF / SGLang"]  # fmt: skip
    rows = []
    for r in results:
        best = {w: max(p[w] for p in r["pairs"]) for w in ("hf", "sglang")}
        ratios = ", ".join(f"{p['sglang'] / p['hf']:.2f}x" for p in r["pairs"])
        step = r["decode_ms_per_step"]
        rows.append([
            r["case"].name, f"{r['tokens']:,}", f"{best['hf']:,.0f}", f"{best['sglang']:,.0f}", ratios,
            f"{r['prefill']['hf']:.2f} / {r['prefill']['sglang']:.2f}",
            "-" if step["hf"] is None else f"{step['hf']:.1f} / {step['sglang']:.1f}",
        ])  # fmt: skip
    return columns, rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short cases, a few minutes")
    parser.add_argument("--repeats", type=int, default=2, help="alternating runs of each engine per case")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of each engine")
    parser.add_argument("--record", type=Path, help="write the table as a results record here")
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory() as root:
        by_model: dict[str, list[Case]] = {}
        for case in cases(args.quick):
            by_model.setdefault(case.model, []).append(case)
        for kind, model_cases in by_model.items():
            engines = Engines(write_model(kind, Path(root)), args.threads)
            try:
                for case in model_cases:
                    results.append(measure(engines, case, args.repeats))
                    print(table(results[-1:])[1][0], flush=True)
            finally:
                engines.sglang.shutdown()
    columns, rows = table(results)
    print(" | ".join(columns))
    for row in rows:
        print(" | ".join(row))
    if args.record:
        write_record(args, columns, rows)


def write_record(args, columns: list[str], rows: list[list[str]]) -> None:
    from verl.tools.results import Record, Table, provenance
    from verl.tools.results import write_record as write

    command = "python benchmarks/sglang_against_hf.py" + (" --quick" if args.quick else "")
    write(args.record, Record(
        name=args.record.stem, title="SGLang's CPU engine against the HF engine", section="engine",
        command=f"{command} --repeats {args.repeats} --threads {args.threads}",
        tables=[Table(columns, rows, CAPTION)], **provenance(),
    ))  # fmt: skip


if __name__ == "__main__":  # SGLang's engine spawns processes: nothing may run at import
    main()

"""SmolLM2-135M-Instruct evaluated on the stored GSM8K and MATH-500 sets, LongCoT and Delethink at the same
thinking budget (256 tokens; Delethink C = 128, m = 64, I = 3), through both engines.

Greedy, the HF engine and SGLang's CPU engine run the same evaluation (`main_eval mode=probe`) and their
samples are compared chunk by chunk: how many traces are equal whole, and where the others part. Sampled
(T = 1, n samples a problem), the HF engine gives mean@n and pass@k on MATH-500. Writes the record
docs/results/real_model_eval.yaml (then `python -m verl.tools.results`).

  python -m verl.models.from_gguf     # once (requirements-real-model.txt)
  python benchmarks/real_model_eval.py [--problems 32] [--samples 4] [--threads 2]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from verl.utils.fs import read_jsonl

REPO = Path(__file__).resolve().parents[1]
RECORD = REPO / "docs" / "results" / "real_model_eval.yaml"
BUDGET = [
    "delethink.chunk_size=128",
    "delethink.keep_head=32",
    "delethink.keep_tail=32",
    "delethink.max_chunks=[3]",
]


NOTES = """\
Accuracy and agreement, not speed: the machine's load changes neither (timings: docs/results/engine.md,
sglang_against_hf). With `reward.thinking_tags=false` only a response that ended with EOS is read as an
answer, one cut at the budget scores 0: SmolLM2-135M-Instruct ends about a third of its responses within
256 tokens, and at 135 M parameters it answers almost none of these problems."""


def evaluate(model: Path, out: Path, overrides: list[str]) -> dict:
    from hydra import compose, initialize_config_dir

    from verl.config import CONFIG_DIR
    from verl.eval.config import load_eval_config
    from verl.eval.evaluate import evaluate as run

    base = [f"model_path={model}", f"output_dir={out}", "mode=probe", "max_prompt_length=576",
            "reward.thinking_tags=false", *BUDGET]  # fmt: skip
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return run(load_eval_config(compose(config_name="eval", overrides=[*base, *overrides])))


def agreement(ours: list[dict], theirs: list[dict]) -> dict[str, int]:
    """Traces equal whole, and for the others the chunk and token where the two first differ."""
    equal, parted_at = 0, []
    for a, b in zip(ours, theirs, strict=True):
        ids_a = [t for c in a["chunks"] for t in c["response_ids"]]
        ids_b = [t for c in b["chunks"] for t in c["response_ids"]]
        if ids_a == ids_b:
            equal += 1
        else:
            parted_at.append(next(i for i, (x, y) in enumerate(zip(ids_a, ids_b, strict=False)) if x != y))
    return {"traces": len(ours), "equal": equal, "parted_at": sorted(parted_at)}


def accuracy_rows(summary: dict, metrics: list[str], engine: str) -> list[list[str]]:
    rows = []
    for run in summary["runs"]:
        for source, m in sorted(run["metrics"].items()):
            if source != "all":
                cells = [f"{m[k]:.3f}" for k in metrics]
                rows.append([engine, run["label"], source, *cells, f"{m['has_eos_rate']:.2f}"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=32, help="the first N problems of each set")
    parser.add_argument("--samples", type=int, default=4, help="samples a MATH-500 problem at T = 1")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--record", type=Path, default=RECORD)
    args = parser.parse_args()
    from verl.models import from_gguf

    model = from_gguf.convert(from_gguf.packaged_gguf(), from_gguf.default_out(from_gguf.packaged_gguf()))
    common = [f"max_problems={args.problems}", f"num_threads={args.threads}"]
    greedy = [*common, "val_tasks@tasks=[gsm8k,math500]", "sampling.temperature=0"]
    sampled = [
        *common,
        "val_tasks@tasks=[math500]",
        f"sampling.n={args.samples}",
        f"pass_k=[1,{args.samples}]",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        summaries = {e: evaluate(model, out / e, [*greedy, f"engine={e}"]) for e in ("hf", "sglang")}
        agree = agreement(
            read_jsonl(out / "sglang" / "samples.jsonl"), read_jsonl(out / "hf" / "samples.jsonl")
        )
        sampled_summary = evaluate(model, out / "sampled", sampled)
    write(args, summaries, agree, sampled_summary)


def write(args, summaries: dict, agree: dict, sampled_summary: dict) -> None:
    from verl.tools.results import Record, Table, provenance, write_record

    greedy_rows = [r for e, s in summaries.items() for r in accuracy_rows(s, ["mean@1"], e)]
    n = args.samples
    sampled_rows = accuracy_rows(sampled_summary, [f"mean@{n}", f"pass@{n}"], "hf")
    parted = ", ".join(str(i) for i in agree["parted_at"]) or "none"
    record = Record(
        name=args.record.stem,
        title="SmolLM2-135M-Instruct on GSM8K and MATH-500: LongCoT and Delethink, HF and SGLang",
        section="pretrained",
        command=f"python benchmarks/real_model_eval.py --problems {args.problems} --samples {n} "
        f"--threads {args.threads}",
        tables=[
            Table(
                ["engine", "run", "set", "mean@1 (greedy)", "EOS rate"],
                greedy_rows,
                f"greedy, the first {args.problems} problems of each set, thinking budget 256",
            ),
            Table(
                ["engine", "run", "set", f"mean@{n}", f"pass@{n}", "EOS rate"],
                sampled_rows,
                f"T = 1, {n} samples of each of the first {args.problems} MATH-500 problems",
            ),
            Table(
                ["greedy traces", "equal whole in both engines", "the others part at thinking token"],
                [[str(agree["traces"]), str(agree["equal"]), parted]],
                "SGLang against the HF engine",
            ),
        ],  # fmt: skip
        notes=NOTES,
        **provenance(),
    )
    write_record(args.record, record)
    print(f"wrote {args.record}")


if __name__ == "__main__":  # SGLang's engine spawns processes: nothing may run at import
    main()

"""python -m verl.tools.viewer RUN_DIR [--compare RUN_DIR_B] [--step N] [--out FILE.html] [--tokenizer DIR]

Writes one HTML file (no server, no network: open it from disk) showing RUN_DIR's trajectories:
training rollouts (rollouts/step_N.jsonl), validation generations (val_generations.jsonl) and
main_eval samples (samples.jsonl). --compare puts a second run beside it, trajectories matched by
prompt and sample (LongCoT vs Delethink with the same seeds). The tokenizer, needed to cut the text
at token boundaries, is found in the run (tokens.find_tokenizer) unless --tokenizer names it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from verl.tools.viewer.page import build_page
from verl.tools.viewer.runs import Trace, read_run
from verl.tools.viewer.tokens import TokenBytes, find_tokenizer, load_token_bytes


def source(
    run_dir: Path, step: int | None, tokenizer: Path | None
) -> tuple[str, dict[str, list[Trace]], TokenBytes | None]:
    groups = read_run(run_dir, step)
    path = tokenizer or find_tokenizer(run_dir)
    if path is None:
        why = "no tokenizer found (pass --tokenizer MODEL_DIR); showing chunks without carry-overs"
        print(f"{run_dir}: {why}", file=sys.stderr)
    return run_dir.name, groups, None if path is None else load_token_bytes(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verl.tools.viewer", description=__doc__.splitlines()[2])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--compare", type=Path, help="a second run shown side by side")
    parser.add_argument("--step", type=int, help="only this training/validation step (default: every step)")
    parser.add_argument("--out", type=Path, help="default: RUN_DIR/viewer.html")
    parser.add_argument("--tokenizer", type=Path, help="model or tokenizer directory of the run(s)")
    args = parser.parse_args(argv)
    try:
        sources = [
            source(d, args.step, args.tokenizer) for d in (args.run_dir, args.compare) if d is not None
        ]
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = args.out or args.run_dir / "viewer.html"
    title = " vs ".join(name for name, _, _ in sources)
    out.write_text(build_page(sources, title), encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Pieces of `python -m verl.trainer.main_sft`: one run (run.py), the two data sources (task.py,
files.py), Delethink continuation examples (continuation.py), micro-batches and the loss (batches.py),
ranks and FSDP2 (parallel.py), checkpoints (checkpoint.py), and demo rows for the CPU path (demo_rows.py)."""

"""Rollout viewer: one self-contained HTML page of a run's trajectories, chunk boundaries and
Delethink carry-overs drawn in place. `python -m verl.tools.viewer RUN_DIR [--step N] [--out FILE]`."""

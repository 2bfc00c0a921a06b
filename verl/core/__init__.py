"""The floor every other floor stands on: what a trajectory is, the engine contract, Delethink's
parameters and carry-over, and the algorithms (advantages, losses, training rows, problem metrics)
as pure functions. Nothing here imports from verl above verl.models and verl.utils."""

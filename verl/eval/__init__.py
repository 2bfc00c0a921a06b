"""Evaluation of checkpoints in the LongCoT and Delethink environments (`verl.trainer.main_eval`)."""

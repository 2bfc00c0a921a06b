"""SFT: `python -m verl.trainer.main_sft [--config-name=sft] [key=value ...]`, or under
`torchrun --nproc_per_node=N` for N FSDP2 ranks (sft/parallel.py). Loss on the response tokens only.

Two data sources (data.source):
- `task` (config/sft_tiny.yaml, sft_testbed.yaml): the tiny model learns the reference LongCoT traces of
  a synthetic task (task.name: `running_sum`, verl/data/synthetic.py, or `shift_register`,
  verl/data/shift_register.py), drawn on the fly from `train.seed` in a stream separate from the RL
  data: prompt = chat template + generation prompt, target = `THINKING</think>\\boxed{A}<|end|>`.
  Opt-in (task.continuation.prob > 0): some examples are the chunk the Delethink loop generates after
  a cut (prompt = question + carry-over), so the model learns to continue a chunk. Training stops
  early once the model is *partly* good (train.stop_at_accuracy), so that RL has something left to
  learn, and a held-out evaluation prints accuracy by problem size (greedy and temperature 1).
- `files` (config/sft.yaml): prompt/response or chat-message rows of jsonl/parquet files, any HF
  causal LM (sft/files.py); validation loss on data.val_files; data.continuation turns a share of the
  long traces into Delethink continuation chunks (sft/continuation.py, shared with the task).
The optimizer loop (sft/loop.py), logging (console/jsonl/wandb), checkpoints that resume
(sft/checkpoint.py) and micro-batching (sft/batches.py) are the same for both. At the end the model and
tokenizer are saved with `save_pretrained`, atomically, to `output_dir`, with the resolved config
(sft_config.yaml) and the losses, evaluation and last validation (sft_metrics.json).
This file checks the config; the run itself is sft/run.py, imported (with torch and transformers) only
for a good config, so a bad key or value stops in a second with one line and exit code 2.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from verl.config import ConfigError
from verl.config.sft import SFTConfig
from verl.data.generated_tasks import TASK_MAX_SIZE
from verl.data.synthetic import check_labels
from verl.trainer.cli_keys import exit_2_on_input_errors, exit_on_unknown_keys


def load_sft_config(cfg: DictConfig) -> SFTConfig:
    """Type-check `cfg` against SFTConfig (verl/config/sft.py) and check its rules; a ConfigError names
    the key and value. The label alphabet and the tasks' sizes are the task modules', known up here."""
    cfg = cfg.copy()
    for key in ("data.train_files", "data.val_files"):  # one file may be given as a plain string
        if isinstance(OmegaConf.select(cfg, key), str):
            OmegaConf.update(cfg, key, [OmegaConf.select(cfg, key)])
    try:
        config: SFTConfig = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(SFTConfig), cfg))
    except OmegaConfBaseException as e:
        raise ConfigError(f"{e.full_key}: {str(e.msg).splitlines()[0]}") from None
    try:
        check_labels(config.task.labels)
    except ValueError as e:
        raise ConfigError(f"task.labels={config.task.labels!r}: {e}") from None
    errors = config.problems(TASK_MAX_SIZE)
    if errors:
        raise ConfigError("\n".join(errors))
    return config


@hydra.main(config_path="config", config_name="sft_tiny", version_base="1.3")
def main(cfg: DictConfig) -> None:
    with exit_2_on_input_errors():
        config = load_sft_config(cfg)
        from verl.trainer.sft.run import run  # imports torch and transformers: only for a good config

        run(config)


if __name__ == "__main__":
    exit_on_unknown_keys(SFTConfig)
    main()

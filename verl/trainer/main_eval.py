"""Evaluation entry point: `python -m verl.trainer.main_eval model_path=... data_files=[...] [key=value]`.

Runs a checkpoint in the LongCoT or Delethink environment over a list of budgets (mode=longcot |
delethink), or both at equal total budgets (mode=probe: does the model already think Markovianly?).
Writes {output_dir}/samples.jsonl, summary.json and, for several budgets, accuracy_vs_budget.png.
A bad config stops here with a message naming the key and exit code 2, before any model loads; a bad
data file or row stops with a line naming it and exit code 2.
Every key is documented in config/eval.yaml.
"""

import hydra
from omegaconf import DictConfig

from verl.eval.config import EvalConfig, load_eval_config
from verl.trainer.cli_keys import exit_2_on_input_errors, exit_on_unknown_keys


@hydra.main(config_path="config", config_name="eval", version_base="1.3")
def main(cfg: DictConfig) -> None:
    with exit_2_on_input_errors():
        config = load_eval_config(cfg)
        from verl.eval.evaluate import evaluate  # imports torch and transformers: only for a good config

        evaluate(config)


if __name__ == "__main__":
    exit_on_unknown_keys(EvalConfig)
    main()

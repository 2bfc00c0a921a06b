#!/usr/bin/env bash
# PPO with a critic: GAE advantages (algorithm.adv_estimator=gae) from a value model trained in the same
# workers as the actor (critic.*: by default the actor's model with a one-output head). Either thinking
# environment; in Delethink each chunk's values are computed in its own context and the GAE runs across
# the chunk boundaries. Every Hydra key can be overridden on the command line:
#   bash examples/critic_gae.sh trainer.total_training_steps=3               (tiny LongCoT, CPU)
#   CONFIG=tiny_delethink bash examples/critic_gae.sh trainer.critic_warmup=2
#   CONFIG=r1d-1.5b_deepscaler_delethink_24k bash examples/critic_gae.sh ...   (GPU)
set -euo pipefail
cd "$(dirname "$0")/.."
source examples/python_env.sh
export RAY_AUTH_MODE=${RAY_AUTH_MODE:-disabled}
# The critic's values replace the group baseline, so one sample per prompt is enough (rollout.n=1 works);
# the configs' n is kept here. The value head starts from scratch: it learns faster than the policy
# (critic.optim.lr above the actor's), and trainer.critic_warmup steps can train it alone first.
exec "$PYTHON" -m verl.trainer.main_policy_iteration --config-name="${CONFIG:-tiny_longcot}" \
  algorithm.adv_estimator=gae \
  algorithm.gamma=1.0 \
  algorithm.lam=0.95 \
  critic.optim.lr=1e-4 \
  critic.cliprange_value=0.5 \
  critic.ppo_micro_batch_size_per_gpu=8 \
  trainer.critic_warmup=0 \
  "$@"

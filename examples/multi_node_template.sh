#!/usr/bin/env bash
# Training across several GPU nodes on one Ray cluster. Run this same script on every node; node 0
# starts the Ray head and, once every node has joined, the training driver:
#
#   node 0:       NODE_RANK=0 NNODES=2 bash examples/multi_node_template.sh [hydra overrides]
#   node 1..N-1:  NODE_RANK=1 NNODES=2 HEAD_ADDR=<node 0 address> bash examples/multi_node_template.sh
#
# Under SLURM: NODE_RANK=$SLURM_NODEID HEAD_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
# Hydra overrides go to the driver on node 0 (e.g. data.train_files=/data/deepscaler.jsonl).
#
# Settings (environment variables):
#   CONFIG          config name under verl/trainer/config (default: the paper's Delethink 24K recipe)
#   NNODES          nodes in the cluster, passed on as trainer.nnodes (default 2)
#   GPUS_PER_NODE   GPUs each node gives Ray, passed on as trainer.n_gpus_per_node (default 8)
#   NODE_RANK       0 on the head node, 1..NNODES-1 on the others (default 0)
#   HEAD_ADDR       node 0's address as the other nodes reach it (required on nodes 1..N-1; on
#                   node 0 the default is this host's first address)
#   RAY_PORT        the head's port (default 6379)
#   NET_IF          network interface between the nodes (e.g. eth0, ib0); sets NCCL_SOCKET_IFNAME and
#                   GLOO_SOCKET_IFNAME, which matters when the first interface is not the one the
#                   nodes share. Other NCCL_* variables (NCCL_IB_HCA, NCCL_DEBUG=INFO) pass through.
#   JOIN_TIMEOUT_S  how long node 0 waits for the others to join (default 600)
#   KEEP_RAY=1      leave the Ray cluster running after training (default: node 0 stops its Ray)
# Rollouts use SGLang (no vLLM, so no VLLM_* variables). Worker processes inherit the environment of
# their node's `ray start`, so variables exported here reach every worker on every node.
#
# DRY_RUN=1 starts nothing: it prints the Ray commands this node would run and, on node 0, validates
# the config and prints the run's plan (GPUs, batches, budgets). No GPU, model or cluster needed.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python; fi
fi
CONFIG=${CONFIG:-r1d-1.5b_deepscaler_delethink_24k}
NNODES=${NNODES:-2}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
NODE_RANK=${NODE_RANK:-0}
if [ "$NODE_RANK" != 0 ] && [ -z "${HEAD_ADDR:-}" ]; then
  echo "node $NODE_RANK: set HEAD_ADDR to node 0's address" >&2
  exit 2
fi
HEAD_ADDR=${HEAD_ADDR:-$(hostname -I 2>/dev/null | awk '{print $1}')}
HEAD_ADDR=${HEAD_ADDR:-127.0.0.1}
RAY_PORT=${RAY_PORT:-6379}
JOIN_TIMEOUT_S=${JOIN_TIMEOUT_S:-600}
RAY_CLI=$(dirname "$PYTHON")/ray  # the ray command of the same environment as $PYTHON
if [ ! -x "$RAY_CLI" ]; then RAY_CLI=ray; fi

export RAY_AUTH_MODE=${RAY_AUTH_MODE:-disabled}
export TOKENIZERS_PARALLELISM=false
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
if [ -n "${NET_IF:-}" ]; then
  export NCCL_SOCKET_IFNAME=$NET_IF GLOO_SOCKET_IFNAME=$NET_IF
fi

run() {  # print a command; execute it unless this is a dry run
  echo "+ $*"
  if [ "${DRY_RUN:-0}" != 1 ]; then "$@"; fi
}

if [ "$NODE_RANK" != 0 ]; then
  # --block keeps this node's Ray in the foreground until the head goes away
  run "$RAY_CLI" start --address="$HEAD_ADDR:$RAY_PORT" --num-gpus="$GPUS_PER_NODE" --block
  exit 0
fi

run "$RAY_CLI" start --head --port="$RAY_PORT" --node-ip-address="$HEAD_ADDR" --num-gpus="$GPUS_PER_NODE" \
  --include-dashboard=false
# The launcher joins the running cluster, instead of starting a private Ray, when RAY_ADDRESS is set.
export RAY_ADDRESS="$HEAD_ADDR:$RAY_PORT"
if [ "${DRY_RUN:-0}" != 1 ]; then
  if [ "${KEEP_RAY:-0}" != 1 ]; then trap '"$RAY_CLI" stop' EXIT; fi
  echo "waiting up to ${JOIN_TIMEOUT_S}s for $NNODES node(s) to join $RAY_ADDRESS"
  "$PYTHON" - "$NNODES" "$JOIN_TIMEOUT_S" <<'EOF'
import sys
import time

import ray

want, timeout = int(sys.argv[1]), float(sys.argv[2])
ray.init()  # RAY_ADDRESS
deadline = time.monotonic() + timeout
while (alive := sum(node["Alive"] for node in ray.nodes())) < want:
    if time.monotonic() > deadline:
        sys.exit(f"only {alive} of {want} nodes joined within {timeout:.0f}s; check NODE_RANK/HEAD_ADDR")
    time.sleep(5)
print(f"{alive} node(s), {ray.cluster_resources().get('GPU', 0):.0f} GPU(s) in the cluster")
EOF
fi
"$PYTHON" -m verl.trainer.main_policy_iteration --config-name="$CONFIG" \
  trainer.nnodes="$NNODES" trainer.n_gpus_per_node="$GPUS_PER_NODE" "$@"

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
# Ranks are placed node by node (verl/single_controller/placement.py): ranks 0..GPUS_PER_NODE-1 on node 0 (the
# driver's), the next GPUS_PER_NODE on another node, and so on; the driver prints the rank -> node table
# at start-up. A cluster that cannot hold trainer.nnodes x trainer.n_gpus_per_node ranks stops the run
# at once with one line saying what it has. If a node is lost mid-run, the driver stops with one line
# naming it and the newest checkpoint; with the node back, the same commands resume from there.
#
# Settings (environment variables):
#   CONFIG          config name under verl/trainer/config (default: the paper's Delethink 24K recipe)
#   NNODES          nodes in the cluster, passed on as trainer.nnodes (default 2)
#   GPUS_PER_NODE   GPUs each node gives Ray, passed on as trainer.n_gpus_per_node (default 8)
#   CPUS_PER_NODE   CPUs each node gives Ray (default: all of the node's cores)
#   NODE_RANK       0 on the head node, 1..NNODES-1 on the others (default 0)
#   HEAD_ADDR       node 0's address as the other nodes reach it (required on nodes 1..N-1; on
#                   node 0 the default is this host's first address)
#   RAY_PORT        the head's port (default 6379)
#   NET_IF          network interface between the nodes (e.g. eth0, ib0); sets NCCL_SOCKET_IFNAME and
#                   GLOO_SOCKET_IFNAME, which matters when the first interface is not the one the
#                   nodes share. Other NCCL_* variables (NCCL_IB_HCA, NCCL_DEBUG=INFO) pass through.
#   JOIN_TIMEOUT_S  how long node 0 waits for the others to join once its own head answers, and the
#                   others for node 0's head to answer (default 600); past it, one line names the
#                   variable to check, exit code 2
#   KEEP_RAY=1      leave node 0's Ray running after training (`ray stop` ends it; default: node 0 stops
#                   its own Ray, and only that, when the driver ends, also after an error; the other
#                   nodes' Ray then leaves within about a minute)
# Rollouts use SGLang (no vLLM, so no VLLM_* variables). Worker processes inherit the environment of
# their node's `ray start`, so variables exported here reach every worker on every node.
#
# DRY_RUN=1 starts nothing: it prints the Ray commands this node would run and, on node 0, validates
# the config and prints the run's plan (GPUs, placement, batches, budgets). No GPU, model or cluster
# needed.
#
# A rehearsal on one machine, CPU ranks: two Ray nodes (two raylets) on this machine, the tiny model and
# data of `make tiny`, ranks 0 and 1 on different nodes talking over gloo (tests/test_multi_node.py runs
# this and compares it with the one-node run; RAY_PORT must be free, and two rehearsals need two ports):
#
#   export NNODES=2 GPUS_PER_NODE=1 CPUS_PER_NODE=1 HEAD_ADDR=127.0.0.1 RAY_PORT=6390 CONFIG=tiny_delethink
#   export RAY_TMPDIR=$(mktemp -d)  # this rehearsal's Ray files, out of /tmp/ray (see below)
#   NODE_RANK=1 bash examples/multi_node_template.sh &
#   NODE_RANK=0 bash examples/multi_node_template.sh trainer.total_training_steps=3
#   kill %1   # node 1's Ray (it would leave by itself within about a minute of node 0's)
#
# Every `ray start` records its cluster's address in $RAY_TMPDIR/ray/ray_current_cluster (default
# /tmp/ray), and a plain ray.init() on that machine joins it (or waits minutes once it is gone); the
# launcher's private Ray, without RAY_ADDRESS, does not.
set -euo pipefail
cd "$(dirname "$0")/.."
source examples/python_env.sh
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

RESOURCES=(--num-gpus="$GPUS_PER_NODE")
if [ -n "${CPUS_PER_NODE:-}" ]; then RESOURCES+=(--num-cpus="$CPUS_PER_NODE"); fi

if [ "$NODE_RANK" != 0 ]; then
  if [ "${DRY_RUN:-0}" != 1 ]; then
    # `ray start --address` waits minutes on an address nobody answers on; this says so in JOIN_TIMEOUT_S
    "$PYTHON" -m verl.trainer.cluster head "$HEAD_ADDR:$RAY_PORT" "$JOIN_TIMEOUT_S"
  fi
  # --block keeps this node's Ray in the foreground until the head goes away or the node is stopped
  run "$RAY_CLI" start --address="$HEAD_ADDR:$RAY_PORT" "${RESOURCES[@]}" --block
  exit 0
fi

HEAD=("$RAY_CLI" start --head --port="$RAY_PORT" --node-ip-address="$HEAD_ADDR" "${RESOURCES[@]}"
  --include-dashboard=false)
HEAD_PID=
if [ "${KEEP_RAY:-0}" = 1 ]; then
  run "${HEAD[@]}"
else
  # The head runs in the background under --block, and ending that one process stops this node's Ray
  # and nothing else (`ray stop` would stop every Ray on the machine, another user's or rehearsal's too).
  echo "+ ${HEAD[*]} --block &"
  if [ "${DRY_RUN:-0}" != 1 ]; then
    "${HEAD[@]}" --block &
    HEAD_PID=$!
    trap 'kill "$HEAD_PID" 2>/dev/null || true; wait "$HEAD_PID" 2>/dev/null || true' EXIT
  fi
fi
# The launcher joins the running cluster, instead of starting a private Ray, when RAY_ADDRESS is set.
export RAY_ADDRESS="$HEAD_ADDR:$RAY_PORT"
if [ "${DRY_RUN:-0}" != 1 ]; then
  echo "waiting up to ${JOIN_TIMEOUT_S}s for $NNODES node(s) to join $RAY_ADDRESS"
  "$PYTHON" -m verl.trainer.cluster nodes "$RAY_ADDRESS" "$NNODES" "$JOIN_TIMEOUT_S" ${HEAD_PID:+"$HEAD_PID"}
fi
"$PYTHON" -m verl.trainer.main_policy_iteration --config-name="$CONFIG" \
  trainer.nnodes="$NNODES" trainer.n_gpus_per_node="$GPUS_PER_NODE" "$@"

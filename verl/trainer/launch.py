"""From a validated config to a finished run: data, reward, the worker group (Ray actors, or one worker
in this process with trainer.launcher=local), the trainer. Ray is imported only when the run uses it."""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from transformers import AutoTokenizer, PreTrainedTokenizerBase

from verl.config import ConfigError, PolicyIterationConfig
from verl.core.trajectory import PromptItem
from verl.data.rl_dataset import DataError
from verl.data.tasks import load_split
from verl.single_controller.sharded_group import ShardedWorkerGroup
from verl.trainer.cluster import head_problem, start_local_ray
from verl.trainer.delethink_ppo.ray_trainer import RayDelethinkTrainer
from verl.trainer.disk_check import describe_disk
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.trainer.resume import prepare_resume
from verl.utils import checkpoint
from verl.utils.checkpoint import ResumeError
from verl.utils.cleanup import closed_after
from verl.utils.reward_score import load_reward_function, math_verify
from verl.utils.seeding import seed_everything
from verl.workers.reward_manager import get_reward_manager

TRAINERS = {"ppo": RayPPOTrainer, "delethink": RayDelethinkTrainer}
# How long the launcher waits for the head at RAY_ADDRESS to answer (a head started just before)
HEAD_WAIT_S = 10.0


def unsupported_reason(config: PolicyIterationConfig) -> str | None:
    """What this machine cannot run; such configs still validate and dry-run, but must not silently
    fall back to something else."""
    import torch

    tr, engine = config.trainer, config.actor_rollout_ref.rollout.name
    if engine == "sglang" and importlib.util.find_spec("sglang") is None:
        return (
            "rollout.name=sglang, but sglang is not installed (GPU: pip install -e .[gpu]; CPU: pip install "
            "--no-deps -r requirements-sglang-cpu.txt)"
        )
    if tr.device == "cuda" and not torch.cuda.is_available():
        return "trainer.device=cuda, but no CUDA device is visible"
    return None


def _resume_point(run_dir: str) -> str:
    """Where a rerun of this config continues: the newest complete checkpoint in `run_dir`."""
    complete = [p for p in checkpoint.step_dirs(run_dir) if checkpoint.checkpoint_problem(p) is None]
    if not complete:
        return f"no checkpoint was written yet in {run_dir}"
    return f"rerun the same command to resume from {complete[0]}"


class SignalStop:
    """Within `with SignalStop(run_dir):`, SIGTERM and Ctrl-C stop the run cleanly: it unwinds like an
    error (what is open gets closed; checkpoints and metrics are committed atomically, so the last ones
    stay intact), a line says where a rerun resumes, and the process exits with 128 + the signal number.
    A second signal while stopping kills at once. The handlers in place before are restored on exit.

    The handler raises KeyboardInterrupt: the only exception Ray's blocking calls pass through (as a
    plain KeyboardInterrupt; any other comes out as a SystemError), so the signal is kept here."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, run_dir: str) -> None:
        self.run_dir = run_dir
        self.received: signal.Signals | None = None
        self.previous = {sig: signal.getsignal(sig) for sig in self.SIGNALS}

    def install(self) -> None:
        for sig in self.SIGNALS:
            signal.signal(sig, self._stop)

    def _stop(self, signum: int, frame: FrameType | None) -> None:
        self.received = signal.Signals(signum)
        for sig in self.SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        raise KeyboardInterrupt

    def __enter__(self) -> SignalStop:
        self.install()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
            received = self.received or signal.SIGINT
            print(f"stopped by {received.name}; {_resume_point(self.run_dir)}", file=sys.stderr)
            raise SystemExit(128 + received) from None


def load_tokenizer(path: str) -> PreTrainedTokenizerBase:
    """The policy's tokenizer. The model files were checked with the config; what only loading shows (a
    hub id that cannot be fetched, a corrupt file, a hub tokenizer without a chat template) exits naming
    the key."""
    key = f"actor_rollout_ref.model.path={path!r}"
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except Exception as e:  # a corrupt file raises anything from KeyError to the tokenizers' own errors
        detail = (str(e).strip().splitlines() or [""])[0]
        raise SystemExit(
            f"model error: {key}: cannot load its tokenizer ({type(e).__name__}: {detail})"
        ) from None
    if not tokenizer.chat_template:
        raise SystemExit(f"model error: {key}: its tokenizer has no chat template, and every prompt uses it")
    return tokenizer


def load_data(config: PolicyIterationConfig, tokenizer) -> tuple[list[PromptItem], list[PromptItem]]:
    """(train, val) prompts; a bad file, row or data key exits with a line naming it, before Ray starts."""
    limit = config.max_question_tokens
    try:
        return load_split(config, "train", tokenizer, limit), load_split(config, "val", tokenizer, limit)
    except ConfigError as e:
        raise SystemExit(f"config error: {e}") from None
    except DataError as e:
        raise SystemExit(f"data error: {e}") from None


def start_ray(config: PolicyIterationConfig) -> None:
    import ray

    if not ray.is_initialized():
        if address := os.environ.get("RAY_ADDRESS"):
            problem = head_problem(address, HEAD_WAIT_S)  # ray.init() would wait minutes for nobody
            if problem:
                print(f"cluster error: RAY_ADDRESS={address}: {problem}", file=sys.stderr)
                raise SystemExit(2)
            ray.init()  # join the running cluster; it owns the resources
        else:
            # one CPU slot per rank even on a small machine: ranks share the cores (their threads are split)
            cpus = max(os.cpu_count() or 1, config.trainer.world_size)
            start_local_ray(num_cpus=cpus, include_dashboard=False)


def start_workers(config: PolicyIterationConfig, stop: SignalStop) -> ShardedWorkerGroup:
    """The run's worker group: one worker in this process (trainer.launcher=local), or Ray actors placed
    node by node (the rank -> node table is printed)."""
    if config.trainer.launcher == "local":
        from verl.single_controller.local_worker_group import LocalWorkerGroup

        return LocalWorkerGroup(config)
    from verl.single_controller.placement import PlacementError
    from verl.single_controller.worker_group import ActorRolloutWorkerGroup

    start_ray(config)
    stop.install()  # Ray's core worker put in a SIGTERM handler that prints a crash dump and aborts
    try:
        group = ActorRolloutWorkerGroup(config)
    except PlacementError as e:  # the cluster cannot hold the ranks: nothing started
        print(f"cluster error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    print(group.describe_placement(), flush=True)
    return group


@contextmanager
def stopped_on_lost_node(workers: ShardedWorkerGroup, run_dir: str) -> Iterator[None]:
    """An error while a rank's node is gone (its raylet killed, the machine down) ends the run with one
    line naming the node and where a rerun resumes (exit code 1), instead of the error it caused
    elsewhere (a collective that lost its peer, an unreachable actor). Any other error propagates."""
    try:
        yield
    except Exception:
        try:
            lost = workers.lost_node_report()
        except Exception:  # the check asks the cluster's head; without an answer the error stands
            lost = None
        if lost is None:
            raise
        back = "start it again, or another in its place"
        raise SystemExit(f"{lost} ({back}); {_resume_point(run_dir)}") from None


def run(config: PolicyIterationConfig) -> dict[str, float]:
    reason = unsupported_reason(config)
    if reason:  # a config error this machine shows: reported as load_config's are, exit code 2
        print(f"cannot run here: {reason}. DRY_RUN=1 prints the run's plan.", file=sys.stderr)
        raise SystemExit(2)
    try:
        resume_from, notes = prepare_resume(config)
    except ResumeError as e:
        raise SystemExit(f"resume error: {e}") from None
    for note in notes:
        print(f"resume: {note}", file=sys.stderr)
    disk = describe_disk(config, checkpoint.step_of(resume_from) if resume_from else 0)
    print(disk.text)
    if disk.refusal:  # before any model is built
        print(f"disk error: {disk.refusal}", file=sys.stderr)
        raise SystemExit(2)
    if disk.warning:
        print(f"disk warning: {disk.warning}", file=sys.stderr)
    with SignalStop(config.trainer.default_local_dir) as stop:
        seed_everything(config.trainer.seed)
        tokenizer = load_tokenizer(config.actor_rollout_ref.model.path)
        train_items, val_items = load_data(config, tokenizer)
        compute_score = load_reward_function(
            config.custom_reward_function.path, config.custom_reward_function.name
        )
        reward_manager = get_reward_manager(config.reward_model.reward_manager)(
            tokenizer, compute_score, thinking_tags=config.reward_model.thinking_tags
        )
        math_verify.set_pool_size(config.reward_model.scoring_processes)  # the reward manager scores here

        workers = start_workers(config, stop)
        # a dead worker is reported, not the shutdown that then fails; a lost node by name (its ranks are
        # then left out of the shutdown), also when it was lost during a checkpoint's write, which then
        # fails for that reason and not for the disk's
        try:
            with (
                closed_after(workers.shutdown),
                stopped_on_lost_node(workers, config.trainer.default_local_dir),
            ):
                trainer = TRAINERS[config.trainer.name](
                    config, tokenizer, train_items, val_items, reward_manager, workers
                )
                return trainer.fit(resume_from)
        except checkpoint.CheckpointWriteError as e:
            # metrics and rollouts of the step are written; a rerun re-runs it from the last checkpoint
            resume = _resume_point(config.trainer.default_local_dir)
            raise SystemExit(f"checkpoint error: {e}; {resume}") from None

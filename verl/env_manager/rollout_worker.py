"""Rollout workers: Ray actors whose env managers run episodes until the scheduler says the round is done.

An `EnvManager` is one slot of the protocol: a (group_id, member) pair. Its `run_rollout_loop` is

    episode_id = scheduler.get_episode_id(group_id, member)      None: the round is done, return
    episode_seed = base_seed + group_id + episode_id             (group_seed + episode_id)
    item = dataset.get_data_item(episode_seed)                   None: dataset exhausted, return
    trajectory = agent_loop.run(item, sampling seed)             until done or max turns
    scheduler.put(group_id, member, episode_id, f"{group_id}_{episode_id}_{episode_seed}", trajectory)

The agent loop is the run's own (`build_agent_loop`): with `gym` every episode builds a fresh env from
the row's `env_config` or `rollout.gym.env_config` and closes it afterwards, and an env that raises
ends its episode with the error recorded in the trajectory (verl/agent_loop/gym.py), so the loop goes
on. Anything else that raises (the engine, a bad config) fails the round.

One actor hosts several env managers as concurrent tasks: their requests batch in the engine, and a
2-core machine does not need a process per env.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from verl.core.engine import SamplingParams
from verl.env_manager.engine import RemoteEngine
from verl.env_manager.scheduler import trajectory_id
from verl.utils.seeding import derive_seed

TRAIN, VAL = "train", "val"
VAL_SEED_STREAM = 7919  # validation sampling seeds come from their own stream


def member_seed(mode: str, base_seed: int, episode_seed: int, item_index: int, member: int) -> int:
    """The sampling seed of one member's episode: members of a group differ, reruns repeat.

    Training seeds by the episode seed. Validation seeds by the row instead: which episode a traversal
    row lands in depends on which worker asked first, but the row's samples must not.
    """
    if mode == TRAIN:
        return derive_seed(episode_seed, member)
    return derive_seed(VAL_SEED_STREAM, base_seed, item_index, member)


class EnvManager:
    def __init__(
        self,
        group_id: int,
        member: int,
        agent_loop,
        scheduler,
        dataset,
        sampling_params: SamplingParams,
        base_seed: int,
        mode: str,
    ) -> None:
        self.group_id = group_id
        self.member = member
        self.agent_loop = agent_loop
        self.scheduler = scheduler
        self.dataset = dataset
        self.sampling_params = sampling_params
        self.base_seed = base_seed
        self.mode = mode

    async def run_rollout_loop(self) -> int:
        """Run episodes until the round or the dataset is done; returns how many were put."""
        episodes = 0
        group_seed = self.base_seed + self.group_id
        while True:
            episode_id = await self.scheduler.get_episode_id.remote(self.group_id, self.member)
            if episode_id is None:
                return episodes
            episode_seed = group_seed + episode_id
            got = await self.dataset.get_data_item.remote(episode_seed)
            if got is None:
                await self.scheduler.release.remote(self.group_id, self.member, episode_id)
                return episodes
            item_index, item = got
            seed = member_seed(self.mode, self.base_seed, episode_seed, item_index, self.member)
            trajectory = await self.agent_loop.run(item, replace(self.sampling_params, seed=seed))
            traj_id = trajectory_id(self.group_id, episode_id, episode_seed)
            trajectory.info["trajectory_id"] = traj_id
            await self.scheduler.put.remote(
                self.group_id, self.member, episode_id, traj_id, item_index, trajectory
            )
            episodes += 1


class RolloutWorker:
    """A Ray actor: the env managers of its slots, for training and validation rounds.

    `slots` maps a mode to this worker's (group_id, member) pairs; `datasets` and `sampling_params`
    map a mode to its GlobalDataset handle and sampling parameters.
    """

    def __init__(
        self,
        config,
        engine_handle,
        scheduler,
        datasets: dict[str, Any],
        sampling_params: dict[str, SamplingParams],
        slots: dict[str, list[tuple[int, int]]],
        base_seed: int,
    ) -> None:
        from transformers import AutoTokenizer

        from verl.agent_loop.manager import build_agent_loop
        from verl.envs.plugins import import_plugins
        from verl.utils.reward_score import math_verify

        import_plugins(config.external_plugins)  # user envs register in this process too
        math_verify.set_pool_size(config.reward_model.scoring_processes)  # the math env judges here
        tokenizer = AutoTokenizer.from_pretrained(config.actor_rollout_ref.model.path)
        agent_loop = build_agent_loop(config, RemoteEngine(engine_handle), tokenizer)
        self.env_managers = {
            mode: [
                EnvManager(
                    g, m, agent_loop, scheduler, datasets[mode], sampling_params[mode], base_seed, mode
                )
                for g, m in mode_slots
            ]
            for mode, mode_slots in slots.items()
        }

    async def run_rollout_loops(self, mode: str) -> int:
        """Run every env manager of `mode` until each is done; returns the episodes put."""
        tasks = [asyncio.ensure_future(m.run_rollout_loop()) for m in self.env_managers.get(mode, [])]
        try:
            return sum(await asyncio.gather(*tasks))
        except BaseException:
            # one failed: stop the others rather than leave them running into the next round
            for task in tasks:
                task.cancel()
            raise

    def shutdown(self) -> int:
        from verl.envs.base import close_open_envs

        return close_open_envs()

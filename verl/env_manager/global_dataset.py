"""One copy of a dataset per run, shared by every rollout worker through a named Ray actor.

Rollout workers do not each load the data: they ask a `GlobalDataset` actor for the item that belongs
to an episode seed. Two modes:

- `sample` (training): the item is a pure function of the seed. Seeds index a fresh permutation of
  the rows per epoch (seed = epoch * n + position; no shuffle seed: file order), so the consecutive
  seeds of one training round get distinct rows, every row is seen once per epoch, and the same seed
  always returns the same row in every actor built from the same rows and shuffle seed. `seed=None`
  draws a random row.
- `traversal` (validation): each row is handed out exactly once, in file order, across all callers;
  then every new seed gets None. A seed asked again gets its first answer again, so all members of a
  GRPO group (they share the episode seed) see the same row. `reset()` starts a new walk.

This module imports no torch so the dataset actors stay light processes.
"""

from __future__ import annotations

import hashlib
import pickle
from typing import Any

import numpy as np
import ray

SAMPLE, TRAVERSAL = "sample", "traversal"
MODES = (SAMPLE, TRAVERSAL)


def dataset_actor_name(dataset_name: str, mode: str) -> str:
    return f"global_dataset/{dataset_name}/{mode}"


def fingerprint(items: list[Any], shuffle_seed: int | None, limit: int) -> str:
    """What a dataset actor serves: callers sharing one by name must agree on it."""
    return hashlib.sha1(pickle.dumps((items, shuffle_seed, limit))).hexdigest()


class GlobalDataset:
    def __init__(self, items: list[Any], mode: str, shuffle_seed: int | None = 0, limit: int = -1) -> None:
        """`shuffle_seed` (sample only): seeds the epoch permutations; None keeps file order in every
        epoch. `limit` (traversal only): hand out at most this many rows per walk; -1: every row."""
        if mode not in MODES:
            raise ValueError(f"GlobalDataset mode={mode!r}; expected one of {MODES}")
        if not items:
            raise ValueError("GlobalDataset got no items")
        if limit == 0 or limit < -1:
            raise ValueError(f"GlobalDataset limit={limit}; it must be >= 1, or -1 for every row")
        self.items = items
        self.mode = mode
        self.shuffle_seed = shuffle_seed
        self.limit = len(items) if limit == -1 else min(limit, len(items))
        self._fingerprint = fingerprint(items, shuffle_seed, limit)
        self._permutations: dict[int, np.ndarray] = {}
        self._unseeded = np.random.default_rng(shuffle_seed)  # only for seed=None
        self._cursor = 0  # traversal: the next row to hand out
        self._answers: dict[int, tuple[int, Any] | None] = {}  # traversal: seed -> what it got

    def fingerprint(self) -> str:
        return self._fingerprint

    def get_data_item(self, seed: int | None = None) -> tuple[int, Any] | None:
        """(row index, row) for this seed, or None when a traversal is exhausted."""
        if seed is not None and (not isinstance(seed, int | np.integer) or seed < 0):
            raise ValueError(f"get_data_item: seed={seed!r}; it must be a non-negative int or None")
        if self.mode == SAMPLE:
            return self._sample(seed)
        if seed is not None and seed in self._answers:
            return self._answers[seed]
        answer = None
        if self._cursor < self.limit:
            answer = (self._cursor, self.items[self._cursor])
            self._cursor += 1
        if seed is not None:
            self._answers[seed] = answer
        return answer

    def _sample(self, seed: int | None) -> tuple[int, Any]:
        n = len(self.items)
        if seed is None:
            index = int(self._unseeded.integers(n))
        else:
            epoch, position = divmod(int(seed), n)
            if self.shuffle_seed is None:
                return position, self.items[position]
            if epoch not in self._permutations:
                self._permutations[epoch] = np.random.default_rng([self.shuffle_seed, epoch]).permutation(n)
            index = int(self._permutations[epoch][position])
        return index, self.items[index]

    def reset(self) -> None:
        self._cursor = 0
        self._answers.clear()


class GlobalDatasetManager:
    """Knows every traversal dataset of the run, so validation can restart all of them at once."""

    def __init__(self) -> None:
        self.datasets: dict[str, Any] = {}

    def register(self, name: str, handle) -> None:
        self.datasets[name] = handle

    def unregister(self, name: str) -> None:
        self.datasets.pop(name, None)

    def names(self) -> list[str]:
        return sorted(self.datasets)

    async def reset_all(self) -> None:
        for handle in self.datasets.values():
            await handle.reset.remote()


MANAGER_NAME = "global_dataset_manager"


# A named actor dies with its creator's last handle, so the creating process keeps one (per Ray job: a
# handle from before a ray.shutdown() is dead).
_managers: dict[str, ray.actor.ActorHandle] = {}


def get_dataset_manager() -> ray.actor.ActorHandle:
    job = ray.get_runtime_context().get_job_id()
    if job not in _managers:
        _managers[job] = (
            ray.remote(GlobalDatasetManager)
            .options(name=MANAGER_NAME, get_if_exists=True, num_cpus=0)
            .remote()
        )
    return _managers[job]


def get_global_dataset(
    dataset_name: str, mode: str, items: list[Any], shuffle_seed: int | None = 0, limit: int = -1
) -> ray.actor.ActorHandle:
    """The dataset actor named after (dataset_name, mode): created on first use, shared afterwards.

    A later caller passing other rows (or another shuffle seed or limit) gets an error instead of
    silently someone else's data. Traversal datasets are registered with the manager for `reset_all`.
    """
    name = dataset_actor_name(dataset_name, mode)
    handle = (
        ray.remote(GlobalDataset)
        .options(name=name, get_if_exists=True, num_cpus=0)
        .remote(items, mode, shuffle_seed, limit)
    )
    if ray.get(handle.fingerprint.remote()) != fingerprint(items, shuffle_seed, limit):
        raise ValueError(
            f"dataset actor {name!r} already serves other rows (or another shuffle_seed or limit) than "
            f"this caller's {len(items)}; give different datasets different names"
        )
    if mode == TRAVERSAL:
        ray.get(get_dataset_manager().register.remote(name, handle))
    return handle


def drop_global_dataset(dataset_name: str, mode: str) -> None:
    """Kill the named dataset actor (if alive) and forget it in the manager."""
    name = dataset_actor_name(dataset_name, mode)
    ray.get(get_dataset_manager().unregister.remote(name))
    try:
        ray.kill(ray.get_actor(name))
    except ValueError:  # no such actor: nothing to drop
        pass

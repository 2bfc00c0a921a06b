"""GlobalDataset: sample mode is a pure function of the seed, traversal hands each row out once."""

import asyncio

import numpy as np
import pytest
import ray

from tests.e2e_utils import HANG_S
from verl.env_manager.global_dataset import (
    GlobalDataset,
    dataset_actor_name,
    drop_global_dataset,
    get_dataset_manager,
    get_global_dataset,
)

ROWS = [{"id": i} for i in range(10)]


def test_sample_mode_walks_a_fresh_permutation_per_epoch():
    ds = GlobalDataset(ROWS, "sample", shuffle_seed=3)
    # seed = epoch * n + position; by hand: the epoch permutations numpy gives for [3, epoch]
    perm0 = np.random.default_rng([3, 0]).permutation(10)
    perm1 = np.random.default_rng([3, 1]).permutation(10)
    assert [ds.get_data_item(s)[0] for s in range(10)] == perm0.tolist()
    assert [ds.get_data_item(s)[0] for s in range(10, 20)] == perm1.tolist()
    assert sorted(perm0.tolist()) == list(range(10))  # one epoch of consecutive seeds: every row once
    assert ds.get_data_item(13) == (int(perm1[3]), ROWS[perm1[3]])
    # same seed, same row, whatever was asked in between, and in another instance
    other = GlobalDataset(ROWS, "sample", shuffle_seed=3)
    assert [other.get_data_item(s) for s in (17, 4, 17)] == [ds.get_data_item(s) for s in (17, 4, 17)]
    # another shuffle seed gives another order; none keeps file order
    assert [GlobalDataset(ROWS, "sample", 4).get_data_item(s)[0] for s in range(10)] != perm0.tolist()
    assert [GlobalDataset(ROWS, "sample", None).get_data_item(s)[0] for s in range(5, 15)] == [
        5,
        6,
        7,
        8,
        9,
        0,
        1,
        2,
        3,
        4,
    ]


def test_sample_mode_without_seed_draws_random_rows():
    ds = GlobalDataset(ROWS, "sample", shuffle_seed=0)
    drawn = {ds.get_data_item(None)[0] for _ in range(200)}
    assert len(drawn) > 5


def test_traversal_hands_each_row_once_then_none_and_repeats_a_seeds_answer():
    ds = GlobalDataset(ROWS, "traversal")
    got = [ds.get_data_item(100 + s) for s in range(10)]
    assert [index for index, _ in got] == list(range(10))
    assert ds.get_data_item(100 + 3) == (3, ROWS[3])  # a group mate with the same seed: the same row
    assert ds.get_data_item(999) is None
    assert ds.get_data_item(None) is None
    assert ds.get_data_item(999) is None
    ds.reset()
    assert ds.get_data_item(999) == (0, ROWS[0])  # reset forgets old answers and starts again


def test_traversal_limit_caps_each_walk():
    ds = GlobalDataset(ROWS, "traversal", limit=3)
    assert [ds.get_data_item(None) for _ in range(4)] == [(0, ROWS[0]), (1, ROWS[1]), (2, ROWS[2]), None]
    ds.reset()
    assert ds.get_data_item(None) == (0, ROWS[0])
    assert GlobalDataset(ROWS, "traversal", limit=50).limit == 10


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(items=ROWS, mode="random"), "mode='random'"),
        (dict(items=[], mode="sample"), "no items"),
        (dict(items=ROWS, mode="traversal", limit=0), "limit=0"),
    ],
)
def test_bad_construction_is_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        GlobalDataset(**kwargs)


def test_negative_seed_is_rejected():
    with pytest.raises(ValueError, match="seed=-1"):
        GlobalDataset(ROWS, "sample").get_data_item(-1)


def test_actors_of_one_name_are_shared_and_same_seed_gives_same_item(ray_session):
    a = get_global_dataset("gd_shared", "sample", ROWS, shuffle_seed=5)
    b = get_global_dataset("gd_shared", "sample", ROWS, shuffle_seed=5)
    try:
        assert a._actor_id == b._actor_id
        seeds = [0, 7, 23, 7, 0]
        assert ray.get([a.get_data_item.remote(s) for s in seeds]) == ray.get(
            [b.get_data_item.remote(s) for s in seeds]
        )
        assert ray.get(a.get_data_item.remote(23)) == GlobalDataset(ROWS, "sample", 5).get_data_item(23)
        with pytest.raises(ValueError, match="already serves other rows .* than this caller's 3"):
            get_global_dataset("gd_shared", "sample", ROWS[:3], shuffle_seed=5)
        with pytest.raises(ValueError, match="another shuffle_seed"):
            get_global_dataset("gd_shared", "sample", ROWS, shuffle_seed=6)
    finally:
        drop_global_dataset("gd_shared", "sample")


def test_traversal_across_concurrent_callers_then_reset_through_the_manager(ray_session):
    ds = get_global_dataset("gd_walk", "traversal", ROWS)

    @ray.remote(num_cpus=0)
    class Gate:
        """Opens once `count` callers have arrived (async methods: the waiting calls run side by side)."""

        def __init__(self, count: int) -> None:
            self.count, self.opened = count, asyncio.Event()

        async def arrive(self) -> None:
            self.count -= 1
            if self.count == 0:
                self.opened.set()
            await self.opened.wait()

    @ray.remote(num_cpus=0)
    class Caller:
        async def drain(self, handle, gate=None) -> list[int]:
            seen = []
            while (got := await handle.get_data_item.remote(None)) is not None:
                seen.append(got[0])
                if gate is not None and len(seen) == 1:
                    await gate.arrive.remote()
            return seen

    callers = [Caller.remote() for _ in range(3)]
    # The walk is shared by construction, not by timing: no caller takes a second row before each holds
    # one (with a sleep between rows instead, a crowded machine let two callers drain all 10 rows before
    # the third asked). 10 rows for 3 callers, so every first request gets one.
    gate = Gate.remote(len(callers))
    try:
        seen = ray.get([c.drain.remote(ds, gate) for c in callers], timeout=HANG_S)  # a safety net
        assert sorted(i for part in seen for i in part) == list(range(10))  # every row exactly once
        assert all(seen)  # each caller took part in the one walk
        manager = get_dataset_manager()
        assert dataset_actor_name("gd_walk", "traversal") in ray.get(manager.names.remote())
        ray.get(manager.reset_all.remote())
        seen = ray.get([c.drain.remote(ds) for c in callers])
        assert sorted(i for part in seen for i in part) == list(range(10))
        drop_global_dataset("gd_walk", "traversal")
        assert dataset_actor_name("gd_walk", "traversal") not in ray.get(manager.names.remote())
    finally:
        drop_global_dataset("gd_walk", "traversal")
        for actor in [*callers, gate]:
            ray.kill(actor)


def test_a_second_caller_with_another_traversal_limit_is_refused(ray_session):
    # the limit decides which rows a walk hands out, so two callers that disagree on it must not share an
    # actor: the later one would validate on the first one's rows without knowing
    get_global_dataset("gd_limit", "traversal", ROWS, limit=3)
    try:
        with pytest.raises(ValueError, match="another shuffle_seed or limit"):
            get_global_dataset("gd_limit", "traversal", ROWS, limit=5)
    finally:
        drop_global_dataset("gd_limit", "traversal")


def test_reset_all_restarts_every_registered_traversal(ray_session):
    # validation resets all of the run's traversal datasets at once, not only the first one registered
    first = get_global_dataset("gd_reset_a", "traversal", ROWS)
    second = get_global_dataset("gd_reset_b", "traversal", ROWS)
    try:
        for handle in (first, second):
            assert [ray.get(handle.get_data_item.remote(None))[0] for _ in range(3)] == [0, 1, 2]
        ray.get(get_dataset_manager().reset_all.remote())
        for handle in (first, second):
            assert ray.get(handle.get_data_item.remote(None)) == (0, ROWS[0])
    finally:
        drop_global_dataset("gd_reset_a", "traversal")
        drop_global_dataset("gd_reset_b", "traversal")

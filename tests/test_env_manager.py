"""The environment-manager protocol on real Ray and the real tiny model.

Two EnvManagerRollout instances (2 rollout workers and 1) share one engine actor and run the gym loop
with a plugin env that fails on odd rows. Their rounds are computed once (module fixture) and checked
from several sides: layout and ids, same items within a group, determinism across instances and
worker counts, traversal coverage, and the failing env.
"""

import asyncio
import textwrap
from dataclasses import dataclass

import pytest
import ray

from tests.e2e_utils import tiny_config
from verl.config import ConfigError
from verl.core.engine import SamplingParams
from verl.env_manager.engine import HFEngineServer, RemoteEngine
from verl.env_manager.global_dataset import GlobalDataset
from verl.env_manager.rollout import EnvManagerConfig, EnvManagerRollout, spread
from verl.env_manager.rollout_worker import EnvManager, member_seed
from verl.env_manager.scheduler import EpisodeScheduler

PLUGIN = textwrap.dedent(
    """
    from verl.envs import register_env
    from verl.envs.math_env import MathEnv


    @register_env("flaky_math")
    class FlakyMathEnv(MathEnv):
        # the math env, except that a row with an odd extra_info.index breaks in step
        async def reset(self, request):
            self.odd = request.extra_info["index"] % 2 == 1
            return await super().reset(request)

        async def step(self, messages):
            if self.odd:
                raise RuntimeError("flaky env: odd row")
            return await super().step(messages)
    """
)

BASE_SEED = 11
NUM_GROUPS, GROUP_SIZE, EPISODES = 2, 2, 2  # train_batch_size = NUM_GROUPS * EPISODES prompts
VAL_ROWS, VAL_N = 8, 2


@dataclass
class Rounds:
    config: object
    train_items: list
    val_items: list
    step1: tuple
    step2: tuple
    val: tuple
    val_again: tuple
    step1_one_worker: tuple
    val_capped: tuple
    engine_max_rows: int
    engine_calls: list  # generate calls each of the two-worker instance's engine handles served


def make_config(tiny_assets, run_dir, plugin, *extra):
    return tiny_config(
        "tiny_longcot", tiny_assets, run_dir,
        f"actor_rollout_ref.model.path={tiny_assets / 'model'}",
        "actor_rollout_ref.rollout.agent.default_agent_loop=gym",
        "actor_rollout_ref.rollout.gym.env_config={name: flaky_math}",
        f"external_plugins=[{plugin}]",
        f"data.train_batch_size={NUM_GROUPS * EPISODES}",
        f"actor_rollout_ref.rollout.n={GROUP_SIZE}",
        f"actor_rollout_ref.rollout.val_kwargs.n={VAL_N}",
        "data.max_response_length=16",
        f"trainer.seed={BASE_SEED}",
        *extra,
    )  # fmt: skip


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
    """One plugin file per module: a second file registering the same env name would be refused."""
    path = tmp_path_factory.mktemp("plugin") / "flaky_plugin.py"
    path.write_text(PLUGIN)
    return path


@pytest.fixture(scope="module")
def engine(tiny_assets, ray_session):
    handle = ray.remote(HFEngineServer).options(num_cpus=0).remote(str(tiny_assets / "model"))
    yield handle
    ray.kill(handle)


@ray.remote(num_cpus=0)
class CountingEngine:
    """An engine handle that counts the requests it serves and passes them on to the shared engine."""

    def __init__(self, inner) -> None:
        self.inner, self.count = inner, 0

    async def generate_one(self, prompt_ids, sampling_params):
        self.count += 1
        return await self.inner.generate_one.remote(prompt_ids, sampling_params)

    def calls(self) -> int:
        return self.count


@pytest.fixture(scope="module")
def rounds(tiny_assets, ray_session, tmp_path_factory, plugin, engine):
    from transformers import AutoTokenizer

    from verl.data.rl_dataset import load_prompts

    root = tmp_path_factory.mktemp("env_manager")
    config = make_config(tiny_assets, root / "run", plugin)
    capped = make_config(tiny_assets, root / "run", plugin, "data.val_batch_size=3")
    tokenizer = AutoTokenizer.from_pretrained(config.actor_rollout_ref.model.path)
    train_items = load_prompts(config.data.train_files, tokenizer, "prompt", 96, True)
    val_items = load_prompts(config.data.val_files, tokenizer, "prompt", 96, True)
    assert len(val_items) == VAL_ROWS

    # two handles for two workers (one engine behind both): each worker must use its own handle
    counting = [CountingEngine.remote(engine) for _ in range(2)]
    two = EnvManagerRollout(
        config, counting, train_items, val_items,
        EnvManagerConfig(num_workers=2, num_groups=NUM_GROUPS, num_val_groups=3), run_name="em_two",
    )  # fmt: skip
    one = EnvManagerRollout(
        capped, [engine], train_items, val_items,
        EnvManagerConfig(num_workers=1, num_groups=NUM_GROUPS, num_val_groups=1), run_name="em_one",
    )  # fmt: skip
    try:
        yield Rounds(
            config, train_items, val_items,
            step1=two.collect(1), step2=two.collect(2), val=two.validate(), val_again=two.validate(),
            step1_one_worker=one.collect(1), val_capped=one.validate(),
            engine_max_rows=ray.get(engine.max_rows_per_forward.remote()),
            engine_calls=ray.get([c.calls.remote() for c in counting]),
        )  # fmt: skip
    finally:
        two.shutdown()
        one.shutdown()
        for handle in counting:
            ray.kill(handle)


def token_ids(trajectories):
    return [[turn.response_ids for turn in t.turns] for t in trajectories]


def test_training_round_layout_ids_and_groups(rounds):
    items, trajectories, ids = rounds.step1
    n = NUM_GROUPS * EPISODES * GROUP_SIZE
    assert len(items) == len(trajectories) == len(ids) == n
    # group by group, episode by episode: episode ids step by the number of groups, so the round's
    # episode seeds are the consecutive integers BASE_SEED .. BASE_SEED + 3
    expected = [
        f"{g}_{e}_{BASE_SEED + g + e}" for g in range(NUM_GROUPS) for e in (0, 2) for _ in range(GROUP_SIZE)
    ]
    assert ids == expected
    assert [t.info["trajectory_id"] for t in trajectories] == ids
    # every member of a GRPO group saw the same row: the one the sample-mode dataset gives the seed
    reference = GlobalDataset(rounds.train_items, "sample", shuffle_seed=rounds.config.data.seed)
    for item, traj_id in zip(items, ids, strict=True):
        assert item == reference.get_data_item(int(traj_id.split("_")[2]))[1]
    assert len({tuple(items[j].prompt_ids) for j in range(0, n, GROUP_SIZE)}) == NUM_GROUPS * EPISODES
    for j in range(0, n, GROUP_SIZE):  # members sample with their own seeds
        assert trajectories[j].turns[0].response_ids != trajectories[j + 1].turns[0].response_ids
        assert trajectories[j].info["messages"][0] == trajectories[j + 1].info["messages"][0]
    # the next step's episodes continue the seeds: BASE_SEED + 4 .. + 7, other rows
    _, _, ids2 = rounds.step2
    assert sorted({int(i.split("_")[2]) for i in ids2}) == list(range(BASE_SEED + 4, BASE_SEED + 8))


def test_same_seed_same_items_and_tokens_across_fresh_instances(rounds):
    items_a, traj_a, ids_a = rounds.step1
    items_b, traj_b, ids_b = rounds.step1_one_worker  # another instance, one worker instead of two
    assert ids_a == ids_b
    assert items_a == items_b
    assert token_ids(traj_a) == token_ids(traj_b)
    assert token_ids(rounds.step2[1]) != token_ids(traj_a)
    assert rounds.engine_max_rows > 1  # the env managers' requests were batched in the engine


def test_rollout_worker_i_uses_engine_handle_i(rounds):
    # two workers, two handles: both serve requests (rollout worker i calls handle i mod 2), and together
    # exactly one request per model turn of the two-worker instance's rounds
    turns = sum(t.num_turns for r in (rounds.step1, rounds.step2, rounds.val, rounds.val_again) for t in r[1])
    assert all(calls > 0 for calls in rounds.engine_calls)
    assert sum(rounds.engine_calls) == turns


@pytest.mark.parametrize(
    "env_manager, message",
    [
        (EnvManagerConfig(num_groups=3), "num_groups=3 must be >= 1 and divide data.train_batch_size=4"),
        (EnvManagerConfig(num_workers=0), "num_workers=0"),
        (EnvManagerConfig(num_val_groups=0), "num_val_groups=0"),
    ],
)
def test_bad_env_manager_settings_are_rejected(tiny_assets, tmp_path, plugin, env_manager, message):
    config = make_config(tiny_assets, tmp_path, plugin)
    with pytest.raises(ValueError, match=message):
        EnvManagerRollout(config, ["engine"], [], [], env_manager)


def test_a_group_count_that_does_not_divide_the_batch_is_a_config_error(tiny_assets, tmp_path):
    # caught when the config loads, not when the first round finds its groups uneven: 6 prompts in
    # 4 groups leave 2 over; 3 groups (2 episodes each) or -1 (one group per prompt) are fine
    em = "actor_rollout_ref.rollout.env_manager"

    def load(num_groups):
        overrides = [f"{em}.enable=true", f"{em}.num_groups={num_groups}", "data.train_batch_size=6"]
        return tiny_config("tiny_longcot", tiny_assets, tmp_path, *overrides)

    uneven = rf"{em}.num_groups=4: must be -1 or divide data.train_batch_size=6"
    with pytest.raises(ConfigError, match=uneven):
        load(4)
    for num_groups in (3, -1):
        assert EnvManagerRollout.config_problems(load(num_groups)) == []


def test_unshuffled_training_takes_rows_in_file_order_and_val_groups_default_to_train_groups(
    tiny_assets, ray_session, tmp_path, plugin
):
    from verl.core.trajectory import PromptItem

    # data.shuffle=false: episode seed s gets row s mod n, every epoch in file order (no round is run, so
    # the engine is never called: a placeholder handle does)
    config = make_config(tiny_assets, tmp_path, plugin, "data.shuffle=false")
    items = [PromptItem([i + 1], "src", "0") for i in range(5)]
    rollout = EnvManagerRollout(
        config, ["engine"], items, items, EnvManagerConfig(num_groups=NUM_GROUPS), run_name="em_file_order"
    )
    try:
        train = rollout.datasets["train"]
        assert [ray.get(train.get_data_item.remote(s))[0] for s in range(7)] == [0, 1, 2, 3, 4, 0, 1]
        assert rollout.num_val_groups == NUM_GROUPS  # num_val_groups=-1: as many as training has
    finally:
        rollout.shutdown()


def test_validation_visits_every_row_once_with_parallel_workers(rounds):
    items, trajectories, ids = rounds.val
    assert len(trajectories) == VAL_ROWS * VAL_N
    indices = [rounds.val_items.index(item) for item in items]
    assert indices == [i for i in range(VAL_ROWS) for _ in range(VAL_N)]  # each row once, its n samples
    for j in range(0, len(ids), VAL_N):
        assert len(set(ids[j : j + VAL_N])) == 1  # one episode of one group per row
    assert len(set(ids)) == VAL_ROWS
    assert len({i.split("_")[0] for i in ids}) > 1  # several groups shared the walk
    # the manager reset the walk; row-seeded sampling makes the pass repeat exactly
    assert rounds.val_again[0] == items
    assert token_ids(rounds.val_again[1]) == token_ids(trajectories)


def test_val_batch_size_caps_a_validation_round(rounds):
    items, trajectories, _ = rounds.val_capped
    assert [rounds.val_items.index(item) for item in items] == [0, 0, 1, 1, 2, 2]
    # the capped pass samples those rows exactly like the full pass (seeds follow the row)
    assert token_ids(trajectories) == token_ids(rounds.val[1][: 3 * VAL_N])


def test_failing_env_is_recorded_and_the_round_goes_on(rounds):
    items, trajectories, _ = rounds.val
    for item, traj in zip(items, trajectories, strict=True):
        if item.extra_info["index"] % 2:
            assert "flaky env: odd row" in traj.info["error"]
            assert traj.info["trajectory_infos"][-1]["error"] == traj.info["error"]
        else:
            assert "error" not in traj.info
            assert traj.info["env"] == "flaky_math"


def test_scheduler_rejects_a_second_trajectory_for_an_episode():
    scheduler = EpisodeScheduler()
    scheduler.begin_round(num_groups=2, group_size=1, episodes_per_group=1, round_index=3)
    assert scheduler.get_episode_id(1, 0) == 6  # (round 3 * 1 episode + 0) * 2 groups
    assert scheduler.get_episode_id(1, 0) is None  # its share of the round is done
    scheduler.put(1, 0, 6, "1_6_x", 0, "trajectory")
    with pytest.raises(ValueError, match="already has its trajectory"):
        scheduler.put(1, 0, 6, "1_6_x", 0, "again")
    with pytest.raises(ValueError, match="never handed out"):
        scheduler.put(0, 0, 6, "0_6_x", 0, "stray")
    with pytest.raises(ValueError, match="member=5 is not in this round"):
        scheduler.get_episode_id(0, 5)
    with pytest.raises(RuntimeError, match="never put or released"):
        scheduler.get_episode_id(0, 0)
        scheduler.end_round()


def test_scheduler_round_ends_in_group_episode_member_order():
    scheduler = EpisodeScheduler()
    scheduler.begin_round(num_groups=2, group_size=2, episodes_per_group=None)
    for g, m in [(1, 1), (0, 1), (1, 0), (0, 0)]:  # members finish out of order
        e = scheduler.get_episode_id(g, m)
        scheduler.put(g, m, e, f"{g}_{e}", 0, (g, m))
        scheduler.release(g, m, scheduler.get_episode_id(g, m))  # then the dataset ran dry
    assert [r.trajectory for r in scheduler.end_round()] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    scheduler.begin_round(num_groups=1, group_size=2, episodes_per_group=None)
    scheduler.put(0, 0, scheduler.get_episode_id(0, 0), "0_0", 0, "only one member")
    scheduler.release(0, 1, scheduler.get_episode_id(0, 1))
    with pytest.raises(RuntimeError, match="fewer than 2 member trajectories"):
        scheduler.end_round()


def test_scheduler_refuses_calls_once_the_round_has_ended():
    # a member still asking after end_round must fail loudly, not be handed episodes of a round whose
    # trajectories were already returned (they would be lost)
    scheduler = EpisodeScheduler()
    scheduler.begin_round(num_groups=1, group_size=1, episodes_per_group=2)
    scheduler.put(0, 0, scheduler.get_episode_id(0, 0), "0_0", 0, "only")
    scheduler.release(0, 0, scheduler.get_episode_id(0, 0))
    assert [r.trajectory for r in scheduler.end_round()] == ["only"]
    with pytest.raises(RuntimeError, match="no round in progress"):
        scheduler.get_episode_id(0, 0)
    with pytest.raises(RuntimeError, match="no round in progress"):
        scheduler.end_round()


def test_scheduler_rejects_releasing_an_episode_twice():
    # a released episode is closed like a put one: a second release or a late put is an error that says so
    scheduler = EpisodeScheduler()
    scheduler.begin_round(num_groups=1, group_size=1, episodes_per_group=None)
    episode_id = scheduler.get_episode_id(0, 0)
    scheduler.release(0, 0, episode_id)
    with pytest.raises(ValueError, match="already has its trajectory"):
        scheduler.release(0, 0, episode_id)
    with pytest.raises(ValueError, match="already has its trajectory"):
        scheduler.put(0, 0, episode_id, "0_0", 0, "late")


def test_member_seeds_follow_the_episode_in_training_and_the_row_in_validation():
    # training: (episode seed, member) decide; the row does not
    assert member_seed("train", 1, 40, 3, 0) == member_seed("train", 1, 40, 9, 0)
    assert member_seed("train", 1, 40, 3, 0) != member_seed("train", 1, 40, 3, 1)
    assert member_seed("train", 1, 40, 3, 0) != member_seed("train", 1, 41, 3, 0)
    # validation: (base seed, row, member) decide; the episode a row landed in does not
    assert member_seed("val", 1, 40, 3, 0) == member_seed("val", 1, 77, 3, 0)
    assert member_seed("val", 1, 40, 3, 0) != member_seed("val", 1, 40, 4, 0)
    assert member_seed("val", 1, 40, 3, 0) != member_seed("val", 2, 40, 3, 0)
    assert 0 <= member_seed("train", 1, 40, 3, 0) < 2**63


def test_spread_deals_slots_round_robin():
    slots = [(g, m) for g in range(2) for m in range(3)]
    assert spread(slots, 4) == [[(0, 0), (1, 1)], [(0, 1), (1, 2)], [(0, 2)], [(1, 0)]]
    assert spread(slots, 1) == [slots]


def test_an_engine_error_fails_the_loop_instead_of_being_swallowed(tiny_assets, ray_session, engine):
    from verl.agent_loop.single_turn import SingleTurnAgentLoop
    from verl.core.trajectory import PromptItem

    scheduler = ray.remote(EpisodeScheduler).options(num_cpus=0).remote()
    dataset = (
        ray.remote(GlobalDataset).options(num_cpus=0).remote([PromptItem([1, 2, 3], "src", "0")], "sample")
    )
    try:
        ray.get(scheduler.begin_round.remote(1, 1, 1))
        too_long = SamplingParams(max_new_tokens=5000)  # beyond the tiny model's 1024 positions
        manager = EnvManager(
            0, 0, SingleTurnAgentLoop(RemoteEngine(engine)), scheduler, dataset, too_long, 0, "train"
        )
        with pytest.raises(ValueError, match="max_position_embeddings"):
            asyncio.run(manager.run_rollout_loop())
        with pytest.raises(RuntimeError, match="never put or released"):  # the round knows it is short
            ray.get(scheduler.end_round.remote())
    finally:
        ray.kill(scheduler)
        ray.kill(dataset)

"""The `gym` agent loop: the policy talks to an environment (verl/envs) for several turns.

    reset -> (system message, first observation)
    repeat up to max_turns: manage_context -> chat template -> engine -> step(conversation)
    until the env says done

Token in, token out: each `Turn` holds the exact prompt ids the engine saw and the exact ids it sampled.
Observations (user messages) only ever appear in later prompts, so they are never trained. When the
context manager left the history alone, the next prompt is the previous prompt + the sampled ids + the
ids of the template's turn separator and the new user message: the sampled text is never re-tokenised.
When it rewrote the history (e.g. trimmed thinking), the rewritten messages are templated afresh.

A failing env (reset/step raises, returns the wrong shape, or takes longer than `step_timeout_s`) ends
the episode: the error goes into `info["error"]` and `trajectory_infos`, and the trajectory keeps its
turns so the batch keeps its shape, but it trains nothing (see `trajectory_rows`).
"""

from __future__ import annotations

import asyncio
import json
import math
import uuid
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from verl.agent_loop.base import ROLLOUT, AgentLoop
from verl.core.engine import RolloutEngine, SamplingParams
from verl.core.trajectory import PromptItem, Trajectory, Turn
from verl.data.rl_dataset import encode_prompt
from verl.envs import make_context_manager, make_env
from verl.envs.base import ContextManager, Env, EnvRequest, Messages, close_env
from verl.utils.seeding import chunk_seed

if TYPE_CHECKING:
    from verl.agent_loop.base import RewardManager
    from verl.config import PolicyIterationConfig

TRAIN_ON = ("last", "all")


class EnvError(Exception):
    """An env broke its contract; the episode ends with this message recorded."""


def jsonable(info: Any) -> Any:
    """A JSON-safe copy of an env's info (unknown objects become their repr), so it can be logged."""
    return json.loads(json.dumps(info, default=repr))


def _checked_reset(out: Any) -> tuple[str, dict[str, Any], str | None]:
    if not (isinstance(out, tuple) and len(out) == 3):
        raise EnvError(f"reset must return (observation, info, system_message), got {out!r:.200}")
    observation, info, system = out
    if not isinstance(observation, str):
        raise EnvError(f"reset's observation must be a str, got {type(observation).__name__}")
    if not isinstance(info, dict):
        raise EnvError(f"reset's info must be a dict, got {type(info).__name__}")
    if system is not None and not isinstance(system, str):
        raise EnvError(f"reset's system_message must be a str or None, got {type(system).__name__}")
    return observation, info, system


def _checked_step(out: Any) -> tuple[str | None, float, bool, dict[str, Any]]:
    if not (isinstance(out, tuple) and len(out) == 4):
        raise EnvError(f"step must return (observation, reward, done, info), got {out!r:.200}")
    observation, reward, done, info = out
    if not isinstance(done, bool):
        raise EnvError(f"step's done must be a bool, got {type(done).__name__}")
    if isinstance(reward, bool) or not isinstance(reward, int | float) or not math.isfinite(reward):
        raise EnvError(f"step's reward must be a finite number, got {reward!r}")
    if not isinstance(info, dict):
        raise EnvError(f"step's info must be a dict, got {type(info).__name__}")
    if not (isinstance(observation, str) or (done and observation is None)):
        raise EnvError(
            f"step's observation must be a str (or None when done), got {type(observation).__name__}"
        )
    return observation, float(reward), done, info


def continuation_ids(tokenizer, ended_with: int | None, observation: str) -> list[int]:
    """Ids that follow a sampled reply so that the prompt reads `... reply, user: observation, assistant:`.

    Found by templating a stand-in conversation with and without the new user message: the difference is
    the template's text after an assistant message (minus the end-of-turn token when the reply already
    sampled it) and the templated user message with the generation prompt.
    """
    base = [{"role": "user", "content": "?"}, {"role": "assistant", "content": "!"}]
    before = tokenizer.apply_chat_template(base, tokenize=False)
    after = tokenizer.apply_chat_template(
        [*base, {"role": "user", "content": observation}], tokenize=False, add_generation_prompt=True
    )
    if not after.startswith(before):
        raise ValueError(
            "the chat template rewrites earlier turns when a message is added, so a multi-turn prompt cannot "
            "grow by appending tokens; the gym loop needs a template that renders past turns verbatim"
        )
    closing = before[before.rindex("!") + 1 :]  # what the template writes after an assistant message
    if ended_with is not None:
        sampled_end = tokenizer.decode([ended_with])
        if closing.startswith(sampled_end):
            closing = closing[len(sampled_end) :]
    return list(tokenizer(closing + after[len(before) :], add_special_tokens=False)["input_ids"])


def generation_prefix(tokenizer) -> str:
    """Text the generation prompt opens the assistant's message with (e.g. `<think>`), which the template
    would otherwise render inside the message's content. Prepended to each decoded reply, so that
    re-templating a conversation reproduces what the model saw."""
    user = [{"role": "user", "content": "?"}]
    bare = tokenizer.apply_chat_template(user, tokenize=False)
    header = tokenizer.apply_chat_template([*user, {"role": "assistant", "content": "!"}], tokenize=False)
    header = header[len(bare) : header.rindex("!")]
    prompt = tokenizer.apply_chat_template(user, tokenize=False, add_generation_prompt=True)[len(bare) :]
    return prompt[len(header) :] if prompt.startswith(header) else ""


async def run_episode(
    env: Env,
    ctx: ContextManager | None,
    engine: RolloutEngine,
    tokenizer,
    request: EnvRequest,
    sampling_params: SamplingParams,
    *,
    max_turns: int,
    train_on: str = "last",
    step_timeout_s: float = 30.0,
    max_prompt_tokens: int | None = None,
) -> Trajectory:
    """Run one episode of `env` (already built, not reset) with the policy behind `engine`.

    - `ctx`: rewrites the conversation before each model turn (None: the conversation as is).
    - `tokenizer`: the policy's HF tokenizer (chat template, decoding replies for the env).
    - `request`: what `env.reset` gets; `request.trajectory_id` is passed to `ctx`.
    - `sampling_params`: every turn may sample `max_new_tokens`; turn t uses seed chunk_seed(seed, t).
    - `max_turns`: most model turns; `train_on`: "last" marks only the last turn trainable, "all" all.
    - `step_timeout_s`: limit for each reset and step call; `max_prompt_tokens`: an episode whose next
      prompt would be longer ends there (truncated), None for no limit.

    Returns a Trajectory with one Turn per model turn and `info` holding: env_reward (sum of step
    rewards), step_rewards, trajectory_infos (reset's info then each step's info, JSON-safe), messages
    (the whole conversation), truncated (max_turns or prompt length reached before done) and, if the env
    failed, error. The env is not closed: whoever built it closes it.
    """
    if train_on not in TRAIN_ON:
        raise ValueError(f"train_on must be one of {list(TRAIN_ON)}, got {train_on!r}")
    episode = _Episode(env, ctx, engine, tokenizer, request, step_timeout_s)
    error: str | None = None
    try:
        await episode.play(sampling_params, max_turns, max_prompt_tokens)
    except EnvError as e:
        error = str(e)
        episode.infos.append({"error": error})
    return episode.trajectory(train_on, error)


@dataclass
class _Episode:
    """One episode's env, policy and context manager, and what it has produced so far: `play` fills the
    turns, rewards, infos and conversation; an env failure leaves what came before it in place."""

    env: Env
    ctx: ContextManager | None
    engine: RolloutEngine
    tokenizer: Any
    request: EnvRequest
    step_timeout_s: float
    turns: list[Turn] = field(default_factory=list)
    infos: list[Any] = field(default_factory=list)  # reset's info, then each step's (JSON-safe)
    rewards: list[float] = field(default_factory=list)
    conversation: Messages = field(default_factory=list)
    done: bool = False

    async def call(self, what: str, coro):
        """An env call under `step_timeout_s`; whatever goes wrong becomes an EnvError naming the call."""
        try:
            return await asyncio.wait_for(coro, self.step_timeout_s)
        except TimeoutError:
            raise EnvError(f"{what} took longer than step_timeout_s={self.step_timeout_s}") from None
        except EnvError:
            raise
        except Exception as e:
            raise EnvError(f"{what} raised {e!r}") from e

    def view(self) -> Messages:
        """The conversation as the model sees it: copies, so neither the manager nor the env can edit
        what the other holds."""
        messages = [dict(m) for m in self.conversation]
        shown = self.ctx.manage_context(messages, self.request.trajectory_id) if self.ctx else messages
        return [dict(m) for m in shown]

    async def play(
        self, sampling_params: SamplingParams, max_turns: int, max_prompt_tokens: int | None
    ) -> None:
        """Reset, then model turns and env steps until done, `max_turns`, or a prompt over
        `max_prompt_tokens`; an EnvError when the env fails."""
        reply_prefix = generation_prefix(self.tokenizer)
        observation, info, system = _checked_reset(await self.call("reset", self.env.reset(self.request)))
        self.infos.append(jsonable(info))
        system_messages = [{"role": "system", "content": system}] if system else []
        self.conversation = [*system_messages, {"role": "user", "content": observation}]
        shown = self.view()
        prompt = encode_prompt(self.tokenizer, shown)
        for t in range(max_turns):
            if max_prompt_tokens is not None and len(prompt) > max_prompt_tokens:
                return
            out = await self.engine.generate(
                prompt, replace(sampling_params, seed=chunk_seed(sampling_params.seed, t))
            )
            self.turns.append(Turn(prompt, out.token_ids, out.log_probs, out.finish_reason))
            text = self.tokenizer.decode(out.token_ids, skip_special_tokens=True)
            reply = {"role": "assistant", "content": reply_prefix + text}
            self.conversation.append(reply)
            stepped = await self.call("step", self.env.step(list(self.conversation)))
            observation, reward, self.done, info = _checked_step(stepped)
            self.rewards.append(reward)
            self.infos.append(jsonable(info))
            if self.done:
                return
            user = {"role": "user", "content": observation}
            self.conversation.append(user)
            new_shown = self.view()
            if new_shown == [*shown, reply, user]:  # the history left alone: the prompt grows by tokens
                ended_with = out.token_ids[-1] if out.finish_reason == "stop" and out.token_ids else None
                prompt = prompt + out.token_ids + continuation_ids(self.tokenizer, ended_with, observation)
            else:
                prompt = encode_prompt(self.tokenizer, new_shown)
            shown = new_shown

    def trajectory(self, train_on: str, error: str | None) -> Trajectory:
        """The episode's turns, trainable as `train_on` says, and its info (run_episode's docstring)."""
        turns = self.turns
        if not turns:  # reset failed: one empty, untrainable turn keeps the trajectory's place in the batch
            turns = [Turn(encode_prompt(self.tokenizer, self.request.messages), [], [], "length")]
        for i, turn in enumerate(turns):
            turn.trainable = train_on == "all" or i == len(turns) - 1
        info: dict[str, Any] = {
            "env": self.env.env_config.get("name"),
            "env_reward": float(sum(self.rewards)),
            "step_rewards": self.rewards,
            "trajectory_infos": self.infos,
            "messages": self.conversation,
            "truncated": error is None and not self.done,
        }
        if error is not None:
            info["error"] = error
        return Trajectory(turns, info)


class GymAgentLoop(AgentLoop):
    """One fresh env (and context manager) per episode, chosen by the item's row columns or the
    global `actor_rollout_ref.rollout.gym` configs, closed when the episode ends."""

    fits_any_environment = True  # an env conversation, LongCoT- or Delethink-style (docs/ENVIRONMENTS.md)

    def __init__(
        self,
        engine: RolloutEngine,
        *,
        tokenizer,
        max_turns: int,
        env_config: dict[str, Any] | None = None,
        ctx_config: dict[str, Any] | None = None,
        train_on: str = "last",
        step_timeout_s: float = 30.0,
        max_prompt_tokens: int | None = None,
    ) -> None:
        super().__init__(engine)
        self.tokenizer = tokenizer
        self.max_turns = max_turns
        self.env_config = env_config
        self.ctx_config = ctx_config
        self.train_on = train_on
        self.step_timeout_s = step_timeout_s
        self.max_prompt_tokens = max_prompt_tokens

    async def run(self, item: PromptItem, sampling_params: SamplingParams) -> Trajectory:
        env_config = item.env_config or self.env_config
        if not env_config:
            raise ValueError(
                f"the gym loop needs an env for data_source={item.data_source!r}: give the row an env_config "
                "column or set actor_rollout_ref.rollout.gym.env_config"
            )
        if not item.messages:
            raise ValueError(
                f"the gym loop hands the row's prompt messages to env.reset, but this item "
                f"(data_source={item.data_source!r}) has none (PromptItem.messages is empty)"
            )
        ctx_config = item.ctx_config or self.ctx_config
        trajectory_id = uuid.uuid4().hex if sampling_params.seed is None else str(sampling_params.seed)
        request = EnvRequest(
            messages=item.messages,
            data_source=item.data_source,
            ground_truth=item.ground_truth,
            extra_info=item.extra_info,
            env_config=env_config,
            seed=sampling_params.seed,
            trajectory_id=trajectory_id,
        )
        ctx = make_context_manager(ctx_config, self.tokenizer) if ctx_config else None
        env = make_env(env_config)
        try:
            trajectory = await run_episode(
                env, ctx, self.engine, self.tokenizer, request, sampling_params,
                max_turns=self.max_turns, train_on=self.train_on, step_timeout_s=self.step_timeout_s,
                max_prompt_tokens=self.max_prompt_tokens,
            )  # fmt: skip
        finally:
            close_error = await close_env(env, self.step_timeout_s)
        if ctx_config:
            trajectory.info["ctx"] = ctx_config.get("name")
        if close_error:
            trajectory.info["trajectory_infos"].append({"error": close_error})
        return trajectory

    @classmethod
    def from_config(cls, config: PolicyIterationConfig, engine: RolloutEngine, tokenizer: Any) -> AgentLoop:
        rollout = config.actor_rollout_ref.rollout
        gym = rollout.gym
        return cls(
            engine,
            tokenizer=tokenizer,
            max_turns=rollout.multi_turn.max_assistant_turns,
            env_config=gym.env_config,
            ctx_config=gym.ctx_config,
            train_on=gym.train_on,
            step_timeout_s=gym.step_timeout_s,
            max_prompt_tokens=gym.max_prompt_tokens,
        )

    @classmethod
    def config_problems(cls, config: PolicyIterationConfig) -> list[str]:
        train_on = config.actor_rollout_ref.rollout.gym.train_on
        if config.trainer.name == "ppo" and train_on != "last":
            return [
                f"{ROLLOUT}.gym.train_on={train_on!r}: train_on=all trains every assistant turn as its own "
                "row; use trainer.name=delethink (one row per turn, padded to the mini-batches, loss "
                "rescaled to a mean over trajectories)"
            ]
        return []

    @classmethod
    def scorer(cls, reward_manager: RewardManager) -> RewardManager:
        from verl.envs.scoring import EpisodeScorer

        return EpisodeScorer(reward_manager)

    @classmethod
    def plan_rows(cls, config: PolicyIterationConfig) -> list[tuple[str, str]]:
        data, rollout = config.data, config.actor_rollout_ref.rollout
        gym = rollout.gym
        env = (gym.env_config or {}).get("name", "from each row's env_config")
        ctx = (gym.ctx_config or {}).get("name", "none (or each row's ctx_config)")
        turns = rollout.multi_turn.max_assistant_turns
        return [
            ("environment", f"gym: env {env}, context manager {ctx}"),
            ("turns", f"up to {turns} model turns, training on {gym.train_on}"),
            (
                "context",
                f"<= {data.max_prompt_length} prompt + {data.max_response_length} new tokens per turn",
            ),
        ]

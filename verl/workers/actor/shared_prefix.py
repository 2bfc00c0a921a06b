"""Prompt prefixes shared by rows of a micro-batch, computed once (`model.share_prompt_prefix`).

The rows of a training batch repeat their prompts: a GRPO group's n samples have the same prompt, and
every Delethink chunk row of a group starts with the same question (the later chunks of one trajectory
also share its first `keep_head` thinking tokens). The padded forward computes each copy again.

Here a micro-batch is packed into one sequence without padding: each prefix group's shared prompt
tokens once (`plan_shared_prefixes`), then every row's remaining prompt tokens and its response, with
the position ids the row has on its own (the rest of a row continues from its prefix's length). One
forward pass of the model runs over it; only attention needs to know the layout, and it gets it from
an attention function registered with transformers (`AttentionInterface`, name
`SHARED_PREFIX_ATTENTION`): it gathers, for each segment, its queries and the keys it may see (a
prefix sees itself; a row sees its prefix and itself), runs sdpa on those views with a causal mask
over positions, and scatters the outputs back. A row therefore attends to exactly the keys and values
it would see alone, so log-probs equal the padded path; the prefix's activations get the gradient of
every row that shares them, so gradients do too.

Attention per view costs what a padded row costs (no dense mask over the whole packed sequence, which
on CPU costs more than the padding it saves); the projections and MLPs run once per shared token.
One ordinary forward call also keeps FSDP2's hooks and gradient checkpointing as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

# the attention implementation of a model that shares prefixes: sdpa, and the views when given
SHARED_PREFIX_ATTENTION = "sdpa_shared_prefix"
VIEWS_KWARG = "shared_prefix_views"  # the forward's keyword that carries the layout to attention


@dataclass(frozen=True)
class PrefixPlan:
    """Which rows share which prefix: row i belongs to group `group[i]`, whose first `lengths[g]` prompt
    tokens are computed once (taken from the group's row `source[g]`)."""

    group: list[int]
    lengths: list[int]
    source: list[int]

    def tokens_computed(self, total_tokens: int) -> int:
        """Real tokens through the model: the prefixes once, and every row's tokens after its prefix."""
        shared = sum(self.lengths[g] for g in self.group)
        return total_tokens - shared + sum(self.lengths)


def _common_length(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def plan_shared_prefixes(prompts: Sequence[Sequence[int]]) -> PrefixPlan:
    """Prefix groups that save the most tokens, for rows with these prompt ids.

    Rows are sorted by prompt (rows with a common prefix become neighbours) and the sorted order is cut
    into runs by dynamic programming: a run of k rows shares p = min(common prefix of its prompts,
    shortest prompt - 1) tokens and saves (k - 1) * p of them. A prefix stops one token short of a
    prompt so that every row keeps a prompt token in pass 2, the one whose logits predict its first
    response token. A run of one row saves nothing; its prefix is all but its last prompt token.
    """
    if not prompts:
        raise ValueError("no rows to plan")
    short = [i for i, p in enumerate(prompts) if len(p) < 2]
    if short:
        raise ValueError(f"rows {short} have fewer than 2 prompt tokens; a shared prefix needs one left over")
    order = sorted(range(len(prompts)), key=lambda i: (list(prompts[i]), i))
    n = len(order)
    neighbour = [_common_length(prompts[order[j]], prompts[order[j + 1]]) for j in range(n - 1)]

    def run_length(a: int, b: int) -> int:  # prefix of the sorted rows a..b (inclusive)
        shortest = min(len(prompts[order[j]]) for j in range(a, b + 1))
        return min([shortest - 1, *neighbour[a:b]])

    # best[b]: the most tokens saved by cutting the first b sorted rows into runs; cut[b]: its last run's
    # start. The last run a..b-1 is grown leftwards, its prefix length kept as a running minimum.
    best, cut = [0] * (n + 1), [0] * (n + 1)
    for b in range(1, n + 1):
        length = len(prompts[order[b - 1]]) - 1
        for a in range(b - 1, -1, -1):
            if a < b - 1:
                length = min(length, neighbour[a], len(prompts[order[a]]) - 1)
            saved = best[a] + (b - 1 - a) * length
            if a == b - 1 or saved > best[b]:
                best[b], cut[b] = saved, a
    runs = []
    b = n
    while b > 0:
        runs.append((cut[b], b - 1))
        b = cut[b]
    runs.reverse()
    group = [0] * n
    lengths, source = [], []
    for g, (a, last) in enumerate(runs):
        lengths.append(run_length(a, last))
        source.append(order[a])
        for j in range(a, last + 1):
            group[order[j]] = g
    return PrefixPlan(group, lengths, source)


def prompt_ids(batch: dict[str, torch.Tensor]) -> list[list[int]]:
    """Each row's real prompt tokens (rows from `collate_rows`: left-padded prompt | response)."""
    mask = batch["attention_mask"].bool()
    prompt_columns = mask.shape[1] - batch["responses"].shape[1]
    return [
        ids[m].tolist()
        for ids, m in zip(batch["input_ids"][:, :prompt_columns], mask[:, :prompt_columns], strict=True)
    ]


@dataclass(frozen=True)
class AttentionViews:
    """Segments of the packed sequence as a padded batch for attention: view v's queries are packed
    positions `queries[v]`, its keys `keys[v]` (padding: index 0, masked), `mask` [V, 1, Q, K] says
    which key each query may see."""

    queries: torch.Tensor  # [V, Q] packed index of each query
    query_valid: torch.Tensor  # [V, Q] bool
    keys: torch.Tensor  # [V, K] packed index of each key
    mask: torch.Tensor  # [V, 1, Q, K] bool


def _padded(segments: list[list[int]], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in segments)
    index = torch.zeros((len(segments), width), dtype=torch.long, device=device)
    valid = torch.zeros((len(segments), width), dtype=torch.bool, device=device)
    for v, segment in enumerate(segments):
        index[v, : len(segment)] = torch.tensor(segment, dtype=torch.long, device=device)
        valid[v, : len(segment)] = True
    return index, valid


def pack_with_shared_prefixes(
    batch: dict[str, torch.Tensor], plan: PrefixPlan
) -> tuple[torch.Tensor, torch.Tensor, AttentionViews, torch.Tensor]:
    """The packed sequence of `batch` under `plan`: (input ids [1, P], position ids [1, P], the attention
    views, and [B, T] the packed position whose logits predict each response column)."""
    device = batch["input_ids"].device
    prompts = prompt_ids(batch)
    t = batch["responses"].shape[1]
    response_lengths = batch["attention_mask"][:, -t:].sum(-1).tolist()
    tokens: list[int] = []
    positions: list[int] = []
    prefix_span: list[list[int]] = []  # packed indices of each group's prefix
    for row, p in zip(plan.source, plan.lengths, strict=True):
        prefix_span.append(list(range(len(tokens), len(tokens) + p)))
        tokens += prompts[row][:p]
        positions += range(p)
    row_span: list[list[int]] = []  # packed indices of each row's own tokens
    for i, (prompt, g) in enumerate(zip(prompts, plan.group, strict=True)):
        p = plan.lengths[g]
        own = prompt[p:] + batch["responses"][i, : response_lengths[i]].tolist()
        row_span.append(list(range(len(tokens), len(tokens) + len(own))))
        tokens += own
        positions += range(p, p + len(own))
    # response token j of a row is predicted at the row's last prompt token + j; past the row's end the
    # index stays on its last token (those columns are masked out of every loss)
    logits_index = torch.tensor(
        [
            [span[min(len(prompt) - plan.lengths[g] - 1 + j, len(span) - 1)] for j in range(t)]
            for span, prompt, g in zip(row_span, prompts, plan.group, strict=True)
        ],
        device=device,
    )
    queries, query_valid = _padded(prefix_span + row_span, device)
    keys, key_valid = _padded(
        prefix_span + [prefix_span[g] + span for g, span in zip(plan.group, row_span, strict=True)], device
    )
    position = torch.tensor(positions, device=device)
    # keys before or at the query's position; a prefix's positions all come before its rows' own
    query_position = torch.where(query_valid, position[queries], position.max() + 1)
    mask = key_valid[:, None, :] & (position[keys][:, None, :] <= query_position[:, :, None])
    views = AttentionViews(queries, query_valid, keys, mask[:, None])
    ids = torch.tensor(tokens, dtype=torch.long, device=device)[None]
    return ids, position[None], views, logits_index


def shared_prefix_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """sdpa over the views of a packed shared-prefix micro-batch ([1, heads, P, dim] in, [1, P, heads,
    dim] out); plain sdpa when the forward carries no views."""
    views: AttentionViews | None = kwargs.pop(VIEWS_KWARG, None)
    if views is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    kwargs.pop("is_causal", None)  # the views' mask is the causal one

    def gather(states: torch.Tensor, index: torch.Tensor) -> torch.Tensor:  # [1, h, P, d] -> [V, h, n, d]
        return states[0][:, index].transpose(0, 1)

    out, _ = sdpa_attention_forward(
        module, gather(query, views.queries), gather(key, views.keys), gather(value, views.keys), views.mask,
        is_causal=False, **kwargs,
    )  # fmt: skip
    packed = out.new_zeros((query.shape[2], *out.shape[2:]))
    packed[views.queries[views.query_valid]] = out[views.query_valid]
    return packed[None], None


AttentionInterface.register(SHARED_PREFIX_ATTENTION, shared_prefix_attention)
ALL_MASK_ATTENTION_FUNCTIONS.register(SHARED_PREFIX_ATTENTION, sdpa_mask)


def shared_prefix_response_logits(
    model: torch.nn.Module, batch: dict[str, torch.Tensor], plan: PrefixPlan
) -> torch.Tensor:
    """Logits predicting each response token, [B, T, V] like `dp_actor.response_logits`, with the
    prefixes of `plan` (made from `prompt_ids(batch)`) computed once. The model's attention
    implementation must be `SHARED_PREFIX_ATTENTION`."""
    if model.config._attn_implementation != SHARED_PREFIX_ATTENTION:
        # any other attention would ignore the views and let every token see the whole packed sequence
        raise ValueError(
            f"the model's attention implementation is {model.config._attn_implementation!r}; call "
            f"model.set_attn_implementation({SHARED_PREFIX_ATTENTION!r}) first"
        )
    ids, positions, views, logits_index = pack_with_shared_prefixes(batch, plan)
    logits = model(
        input_ids=ids,
        position_ids=positions,
        attention_mask=torch.ones_like(ids),  # no padding: the views do the masking
        use_cache=False,
        logits_to_keep=logits_index.flatten(),
        **{VIEWS_KWARG: views},
    ).logits
    return logits.view(*logits_index.shape, -1)

"""Per-request random draws and the token sampler of the HF rollout engine.

A request's draws come from a counter-based generator: draw i of a request is a pure function of
(request seed, i). Its tokens therefore ignore which other requests share its batch, and one
vectorised op makes every row's draw for a step (instead of one generator call per row per step).
"""

from __future__ import annotations

import torch

_UINT64 = (1 << 64) - 1
# splitmix64 (Steele, Lea, Flood 2014; the seeder of xoshiro): its state advances by the golden gamma,
# so output i is a finaliser applied to seed + (i + 1) * gamma, a pure function of (seed, i).
_GAMMA = 0x9E3779B97F4A7C15
_MIX_1 = 0xBF58476D1CE4E5B9
_MIX_2 = 0x94D049BB133111EB


def as_int64(value: int) -> int:
    """The int64 holding the low 64 bits of `value`: torch has no uint64 arithmetic, and int64
    addition and multiplication wrap with the same bits a uint64 would have."""
    value &= _UINT64
    return value - (1 << 64) if value >= 1 << 63 else value


def _shift_right(x: torch.Tensor, bits: int) -> torch.Tensor:
    # int64 `>>` copies the sign bit in; masking it off gives the unsigned (logical) shift
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def splitmix64(seeds: torch.Tensor, counters: torch.Tensor) -> torch.Tensor:
    """Output number `counters` (0-based) of splitmix64 started from `seeds`, elementwise, as int64
    bit patterns. seeds: int64 (see `as_int64`); counters: int64 >= 0."""
    z = seeds + (counters + 1) * as_int64(_GAMMA)
    z = (z ^ _shift_right(z, 30)) * as_int64(_MIX_1)
    z = (z ^ _shift_right(z, 27)) * as_int64(_MIX_2)
    return z ^ _shift_right(z, 31)


def counter_uniform(seeds: torch.Tensor, counters: torch.Tensor) -> torch.Tensor:
    """Uniform float32 draws in [0, 1): the top 24 bits of `splitmix64(seeds, counters)` / 2**24.
    24 bits is what a float32 holds exactly, so every value is a multiple of 2**-24 below 1."""
    return _shift_right(splitmix64(seeds, counters), 40).to(torch.float32) / 2**24


def _inverse_cdf(probs: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """Per row, the first token whose cumulative probability (vocabulary order) exceeds
    uniform * total. Scaling the draw by the total mass absorbs rounding in the sum."""
    cdf = probs.cumsum(dim=-1)
    threshold = (uniform * cdf[:, -1]).unsqueeze(-1)
    tokens = torch.searchsorted(cdf, threshold, right=True).squeeze(-1)
    # Rounding can put the threshold on the total mass, past every token: take the last token with
    # non-zero probability instead (a zero-probability token would have log-prob -inf).
    overflow = tokens == probs.shape[-1]
    if bool(overflow.any()):
        rows = overflow.nonzero().squeeze(-1)
        last_positive = (probs[rows].flip(-1) > 0).to(torch.uint8).argmax(dim=-1)
        tokens[rows] = probs.shape[-1] - 1 - last_positive
    return tokens


def _sample_filtered(
    log_probs: torch.Tensor, top_p: torch.Tensor, top_k: torch.Tensor, uniform: torch.Tensor
) -> torch.Tensor:
    """Inverse-CDF sampling over the most likely tokens kept by top-k and top-p (sorted order)."""
    vocab_size = log_probs.shape[-1]
    sorted_log_probs, sorted_ids = log_probs.sort(dim=-1, descending=True)
    sorted_probs = sorted_log_probs.exp()
    # Both filters keep a prefix of the sorted vocabulary; the most likely token always survives
    # because the mass before it is 0.
    rank = torch.arange(vocab_size, device=log_probs.device)
    k = torch.where(top_k > 0, top_k, vocab_size)
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
    kept = (rank < k.unsqueeze(-1)) & (mass_before < top_p.unsqueeze(-1)) & (sorted_probs > 0)
    cdf = (sorted_probs * kept).cumsum(dim=-1)
    # Scaling the draw by the kept mass renormalises the filtered distribution without dividing.
    threshold = (uniform * cdf[:, -1]).unsqueeze(-1)
    position = torch.searchsorted(cdf, threshold, right=True).squeeze(-1)
    # Rounding can put the threshold on the kept mass; stay inside the kept prefix.
    position = torch.minimum(position, kept.sum(dim=-1) - 1)
    return sorted_ids.gather(-1, position.unsqueeze(-1)).squeeze(-1)


def sample_unfiltered(
    logits: torch.Tensor, temperature: torch.Tensor, uniform: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """`sample_next_tokens` for rows that all sample (temperature > 0) with top-k and top-p off: the
    same tokens and log-probs, without the per-row checks for greedy and filtered rows: a dozen small
    ops, 2-3 us each on a CPU, a fifth of the sampling time per step at batch 8."""
    log_probs = (logits.float() / temperature.unsqueeze(-1)).log_softmax(dim=-1)
    tokens = _inverse_cdf(log_probs.exp(), uniform)
    return tokens, log_probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def sample_next_tokens(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_p: torch.Tensor,
    top_k: torch.Tensor,
    uniform: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one token per row; return (tokens, their log-probs).

    logits: (rows, vocab). temperature, top_p, uniform: (rows,) floats; top_k: (rows,) ints, -1 = off.
    A row with temperature 0 is greedy (argmax of the logits, as HF generate). Other rows sample by
    inverse CDF with their draw `uniform` in [0, 1): in vocabulary order when unfiltered (no sort),
    in sorted order over the kept tokens when top-k or top-p is on. The returned log-prob is
    log_softmax(logits / temperature) (plain log_softmax when greedy) before filtering, which is what
    the actor recomputes.
    """
    greedy = temperature == 0
    scale = torch.where(greedy, torch.ones_like(temperature), temperature)
    log_probs = (logits.float() / scale.unsqueeze(-1)).log_softmax(dim=-1)
    if bool(greedy.all()):
        tokens = logits.argmax(dim=-1)
    else:
        tokens = _inverse_cdf(log_probs.exp(), uniform)
        filtered = ((top_k > 0) | (top_p < 1)) & ~greedy
        if bool(filtered.any()):
            rows = filtered.nonzero().squeeze(-1)
            tokens[rows] = _sample_filtered(log_probs[rows], top_p[rows], top_k[rows], uniform[rows])
        if bool(greedy.any()):
            tokens = torch.where(greedy, logits.argmax(dim=-1), tokens)
    return tokens, log_probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)

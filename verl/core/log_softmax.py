"""Log-probs of sampled tokens and the entropy, from logits too large to upcast whole: log softmax(logits / T)
at the labels and the entropy of softmax(logits / T), as a torch autograd Function that works a chunk of
positions at a time in float32 and recomputes softmax in its backward. The actor's log-prob and loss
passes go through it (verl/workers/actor/dp_actor.py); the arithmetic it serves is in core_algos.py.
"""

from __future__ import annotations

import torch
from torch import Tensor

# Positions per chunk of the log-prob and entropy pass: as many as make one float32 [chunk, V] buffer
# of about 256 MiB (441 positions of a 151936-token vocabulary). One such buffer is alive at a time (two
# in the backward of an entropy bonus): small against the [P, V] logits themselves (7 GiB of bfloat16
# for 24K positions), and large enough that each chunk's kernels stay busy. A small vocabulary fits any
# micro-batch in one chunk (the tiny model's 263 tokens: 255K positions), so there the loop runs once.
LOGITS_CHUNK_BYTES = 256 * 2**20


def _chunks(positions: int, vocab_size: int, dtype: torch.dtype) -> list[slice]:
    size = max(1, LOGITS_CHUNK_BYTES // (vocab_size * dtype.itemsize))
    return [slice(s, min(s + size, positions)) for s in range(0, positions, size)]


def _scaled(logits: Tensor, temperature: float, dtype: torch.dtype) -> Tensor:
    """A fresh `dtype` copy of logits / temperature (the callers work in place on it)."""
    z = logits.to(dtype, copy=True)
    return z.div_(temperature) if temperature != 1.0 else z


def _forward_chunk(
    logits: Tensor, labels: Tensor, temperature: float, dtype: torch.dtype, with_entropy: bool
) -> tuple[Tensor, Tensor, Tensor | None]:
    """(logsumexp(z), log p at the labels, entropy or None) of z = logits / T, one chunk of positions.
    A function of its own so that the chunk's float32 buffer is freed before the next one is made."""
    z = _scaled(logits, temperature, dtype)
    picked = z.gather(-1, labels[:, None]).squeeze(-1)
    peak = z.amax(-1, keepdim=True)
    exp = z.sub_(peak).exp_()  # e = exp(z - max z), in place: the chunk's one float32 buffer
    sum_exp = exp.sum(-1)
    log_sum = sum_exp.log()
    # logsumexp as torch.logsumexp computes it: the log-probs round as picked - logsumexp did
    log_norm = log_sum + peak.squeeze(-1)
    # -sum p log p = log S - sum(e log e) / S, S = sum e
    entropy = log_sum - exp.xlogy_(exp).sum(-1) / sum_exp if with_entropy else None
    return log_norm, picked - log_norm, entropy


def _backward_chunk(
    logits: Tensor,
    labels: Tensor,
    log_norm: Tensor,
    entropy: Tensor | None,
    grad_log_probs: Tensor | None,
    grad_entropy: Tensor | None,
    temperature: float,
) -> Tensor:
    """d/d logits of sum(grad_log_probs * log p_label + grad_entropy * H) for one chunk, float32."""
    log_p = _scaled(logits, temperature, log_norm.dtype).sub_(log_norm[:, None])
    if grad_entropy is None:  # d log p_label / dz = onehot - p
        grad_z = log_p.exp_().mul_(-grad_log_probs[:, None])
    else:  # dH/dz = -p (log p + H): p and log p both, a second buffer
        p = log_p.exp()
        weight = log_p.add_(entropy[:, None]).mul_(grad_entropy[:, None])
        if grad_log_probs is not None:
            weight.add_(grad_log_probs[:, None])
        grad_z = p.mul_(weight).neg_()
    if grad_log_probs is not None:
        grad_z.scatter_add_(-1, labels[:, None], grad_log_probs[:, None])
    return grad_z.div_(temperature) if temperature != 1.0 else grad_z


def _part(values: Tensor | None, chunk: slice) -> Tensor | None:
    return None if values is None else values[chunk]


class _LogSoftmaxAtLabels(torch.autograd.Function):
    """log softmax(logits / T) at the labels and, on request, the entropy of softmax(logits / T), for
    logits [P, V] in their own dtype (bfloat16 on GPU).

    Autograd through log_softmax keeps float32 [P, V] tensors for its backward; here each chunk of
    positions is upcast, reduced in place and dropped, and only the logits and per-position statistics
    are saved. The backward recomputes softmax chunk by chunk and writes d/dz of (log p_label, H),
    (onehot - p) g - p (log p + H) h, divided by T, into one gradient of the logits' dtype."""

    @staticmethod
    def forward(ctx, logits: Tensor, labels: Tensor, temperature: float, with_entropy: bool):
        ctx.set_materialize_grads(False)  # an unused output's gradient arrives as None, not zeros
        dtype = torch.promote_types(logits.dtype, torch.float32)
        positions, vocab_size = logits.shape
        log_norm = logits.new_empty(positions, dtype=dtype)  # logsumexp(logits / T)
        log_probs = torch.empty_like(log_norm)
        entropy = torch.empty_like(log_norm) if with_entropy else None
        for chunk in _chunks(positions, vocab_size, dtype):
            parts = _forward_chunk(logits[chunk], labels[chunk], temperature, dtype, with_entropy)
            log_norm[chunk], log_probs[chunk] = parts[:2]
            if entropy is not None:
                entropy[chunk] = parts[2]
        ctx.save_for_backward(logits, labels, log_norm, entropy)
        ctx.temperature = temperature
        return log_probs, entropy

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_log_probs: Tensor | None, grad_entropy: Tensor | None):
        logits, labels, log_norm, entropy = ctx.saved_tensors
        grad = torch.empty_like(logits)
        for chunk in _chunks(*logits.shape, log_norm.dtype):
            grad[chunk] = _backward_chunk(
                logits[chunk], labels[chunk], log_norm[chunk], _part(entropy, chunk),
                _part(grad_log_probs, chunk), _part(grad_entropy, chunk), ctx.temperature,
            )  # fmt: skip
        return grad, None, None, None


def _log_softmax_at_labels(
    logits: Tensor, labels: Tensor, temperature: float, with_entropy: bool
) -> tuple[Tensor, Tensor | None]:
    if logits.dim() != 3 or labels.shape != logits.shape[:-1]:
        raise ValueError(
            f"expected logits [B, T, V] and labels [B, T]; got {tuple(logits.shape)}, {tuple(labels.shape)}"
        )
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    temperature = float(temperature)
    # a view for contiguous logits (what the actor passes); other layouts are copied once
    flat = logits.reshape(-1, logits.shape[-1])
    log_probs, entropy = _LogSoftmaxAtLabels.apply(flat, labels.reshape(-1), temperature, with_entropy)
    return log_probs.view(labels.shape), None if entropy is None else entropy.view(labels.shape)


def log_probs_from_logits(logits: Tensor, labels: Tensor, temperature: float = 1.0) -> Tensor:
    """log softmax(logits / temperature) at `labels`: [B, T, V], [B, T] -> [B, T] (at least float32).

    The logits stay in their dtype; the float32 work goes a chunk of positions at a time
    (`LOGITS_CHUNK_BYTES`), so memory is the logits plus a few [chunk, V] buffers, and the backward
    adds one gradient of the logits' size and dtype."""
    return _log_softmax_at_labels(logits, labels, temperature, with_entropy=False)[0]


def log_probs_and_entropy(logits: Tensor, labels: Tensor, temperature: float = 1.0) -> tuple[Tensor, Tensor]:
    """`log_probs_from_logits` and the entropy of softmax(logits / temperature), [B, T] each, in one
    pass over the logits. The entropy is differentiable (an entropy bonus); when only its value is
    used its backward costs nothing."""
    log_probs, entropy = _log_softmax_at_labels(logits, labels, temperature, with_entropy=True)
    assert entropy is not None
    return log_probs, entropy

"""The chunked log-softmax kernel (verl/core/log_softmax.py) against numbers worked out by hand, against
torch's whole-tensor log_softmax and entropy, and across chunk sizes."""

import math

import pytest
import torch
from torch.testing import assert_close

from tests.tolerances import ULPS_PER_REDUCTION, reordered_atol
from verl.core import log_softmax
from verl.core.log_softmax import log_probs_and_entropy, log_probs_from_logits


def test_entropy_hand_computed():
    # uniform over 4: ln 4
    # p = [2/3, 1/3] from logits [ln 2, 0]: -(2/3 ln 2/3 + 1/3 ln 1/3) = ln 3 - (2/3) ln 2 = 0.636514
    # [1000, 1000]: uniform over 2 = ln 2 (logits this large must not overflow)
    # [1000, 0, 0, 0]: one-hot to float precision -> 0
    logits = torch.tensor(
        [
            [0.0, 0.0, 0.0, 0.0],
            [math.log(2), 0.0, -1e9, -1e9],
            [1000.0, 1000.0, -1e9, -1e9],
            [1000.0, 0.0, 0.0, 0.0],
        ]
    )
    expected = torch.tensor([math.log(4), math.log(3) - 2 / 3 * math.log(2), math.log(2), 0.0])
    _, entropy = log_probs_and_entropy(logits[None], torch.zeros(1, 4, dtype=torch.long))
    assert_close(entropy[0], expected)


def test_log_probs_from_logits_hand_computed():
    logits = torch.tensor([[[0.0, math.log(3)], [0.0, math.log(3)]]])
    labels = torch.tensor([[1, 0]])
    # softmax([0, ln 3]) = [1/4, 3/4]
    assert_close(log_probs_from_logits(logits, labels), torch.tensor([[math.log(3 / 4), math.log(1 / 4)]]))
    # temperature 2: softmax([0, ln 3 / 2]) = [1, sqrt 3] / (1 + sqrt 3)
    s3 = math.sqrt(3)
    expected = torch.tensor([[math.log(s3 / (1 + s3)), math.log(1 / (1 + s3))]])
    assert_close(log_probs_from_logits(logits, labels, temperature=2.0), expected)


# The chunked function against whole-tensor torch ops: the same float32 math with its sums in another order.
# A log-prob is the label's logit minus a log-sum-exp (two reductions), on the scale of the log-probs.
LOG_PROB_ULPS = 2 * ULPS_PER_REDUCTION


@pytest.mark.compares_runs
def test_log_probs_from_logits_matches_log_softmax_with_grad():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 5, generator=gen, requires_grad=True)
    labels = torch.randint(0, 5, (2, 3), generator=gen)
    out = log_probs_from_logits(logits, labels, temperature=0.7)
    manual = torch.log_softmax(logits / 0.7, dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    assert_close(out, manual, atol=reordered_atol(manual, LOG_PROB_ULPS), rtol=0)
    (grad,) = torch.autograd.grad(out.sum(), logits)
    (manual_grad,) = torch.autograd.grad(manual.sum(), logits)
    # (onehot - softmax) / T: the softmax's sum, then the division, on the scale of 1 / T
    assert_close(grad, manual_grad, atol=reordered_atol(1 / 0.7, 2 * ULPS_PER_REDUCTION), rtol=0)
    # bf16 logits are scored in float32
    assert log_probs_from_logits(logits.detach().bfloat16(), labels).dtype == torch.float32
    with pytest.raises(ValueError, match="temperature must be > 0"):
        log_probs_from_logits(logits, labels, temperature=0.0)
    with pytest.raises(ValueError, match=r"labels \[B, T\]"):
        log_probs_from_logits(logits, labels[:, :2])


# A 2 x 3 example: position 0 has logits [0, ln 2, ln 3] -> p = [1/6, 1/3, 1/2], label 2;
# position 1 has [0, 0, 0] -> p = [1/3, 1/3, 1/3], label 0.
HAND_LOGITS = torch.tensor([[[0.0, math.log(2), math.log(3)], [0.0, 0.0, 0.0]]])
HAND_LABELS = torch.tensor([[2, 0]])
HAND_P = torch.tensor([[1 / 6, 1 / 3, 1 / 2], [1 / 3, 1 / 3, 1 / 3]])
# H = -sum p ln p: (1/6) ln 6 + (1/3) ln 3 + (1/2) ln 2 = 1.011404; ln 3 = 1.098612
HAND_ENTROPY = torch.tensor([[math.log(6) / 6 + math.log(3) / 3 + math.log(2) / 2, math.log(3)]])


@pytest.mark.parametrize("temperature", [1.0, 2.0])
def test_log_probs_entropy_and_their_gradients_by_hand(temperature):
    """At temperature T the logits are T times the example's, so p is the same and every gradient
    is divided by T."""
    logits = (HAND_LOGITS * temperature).requires_grad_()
    log_probs, entropy = log_probs_and_entropy(logits, HAND_LABELS, temperature)
    assert_close(log_probs, torch.tensor([[math.log(1 / 2), math.log(1 / 3)]]))
    assert_close(entropy, HAND_ENTROPY)
    # d log p_label / dz = onehot - p: [-1/6, -1/3, 1/2] and [2/3, -1/3, -1/3]
    (grad,) = torch.autograd.grad(log_probs.sum(), logits, retain_graph=True)
    onehot = torch.tensor([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    assert_close(grad[0], (onehot - HAND_P) / temperature)
    # dH/dz = -p (ln p + H): 0 for the uniform position;
    # position 0: -[1/6 (ln 1/6 + H), 1/3 (ln 1/3 + H), 1/2 (ln 1/2 + H)] = [0.1301, 0.0291, -0.1592]
    (grad,) = torch.autograd.grad(entropy.sum(), logits, retain_graph=True)
    expected = -HAND_P * (HAND_P.log() + HAND_ENTROPY[0, :, None])
    assert_close(expected[0], torch.tensor([0.13010, 0.02910, -0.15920]), atol=1e-4, rtol=0)
    assert_close(grad[0], expected / temperature)
    # both at once, weighted: the sum of the two
    (grad,) = torch.autograd.grad((2 * log_probs - 3 * entropy).sum(), logits)
    assert_close(grad[0], (2 * (onehot - HAND_P) - 3 * expected) / temperature)


def reference_log_probs_and_entropy(logits, labels, temperature):
    """What the actor computed before the chunked function, on float32 copies of the whole tensor."""
    scaled = logits.float() / temperature
    log_probs = scaled.gather(-1, labels.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(scaled, dim=-1)
    shifted = scaled - scaled.detach().amax(dim=-1, keepdim=True)
    entropy = torch.logsumexp(shifted, dim=-1) - (torch.softmax(shifted, dim=-1) * shifted).sum(-1)
    return log_probs, entropy


@pytest.mark.compares_runs
@pytest.mark.parametrize("temperature", [1.0, 0.6])
@pytest.mark.parametrize("chunk_positions", [1, 3, 1000])  # one position, an uneven split, one chunk
def test_chunks_give_the_whole_tensors_result(monkeypatch, temperature, chunk_positions):
    gen = torch.Generator().manual_seed(0)
    vocab = 50
    monkeypatch.setattr(log_softmax, "LOGITS_CHUNK_BYTES", chunk_positions * vocab * 4)
    logits = (5 * torch.randn(2, 7, vocab, generator=gen)).requires_grad_()
    labels = torch.randint(0, vocab, (2, 7), generator=gen)
    weights = torch.randn(2, 2, 7, generator=gen)
    log_probs, entropy = log_probs_and_entropy(logits, labels, temperature)
    ref_log_probs, ref_entropy = reference_log_probs_and_entropy(logits, labels, temperature)
    assert_close(log_probs, ref_log_probs, atol=reordered_atol(ref_log_probs, LOG_PROB_ULPS), rtol=0)
    assert_close(log_probs_from_logits(logits, labels, temperature), log_probs, atol=0, rtol=0)
    # the entropy, log-sum-exp minus sum p z, and its gradient p (z - sum p z) (times the weights) cancel
    # terms as large as the scaled logits z: three reductions on that scale
    z = (logits / temperature).abs().max()
    assert_close(entropy, ref_entropy, atol=reordered_atol(z, 3 * ULPS_PER_REDUCTION), rtol=0)
    (grad,) = torch.autograd.grad((weights[0] * log_probs + weights[1] * entropy).sum(), logits)
    (ref_grad,) = torch.autograd.grad((weights[0] * ref_log_probs + weights[1] * ref_entropy).sum(), logits)
    grad_atol = reordered_atol(weights.abs().max() * z, 3 * ULPS_PER_REDUCTION)
    assert_close(grad, ref_grad, atol=grad_atol, rtol=0)


@pytest.mark.compares_runs
def test_bfloat16_logits_are_scored_in_float32_and_get_a_bfloat16_gradient():
    gen = torch.Generator().manual_seed(1)
    logits = (3 * torch.randn(3, 4, 20, generator=gen)).bfloat16().requires_grad_()
    labels = torch.randint(0, 20, (3, 4), generator=gen)
    log_probs = log_probs_from_logits(logits, labels, 0.8)
    assert log_probs.dtype == torch.float32
    ref_log_probs, _ = reference_log_probs_and_entropy(logits, labels, 0.8)
    assert_close(log_probs, ref_log_probs, atol=reordered_atol(ref_log_probs, LOG_PROB_ULPS), rtol=0)
    (grad,) = torch.autograd.grad(log_probs.sum(), logits)
    (ref_grad,) = torch.autograd.grad(ref_log_probs.sum(), logits)  # float32 grad, cast back by .float()
    assert grad.dtype == torch.bfloat16
    # torch's bfloat16 default (a few bfloat16 ulps): float32 rounding may tip the cast to the next one
    assert_close(grad, ref_grad)


def test_empty_batches_give_empty_results():
    log_probs, entropy = log_probs_and_entropy(torch.zeros(0, 5, 7), torch.zeros(0, 5, dtype=torch.long))
    assert log_probs.shape == entropy.shape == (0, 5)
    assert log_probs_from_logits(torch.zeros(2, 0, 7), torch.zeros(2, 0, dtype=torch.long)).shape == (2, 0)


def test_a_masked_vocabulary_gets_a_zero_gradient_when_only_the_log_probs_are_trained_on():
    # logits [0, ln 3, -inf]: p = [1/4, 3/4, 0]; [ln 3, 0, -inf]: p = [3/4, 1/4, 0]; label 1 in both.
    # The entropy is computed but not trained on, so its gradient must not enter: p (log p + H) at the
    # masked token would be 0 * -inf.
    logits = torch.tensor([[[0.0, math.log(3), -math.inf], [math.log(3), 0.0, -math.inf]]])
    logits.requires_grad_()
    log_probs, entropy = log_probs_and_entropy(logits, torch.tensor([[1, 1]]))
    assert_close(log_probs, torch.tensor([[math.log(3 / 4), math.log(1 / 4)]]))
    # -(1/4 ln 1/4 + 3/4 ln 3/4) = 0.562335 at both positions
    assert_close(entropy, torch.full((1, 2), -(math.log(1 / 4) / 4 + 3 * math.log(3 / 4) / 4)))
    (grad,) = torch.autograd.grad(log_probs.sum(), logits)
    # onehot - p
    assert_close(grad, torch.tensor([[[-1 / 4, 1 / 4, 0.0], [-3 / 4, 3 / 4, 0.0]]]))


def test_log_probs_alone_compute_no_entropy(monkeypatch):
    entropies = []

    def recording(*args):
        parts = forward_chunk(*args)
        entropies.append(parts[2])
        return parts

    forward_chunk = log_softmax._forward_chunk
    monkeypatch.setattr(log_softmax, "_forward_chunk", recording)
    log_probs_from_logits(HAND_LOGITS, HAND_LABELS)
    assert entropies == [None]  # one chunk, and no entropy in it
    log_probs_and_entropy(HAND_LOGITS, HAND_LABELS)
    assert entropies[1].shape == (2,)


@pytest.mark.parametrize(
    "positions, vocab, dtype, starts",
    [
        # 256 MiB / (151936 * 4 bytes) = 441.7: 441 positions a chunk, the last one the 118 left
        (1000, 151936, torch.float32, [0, 441, 882, 1000]),
        (1000, 151936, torch.float64, [0, 220, 440, 660, 880, 1000]),  # 8 bytes: 220.8
        (441, 151936, torch.float32, [0, 441]),  # exactly one chunk
        (0, 151936, torch.float32, [0]),  # no positions: no chunk
        (3, 2**25, torch.float32, [0, 2, 3]),  # one position is half the budget: 2 a chunk
        (3, 2**26, torch.float32, [0, 1, 2, 3]),  # exactly the budget: 1 a chunk
        (3, 2**27, torch.float32, [0, 1, 2, 3]),  # twice the budget: still 1 a chunk
    ],
)
def test_chunks_cover_the_positions_once_within_the_byte_budget(positions, vocab, dtype, starts):
    assert log_softmax.LOGITS_CHUNK_BYTES == 2**28  # 256 MiB
    expected = [slice(a, b) for a, b in zip(starts[:-1], starts[1:], strict=True)]
    assert log_softmax._chunks(positions, vocab, dtype) == expected

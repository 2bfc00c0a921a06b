"""Seeds: derived per sample from a run's seed, and one call to seed every generator the driver uses."""

from __future__ import annotations

import random

import numpy as np


def derive_seed(*entropy: int) -> int:
    """A 63-bit seed that is a pure function of the given integers (step, sample index, ...), with
    unrelated streams for different inputs."""
    return int(np.random.SeedSequence(list(entropy)).generate_state(1, dtype=np.uint64)[0] >> 1)


def chunk_seed(seed: int | None, chunk_index: int) -> int | None:
    """The seed of a trajectory's chunk or turn `chunk_index` (Delethink's chunks, the gym loop's turns):
    chunk 0 keeps the trajectory's seed (so one chunk samples exactly like LongCoT); later chunks get
    independent seeds derived from it."""
    if seed is None or chunk_index == 0:
        return seed
    return derive_seed(seed, chunk_index)


def seed_everything(seed: int) -> None:
    import torch  # here: the agent loops import this module, and a config check must not wait for torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)

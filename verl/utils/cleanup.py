"""Closing what a run holds without hiding why it stopped."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

logger = logging.getLogger(__name__)


@contextmanager
def closed_after(*closers: Callable[[], object]) -> Iterator[None]:
    """Call `closers` in order when the block ends. After an error in the block they are best effort: one
    that fails as well is logged and the block's error propagates. (In a plain `finally`, a shutdown that
    cannot reach a dead worker raises the error that gets reported, and the death that caused it is
    buried in its context.)"""
    try:
        yield
    except BaseException:
        for close in closers:
            try:
                close()
            except Exception:
                logger.warning("after the error below, %s failed too", _name(close), exc_info=True)
        raise
    for close in closers:
        close()


def _name(close: Callable[[], object]) -> str:
    return getattr(close, "__qualname__", repr(close))

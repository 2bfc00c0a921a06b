"""Name -> class (or function) registries. The built-ins are a dict literal beside their code (e.g.
`verl.agent_loop.AGENT_LOOPS`); plugins (`external_plugins`) add theirs with a decorator made here."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def registrar(registry: dict[str, T], kind: str) -> Callable[[str], Callable[[T], T]]:
    """`register = registrar(THINGS, "thing")`, then `@register("name")` adds a class or function to
    THINGS; registering a taken name is an error, so two plugins cannot silently replace each other."""

    def register(name: str) -> Callable[[T], T]:
        def decorator(obj: T) -> T:
            if name in registry:
                raise ValueError(f"{kind} {name!r} is already registered by {registry[name].__qualname__}")
            registry[name] = obj
            return obj

        return decorator

    return register

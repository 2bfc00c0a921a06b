"""What the entry points say about bad input: unknown keys on the command line, named before Hydra
composes the config, and a bad config, data file or resume, each one line and exit code 2.

For `data.trian_batch_size=8` Hydra says the key "is not in struct" and suggests appending it with
`+data.trian_batch_size=8`, which only moves the failure to the schema check. The entry points call
`exit_on_unknown_keys` first, which names the key and the closest known one, as the schema check does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import sys
import types
import typing
from collections.abc import Iterator, Sequence
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import OverrideType
from hydra.errors import OverrideParseException

from verl.config import ConfigError
from verl.data.rl_dataset import DataError
from verl.utils.checkpoint import ResumeError


def _without_none(tp: Any) -> Any:
    """`X | None` -> X."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        (tp,) = (arg for arg in typing.get_args(tp) if arg is not type(None))
    return tp


def unknown_key_error(schema: type, key: str) -> str | None:
    """The error for dotted `key` if it names no field under dataclass `schema`; None if it does, or if
    it goes into a free-form value (a dict of anything), where the schema check judges it."""
    tp: Any = schema
    parts = key.split(".")
    for i, name in enumerate(parts):
        tp = _without_none(tp)
        if typing.get_origin(tp) is dict:  # `name` is a free name, e.g. a task in train_tasks
            tp = typing.get_args(tp)[1]
            continue
        if not dataclasses.is_dataclass(tp):
            return None
        fields = [f.name for f in dataclasses.fields(tp)]
        if name not in fields:
            prefix = "".join(f"{part}." for part in parts[:i])
            close = difflib.get_close_matches(name, fields, n=1)
            hint = f"did you mean {prefix}{close[0]}?" if close else f"known keys: {fields}"
            return f"{prefix}{name}: unknown key; {hint}"
        tp = typing.get_type_hints(tp)[name]
    return None


def unknown_key_errors(schema: type, overrides: Sequence[str]) -> list[str]:
    """An error for each `KEY=VALUE` override whose KEY is not in `schema`. Overrides that add (`+`),
    force (`++`) or delete (`~`) keys, pick a config group (`a/b=`), or set hydra's own keys are left to
    Hydra and the schema check, and so is a syntax error."""
    try:
        parsed = OverridesParser.create().parse_overrides([o for o in overrides if not o.startswith("-")])
    except OverrideParseException:
        return []
    errors = []
    for override in parsed:
        key = override.key_or_group
        if override.type is not OverrideType.CHANGE or override.package is not None or "/" in key:
            continue
        if key != "hydra" and not key.startswith("hydra."):
            errors.append(unknown_key_error(schema, key))
    return [error for error in errors if error]


def exit_on_unknown_keys(schema: type) -> None:
    """Exit with code 2 and one `config error:` line per unknown key in this process's arguments."""
    errors = unknown_key_errors(schema, sys.argv[1:])
    for error in errors:
        print(f"config error: {error}", file=sys.stderr)
    if errors:
        sys.exit(2)


@contextlib.contextmanager
def exit_2_on_input_errors() -> Iterator[None]:
    """A bad config, data file or resume ends the process with one line naming it and exit code 2."""
    try:
        yield
    except (ConfigError, DataError, ResumeError) as e:
        kinds = ((ConfigError, "config"), (DataError, "data"), (ResumeError, "resume"))
        kind = next(name for cls, name in kinds if isinstance(e, cls))
        print(f"{kind} error: {e}", file=sys.stderr)
        sys.exit(2)

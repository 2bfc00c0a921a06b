"""From a composed OmegaConf tree to typed dataclasses: Hydra composition in-process, type checks that
name the key, and `config_error`, which joins every problem into one `ConfigError`."""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Sequence
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from verl.config.policy_iteration import PolicyIterationConfig
from verl.config.rules import CONFIG_DIR, ConfigError, join_key
from verl.utils.config_resolvers import register_resolvers


def compose_config(config_name: str, overrides: Sequence[str] = ()) -> DictConfig:
    """The config that `main_policy_iteration --config-name=NAME OVERRIDES...` gets, composed in-process."""
    from hydra import compose, initialize_config_dir

    register_resolvers()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name=config_name, overrides=list(overrides))


def parse_config(cfg: DictConfig) -> PolicyIterationConfig:
    """Resolve `cfg` and convert it into dataclasses with type checks; every type problem at once. The
    rules come after (verl.config.checks, and verl/trainer/config_loader.py for the whole set)."""
    register_resolvers()
    try:
        missing = sorted(OmegaConf.missing_keys(cfg))
        tree = OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as e:
        reason = str(e.msg).splitlines()[0]  # the rest repeats the key and OmegaConf's node type
        raise ConfigError(f"{e.full_key}: cannot resolve the value: {reason}") from None
    if missing:
        raise config_error(
            [f"{key}: required, has no default (??? in the YAML); set {key}=..." for key in missing]
        )

    errors: list[str] = []
    config = _build(PolicyIterationConfig, tree, "", errors)
    if errors:
        raise config_error(errors)
    return config


def to_dataclass(cls: type, tree: dict[str, Any], path: str = "") -> Any:
    """Type-check a plain dict into dataclass `cls` (for configs other than the training one)."""
    errors: list[str] = []
    out = _build(cls, tree, path, errors)
    if errors:
        raise config_error(errors)
    return out


def config_error(errors: list[str]) -> ConfigError:
    if len(errors) == 1:
        return ConfigError(errors[0])
    return ConfigError(f"{len(errors)} problems:\n" + "\n".join(f"  - {e}" for e in errors))


# ---------------------------------------------------------------------------------------------------
# Type checking: OmegaConf tree -> dataclasses

_INVALID = object()  # stands in for a value that failed its check; the error is already recorded
_TYPE_NAMES = {bool: "true or false", int: "an integer", float: "a finite number", str: "a string"}


def _build(cls: type, node: Any, path: str, errors: list[str]) -> Any:
    if not isinstance(node, dict):
        errors.append(f"{path}={node!r}: must be a section of keys")
        return _INVALID
    num_errors = len(errors)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for name in node:
        if name not in fields:
            close = difflib.get_close_matches(str(name), fields, n=1)
            hint = f"did you mean {join_key(path, close[0])}?" if close else f"known keys: {list(fields)}"
            errors.append(f"{join_key(path, str(name))}: unknown key; {hint}")
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for name, f in fields.items():
        if name in node:
            kwargs[name] = _convert(hints[name], node[name], join_key(path, name), errors)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            errors.append(f"{join_key(path, name)}: required key is missing")
    return cls(**kwargs) if len(errors) == num_errors else _INVALID


def _convert(tp: Any, value: Any, key: str, errors: list[str]) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (tp,) = (a for a in args if a is not type(None))
        origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, key, errors)
    if origin is dict:
        if not isinstance(value, dict):
            errors.append(f"{key}={value!r}: must be a section of keys")
            return _INVALID
        return {str(k): _convert(args[1], v, join_key(key, str(k)), errors) for k, v in value.items()}
    if origin is list:
        if isinstance(value, str):  # a single file or logger needs no brackets on the command line
            value = [value]
        if not isinstance(value, list):
            errors.append(f"{key}={value!r}: must be a list")
            return _INVALID
        return [_convert(args[0], v, f"{key}[{i}]", errors) for i, v in enumerate(value)]
    if origin is tuple:
        if not isinstance(value, (list, tuple)) or len(value) != len(args):
            errors.append(f"{key}={value!r}: must be a list of {len(args)} values")
            return _INVALID
        items = enumerate(zip(args, value, strict=True))
        return tuple(_convert(a, v, f"{key}[{i}]", errors) for i, (a, v) in items)
    if tp not in _TYPE_NAMES:
        raise TypeError(f"{key}: verl.config has no type check for annotation {tp!r}")
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is float and is_number and math.isfinite(value):
        return float(value)
    if (tp is int and is_number and isinstance(value, int)) or (tp in (bool, str) and isinstance(value, tp)):
        return value
    errors.append(f"{key}={value!r}: must be {_TYPE_NAMES[tp]}")
    return _INVALID

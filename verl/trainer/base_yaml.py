"""policy_iteration.yaml, the base training config, generated from the dataclasses of verl/config/.

Each key's default is its field's default and its comment is the field's help comment (the comment
after the field, or the comment lines right above it), so adding a key, its default and its
documentation touches one place. The keys an environment file sets (config/environment/) are written
as comments: the base leaves them to the environment. `tests/test_config.py` checks that the
checked-in file is what this generates; after changing a field, rewrite it with

    python -m verl.trainer.base_yaml
"""

from __future__ import annotations

import dataclasses
import inspect
import io
import json
import re
import tokenize
import typing
from typing import Any

from verl.config import CONFIG_DIR, ENVIRONMENT_KEYS, PolicyIterationConfig

BASE_YAML = CONFIG_DIR / "policy_iteration.yaml"
COMMENT_COLUMN = 35  # where a key's comment starts, unless the key and its value are longer
SET_BY_ENVIRONMENT = ("environment", *ENVIRONMENT_KEYS)  # written as comments
# YAML values that are interpolations; the field's default is what they resolve to by default
INTERPOLATED = {"trainer.default_local_dir": "outputs/${trainer.experiment_name}"}

HEADER = """\
# Base PPO config: every key the RL trainer reads. GENERATED from the dataclasses of
# verl/config/ (defaults and comments) by `python -m verl.trainer.base_yaml`: edit those.
# The keys the thinking environment sets together are commented out here (config/environment/
# {longcot,delethink}.yaml: agent loop, trainer.name, reward manager, loss aggregation): pick one with
# `environment=delethink` on the command line or `- override environment: delethink` in an overlay's defaults.
# Overlays (tiny_*.yaml, r1d-1.5b_*.yaml) compose it with `defaults: [policy_iteration, _self_]`.
# Units: "prompts" count questions, "rows" count training samples (a prompt gives rollout.n
# trajectories; a Delethink trajectory gives one row per chunk), "tokens" count token ids.

defaults:
  - train_tasks: null              # none selected; `train_tasks=[deepscaler]` picks from config/train_tasks/
  - val_tasks: null                # none selected; `val_tasks=[aime24,math500]` merges several
  - _self_
  - environment: longcot           # thinking environment: longcot | delethink (after _self_: its keys win)
"""

FOOTER = """\
hydra:
  run:
    dir: ${trainer.default_local_dir}  # Hydra's .hydra/ and log go next to the run's own outputs
  job:
    chdir: false                   # relative paths in the config stay relative to where you launched
"""


def field_help(cls: type) -> dict[str, str]:
    """Each field's help comment: the comment after it, else the comment lines right above it."""
    lines = inspect.getsource(cls).splitlines(keepends=True)
    comments = {
        tok.start[0]: tok.string.lstrip("#").strip()
        for tok in tokenize.generate_tokens(io.StringIO("".join(lines)).readline)
        if tok.type == tokenize.COMMENT
    }
    helps: dict[str, str] = {}
    above: list[str] = []
    for number, line in enumerate(lines, start=1):
        field_match = re.match(r"    (\w+): ", line)
        if line.startswith("    #"):
            above.append(comments[number])
            continue
        if field_match:
            helps[field_match.group(1)] = comments.get(number) or " ".join(above)
        above = []
    return helps


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        text = repr(value)
        mantissa, e, exponent = text.partition("e")
        # a dot in the mantissa: YAML 1.1 loaders other than OmegaConf's read 1e-06 as a string
        return f"{mantissa if '.' in mantissa else mantissa + '.0'}e{exponent}" if e else text
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_scalar(v) for v in value) + "]"
    if isinstance(value, dict):
        if value:
            raise ValueError(f"no YAML form for a non-empty dict default {value!r}")
        return "{}"
    plain = re.fullmatch(r"[A-Za-z_.$/{}][\w.$/{}-]*", value) and value not in ("null", "true", "false")
    return value if plain else json.dumps(value)


def _line(text: str, help_text: str) -> str:
    if not help_text:
        return text
    if len(text) < COMMENT_COLUMN:
        return f"{text:<{COMMENT_COLUMN}}# {help_text}"
    return f"{text}  # {help_text}"


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def _leaves(cls: type, prefix: str) -> list[str]:
    hints = typing.get_type_hints(cls)
    keys = []
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        keys += _leaves(tp, f"{prefix}{f.name}.") if dataclasses.is_dataclass(tp) else [prefix + f.name]
    return keys


def _section(cls: type, prefix: str, indent: int) -> list[str]:
    """The lines of section `cls` (its keys start with `prefix`), indented by `indent` spaces."""
    hints, helps, pad = typing.get_type_hints(cls), field_help(cls), " " * indent
    out: list[str] = []
    previous_was_section = False
    for f in dataclasses.fields(cls):
        key, tp, help_text = prefix + f.name, hints[f.name], helps.get(f.name, "")
        is_section = dataclasses.is_dataclass(tp)
        if indent == 0 and out and (is_section or previous_was_section):
            out.append("")  # top-level sections stand apart
        previous_was_section = is_section
        if is_section and all(leaf in SET_BY_ENVIRONMENT for leaf in _leaves(tp, key + ".")):
            # every key below is the environment's: name them in comments, relative to this section
            sub_helps = field_help(tp)
            out += [f"{pad}# {f.name}.{g.name}: {sub_helps.get(g.name, '')}" for g in dataclasses.fields(tp)]
        elif is_section:
            out.append(_line(f"{pad}{f.name}:", help_text))
            out += _section(tp, key + ".", indent + 2)
        elif key in SET_BY_ENVIRONMENT:
            out.append(f"{pad}# {f.name}: {help_text}")
        else:
            default = _default(f)
            value = "???" if default is dataclasses.MISSING else INTERPOLATED.get(key) or _scalar(default)
            out.append(_line(f"{pad}{f.name}: {value}", help_text))
    return out


def base_yaml() -> str:
    return HEADER + "\n" + "\n".join(_section(PolicyIterationConfig, "", 0)) + "\n\n" + FOOTER


if __name__ == "__main__":
    BASE_YAML.write_text(base_yaml())
    print(f"wrote {BASE_YAML}")

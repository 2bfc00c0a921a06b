"""`external_plugins`: user modules imported at start-up so their envs, context managers (or anything
else with a registry) register themselves, in the driver and in every worker process.

An entry is a module name (`my_pkg.envs`, importable from the Python path) or a path to a .py file
(relative to the directory the run was launched from). Importing the same entry twice is a no-op.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path


def _module_name_for_file(path: Path) -> str:
    # one name per file (not per stem): two plugins called envs.py in different folders both load
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    return f"verl_plugin_{path.stem}_{digest}"


def import_plugin(entry: str) -> None:
    if not entry.endswith(".py"):
        try:
            importlib.import_module(entry)
        except ImportError as e:
            raise ValueError(f"external plugin {entry!r}: cannot import it: {e}") from e
        return
    path = Path(entry).expanduser().resolve()
    if not path.is_file():
        raise ValueError(f"external plugin {entry!r}: no such file (relative to {Path.cwd()})")
    name = _module_name_for_file(path)
    if name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ValueError(f"external plugin {entry!r}: not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before running it: dataclasses in the file look their module up
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        del sys.modules[name]
        raise ValueError(f"external plugin {entry!r}: importing it failed: {e!r}") from e


def import_plugins(entries: list[str]) -> None:
    for entry in entries:
        import_plugin(entry)

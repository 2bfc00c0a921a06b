# Sourced, from the repository root, by the scripts under examples/ and recipes/: sets PYTHON, the
# interpreter they run. The one the caller names (PYTHON=...), else the project's .venv (`make install`
# makes it), else `python` on PATH. One without the project installed stops the script here with one
# line, instead of a traceback from whatever stage first imports it.
if [[ -z ${PYTHON:-} ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python; fi
fi
# find_spec, not import: torch takes seconds to import. The first sys.path entry (the current directory
# under -c) is dropped, so verl counts only when it is installed: recipe scripts run from their own folder.
if ! "$PYTHON" -c "
import importlib.util, sys
sys.path.pop(0)
sys.exit(any(importlib.util.find_spec(m) is None for m in ('torch', 'transformers', 'hydra', 'verl')))
" 2>/dev/null; then
  echo "PYTHON=$PYTHON cannot import torch, transformers, hydra and verl: run 'make install' and use" \
    ".venv/bin/python (or activate .venv), or set PYTHON to an interpreter with the project installed" >&2
  exit 2
fi

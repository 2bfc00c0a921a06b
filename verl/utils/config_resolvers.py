"""OmegaConf resolvers used by our YAML configs.

`${eval:'...'}` lets a config derive one length from others, e.g. Delethink's per-chunk budget
`${eval:'int(${data.max_response_length}) - int(${algorithm.delethink.keep_head})'}`. It evaluates
arithmetic only (numbers, + - * / // %, parentheses, int/min/max), never arbitrary Python: a config
can come from a command line, and Python's `eval` would run any code in it.

`${vendored_math_dir:}` is the folder of math problem sets stored in the package (verl/data/math/): the
task YAMLs default to it, `${oc.env:MATH_DATA_DIR,${vendored_math_dir:}}/aime24.jsonl`.
"""

from __future__ import annotations

import ast
import operator

from omegaconf import OmegaConf

from verl.utils import math_data

_BINARY_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_UNARY_OPS = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS = {"int": int, "min": min, "max": max}


def _evaluate(node: ast.AST) -> int | float:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    # bool is an int subclass; `True + 1` in a config is a mistake, not arithmetic
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY_OPS:
        return _BINARY_OPS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY_OPS:
        return _UNARY_OPS[type(node.op)](_evaluate(node.operand))
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCTIONS
        and not node.keywords
        and node.args
    ):
        return _FUNCTIONS[node.func.id](*(_evaluate(arg) for arg in node.args))
    raise ValueError(f"{ast.unparse(node)!r} is not allowed (numbers, + - * / // % ( ), int, min, max only)")


def eval_arithmetic(expression: str) -> int | float:
    """Value of an arithmetic expression; ValueError naming the expression if it is not one."""
    try:
        return _evaluate(ast.parse(str(expression).strip(), mode="eval"))
    except (SyntaxError, ValueError, ArithmeticError, TypeError) as e:
        raise ValueError(f"eval: cannot evaluate {expression!r}: {e}") from None


def register_resolvers() -> None:
    """Register `eval` and `vendored_math_dir` with OmegaConf. Safe to call more than once."""
    if not OmegaConf.has_resolver("eval"):
        OmegaConf.register_new_resolver("eval", eval_arithmetic)
    if not OmegaConf.has_resolver("vendored_math_dir"):
        # read at each use, not at registration, so that it always names math_data's folder
        OmegaConf.register_new_resolver("vendored_math_dir", lambda: str(math_data.VENDORED_MATH_DIR))

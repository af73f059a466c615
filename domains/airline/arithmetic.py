"""The `calculate` tool's arithmetic, with the reference's results and error texts but no `eval`.

The reference filters characters to `0123456789+-*/(). ` and then `eval`s the text, which still
allows `**` (so `9**9**9` would hang the process) and calls such as `(1)(2)`. Here the text is
first compiled (never run) exactly as `eval` compiles it, so every syntax error, literal-size error
and nesting error has the reference's wording; a valid text is then evaluated by an iterative
operator-precedence parser over the same Python values (int, float, the empty tuple, Ellipsis),
applying the same `operator` functions, so type errors, zero divisions and the final
`round(float(...), 2)` read the same too. The one departure: an integer power whose result would
exceed `MAX_POWER_BITS` is refused as the overflow the reference would end in, instead of hanging.
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Callable
from typing import Any

ALLOWED = "0123456789+-*/(). "  # a str, not a set: the reference tests `char in` this string
MAX_POWER_BITS = 4_000_000

_BINARY: dict[str, tuple[int, Callable[[Any, Any], Any]]] = {
    "+": (1, operator.add),
    "-": (1, operator.sub),
    "*": (2, operator.mul),
    "/": (2, operator.truediv),
    "//": (2, operator.floordiv),
    "**": (4, operator.pow),  # right-associative; binds tighter than a unary sign on its left
}
_UNARY_PRECEDENCE = 3
_UNARY = {"u-": operator.neg, "u+": operator.pos}
_CALL = "call("  # operator-stack marker of a call's argument list, e.g. `(1)(2)`


def _tokens(text: str) -> list[str]:
    """Python's tokens for a text already known to compile: numbers, `...`, operators, parens."""
    tokens: list[str] = []
    i, n = 0, len(text)
    while i < n:
        char = text[i]
        if char == " ":
            i += 1
        elif char.isdigit() or (char == "." and i + 1 < n and text[i + 1].isdigit()):
            start = i
            while i < n and text[i].isdigit():
                i += 1
            if i < n and text[i] == ".":
                i += 1
                while i < n and text[i].isdigit():
                    i += 1
            tokens.append(text[start:i])
        elif text.startswith("...", i):
            tokens.append("...")
            i += 3
        elif text.startswith("**", i) or text.startswith("//", i):
            tokens.append(text[i : i + 2])
            i += 2
        else:
            tokens.append(char)
            i += 1
    return tokens


def _number(token: str) -> Any:
    if token == "...":
        return Ellipsis
    return float(token) if "." in token else int(token)


def _power(base: Any, exponent: Any) -> Any:
    is_int = type(base) is int and type(exponent) is int
    if is_int and exponent > 0 and abs(base) > 1 and (abs(base).bit_length() - 1) * exponent > MAX_POWER_BITS:
        # The reference would spend minutes building this integer, and float() of it then fails so.
        raise OverflowError("int too large to convert to float")
    return operator.pow(base, exponent)


def _call(frame: dict[str, Any], values: list[Any]) -> None:
    """Apply a call such as `(1)(2)`: none of these values is callable, so it always raises.

    Without commas a call has at most one argument: plain, `*x` or `**x`; CPython checks the
    unpacking first and names the callee by its str() in that message."""
    argument = values.pop() if frame["has_argument"] else None
    callee = values.pop()
    if frame["star"] == "*" and not isinstance(argument, tuple):
        raise TypeError(f"{callee} argument after * must be an iterable, not {type(argument).__name__}")
    if frame["star"] == "**":
        raise TypeError(f"{callee} argument after ** must be a mapping, not {type(argument).__name__}")
    raise TypeError(f"'{type(callee).__name__}' object is not callable")


def _apply(op: Any, values: list[Any]) -> None:
    if op in _UNARY:
        values.append(_UNARY[op](values.pop()))
        return
    right = values.pop()
    left = values.pop()
    values.append(_power(left, right) if op == "**" else _BINARY[op][1](left, right))


def _precedence(op: Any) -> int:
    if op in _UNARY:
        return _UNARY_PRECEDENCE
    return _BINARY[op][0] if isinstance(op, str) and op in _BINARY else 0


def evaluate(text: str) -> Any:
    """The value of a text that compiles as a Python expression over the allowed characters."""
    values: list[Any] = []
    ops: list[Any] = []  # operator names, "(" and call frames (dicts)
    expect_operand = True
    for token in _tokens(text):
        if expect_operand:
            if token[0].isdigit() or token[0] == ".":
                values.append(_number(token))
                expect_operand = False
            elif token == "(":
                ops.append("(")
            elif token in ("+", "-"):
                ops.append("u" + token)
            elif token in ("*", "**") and isinstance(ops[-1], dict):
                ops[-1]["star"] = token  # `f(*x)` / `f(**x)`: the whole argument is unpacked
            elif token == ")" and ops[-1] == "(":
                ops.pop()
                values.append(())  # `()`: the empty tuple
                expect_operand = False
            else:  # `)` closing an empty call `f()`
                _call(ops.pop(), values)
        elif token == "(":
            ops.append({"marker": _CALL, "star": None, "has_argument": False})
            expect_operand = True
        elif token == ")":
            while not (ops[-1] == "(" or isinstance(ops[-1], dict)):
                _apply(ops.pop(), values)
            top = ops.pop()
            if isinstance(top, dict):
                top["has_argument"] = True
                _call(top, values)
        else:
            right_assoc = token == "**"
            while ops and not isinstance(ops[-1], dict) and ops[-1] != "(":
                top_precedence = _precedence(ops[-1])
                if top_precedence > _BINARY[token][0] or (top_precedence == _BINARY[token][0] and not right_assoc):
                    _apply(ops.pop(), values)
                else:
                    break
            ops.append(token)
            expect_operand = True
    while ops:
        _apply(ops.pop(), values)
    return values[0]


def calculate(expression: Any) -> str:
    """The tool's result: the value rounded to 2 places as text, or an `Error: ...` string.

    A non-iterable `expression` raises TypeError here, as in the reference (the environment turns
    it into `Error: ...`); inside, every error becomes a string, as the reference's own
    `except Exception` does."""
    if not all(char in ALLOWED for char in expression):
        return "Error: invalid characters in expression"
    try:
        if not isinstance(expression, str):
            raise TypeError("eval() arg 1 must be a string, bytes or code object")
        text = expression.lstrip(" \t")  # eval() strips leading blanks before compiling
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # `(1)(2)` warns at compile time; the result is the same
            compile(text, "<string>", "eval", dont_inherit=True)
        return str(round(float(evaluate(text)), 2))
    except Exception as exc:  # the reference's calculate returns every failure as f"Error: {e}"
        return f"Error: {exc}"

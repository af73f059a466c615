"""The `calculate` tool's arithmetic: a tiny parser, never `eval`.

The reference tool filters characters to `0123456789+-*/(). ` and then calls `eval`, which
still allows `**` (so `9**9**9` hangs the process). Here the expression is tokenised and
evaluated with an iterative shunting-yard over Python ints and floats: the same operators,
precedence and number semantics as the reference for + - * / unary signs and parentheses, and
nothing else, with no recursion for hostile nesting to exhaust.
"""

from __future__ import annotations

ALLOWED_CHARS = frozenset("0123456789+-*/(). ")
_BINARY = {"+": 1, "-": 1, "*": 2, "/": 2}
_UNARY_PRECEDENCE = 3  # binds tighter than * and /, as in Python: -2*3 is (-2)*3


class CalculationError(ValueError):
    """An expression the calculator refuses; the message becomes the tool's Error result."""


def _tokens(expression: str) -> list[str]:
    tokens: list[str] = []
    i, n = 0, len(expression)
    while i < n:
        char = expression[i]
        if char == " ":
            i += 1
        elif char.isdigit() or char == ".":
            start = i
            while i < n and (expression[i].isdigit() or expression[i] == "."):
                i += 1
            tokens.append(expression[start:i])
        else:
            # ** and // are Python operators the character filter lets through; refuse them by name
            if expression.startswith("**", i) or expression.startswith("//", i):
                raise CalculationError(f"unsupported operator {expression[i : i + 2]!r}")
            tokens.append(char)
            i += 1
    return tokens


def _number(token: str) -> int | float:
    if token.count(".") > 1 or token == ".":
        raise CalculationError(f"invalid number {token[:40]!r}")
    if "." in token:
        return float(token)
    if len(token) > 1 and token[0] == "0" and token.strip("0"):
        raise CalculationError("leading zeros in decimal integer literals are not permitted")
    return int(token)


def _apply(operator: str, values: list[int | float]) -> None:
    if operator in ("u-", "u+"):
        if not values:
            raise CalculationError("invalid syntax")
        if operator == "u-":
            values[-1] = -values[-1]
        return
    if len(values) < 2:
        raise CalculationError("invalid syntax")
    right = values.pop()
    left = values.pop()
    if operator == "+":
        values.append(left + right)
    elif operator == "-":
        values.append(left - right)
    elif operator == "*":
        values.append(left * right)
    else:
        values.append(left / right)  # ZeroDivisionError / OverflowError handled by the caller


def _precedence(operator: str) -> int:
    return _UNARY_PRECEDENCE if operator in ("u-", "u+") else _BINARY.get(operator, 0)


def evaluate(expression: str) -> int | float:
    """Value of an arithmetic expression over numbers, + - * /, unary signs and parentheses."""
    values: list[int | float] = []
    operators: list[str] = []
    expect_operand = True
    for token in _tokens(expression):
        if expect_operand:
            if token[0].isdigit() or token[0] == ".":
                values.append(_number(token))
                expect_operand = False
            elif token == "(":
                operators.append(token)
            elif token in ("+", "-"):
                operators.append("u" + token)  # prefix: pushing it never pops anything
            else:
                raise CalculationError("invalid syntax")
        elif token in _BINARY:
            while operators and operators[-1] != "(" and _precedence(operators[-1]) >= _BINARY[token]:
                _apply(operators.pop(), values)
            operators.append(token)
            expect_operand = True
        elif token == ")":
            while operators and operators[-1] != "(":
                _apply(operators.pop(), values)
            if not operators:
                raise CalculationError("unmatched ')'")
            operators.pop()
        else:
            raise CalculationError("invalid syntax")
    if expect_operand:
        raise CalculationError("invalid syntax" if values or operators else "empty expression")
    while operators:
        operator = operators.pop()
        if operator == "(":
            raise CalculationError("'(' was never closed")
        _apply(operator, values)
    if len(values) != 1:
        raise CalculationError("invalid syntax")
    return values[0]


def calculate(expression: str) -> str:
    """The tool result: the value rounded to 2 places as text, or an `Error:` string."""
    if not all(char in ALLOWED_CHARS for char in expression):
        return "Error: invalid characters in expression"
    try:
        return str(round(float(evaluate(expression)), 2))
    except CalculationError as exc:
        return f"Error: {exc}"
    except (ZeroDivisionError, OverflowError) as exc:  # the reference reports these the same way
        return f"Error: {exc}"
    except ValueError as exc:  # int() refuses literals over Python's digit limit
        return f"Error: {exc}"

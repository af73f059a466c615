"""Hostile tool calls: junk names and arguments give an audited `Error:` result, never an
exception and never a state change; no tool reaches files, network or processes; `calculate`
evaluates arithmetic and nothing else."""

from __future__ import annotations

import sys
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers_environment import fresh_env, tiny_world
from tests.helpers_retail import TOOL_NAMES
from training.sandbox.environment import call_tool


def _nested(depth: int) -> object:
    value: object = "x"
    for _ in range(depth):
        value = [value]
    return value


JUNK_NAMES = [
    None,
    42,
    "",
    "reset",
    "get_reward",
    "__init__",
    "_invoke",
    "state",
    "episode",
    "eval",
    "x" * 1_000_000,
    ["cancel_pending_order"],
    ("a",),
    _nested(50_000),
]

JUNK_ARGUMENTS = [
    ("get_order_details", None),
    ("get_order_details", ["#W1"]),
    ("get_order_details", "#W1"),
    ("get_order_details", {}),
    ("get_order_details", {"order_id": ["#W1"]}),
    ("get_order_details", {"order_id": 1}),
    ("get_order_details", {"order_id": None}),
    ("get_order_details", {"order_id": True}),
    ("get_order_details", {"order_id": float("nan")}),
    ("get_order_details", {"order_id": "#W1" * 400_000}),
    ("get_order_details", {"order_id": "#W1", "verbose": True}),
    ("get_order_details", {"order_id": "#W1", 7: "x"}),
    ("get_order_details", {"order_id": _nested(10_000)}),
    ("get_order_details", {f"k{i}": i for i in range(100_000)}),
    ("cancel_pending_order", {"order_id": "#W1", "reason": {"$gt": ""}}),
    ("cancel_pending_order", {"order_id": "#W1"}),
    (
        "modify_pending_order_items",
        {"order_id": "#W1", "item_ids": "I1", "new_item_ids": ["I2"], "payment_method_id": "gift_card_1"},
    ),
    (
        "modify_pending_order_items",
        {"order_id": "#W1", "item_ids": [["I1"]], "new_item_ids": [["I2"]], "payment_method_id": "gift_card_1"},
    ),
    (
        "modify_pending_order_items",
        {
            "order_id": "#W1",
            "item_ids": ["I1"] * 100_000,
            "new_item_ids": ["I2"] * 100_000,
            "payment_method_id": "gift_card_1",
        },
    ),
    ("return_delivered_order_items", {"order_id": "#W2", "item_ids": [1], "payment_method_id": "gift_card_1"}),
    (
        "modify_user_address",
        {
            "user_id": "ann_lee_1",
            "address1": "x" * 10_001,
            "address2": "",
            "city": "c",
            "state": "s",
            "country": "c",
            "zip": "z",
        },
    ),
    ("send_message_to_customer", {"message": "hi"}),
]

FORBIDDEN_EVENTS = (
    "open",
    "socket.",
    "subprocess.",
    "os.system",
    "os.exec",
    "os.spawn",
    "os.posix_spawn",
    "os.fork",
    "os.remove",
    "os.rename",
    "os.mkdir",
    "shutil.",
    "urllib.",
    "http.",
    "ctypes.",
    "builtins.input",
    "compile",
    "exec",
)
_WATCH = {"on": False, "events": []}


def _audit_hook(event: str, args: tuple) -> None:
    # Audit hooks cannot be removed, so this one stays inert unless a test switches it on.
    if _WATCH["on"] and event.startswith(FORBIDDEN_EVENTS):
        _WATCH["events"].append(event)


if not getattr(sys, "_retail_env_audit_hook", False):
    sys.addaudithook(_audit_hook)
    sys._retail_env_audit_hook = True  # type: ignore[attr-defined]


def _assert_refused(env, before_log: int, result: str) -> None:
    assert isinstance(result, str) and result.startswith("Error:"), result[:200]
    assert env.state == tiny_world()
    assert len(env.audit_log) == before_log + 1
    entry = env.audit_log[-1]
    assert entry.error and not entry.changed and entry.result == result
    assert len(repr(entry.arguments)) < 20_000  # junk is summarised, not stored whole


@pytest.mark.parametrize(
    "name", JUNK_NAMES, ids=lambda n: type(n).__name__ + str(len(n) if hasattr(n, "__len__") else n)
)
def test_unknown_tool_names_are_refused(name):
    env = fresh_env()
    _assert_refused(env, 0, call_tool(env, name, {"order_id": "#W1"}))


@pytest.mark.parametrize("name,arguments", JUNK_ARGUMENTS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(JUNK_ARGUMENTS)])
def test_bad_arguments_are_refused(name, arguments):
    env = fresh_env()
    started = time.perf_counter()
    _assert_refused(env, 0, call_tool(env, name, arguments))
    assert time.perf_counter() - started < 1.0


def test_positional_misuse_and_calls_after_transfer_are_refused():
    env = fresh_env()
    _assert_refused(env, 0, env.get_order_details("#W1", "#W2"))
    _assert_refused(env, 1, env.get_order_details("#W1", order_id="#W1"))
    env.transfer_to_human_agents(summary="bye")
    assert env.get_order_details(order_id="#W1").startswith("Error:") and len(env.audit_log) == 4


@pytest.mark.parametrize(
    "expression",
    [
        "__import__('os').system('ls')",
        "open('/etc/passwd').read()",
        "2**2**100",
        "9//2",
        "1e999",
        "9" * 9_999,
        "(" * 5_000 + "1" + ")" * 5_000,
        "-" * 9_000 + "1",
        "1/0",
        "()",
        "1 2",
        "",
        "lambda: 1",
        "[1]*10**9",
        "0x10",
        "1_000",
    ],
)
def test_calculate_refuses_anything_but_arithmetic(expression):
    env = fresh_env()
    started = time.perf_counter()
    result = env.calculate(expression=expression)
    assert time.perf_counter() - started < 1.0
    # Deep parentheses and unary chains are valid arithmetic; everything else here is not.
    assert result.startswith("Error:") or expression.startswith(("(", "-")), result
    assert env.state == tiny_world()


def test_no_tool_touches_files_network_or_processes():
    env = fresh_env()
    _WATCH["events"].clear()
    _WATCH["on"] = True
    try:
        for name in TOOL_NAMES:
            call_tool(env, name, {})
        for name, arguments in JUNK_ARGUMENTS:
            call_tool(env, name, arguments)
        for expression in ("__import__('os').system('id')", "open('x')", "1+1"):
            env.calculate(expression=expression)
        env.get_order_details(order_id="../../etc/passwd")
        env.get_user_details(user_id="file:///etc/passwd")
        env.cancel_pending_order(order_id="#W1", reason="no longer needed")
        env.modify_pending_order_items(
            order_id="#W5", item_ids=["I2"], new_item_ids=["I1"], payment_method_id="gift_card_1"
        )
        _ = env.episode  # building the judge's view is part of a rollout too
    finally:
        _WATCH["on"] = False
    assert _WATCH["events"] == []
    # The hook does see what it should: prove it is alive.
    _WATCH["on"] = True
    try:
        open(__file__).close()
    finally:
        _WATCH["on"] = False
    assert "open" in _WATCH["events"]


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(TOOL_NAMES) | st.text(max_size=30), arguments=_json)
def test_fuzzed_calls_never_raise_and_errors_never_change_state(name, arguments):
    env = fresh_env()
    result = call_tool(env, name, arguments)
    assert isinstance(result, str)
    entry = env.audit_log[-1]
    assert entry.error == result.startswith("Error:")
    if entry.error:
        assert env.state == tiny_world() and not entry.changed

"""PII scrubbing of free text before anything is stored (DESIGN section 3).

Masks card numbers, phone numbers and national ids with [CARD], [PHONE], [NATIONAL_ID]. The
patterns are deliberately shaped so the retail world's own identifiers survive: the agent must
still copy them. Order ids (#W1234567) and payment ids (credit_card_4190576) are 7 digits behind
a non-digit prefix; item and product ids are 10 contiguous digits; tracking ids 12 contiguous
digits; zip codes 5; prices carry a two-digit decimal part. So: a card is 13-19 contiguous digits
or 4-digit groups with one consistent separator (Amex 4-6-5), and must pass Luhn; a phone number
always has separators between its groups; a national id has its own group shape.
"""
from __future__ import annotations

import re
from typing import Any

# Digits glued to a letter, '#' or '_' belong to an identifier, never to a number we mask.
_LEFT = r"(?<![\w#])"
_RIGHT = r"(?![\w])"

# The fraction digits of an unrounded amount (20.44999999999999) are not a card number.
_CARD_RE = re.compile(
    _LEFT + r"(?<!\d\.)(?:"
    r"\d{13,19}"
    r"|\d{4}(?P<s1>[ -])\d{4}(?P=s1)\d{4}(?P=s1)\d{1,7}"
    r"|\d{4}(?P<s2>[ -])\d{6}(?P=s2)\d{4,5}"
    r")" + _RIGHT)
_NATIONAL_ID_RES = (
    re.compile(_LEFT + r"\d{3}(?P<s>[ -])\d{2}(?P=s)\d{4}" + _RIGHT),  # US SSN
    re.compile(r"\b[A-CEGHJ-PR-TW-Z]{2} ?\d{2} ?\d{2} ?\d{2} ?[A-D]\b"),  # UK National Insurance
)
_PHONE_RES = (
    # North American: optional +1, then (415) 555-0100 / 415-555-0100 / 415.555.0100 / 415 555 0100
    re.compile(r"(?<![\w#+])(?:\+?1[ .-]?)?(?:\(\d{3}\)[ .-]?|\d{3}[ .-])\d{3}[ .-]\d{4}" + _RIGHT),
    # International with an explicit +country code and separated groups: +44 20 7946 0958
    re.compile(r"(?<![\w#])\+\d{1,3}(?:[ -]\(?\d{1,5}\)?){2,5}" + _RIGHT),
)

CARD, PHONE, NATIONAL_ID = "[CARD]", "[PHONE]", "[NATIONAL_ID]"
_DIGIT = re.compile(r"\d")  # every PII pattern holds a digit; text without one skips all regexes


def luhn_ok(digits: str) -> bool:
    """The Luhn checksum every payment card number satisfies."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _card_sub(match: re.Match) -> str:
    digits = re.sub(r"\D", "", match.group(0))
    return CARD if 13 <= len(digits) <= 19 and luhn_ok(digits) else match.group(0)


def _phone_sub(match: re.Match) -> str:
    digits = sum(ch.isdigit() for ch in match.group(0))
    return PHONE if 8 <= digits <= 15 else match.group(0)


def _national_sub(match: re.Match) -> str:
    return NATIONAL_ID


_PASSES = ((_CARD_RE, _card_sub),) + tuple((p, _national_sub) for p in _NATIONAL_ID_RES) + tuple(
    (p, _phone_sub) for p in _PHONE_RES)
_KINDS = {CARD: "card", NATIONAL_ID: "national_id", PHONE: "phone"}


def _scrub(text: str, found: list[str] | None) -> str:
    if _DIGIT.search(text) is None:
        return text
    for pattern, sub in _PASSES:
        if found is None:
            text = pattern.sub(sub, text)
            continue

        def counting(match: re.Match, sub=sub) -> str:
            token = sub(match)
            if token in _KINDS:
                found.append(_KINDS[token])
            return token
        text = pattern.sub(counting, text)
    return text


def scrub_text(text: str) -> str:
    """Return `text` with card numbers, national ids and phone numbers masked (in that order)."""
    return _scrub(text, None)


def find_pii(text: str) -> list[str]:
    """Kinds of PII in `text` ("card", "national_id", "phone"), one entry per masked span.

    Returns kinds rather than the matches so that reports and logs never echo the PII itself.
    """
    found: list[str] = []
    _scrub(text, found)
    return found


def scrub_record(record: dict[str, Any]) -> dict[str, Any]:
    """Scrub the free text of a (validated) record: message content and the scenario instruction.

    Returns a new top-level dict; nested objects that need no change are shared, not copied.
    """
    out = dict(record)
    out["messages"] = [
        {**m, "content": scrub_text(m["content"])} if _DIGIT.search(m["content"]) else m
        for m in record["messages"]
    ]
    scenario = record["user_scenario"]
    out["user_scenario"] = {**scenario, "instruction": scrub_text(scenario["instruction"])}
    return out

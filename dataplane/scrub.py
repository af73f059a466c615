"""PII scrubbing of free text before anything is stored.

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

# Digits glued to a letter, '#' or '_' belong to an identifier, never to a number we mask.
_LEFT = r"(?<![\w#])"
_RIGHT = r"(?![\w])"

# The fraction digits of an unrounded amount (20.44999999999999) are not a card number.
_CARD_RE = re.compile(
    _LEFT + r"(?<!\d\.)(?:"
    r"\d{13,19}"
    r"|\d{4}(?P<s1>[ -])\d{4}(?P=s1)\d{4}(?P=s1)\d{1,7}"
    r"|\d{4}(?P<s2>[ -])\d{6}(?P=s2)\d{4,5}"
    r")" + _RIGHT
)
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
    digits = _NON_DIGIT.sub("", match.group(0))
    return CARD if 13 <= len(digits) <= 19 and luhn_ok(digits) else match.group(0)


def _phone_sub(match: re.Match) -> str:
    digits = len(_DIGIT.findall(match.group(0)))
    return PHONE if 8 <= digits <= 15 else match.group(0)


def _national_sub(match: re.Match) -> str:
    return NATIONAL_ID


_NON_DIGIT = re.compile(r"\D")
# Each pass with the fewest digits any masked span of it holds, and a character the span must
# contain: a text with fewer digits than that (counted before any pass, so never an undercount of
# what a later pass sees) cannot be changed by the pass, which is then skipped. Most free text has
# a few digits (an order id, a price) and so skips the card and id regexes outright.
_PASSES = (
    (_CARD_RE, _card_sub, 13, ""),
    (_NATIONAL_ID_RES[0], _national_sub, 9, ""),
    (_NATIONAL_ID_RES[1], _national_sub, 6, ""),
    (_PHONE_RES[0], _phone_sub, 10, ""),
    (_PHONE_RES[1], _phone_sub, 8, "+"),  # _phone_sub keeps spans of under 8 digits
)
# Each pass's replacement where every span it matches is masked (a national id always; a North
# American phone number always has 10 or 11 digits, which `_phone_sub` masks): a string
# replacement runs in C, a function is called per match.
_FIXED = (None, NATIONAL_ID, NATIONAL_ID, PHONE, None)
_KINDS = {CARD: "card", NATIONAL_ID: "national_id", PHONE: "phone"}
# Each pass's span also has a shape, in an ASCII text mapped digit -> "d", space/'.'/'-' -> "s",
# capital -> "L", '+' -> "+": a card has 13 digits in a row or 4, a separator and 4; a US id
# "dddsddsdddd"; a UK id two capitals then (a space and) a digit; a North American phone number
# ends "dddsdddd"; an international one starts "+d". A pass whose shapes are all absent is skipped
# (a mask brings no digit, separator or capital next to a digit, so skipping stays sound after
# earlier passes). Most texts that pass the digit count, say one holding a phone number, then run
# one regex instead of five.
# bytes.translate with a 256-byte table is one C loop; str.translate with a mapping looks every
# character up in a dict, which cost more than the passes it lets a text skip.
_TEXT_SHAPE = bytes(
    ord("d") if 48 <= b <= 57 else ord("s") if b in b" .-" else ord("L") if 65 <= b <= 90 else b if b == 43 else 95
    for b in range(256)
)
_PASS_SHAPES = tuple(
    re.compile(shape) for shape in (rb"d{13}|ddddsdddd", rb"dddsddsdddd", rb"LLs?d", rb"dddsdddd", rb"\+d")
)


def _scrub(text: str, found: list[str] | None) -> str:
    if text.isascii():
        shape = text.encode("ascii").translate(_TEXT_SHAPE)
        digits = shape.count(b"d")
    else:
        shape, digits = None, len(_DIGIT.findall(text))
    if not digits:
        return text
    for (pattern, sub, min_digits, needs), fixed, shapes in zip(_PASSES, _FIXED, _PASS_SHAPES):
        if digits < min_digits or needs not in text:
            continue
        if shape is not None and shapes.search(shape) is None:
            continue
        if found is None:
            text = pattern.sub(fixed or sub, text)
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


# Escapes of characters that cannot be part of PII (quotes, backslashes, control characters, lone
# surrogates); the text between two of them is searched on its own, as a string boundary would be.
_KEPT_ESCAPE = re.compile(r"(\\(?:[bfnrt\"\\]|u(?:00[01][0-9a-fA-F]|0022|005[cC]|[dD][89a-fA-F][0-9a-fA-F]{2})))")
_OTHER_ESCAPE = re.compile(r"\\(?:u[0-9a-fA-F]{4}|.)", re.DOTALL)


def scrub_json_text(text: str) -> str:
    """`scrub_text` for text that is, or may be, JSON (a quarantined line, a detail quoting one).

    On JSON text `scrub_text` alone misses PII right after an escape ("\\n4111 ..." reads as a
    word glued to the digits) and PII written with \\u escapes. So the text is cut at every
    escape of a character that cannot belong to PII, each piece is searched on its own with its
    other escapes decoded, and a piece holding PII is replaced by its masked, decoded text. Text
    without PII comes back exactly as given.
    """
    if "\\" not in text:
        return scrub_text(text)
    pieces = _KEPT_ESCAPE.split(text)  # text, escape, text, escape, ..., text
    for i in range(0, len(pieces), 2):
        piece = pieces[i]
        readable = _OTHER_ESCAPE.sub(_decode_escape, piece) if "\\" in piece else piece
        clean = scrub_text(readable)
        if clean != readable:
            pieces[i] = clean
    return "".join(pieces)


def _decode_escape(match: re.Match) -> str:
    escape = match.group(0)
    return chr(int(escape[2:], 16)) if escape[1] == "u" and len(escape) == 6 else escape[1]

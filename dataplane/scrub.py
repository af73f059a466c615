"""PII in one text: normalised, found, masked or pseudonymised, before anything is stored.

What is found (README, "PII"): payment card numbers ([CARD]), IBANs ([IBAN]), US social security
and UK National Insurance numbers ([NATIONAL_ID]), phone numbers ([PHONE]) and e-mail addresses.
E-mail addresses are pseudonymised rather than masked: a customer is identified by one (the
retail world's `find_user_id_by_email`), so each becomes `user_<16 hex>@masked.invalid`, a keyed
HMAC of the lower-cased address (`dataplane.home.Home.pii_key`): the same in the customer's
message, the tool call's argument, `initial_state` and gold, so a stored conversation replays.

Detection reads the text normalised: every character NFKC-normalised, format characters (Unicode
category Cf: zero-width spaces and joiners, soft hyphens, the BOM) removed, every space and line
or paragraph separator made a plain space, every dash (Pd) a hyphen, every decimal digit of any
script its ASCII digit. A separator hidden behind a zero-width or non-breaking character is then
seen. Only the spans found are replaced, in the text as given: a text without PII comes back
exactly as it was, so a clean record hashes as it always did.

The shapes are chosen so the worlds' own identifiers survive (the agent must copy them): digits
glued to a letter, '#' or '_' (and for bare runs '-', '.', '/' or '+') belong to an identifier
(#W1234567, credit_card_4190576, int-123456789); a card is 13-19 digits with one separator or none, a known network's first digit
and a valid Luhn sum; a bare digit run is a phone number only after a '+' (E.164) or as a
0-prefixed national number of 10-11 digits; national numbers with separators are matched by
their grouping; 10-digit item ids, 12-digit tracking ids, zip codes, prices, dates and times
match none of them. A domain's `world_key_patterns` (`domains.api.Domain`) name what must survive
besides: a found span that is wholly one of its world keys is kept (`PiiScanner.keep`).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

CARD, PHONE, NATIONAL_ID, IBAN = "[CARD]", "[PHONE]", "[NATIONAL_ID]", "[IBAN]"
PSEUDONYM_DOMAIN = "masked.invalid"  # RFC 2606's reserved `.invalid`: no mail can ever reach it

# ---- normalisation -------------------------------------------------------------------------

_NON_ASCII_RUN = re.compile(r"[^\x00-\x7f]+")
_CHAR_MAP: dict[str, str] = {}  # non-ASCII character -> its normalised text; the alphabet is small


def _map_char(char: str) -> str:
    category = unicodedata.category(char)
    if category == "Cf":
        return ""
    if category in ("Zs", "Zl", "Zp"):
        return " "
    if category == "Pd":
        return "-"
    if category == "Nd":
        return str(unicodedata.decimal(char))
    folded = unicodedata.normalize("NFKC", char)
    if folded == char or folded.isascii():
        return folded
    # NFKC can yield characters the rules above map in turn (a compatibility space, a dash).
    return "".join(c if c.isascii() or c == char else _map_char(c) for c in folded)


def _char(char: str) -> str:
    mapped = _CHAR_MAP.get(char)
    if mapped is None:
        mapped = _map_char(char)
        if len(_CHAR_MAP) < 65_536:  # a hostile text cannot grow the map without bound
            _CHAR_MAP[char] = mapped
    return mapped


def normalise(text: str) -> str:
    """`text` as PII is detected in (see the module docstring); ASCII text is returned as is."""
    return text if text.isascii() else _normalised(text)[0]


def _normalised(text: str) -> tuple[str, list[int] | None]:
    """(normalised text, origin) where origin[i] is the index in `text` of normalised character
    i, with len(text) appended; origin is None when normalising changed nothing."""
    runs = _NON_ASCII_RUN.findall(text)
    if all(_char(c) == c for run in runs for c in run):
        return text, None
    parts: list[str] = []
    origin: list[int] = []
    pos = 0
    for match in _NON_ASCII_RUN.finditer(text):
        start, end = match.span()
        parts.append(text[pos:start])
        origin.extend(range(pos, start))
        for i in range(start, end):
            mapped = _char(text[i])
            parts.append(mapped)
            origin.extend([i] * len(mapped))
        pos = end
    parts.append(text[pos:])
    origin.extend(range(pos, len(text) + 1))
    return "".join(parts), origin


# ---- checksums -----------------------------------------------------------------------------


def luhn_ok(digits: str) -> bool:
    """The Luhn checksum every payment card number satisfies."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


# IBAN length by country, from the ISO 13616 registry: a country outside it is no IBAN (a check
# over every length from 15 to 34 would pass one text in five by chance).
_IBAN_LENGTHS = {
    **dict.fromkeys(("NO",), 15),
    **dict.fromkeys(("BE",), 16),
    **dict.fromkeys(("DK", "FI", "FK", "FO", "GL", "NL", "SD"), 18),
    **dict.fromkeys(("MK", "SI"), 19),
    **dict.fromkeys(("AT", "BA", "EE", "KZ", "LT", "LU", "MN", "XK"), 20),
    **dict.fromkeys(("CH", "CR", "HR", "LI", "LV"), 21),
    **dict.fromkeys(("BG", "BH", "DE", "GB", "GE", "IE", "ME", "RS", "VA"), 22),
    **dict.fromkeys(("AE", "GI", "IL", "IQ", "OM", "SO", "TL"), 23),
    **dict.fromkeys(("AD", "CZ", "ES", "MD", "PK", "RO", "SA", "SE", "SK", "TN", "VG"), 24),
    **dict.fromkeys(("LY", "PT", "ST"), 25),
    **dict.fromkeys(("IS", "TR"), 26),
    **dict.fromkeys(("BI", "DJ", "FR", "GR", "IT", "MC", "MR", "SM"), 27),
    **dict.fromkeys(("AL", "AZ", "BY", "CY", "DO", "GT", "HN", "HU", "LB", "NI", "PL", "SV"), 28),
    **dict.fromkeys(("BR", "EG", "PS", "QA", "UA"), 29),
    **dict.fromkeys(("JO", "KW", "MU", "YE"), 30),
    **dict.fromkeys(("MT", "SC"), 31),
    **dict.fromkeys(("LC",), 32),
    **dict.fromkeys(("RU",), 33),
}


def iban_ok(iban: str) -> bool:
    """ISO 13616's check: the country and check digits moved to the end, letters as 10-35, mod 97 is 1."""
    text = iban.upper()
    rearranged = text[4:] + text[:4]
    number = "".join(str(int(c, 36)) for c in rearranged)
    return int(number) % 97 == 1


# ---- the patterns, on normalised text ------------------------------------------------------
# Each pass: a search for candidate spans and a judge of each (the replacement, or None to keep
# it); `_shape_passes` knows the fewest digits each needs. Every pattern starts by consuming one
# character of a small class (a digit, '+', '(', a capital) and checks what precedes the span
# with a lookbehind placed after that character: Python's engine then skips every other
# character in a C loop, where a pattern that starts with a lookbehind is tried at every
# position (ten to fifty times slower on a record's text). E-mail addresses and IBANs are found
# from their '@' and from their check digits (`_email_search`, `_iban_search`).

_A = re.ASCII
_RIGHT = r"(?![\w])"
_NUMBER_END = r"(?![\w])(?!\.\d)"  # not followed by a decimal fraction either

# The local part: the run of [\w.%+-] (1-64) ending at the '@', not preceded by another of them.
_EMAIL_LOCAL = re.compile(r"[\w.%+-]{1,64}\Z", _A)
_EMAIL_LOCAL_CHAR = re.compile(r"[\w.%+-]", _A)
_EMAIL_DOMAIN = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,24}(?![\w-])", _A)
# An IBAN from its check digits: two letters at a word's start before them, then 11-30 letters
# and digits, single spaces allowed between them.
_IBAN_DIGITS = re.compile(r"\d(?<=\b[A-Za-z]{2}\d)\d(?: ?[A-Za-z0-9]){11,30}\b", _A)
# Cards: 13-19 digits in a row, or in 4-digit groups with one separator ('.', '-' or a space) or
# Amex's 4-6-5, not glued to a word, '#' or a decimal point.
_CARD_RE = re.compile(
    r"\d(?<![\w#]\d)(?<!\d\.\d)(?:"
    r"\d{12,18}"
    r"|\d{3}(?P<s1>[ .-])\d{4}(?P=s1)\d{4}(?P=s1)\d{1,7}"
    r"|\d{3}(?P<s2>[ .-])\d{6}(?P=s2)\d{4,5}"
    r")" + _NUMBER_END,
    _A,
)
# US SSN: 3-2-4 digits with one separator or none. A bare run must not be glued to '-', '.',
# '/' or '+' either (int-123456789, a decimal, a path, a phone number).
_SSN_RE = re.compile(
    r"\d(?<![\w#]\d)(?:\d{2}(?P<s>[ -])\d{2}(?P=s)\d{4}|(?<![-./+]\d)\d{8})" + _NUMBER_END,
    _A,
)
# UK National Insurance: two prefix letters (D, F, I, Q, U, V never; O never second; BG, GB,
# KN, NK, NT, TN, ZZ unallocated), six digits, a suffix A-D; spaces between pairs optional.
_NINO_RE = re.compile(
    r"[A-CEGHJ-PR-TW-Z](?<!\w[A-Z])[A-CEGHJ-NPR-TW-Z](?<!BG|GB|KN|NK|NT|TN|ZZ) ?\d{2} ?\d{2} ?\d{2} ?[A-D]\b",
    _A,
)
# North American: optional (+)1, then (415) 555-0100 / 415-555-0100 / 415.555.0100 / 415 555 0100.
_NANP_RE = re.compile(
    r"(?:\+(?<![\w#+]\+)1[ .-]?(?:\(\d{3}\)[ .-]?|\d{3}[ .-])"
    r"|1(?<![\w#+]1)[ .-]?(?:\(\d{3}\)[ .-]?|\d{3}[ .-])"
    r"|\((?<![\w#+]\()\d{3}\)[ .-]?"
    r"|\d(?<![\w#+]\d)\d{2}[ .-])"
    r"\d{3}[ .-]\d{4}" + _RIGHT,
    _A,
)
# International: '+', a country code, then digits with single separators, a trunk "(0)" or an
# area code in brackets between them: +14155550100, +44 (0)20 7946 0958, +49 30/1234-5678.
_INTL_RE = re.compile(r"\+(?<![\w+]\+)[1-9](?:[ .\-/]?(?:\(0\)|\(\d{1,4}\)|\d)){6,20}" + _RIGHT, _A)
# The same after an international prefix 00 and a country code followed by a separator.
_INTL00_RE = re.compile(r"0(?<![\w#+.\-/]0)0[1-9]\d{0,2}[ .\-/](?:[ .\-/]?(?:\(0\)|\d)){6,17}" + _RIGHT, _A)
# National numbers behind a trunk 0 (UK, DE, FR and most of Europe), in groups: one separator
# throughout (020 7946 0958, 01 23 45 67 89, 030-1234-5678), or an area code before a slash or
# in brackets (030/1234 5678, (020) 7946 0958); or one run of 10-11 digits (07700900123).
_TRUNK_RE = re.compile(
    r"(?:0(?<![\w#+.\-/]0)(?:"
    r"[1-9]\d{0,4}(?P<s>[ .-])\d{2,8}(?:(?P=s)\d{2,8}){0,4}"
    r"|[1-9]\d{0,4}/ ?\d{2,8}(?:(?P<t>[ .-])\d{2,8}(?:(?P=t)\d{2,8}){0,3})?"
    r"|[1-9]\d{8,9})"
    r"|\((?<![\w#+.\-/]\()0[1-9]\d{0,4}\) ?\d{2,8}(?:(?P<u>[ .-])\d{2,8}(?:(?P=u)\d{2,8}){0,3})?"
    r")" + _NUMBER_END,
    _A,
)
_NON_DIGIT = re.compile(r"\D", _A)


def _digits(text: str) -> str:
    return _NON_DIGIT.sub("", text)


# A judge reads a match of its pass (in normalised text) and returns the replacement, or None to
# leave it; it sees the scanner for the pseudonym key.


def _judge_card(span: str, _scanner: PiiScanner) -> str | None:
    digits = _digits(span)
    size = len(digits)
    # A network's first digit: 13 digits only for old Visa (4), 15 also for UATP (1); never 0,
    # 7-9. So millisecond and nanosecond timestamps (1...) are no card whatever their Luhn sum.
    first = digits[0]
    if size == 13:
        network = first == "4"
    elif size == 15:
        network = "1" <= first <= "6"
    else:
        network = "2" <= first <= "6"
    return CARD if network and luhn_ok(digits) else None


def _judge_ssn(span: str, _scanner: PiiScanner) -> str | None:
    digits = _digits(span)
    area, group, serial = digits[:3], digits[3:5], digits[5:]
    if area in ("000", "666") or area[0] == "9" or group == "00" or serial == "0000":
        return None  # never issued: an order number, not an SSN
    return NATIONAL_ID


def _judge_national(_span: str, _scanner: PiiScanner) -> str | None:
    return NATIONAL_ID


def _judge_nanp(_span: str, _scanner: PiiScanner) -> str | None:
    return PHONE  # 10 or 11 digits by its shape


def _judge_intl(span: str, _scanner: PiiScanner) -> str | None:
    # E.164 holds at most 15 digits; a longer run is masked too (a number followed by another).
    return PHONE if len(_digits(span.replace("(0)", ""))) >= 8 else None


def _judge_trunk(span: str, _scanner: PiiScanner) -> str | None:
    return PHONE if 10 <= len(_digits(span)) <= 12 else None


def iban_prefix(span: str) -> int:
    """How many non-space characters at the start of `span` (an IBAN's shape, perhaps followed by
    more words its pattern took in) form a valid IBAN; 0 for none."""
    compact = span.replace(" ", "").upper()
    size = _IBAN_LENGTHS.get(compact[:2], 0)
    return size if size and size <= len(compact) and iban_ok(compact[:size]) else 0


def _judge_email(span: str, scanner: PiiScanner) -> str | None:
    if span.rpartition("@")[2].lower() == PSEUDONYM_DOMAIN:
        return None  # already a pseudonym
    return scanner.pseudonym(span)


Search = Callable[[str, int], "tuple[int, int] | None"]


def _regex_search(pattern: re.Pattern) -> Search:
    find = pattern.search

    def search(text: str, pos: int) -> tuple[int, int] | None:
        match = find(text, pos)
        return None if match is None else match.span()

    return search


def _email_search(text: str, pos: int) -> tuple[int, int] | None:
    """The first e-mail address starting at `pos` or later: found from its '@'."""
    at = text.find("@", pos)
    while at != -1:
        local = _EMAIL_LOCAL.search(text, max(pos, at - 64), at)
        if local is not None:
            start = local.start()
            # The whole run before the '@', as a lookbehind would require: not one that goes on
            # to the left (of over 64 characters, or cut at `pos` by a refused candidate).
            if start == 0 or _EMAIL_LOCAL_CHAR.match(text, start - 1) is None:
                domain = _EMAIL_DOMAIN.match(text, at + 1)
                if domain is not None:
                    return start, domain.end()
        at = text.find("@", at + 1)
    return None


def _iban_search(text: str, pos: int) -> tuple[int, int] | None:
    match = _IBAN_DIGITS.search(text, pos + 2)  # its letters start at `pos` or later
    return None if match is None else (match.start() - 2, match.end())


@dataclass(frozen=True)
class _Pass:
    kind: str
    search: Search
    judge: Callable[[str, PiiScanner], str | None] | None  # None: the IBAN pass (`iban_prefix`)


EMAIL_PASS = _Pass("email", _email_search, _judge_email)
IBAN_PASS = _Pass("iban", _iban_search, None)
CARD_PASS = _Pass("card", _regex_search(_CARD_RE), _judge_card)
SSN_PASS = _Pass("national_id", _regex_search(_SSN_RE), _judge_ssn)
NINO_PASS = _Pass("national_id", _regex_search(_NINO_RE), _judge_national)
NANP_PASS = _Pass("phone", _regex_search(_NANP_RE), _judge_nanp)
INTL_PASS = _Pass("phone", _regex_search(_INTL_RE), _judge_intl)
INTL00_PASS = _Pass("phone", _regex_search(_INTL00_RE), _judge_intl)
TRUNK_PASS = _Pass("phone", _regex_search(_TRUNK_RE), _judge_trunk)
# In this order: e-mail addresses and IBANs (letters and digits) before the digit-only kinds,
# cards before national ids before phone numbers (a span replaced by one is not read by the next).
_PASSES = (EMAIL_PASS, IBAN_PASS, CARD_PASS, SSN_PASS, NINO_PASS, NANP_PASS, INTL_PASS, INTL00_PASS, TRUNK_PASS)
_FILL = "\x00"  # what a replaced span becomes for the later passes: no pattern reads across it

_AT_PSEUDONYM = "@" + PSEUDONYM_DOMAIN
PSEUDONYM_RE = re.compile(r"user_[0-9a-f]{16}" + re.escape(_AT_PSEUDONYM))  # what `PiiScanner.pseudonym` writes
# An '@' that does not start a pseudonym's domain: only then can the e-mail pass replace anything
# (stored records hold pseudonyms, and are scanned again by every no-PII check).
_REAL_AT = re.compile(r"@(?!" + re.escape(PSEUDONYM_DOMAIN) + r"(?![\w-]|\.[A-Za-z0-9]))")

# The shape of ASCII text, one byte a character: '0' -> '0', other digits -> 'd', a space -> 's',
# '.' and '-' -> 'S', capitals -> 'U', small letters -> 'l', '+', '(', ')' and '/' as themselves,
# anything else '_'; a second shape has every digit 'd' and every separator 's'. `_shape_passes`
# tests on them a necessary condition of each pass replacing anything: substring tests where it
# can (bytes.translate and `in` are C loops), else a regex that starts with a literal (Python's
# engine finds it with a fast scan; one that starts with a class or a lookbehind is tried at
# every position, ten times slower on a record's text), its lookbehind placed after that literal.
_ZEROS = bytes(
    ord("0")
    if b == 48
    else ord("d")
    if 49 <= b <= 57
    else ord("s")
    if b == 32
    else ord("S")
    if b in b".-"
    else ord("U")
    if 65 <= b <= 90
    else ord("l")
    if 97 <= b <= 122
    else b
    if b in b"+()/"
    else ord("_")
    for b in range(256)
)
_ZEROS_TO_SHAPE = bytes(ord("d") if b == 48 else ord("s") if b == ord("S") else b for b in range(256))
_IBAN_SHAPE = re.compile(rb"dd(?<=[Ul][Ul]dd)")  # two letters, then two digits
_NINO_SHAPE = re.compile(rb"UUs?dds?dds?dds?U")
# On the shape with zeros: a '0' that no digit, letter, '+', '/', '.' or '-' glues to an identifier,
# then the international prefix's second 0, a country code of 1-3 digits and a separator.
_INTL00_SHAPE = re.compile(rb"0(?<![0dUl+/S]0)0d[0d]{0,2}[sS/]")
# A trunk number after such a '0': a digit 1-9, up to 4 more digits, a separator, then 10-12
# digits in all (a first group of at most 6 leaves 4 or more after its separator, in one group or
# in two); or 10 in a row.
_TRUNK_SHAPE = re.compile(rb"0(?<![0dUl+/S]0)d(?:[0d]{0,4}(?:[sS]|\)s?|/s?)(?:[0d]{4}|[0d]{2,3}[sS][0d]{2})|[0d]{8})")


# The fewest characters of a text each kind needs: shorter texts skip its tests.
_IBAN_MIN_LEN = 15


def _shape_passes(text: str) -> tuple[_Pass, ...]:
    """The passes that may replace something in normalised `text` (cheap tests only)."""
    out: list[_Pass] = []
    if "@" in text:
        if _REAL_AT.search(text) is not None:
            out.append(EMAIL_PASS)
        if _AT_PSEUDONYM in text:
            # A pseudonym's hex reads as letters and digits to the shape tests ("bb64" as an IBAN's
            # start), never to the patterns (glued to its own letters): leave it out of the shape.
            text = PSEUDONYM_RE.sub(lambda m: "_" * len(m.group(0)), text)
    # Normalised text is ASCII but for letters and symbols outside it, which no pattern reads as a
    # letter, digit or separator (their \w and \d are ASCII): each shapes as '?', then '_'.
    zeros = (text.encode() if text.isascii() else text.encode("ascii", "replace")).translate(_ZEROS)
    digits = zeros.count(b"d") + zeros.count(b"0")
    if digits < 2:  # every pass but the e-mail one needs two digits or more
        return tuple(out)
    shape = zeros.translate(_ZEROS_TO_SHAPE)
    if len(text) >= _IBAN_MIN_LEN and (b"Udd" in shape or b"ldd" in shape) and _IBAN_SHAPE.search(shape):
        out.append(IBAN_PASS)
    if digits < 6:
        return tuple(out)
    if digits >= 9:
        if digits >= 13 and (b"ddddddddddddd" in shape or b"ddddsdddd" in shape):
            out.append(CARD_PASS)
        # A bare SSN is a run of exactly 9 digits. Counted without overlap, a run of L digits
        # holds L // 9 nines and L // 10 tens: more nines than tens for L = 9 (and some longer L),
        # never fewer, so a text with a run of 9 has more in all.
        if b"dddsddsdddd" in shape or shape.count(b"ddddddddd") > shape.count(b"dddddddddd"):
            out.append(SSN_PASS)
    if b"UU" in shape and _NINO_SHAPE.search(shape):
        out.append(NINO_PASS)
    if digits >= 8:
        if digits >= 10 and b"dddsdddd" in shape:
            out.append(NANP_PASS)
        if b"+d" in zeros:
            out.append(INTL_PASS)
        if b"00d" in zeros and _INTL00_SHAPE.search(zeros):
            out.append(INTL00_PASS)
        if digits >= 10 and _TRUNK_SHAPE.search(zeros):
            out.append(TRUNK_PASS)
    return tuple(out)


# ---- the scanner ---------------------------------------------------------------------------


@dataclass
class PiiScanner:
    """Finds, masks and pseudonymises PII; `keep` (a domain's world keys) names spans to leave.

    One per set of world keys (`scanner_for`); its memory of e-mail pseudonyms is bounded.
    """

    keep: re.Pattern | None = None
    _tokens: dict[tuple[bytes, str], str] = field(default_factory=dict, repr=False)

    def pseudonym(self, email: str) -> str:
        """`user_<16 hex>@masked.invalid`: a keyed HMAC of the lower-cased address."""
        key = _pii_key()
        address = email.lower()
        token = self._tokens.get((key, address))
        if token is None:
            digest = hmac.new(key, address.encode("utf-8"), hashlib.sha256).hexdigest()[:16]
            token = f"user_{digest}@{PSEUDONYM_DOMAIN}"
            if len(self._tokens) >= 65_536:
                self._tokens.clear()
            self._tokens[(key, address)] = token
        return token

    def _spans(self, norm: str, passes: tuple[_Pass, ...]) -> list[tuple[int, int, str, str]]:
        """(start, end, replacement, kind) of every PII span in normalised text, in order.

        Passes run in turn over a working copy in which each span already replaced is filled
        with _FILL (same length, so positions stay those of `norm`), as if masked. A match its
        judge refuses is searched again one character on, so a refused candidate (a long digit
        run failing Luhn, words an IBAN's pattern took in) cannot hide one that starts inside it.
        """
        spans: list[tuple[int, int, str, str]] = []
        if not passes:
            return spans
        work = norm
        keep = self.keep
        last = passes[-1]
        for p in passes:
            found: list[tuple[int, int, str, str]] = []
            search = p.search
            match = search(work, 0)
            while match is not None:
                start, end = match
                text = work[start:end]
                token = None
                if keep is None or keep.fullmatch(text) is None:
                    if p.judge is None:
                        size = iban_prefix(text)
                        if size:
                            token, end = IBAN, _end_of_prefix(norm, start, size)
                    else:
                        token = p.judge(text, self)
                if token is None:
                    match = search(work, start + 1)
                    continue
                found.append((start, end, token, p.kind))
                match = search(work, end)
            if found and p is not last:  # the last pass's spans are read by no other
                pieces, pos = [], 0
                for start, end, _token, _kind in found:
                    pieces += (work[pos:start], _FILL * (end - start))
                    pos = end
                pieces.append(work[pos:])
                work = "".join(pieces)
            spans += found
        if len(passes) > 1:
            spans.sort()
        return spans

    def scan(self, text: str) -> tuple[str, list[str]]:
        """(`text` with every PII span replaced, the kinds replaced in order)."""
        origin, spans = self._found(text)
        if not spans:
            return text, []
        return self._apply(text, origin, spans), [span[3] for span in spans]

    def _found(self, text: str) -> tuple[list[int] | None, list[tuple[int, int, str, str]]]:
        """(the map from normalised positions back to `text`'s, or None; every PII span in the
        normalised text)."""
        if text.isascii():
            norm, origin = text, None
        else:
            norm, origin = _normalised(text)
        passes = _shape_passes(norm)
        return origin, self._spans(norm, passes) if passes else []

    def scrub(self, text: str) -> str:
        """`text` with every PII span replaced (`scan` without the kinds: the walk's fast path)."""
        if text.isascii():
            passes = _shape_passes(text)
            spans = self._spans(text, passes) if passes else None
            return self._apply(text, None, spans) if spans else text
        return self.scan(text)[0]

    def pseudonymise(self, text: str) -> tuple[str, dict[str, str]]:
        """(`text` scrubbed as `scan` scrubs it, {pseudonym: the e-mail address as written}).

        The map is what a serving gateway needs to give the tools back the addresses its model
        only ever saw as pseudonyms; masked kinds (cards, phones, ...) are not reversible."""
        origin, spans = self._found(text)
        if not spans:
            return text, {}
        written = {}
        for start, end, token, kind in spans:
            if kind == EMAIL_PASS.kind:
                start, end = _given(origin, start, end)
                written[token] = text[start:end]
        return self._apply(text, origin, spans), written

    @staticmethod
    def _apply(text: str, origin: list[int] | None, spans: list[tuple[int, int, str, str]]) -> str:
        out: list[str] = []
        pos = 0
        for start, end, token, _kind in spans:
            start, end = _given(origin, start, end)
            out.append(text[pos:start])
            out.append(token)
            pos = end
        out.append(text[pos:])
        return "".join(out)

    def find(self, text: str) -> list[str]:
        return self.scan(text)[1]


def _given(origin: list[int] | None, start: int, end: int) -> tuple[int, int]:
    """A span of the normalised text as a span of the text as given: only the span itself changes."""
    return (start, end) if origin is None else (origin[start], origin[end - 1] + 1)


def may_hold_pii(text: str) -> bool:
    """False only when no pass of any scanner could replace anything in `text`."""
    return bool(_shape_passes(text if text.isascii() else _normalised(text)[0]))


def _end_of_prefix(text: str, start: int, size: int) -> int:
    """The end of the first `size` non-space characters of `text` from `start`."""
    seen = 0
    for i in range(start, len(text)):
        if text[i] != " ":
            seen += 1
            if seen == size:
                return i + 1
    return len(text)


# ---- the key -------------------------------------------------------------------------------

_KEYS: dict[tuple[str | None, str | None], bytes] = {}
HOME_ENV = "RETRAIN_HOME"


def process_pii_setting() -> tuple[str | None, str | None]:
    """(RETRAIN_PII_KEY, RETRAIN_HOME) as this process's environment sets them.

    The one read of the environment below `orchestration/` that stays (listed in
    `orchestration.environment.VARIABLES`): the scrubber is process-wide and runs deep in the
    store, labels, run log and record model, in every process that stores a record (the code
    server, each run worker, the CLI, benchmarks), none of which has a home at hand there; the
    environment is what all of them inherit, so every one pseudonymises under the same key."""
    from dataplane.home import PII_KEY_ENV

    return os.environ.get(PII_KEY_ENV), os.environ.get(HOME_ENV)


def _pii_key() -> bytes:
    """The pseudonymisation key of the current home (`Home.pii_key`), read once per setting."""
    from dataplane.home import Home

    setting = process_pii_setting()
    key = _KEYS.get(setting)
    if key is None:
        configured, root = setting
        key = _KEYS[setting] = Home.at(root).pii_key(configured)
    return key


@contextmanager
def using_pii_key(key: str) -> Iterator[None]:
    """Pseudonymise under `key` inside the block (`RETRAIN_PII_KEY` set, then restored).

    For data made outside any home (a recipe's simulated traffic), so its pseudonyms are the same
    on every machine; a home's own records always use `Home.pii_key`. A key too short is refused
    where it is read (`Home.pii_key`)."""
    from dataplane.home import PII_KEY_ENV

    before = os.environ.get(PII_KEY_ENV)
    os.environ[PII_KEY_ENV] = key
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(PII_KEY_ENV, None)
        else:
            os.environ[PII_KEY_ENV] = before


# ---- world keys ----------------------------------------------------------------------------

_SCANNERS: dict[tuple[str, ...], PiiScanner] = {}


def scanner_for(world_key_patterns: Iterable[str] = ()) -> PiiScanner:
    """The scanner that keeps spans wholly matching one of `world_key_patterns` (one per set)."""
    patterns = tuple(world_key_patterns)
    scanner = _SCANNERS.get(patterns)
    if scanner is None:
        keep = re.compile("|".join(f"(?:{p})" for p in patterns)) if patterns else None
        scanner = _SCANNERS[patterns] = PiiScanner(keep)
    return scanner


STRICT = scanner_for(())  # no world keys: where the domain is unknown (quarantine, run logs)


def scrub_text(text: str) -> str:
    """`text` with PII masked and e-mail addresses pseudonymised, keeping no world key.

    The function for any free text outside a record (a rater's name, a note, a logged sample).
    """
    return STRICT.scan(text)[0]


def find_pii(text: str) -> list[str]:
    """Kinds of PII in `text` ("email", "iban", "card", "national_id", "phone"), one per span.

    Returns kinds rather than the matches so that reports and logs never echo the PII itself. A
    pseudonymised address is not PII.
    """
    return STRICT.scan(text)[1]


def check_free_text(text: str) -> tuple[str, list[str]]:
    """(`text` scrubbed, the kinds of PII it held): for free text such as a rater's name."""
    return STRICT.scan(text)


# ---- JSON text -----------------------------------------------------------------------------

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

"""Error codes in a question: a help desk's best clue, and one a sentence encoder barely sees.

An encoder reads ``0x80070005`` as a few sub-word pieces that most codes share, so two questions about Windows Update
with different codes look alike and the one with the same code need not come first. Search engines keep such rare tokens
as exact terms. :func:`codes` finds them in a question, by one rule (lower-cased, so ``0x800CCC0E`` is ``0x800ccc0e``):

* a hexadecimal number of at least four digits: ``0x80070005``;
* letters, a hyphen and digits (more groups allowed): ``ORA-00942``, ``E-401``, ``NW-2-5``, ``CE-34878-0``;
* letters followed by at least two digits, and maybe more letters or digits: ``E15``, ``B200``, ``caa70004``;
* a number of at least two digits after ``error``, ``code``, ``status``, ``sqlstate`` or ``http``
  (``error code 83``, ``HTTP 503``, ``support code 5100``): a bare number is a code only so introduced.

:func:`shared_codes` says which of a question's codes appear in another text as whole tokens (the other text may write
``401 Unauthorized`` with no ``error`` before it).

>>> sorted(codes("Update fails with 0x80070005, then error 503 and ORA-00942"))
['0x80070005', '503', 'ora-00942']
>>> shared_codes({"503"}, "Why does my website return HTTP 503?")
{'503'}
"""

from __future__ import annotations

import re

__all__ = ["codes", "shared_codes", "tokens"]

_CODE = re.compile(
    r"\b(0x[0-9a-f]{4,}|[a-z]{1,4}(?:-\d+)+|[a-z]+\d{2,}[a-z0-9]*)\b"
    r"|\b(?:error|code|status|sqlstate|http)(?:\s+code)?:?\s+#?(\d{2,})\b",
    re.IGNORECASE,
)
_TOKEN = re.compile(r"[0-9a-z]+(?:-[0-9a-z]+)*")


def codes(text: str) -> frozenset[str]:
    """The error codes ``text`` names (lower-cased), by the rule in the module docstring; empty where it names none."""
    return frozenset((m.group(1) or m.group(2)).lower() for m in _CODE.finditer(text))


def tokens(text: str) -> set[str]:
    """The whole tokens of ``text``, lower-cased: runs of letters and digits, hyphens inside kept (``ora-00942``)."""
    return set(_TOKEN.findall(text.lower()))


def shared_codes(wanted: set[str] | frozenset[str], text: str) -> set[str]:
    """Which codes of ``wanted`` appear in ``text`` as whole tokens (case aside)."""
    return set(wanted).intersection(tokens(text)) if wanted else set()

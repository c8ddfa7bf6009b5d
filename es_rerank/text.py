"""The tokenizer: one source of truth for indexing, training and serving.

Rules from section 4.1 of the Delta paper (Mohan et al., WWW 2018): split on
whitespace and punctuation while preserving abbreviations and numeric forms,
lower-case, drop punctuation. The embedding path additionally collapses numbers
into seven classes; the lexical path keeps them as they are.

Choices the paper leaves open, made here for biomedical text:
- Hyphenated compounds that look like entity names (a part holds a digit, a
  non-ASCII letter, or is an upper-case abbreviation: ``IL-6``, ``COVID-19``,
  ``5-HT2A``, ``TNF-α``, ``α-synuclein``) stay one token with the hyphen;
  plain English compounds (``well-known``) split into their words.
- Dotted abbreviations (``U.S.``, ``e.g.``) keep their dots so they do not
  collide with ordinary words (``us``).
- A possessive ``'s`` is dropped (``Müller's`` -> ``müller``).
- A minus sign belongs to a number only where it cannot be a hyphen
  (``10(-6)`` -> ``10``, ``-6``).
- A range of bare numbers splits into its numbers so each keeps its number
  class (``18-65`` -> ``18``, ``65``; ``1-2%`` -> ``1%``, ``2%``), like the
  en-dash form ``18–65`` already does; a compound with a word part stays one
  token (``10-fold``, ``1,000-fold``, ``3.5-fold``).
- ``.5`` is the number 0.5; ``50 %`` is the percentage ``50%`` (as ``$ 20`` is
  the dollar amount ``$20``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

# Number classes of the embedding path (section 4.1), as vocabulary tokens.
INTEGER = "<int>"
FRACTION = "<frac>"
REAL = "<real>"
YEAR_19XX = "<year19>"
YEAR_20XX = "<year20>"
PERCENTAGE = "<pct>"
DOLLAR = "<dollar>"
NUMBER_CLASSES = (INTEGER, FRACTION, REAL, YEAR_19XX, YEAR_20XX, PERCENTAGE, DOLLAR)

_LETTERS = r"[^\W\d_]"
_ALNUM = r"[^\W_]"
_NUMBER_BODY = r"(?:\d+(?:,\d{3})*(?:\.\d+)?|\.\d+)"
# A digit run inside a word may carry thousands groups (``1,000-fold``).
_WORD_PART = rf"{_ALNUM}+(?:(?<=\d),\d{{3}}(?!\d))*(?:\.\d+)?(?:['’]{_ALNUM}+)*"

# No capturing groups, so findall returns plain strings (the fast path).
_TOKEN_RE = re.compile(
    rf"""
    \$\s?{_NUMBER_BODY}                               # dollar amount
    | (?:{_LETTERS}\.){{2,}}                          # dotted abbreviation
    | (?<![\w.])-?{_NUMBER_BODY}(?:-{_NUMBER_BODY})*(?:\s?%)?(?![\w-]|[.,]\d)
                                                      # number, range, percentage
    | {_WORD_PART}(?:-{_WORD_PART})*                  # word or hyphenated compound
    """,
    re.VERBOSE,
)
_WHITESPACE_RE = re.compile(r"\s")
_POSSESSIVE_RE = re.compile(r"['’]s$")
_NUMBER_RE = re.compile(rf"-?{_NUMBER_BODY}")
_NUMERIC_RE = re.compile(rf"-?{_NUMBER_BODY}(?:-{_NUMBER_BODY})*%?")


def _is_plain_english_part(part: str) -> bool:
    """True for a lower-case or capitalised ASCII word (not an abbreviation)."""
    return part.isascii() and part.isalpha() and not (len(part) > 1 and part.isupper())


def _special_tokens(value: str) -> list[str]:
    """Tokens of a match holding a hyphen, an apostrophe or a space (`$ 20`, `50 %`)."""
    compact = _WHITESPACE_RE.sub("", value)  # any space, also no-break and thin ones
    if value.startswith("$"):
        return [compact]
    if _NUMERIC_RE.fullmatch(compact):  # -6, 50 %, 18-65, 1-2%
        percent = "%" if compact.endswith("%") else ""
        body = compact.rstrip("%")
        sign = "-" if body.startswith("-") else ""
        parts = body[len(sign) :].split("-")
        parts[0] = sign + parts[0]
        return [part + percent for part in parts]
    word = _POSSESSIVE_RE.sub("", value)
    parts = word.split("-")
    if len(parts) > 1 and all(_is_plain_english_part(p) for p in parts):
        return [p.lower() for p in parts]
    return [word.lower()]


def tokenize(text: str) -> list[str]:
    """Lexical tokens: lower-cased, punctuation dropped, numbers kept verbatim."""
    tokens: list[str] = []
    for value in _TOKEN_RE.findall(text):
        # Only dollar amounts and percentages may hold a space (of any kind) inside.
        if "-" in value or "'" in value or "’" in value or value[0] == "$" or value[-1] == "%":
            tokens.extend(_special_tokens(value))
        else:
            tokens.append(value.lower())
    return tokens


def token_spans(text: str) -> Iterator[tuple[int, int, list[str]]]:
    """Each run of ``text`` that ``tokenize`` reads, as (start, end, its lexical tokens): where a token sits."""
    for found in _TOKEN_RE.finditer(text):
        value = found.group()
        if "-" in value or "'" in value or "’" in value or value[0] == "$" or value[-1] == "%":
            yield found.start(), found.end(), _special_tokens(value)  # as tokenize reads it
        else:
            yield found.start(), found.end(), [value.lower()]


def number_class(token: str) -> str | None:
    """The embedding-path class of a numeric token, or None for a word."""
    if token.startswith("$"):
        return DOLLAR if _NUMBER_RE.fullmatch(token[1:]) else None
    if token.endswith("%"):
        return PERCENTAGE if _NUMBER_RE.fullmatch(token[:-1]) else None
    if not _NUMBER_RE.fullmatch(token):
        return None
    if "." in token:
        value = float(token.replace(",", ""))
        return FRACTION if 0.0 < value < 1.0 else REAL
    if len(token) == 4 and token.startswith("19"):
        return YEAR_19XX
    if len(token) == 4 and token.startswith("20"):
        return YEAR_20XX
    return INTEGER


def embedding_token(token: str) -> str:
    """Map one lexical token to its embedding-path form (numbers -> class)."""
    return number_class(token) or token


def embedding_tokens(tokens: list[str]) -> list[str]:
    """Embedding-path tokens: the lexical tokens with numbers collapsed to classes."""
    return [embedding_token(t) for t in tokens]

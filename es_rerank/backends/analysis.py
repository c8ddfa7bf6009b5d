"""The ``esrr_text`` analyzer in Elasticsearch's terms: what both backends report their ``text`` to be analysed by.

The embedded index analyses with ``es_rerank.text.tokenize`` itself (its tokens are indexed
as they are); an Elasticsearch index is built with this analyzer, whose ``pattern``
tokenizer mirrors ``tokenize`` (``index_setup/es_index.py`` says how, and where they differ:
98.5 % of NFCorpus's titles and abstracts analyse alike). Both mappings name it, so a client
reading ``_mapping`` or ``_settings`` learns the analysis truly: not the standard analyzer,
which would split ``omega-3`` and ``25-hydroxyvitamin``.
"""

from __future__ import annotations

ANALYZER = "esrr_text"

# --- the token pattern: es_rerank.text._TOKEN_RE rewritten for Java / noida-db regexes ---
_W = r"[\p{L}\p{N}_]"  # Python's \w
_ALNUM = r"[\p{L}\p{N}]"  # [^\W_]
_D = r"\p{Nd}"  # Python's \d
_NUMBER_BODY = rf"(?:{_D}+(?:,{_D}{{3}})*(?:\.{_D}+)?|\.{_D}+)"
_NUMBER_END = rf"(?!{_W}|-|[.,]{_D})"
_THOUSANDS = rf"(?<={_D}),{_D}{{3}}(?!{_D})"
_WORD_PART = rf"{_ALNUM}+(?:{_THOUSANDS})*(?:\.{_D}+)?(?:['’]{_ALNUM}+)*"
_PART_END = rf"(?!{_ALNUM}|{_THOUSANDS}|\.{_D}|['’]{_ALNUM})"  # where a word part stops
_PLAIN = r"(?:[A-Za-z]*[a-z][A-Za-z]*|[A-Za-z])"  # ASCII word, not an upper-case abbreviation
# A word part that is not plain English (a trailing possessive does not count).
_ENTITY_PART = rf"(?!{_PLAIN}{_PART_END}|{_PLAIN}['’]s{_PART_END}(?!-{_ALNUM})){_WORD_PART}"
TOKEN_PATTERN = "|".join(
    [
        rf"\$\s?{_NUMBER_BODY}",  # dollar amount
        r"(?:\p{L}\.){2,}",  # dotted abbreviation
        rf"(?<!{_W}|\.)-?{_NUMBER_BODY}(?:\s?%)?{_NUMBER_END}",  # number, percentage
        rf"(?<!{_W}|\.)-?{_NUMBER_BODY}(?=(?:-{_NUMBER_BODY})+(?:\s?%)?{_NUMBER_END})",  # range start
        rf"(?:{_PLAIN}-)*{_ENTITY_PART}(?:-{_WORD_PART})*",  # compound kept whole (IL-6)
        _WORD_PART,  # word, or one part of a plain compound (well-known)
    ]
)


def analysis_settings() -> dict:
    """The ``esrr_text`` analyzer (see the module docstring for what it mirrors)."""
    return {
        "tokenizer": {"esrr_tokens": {"type": "pattern", "pattern": TOKEN_PATTERN, "group": 0}},
        "filter": {
            "esrr_no_space": {"type": "pattern_replace", "pattern": r"\s", "replacement": ""},
            "esrr_possessive": {"type": "pattern_replace", "pattern": "['’]s$", "replacement": ""},
        },
        "analyzer": {
            ANALYZER: {
                "type": "custom",
                "tokenizer": "esrr_tokens",
                "filter": ["esrr_no_space", "esrr_possessive", "lowercase"],
            }
        },
    }

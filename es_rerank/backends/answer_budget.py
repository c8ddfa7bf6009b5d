"""How many bytes one search's answer may weigh: estimated before the work, counted while a page is assembled.

Elasticsearch bounds what a request may send (``http.max_content_length``) but an answer
grows with what the request asks for: size 1,000 with 100-character highlight tags and
whole fields (a 1.4 KB request) made an 18 MB answer. ``ESRR_GATEWAY_MAX_ANSWER_BYTES``
bounds it twice: ``estimate_answer_bytes`` refuses a request whose expected answer is over
it before the backend runs, and ``AnswerBudget`` stops a page's assembly as soon as what
it has rendered passes it (the estimate cannot know how many words a highlight marks),
so the work a refused answer costs is bounded by the limit, not by the request.

Highlighting costs CPU in proportion to the stored text it reads (each hit's fields, as far
as its fragments reach), whatever the answer weighs: ``ESRR_GATEWAY_MAX_HIGHLIGHT_CHARS``
bounds ``highlight_chars``, the hits times the text each highlighted field covers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from es_rerank.backends.base import QueryRefused
from es_rerank.backends.highlight import FieldHighlight

SETTING = "ESRR_GATEWAY_MAX_ANSWER_BYTES"
HIGHLIGHT_SETTING = "ESRR_GATEWAY_MAX_HIGHLIGHT_CHARS"
# A hit's envelope beside its _source and highlight: _index, _id, _score and esrr's fields.
HIT_ENVELOPE_BYTES = 160


class AnswerTooLarge(QueryRefused):
    """A search whose answer would pass ``ESRR_GATEWAY_MAX_ANSWER_BYTES`` or whose highlight would read more than
    ``ESRR_GATEWAY_MAX_HIGHLIGHT_CHARS`` (a 400 naming the limit, its setting and the request's value)."""


def too_large(bytes_: int, limit: int, hits: int, how: str) -> AnswerTooLarge:
    """The refusal of an answer of ``bytes_`` (estimated or counted, as ``how`` says) for ``hits`` hits."""
    return AnswerTooLarge(
        f"the answer to this search {how} {bytes_:,} bytes for {hits} hits, over the gateway's "
        f"limit of {limit:,} bytes ({SETTING}={limit}); ask for fewer hits (size), fewer or shorter "
        'highlight fragments or tags, or less _source ("_source": ["title"]), and page through '
        "the rest with from"
    )


def estimate_answer_bytes(
    hits: int, source_bytes: float, with_source: bool, highlight: Sequence[FieldHighlight]
) -> int:
    """The expected weight of an answer of ``hits`` hits whose stored ``_source`` weighs ``source_bytes`` on average.

    A highlighted field is counted as its fragments (``number_of_fragments`` x
    ``fragment_size``, the whole field for 0) but no more than a whole ``_source``, plus
    one pair of tags per fragment: the fewest a fragment holds.
    """
    per_hit = HIT_ENVELOPE_BYTES + (source_bytes if with_source else 0)
    for asked in highlight:
        fragments = asked.number_of_fragments or 1
        text = source_bytes if asked.number_of_fragments == 0 else min(fragments * asked.fragment_size, source_bytes)
        per_hit += text + fragments * (len(asked.pre_tag) + len(asked.post_tag))
    return round(hits * per_hit)


@dataclass(frozen=True)
class AnswerLimits:
    """What one search's answer may weigh (bytes) and how much stored text its highlight may read (characters)."""

    max_bytes: int
    max_highlight_chars: int


def highlight_chars(hits: int, source_bytes: float, highlight: Sequence[FieldHighlight]) -> int:
    """The stored text a highlight reads for ``hits`` hits: each distinct field's fragments (``number_of_fragments``
    x ``fragment_size``), no more than a whole field, which is counted as a whole ``_source`` of ``source_bytes``."""
    return round(
        hits
        * sum(
            source_bytes
            if asked.number_of_fragments == 0
            else min(asked.number_of_fragments * asked.fragment_size, source_bytes)
            for asked in highlight
        )
    )


def check_estimate(
    hits: int, source_bytes: float, with_source: bool, highlight: Sequence[FieldHighlight], limits: AnswerLimits
) -> None:
    """``AnswerTooLarge`` when the highlight would read over ``limits.max_highlight_chars`` or the expected answer
    (``estimate_answer_bytes``) weigh over ``limits.max_bytes``, before any work."""
    chars = highlight_chars(hits, source_bytes, highlight)
    if chars > limits.max_highlight_chars:
        shown = ", ".join(f"{asked.name}: {asked.number_of_fragments} x {asked.fragment_size}" for asked in highlight)
        raise AnswerTooLarge(
            f"the highlight of this search would read about {chars:,} characters of stored text "
            f"({hits} hits x fields {shown}; number_of_fragments 0 reads the whole field, about "
            f"{round(source_bytes):,}), over the gateway's limit of {limits.max_highlight_chars:,} "
            f"({HIGHLIGHT_SETTING}={limits.max_highlight_chars}); highlight fewer hits (size) or "
            "fewer, shorter fragments"
        )
    expected = estimate_answer_bytes(hits, source_bytes, with_source, highlight)
    if expected > limits.max_bytes:
        raise too_large(expected, limits.max_bytes, hits, "would weigh about")


@dataclass
class AnswerBudget:
    """The bytes a page may still render; ``spend`` raises ``AnswerTooLarge`` once they are used up."""

    limit: int
    hits: int
    spent: int = field(default=0)

    def spend(self, bytes_: int, how: str = "passed") -> None:
        """Count ``bytes_`` more of the answer; ``AnswerTooLarge`` past the limit (the rest is not rendered).

        ``how`` says what the count is in the refusal: rendered ("passed") or foreseen ("would weigh at least").
        """
        self.spent += bytes_
        if self.spent > self.limit:
            raise too_large(self.spent, self.limit, self.hits, how)

"""How many bytes one search's answer may weigh: estimated before the work, counted while a page is assembled.

Elasticsearch bounds what a request may send (``http.max_content_length``) but an answer
grows with what the request asks for: size 1,000 with 100-character highlight tags and
whole fields (a 1.4 KB request) made an 18 MB answer. ``ESRR_GATEWAY_MAX_ANSWER_BYTES``
bounds it twice: ``estimate_answer_bytes`` refuses a request whose expected answer is over
it before the backend runs, and ``AnswerBudget`` stops a page's assembly as soon as what
it has rendered passes it (the estimate cannot know how many words a highlight marks),
so the work a refused answer costs is bounded by the limit, not by the request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from es_rerank.backends.base import QueryRefused
from es_rerank.backends.highlight import FieldHighlight

SETTING = "ESRR_GATEWAY_MAX_ANSWER_BYTES"
# A hit's envelope beside its _source and highlight: _index, _id, _score and esrr's fields.
HIT_ENVELOPE_BYTES = 160


class AnswerTooLarge(QueryRefused):
    """A search whose answer would pass ``ESRR_GATEWAY_MAX_ANSWER_BYTES`` (a 400 naming the limit)."""


def too_large(bytes_: int, limit: int, hits: int, how: str) -> AnswerTooLarge:
    """The refusal of an answer of ``bytes_`` (estimated or counted, as ``how`` says) for ``hits`` hits."""
    return AnswerTooLarge(f"the answer to this search {how} {bytes_:,} bytes for {hits} hits, over the gateway's "
                          f"limit of {limit:,} bytes ({SETTING}={limit}); ask for fewer hits (size), fewer or shorter "
                          "highlight fragments or tags, or less _source (\"_source\": [\"title\"]), and page through "
                          "the rest with from")


def estimate_answer_bytes(hits: int, source_bytes: float, with_source: bool,
                          highlight: Sequence[FieldHighlight]) -> int:
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


def check_estimate(hits: int, source_bytes: float, with_source: bool, highlight: Sequence[FieldHighlight],
                   limit: int) -> None:
    """``AnswerTooLarge`` when the expected answer (``estimate_answer_bytes``) is over ``limit``, before any work."""
    expected = estimate_answer_bytes(hits, source_bytes, with_source, highlight)
    if expected > limit:
        raise too_large(expected, limit, hits, "would weigh about")


@dataclass
class AnswerBudget:
    """The bytes a page may still render; ``spend`` raises ``AnswerTooLarge`` once they are used up."""

    limit: int
    hits: int
    spent: int = field(default=0)

    def spend(self, bytes_: int) -> None:
        """Count ``bytes_`` more of the answer; ``AnswerTooLarge`` past the limit (the rest is not rendered)."""
        self.spent += bytes_
        if self.spent > self.limit:
            raise too_large(self.spent, self.limit, self.hits, "passed")

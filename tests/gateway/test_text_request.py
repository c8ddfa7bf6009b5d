"""A shell's query text is the request a client sends for those words: ``text_request`` is what ``parse_search``
reads from ``q=`` and from the site page's body, so ``esrr search``, ``eval`` and ``_search`` rank one request."""

from __future__ import annotations

import pytest

from es_rerank.backends.base import text_body
from es_rerank.gateway.search_request import parse_search
from es_rerank.ranking.request import text_request

TEXTS = ["green tea", "Breast Cancer and IL-6", "vitamin d, bone; statins", "...", "  "]


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("size", [1, 10, 1000])
def test_a_text_is_the_request_q_and_a_body_of_its_words_ask_for(text: str, size: int) -> None:
    from_body = parse_search({}, {**text_body(text), "size": size})
    assert from_body == text_request(text, size)
    if text.strip(".").strip():  # plain words: q= is a match on text, not Lucene's syntax
        assert parse_search({"q": text, "size": str(size)}, None) == text_request(text, size)


def test_a_window_is_the_request_that_sets_ext_esrr_window_size() -> None:
    asked = parse_search({}, {**text_body("green tea"), "ext": {"esrr": {"window_size": 20}}})
    assert asked == text_request("green tea", window=20)


def test_words_the_model_cannot_read_skip_the_reranking_as_a_request_without_them_does() -> None:
    assert text_request("...").skipped == parse_search({}, text_body("...")).skipped is not None
    assert text_request("green tea").skipped is None

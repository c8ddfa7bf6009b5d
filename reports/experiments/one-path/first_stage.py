"""Every NFCorpus query's BM25 top-500 on the served embedded index, as this checkout's text path gives it.

Before the one-path change (76791bc) a query text went through ``EmbeddedBackend.search``;
after it, through the body a client sends (``text_hits``: ``text_body`` prepared and searched).
Run it on each checkout and compare the two files (``compare``): ids and scores, bit for bit.

    PYTHONPATH=<checkout> ESRR_HOME=<home> python first_stage.py dump OUT.json
    python first_stage.py compare BEFORE.json AFTER.json
    PYTHONPATH=<this checkout> ESRR_HOME=<home> python first_stage.py orders test

``orders`` shows why the embedded backend sorts a ``match``'s words: the same words' top-500 in
sorted order (the old text path's and now every search's) against the order written.
"""

from __future__ import annotations

import json
import sys


def dump(out: str) -> None:
    from es_rerank.backends import open_backend
    from es_rerank.cli_options import load_settings
    from index_setup.nfcorpus import NFCorpus

    settings = load_settings()
    backend = open_backend(settings)
    try:
        from es_rerank.backends.base import text_hits

        def search(text: str, k: int):
            return text_hits(backend, text, k)
    except ImportError:  # the text path before the change
        search = backend.search
    corpus = NFCorpus.locate(None, settings)
    runs = {
        split: {
            query_id: [(hit.doc_id, float(hit.score).hex()) for hit in search(text, 500)]
            for query_id, text in sorted(corpus.queries(split).items())
        }
        for split in ("train", "dev", "test")
    }
    with open(out, "w", encoding="utf-8") as file:
        json.dump(runs, file)


def compare(before: str, after: str) -> None:
    with open(before, encoding="utf-8") as file:
        old = json.load(file)
    with open(after, encoding="utf-8") as file:
        new = json.load(file)
    for split in old:
        queries = old[split]
        same_ids = sum([d for d, _ in queries[q]] == [d for d, _ in new[split][q]] for q in queries)
        same = sum(queries[q] == new[split][q] for q in queries)
        print(f"{split}: {len(queries)} queries, same ids in the same order {same_ids}, same ids and scores {same}")


def orders(split: str) -> None:
    import tantivy

    from es_rerank.backends import open_backend
    from es_rerank.cli_options import load_settings
    from es_rerank.text import tokenize
    from index_setup.nfcorpus import NFCorpus

    settings = load_settings()
    backend = open_backend(settings)
    Query, Occur = tantivy.Query, tantivy.Occur

    def top(words: list[str]) -> list[tuple[str, float]]:
        query = Query.boolean_query([(Occur.Should, Query.term_query(backend._schema, "text", word)) for word in words])
        scored, _ = backend._top(query, 500)
        return [(hit.doc_id, hit.score) for hit in backend._ranked(scored, 500)]

    queries = NFCorpus.locate(None, settings).queries(split)
    same_ids = same = 0
    for text in queries.values():
        words = list(dict.fromkeys(tokenize(text)))  # a match's words, as written
        written, in_order = top(words), top(sorted(words))
        same_ids += [d for d, _ in written] == [d for d, _ in in_order]
        same += written == in_order
    print(
        f"{split}: {len(queries)} queries; words as written against sorted: same ids in the same order "
        f"{same_ids}, same ids and scores {same}"
    )


if __name__ == "__main__":
    {"dump": dump, "compare": compare, "orders": orders}[sys.argv[1]](*sys.argv[2:])

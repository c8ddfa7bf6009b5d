"""The ceiling of click-derived votes: votes from the true train judgments, restricted to the (query, document)
pairs the simulated users were shown, as if every shown result had been judged without error.

    ESRR_HOME=/tmp/oracle-home python reports/learning-floor/oracle.py --events EVENTS.sqlite3
    ESRR_HOME=/tmp/oracle-home esrr eval --no-baselines --split test --out /tmp/oracle-eval

ESRR_HOME must hold the served NFCorpus index (and the embeddings, for `esrr eval`); the
votes file is written to its models folder. Clicks are not read: only what was shown.
"""

from __future__ import annotations

import argparse

from es_rerank.backends import open_backend
from es_rerank.cli_options import load_settings
from es_rerank.learning.clicklog import click_log
from es_rerank.learning.store import open_store
from es_rerank.ranking.neighbours import CorpusIdentity, JudgedNeighbours
from es_rerank.settings import CommonSettings
from index_setup.nfcorpus import NFCorpus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", required=True)
    options = parser.parse_args()
    settings = load_settings(CommonSettings)
    collection = NFCorpus.locate(None, settings)
    queries, qrels = collection.queries("train"), collection.qrels("train")
    by_text = {" ".join(text.split()): query_id for query_id, text in queries.items()}
    log = click_log(open_store(options.events).learning_rows())
    judged: dict[str, dict[str, int]] = {}
    for query, doc in zip(log.pair_query.tolist(), log.pair_doc.tolist()):
        query_id = by_text[log.queries[query]]
        grade = qrels.get(query_id, {}).get(log.documents[doc], 0)
        if grade > 0:
            judged.setdefault(query_id, {})[log.documents[doc]] = min(grade, 2)
    votes = JudgedNeighbours(
        {query_id: queries[query_id] for query_id in judged},
        judged,
        corpus=CorpusIdentity.of(open_backend(settings).stats),
    )
    settings.neighbours_path.parent.mkdir(parents=True, exist_ok=True)
    votes.save(settings.neighbours_path)
    print(
        f"{len(log.pair_query):,} shown pairs of {len(log.queries):,} queries: {len(judged):,} queries and "
        f"{sum(len(docs) for docs in judged.values()):,} relevant judgments -> {settings.neighbours_path}"
    )


if __name__ == "__main__":
    main()

"""The gateway's CPU by stage from py-spy's collapsed stacks (``flame.sh`` writes them): share of the samples.

    python reports/profile/stacks.py reports/profile/before.collapsed reports/profile/after.collapsed

Each sample goes to the first stage below whose frame is on its stack, the most specific first (the hits' data
before the BM25 search that asks for them, the Lex features before the request that holds them).
"""

from __future__ import annotations

import gzip
import sys
from collections import Counter
from pathlib import Path

STAGES = (  # (stage, a frame that marks it), most specific first
    ("hits' data (DocTerms)", "CorpusStats.doc_terms_at "),
    ("BM25 top-500", "EmbeddedBackend.first_stage "),
    ("Lex features", "lex_features "),
    ("request tokens", "build_request "),
    ("payload encoding", ";encode (es_rerank/payload.py"),
    ("broker round trip", "WorkerReranker.__call__ "),  # the send, the wait, the result read
    ("BM25 guard", "guarded "),
    ("candidate feedback", "DocumentVectorCache.vectors "),
    ("candidate feedback", "with_feedback "),
    ("judged-neighbour votes", "JudgedNeighbours.scores "),
    ("merge", ";merge (es_rerank/ranking/merge.py"),
    ("_source fetch, page", "EmbeddedBackend.page "),
    ("response body", "search_response "),
    ("JSON encoding", "DefaultJSONProvider.dumps "),
    ("request parsing", "parse_search "),
    ("request parsing", "EmbeddedBackend.prepare "),
    ("Flask, hooks and glue", "Flask.wsgi_app "),
    ("waitress: HTTP in and out", "waitress/"),
)


def stage_samples(path: Path) -> Counter:
    """Samples per stage (``other``: none of them) in a collapsed-stacks file, gzipped or not."""
    opener = gzip.open if path.suffix == ".gz" else open
    counts: Counter = Counter()
    with opener(path, "rt", encoding="utf-8") as lines:
        for line in lines:
            stack, _, samples = line.rstrip("\n").rpartition(" ")
            stage = next((name for name, frame in STAGES if frame in stack), "other")
            counts[stage] += int(samples)
    return counts


def main(paths: list[str]) -> None:
    """Print each file's share of samples by stage, side by side."""
    tables = {Path(path).name.split(".")[0]: stage_samples(Path(path)) for path in paths}
    names = list(dict.fromkeys([name for name, _ in STAGES] + ["other"]))
    print(f"{'stage':<28}" + "".join(f"{name:>14}" for name in tables))
    for name in names:
        print(f"{name:<28}" + "".join(f"{counts[name] / sum(counts.values()):>14.1%}" for counts in tables.values()))
    print(f"{'samples':<28}" + "".join(f"{sum(counts.values()):>14}" for counts in tables.values()))


if __name__ == "__main__":
    main(sys.argv[1:])

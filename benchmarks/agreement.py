"""``esrr bench agreement``: the embedded index's BM25 top-k against real Lucene's (Elasticsearch) on NFCorpus queries.

Both indices are built here from the same corpus (the embedded one in a temporary folder, the
Elasticsearch one under a throw-away alias, deleted at the end); each query of the split goes
to both backends' ``search`` (the first stage, no reranking), and to Elasticsearch's ``text``
field, which scores as the embedded index does (title and abstract as one field, k1 1.2, b
0.75), where the Elasticsearch backend sums BM25(title, k1 2.0) and BM25(abstract). Overlap of a query: the documents
both top-k share over the larger of the two lists (1.0 when both are empty). For the queries of
least overlap it prints the query's tokens as ``es_rerank.text.tokenize`` and as the index's
``esrr_text`` analyser see them, where the two differ.

    bash scripts/engine.sh elasticsearch --http-port 9200 &   # a real node (Maven Central jars)
    esrr bench agreement --es-url http://127.0.0.1:9200 [--split test] [--k 10]
"""

from __future__ import annotations

import json
import statistics
import tempfile
import uuid
from pathlib import Path
from typing import Any

import click

from es_rerank.cli_options import json_out_option


def _text_field_top(client, index: str, query: str, k: int) -> list[str]:
    """Elasticsearch's top-``k`` doc ids for any word of ``query`` in ``text`` (title and abstract as one field:
    the embedded index's model), ties by doc id."""
    body = {
        "query": {"match": {"text": {"query": query}}},
        "size": k,
        "_source": ["doc_id"],
        "sort": [{"_score": {"order": "desc"}}, {"doc_id": {"order": "asc"}}],
        "track_scores": True,
    }
    return [hit["_source"]["doc_id"] for hit in client.search(index=index, body=body)["hits"]["hits"]]


def overlap(first: list[str], second: list[str]) -> float:
    """Shared documents over the longer list (1.0 when both are empty)."""
    longer = max(len(first), len(second))
    return 1.0 if longer == 0 else len(set(first) & set(second)) / longer


@click.command(name="agreement")
@click.option(
    "--es-url",
    required=True,
    help="An Elasticsearch to load NFCorpus into (scripts/engine.sh elasticsearch starts one).",
)
@click.option("--data", type=click.Path(exists=True, path_type=Path), default=None, help="NFCorpus directory.")
@click.option("--split", type=click.Choice(["train", "dev", "test"]), default="test", show_default=True)
@click.option("--k", default=10, show_default=True, type=click.IntRange(1, 1000), help="Hits compared per query.")
@click.option(
    "--show",
    default=8,
    show_default=True,
    type=click.IntRange(min=0),
    help="Queries of least overlap printed with their tokens.",
)
@json_out_option("Also write the figures and every query's overlap as JSON.")
def bench_agreement(es_url: str, data: Path | None, split: str, k: int, show: int, json_out: Path | None) -> None:
    """Mean top-k overlap of the embedded and the Elasticsearch backend over one NFCorpus split."""
    from es_rerank.backends.base import text_hits
    from es_rerank.backends.elasticsearch import ElasticsearchBackend
    from es_rerank.backends.embedded import EmbeddedBackend
    from es_rerank.backends.es_client import connect
    from es_rerank.backends.es_layout import stats_root
    from es_rerank.machine import machine_description
    from es_rerank.settings import CommonSettings
    from es_rerank.text import tokenize
    from index_setup.embedded_index import build_embedded_index
    from index_setup.es_index import ANALYZER, load_index
    from index_setup.nfcorpus import NFCorpus

    corpus = NFCorpus.locate(data)
    queries = corpus.queries(split)
    with tempfile.TemporaryDirectory(prefix="esrr-agreement-") as tmp:
        home = Path(tmp)
        settings = CommonSettings(
            home=home, backend="elasticsearch", es_url=es_url, es_alias=f"esrr-agreement-{uuid.uuid4().hex[:8]}"
        )
        client = connect(settings)
        build_embedded_index(corpus.documents(), home / "embedded", progress=False)
        embedded = EmbeddedBackend.open_current(home / "embedded")
        loaded = load_index(client, corpus.documents(), settings, progress=False)
        try:
            elasticsearch = ElasticsearchBackend(client, settings.es_alias, stats_root(settings))
            server = client.info()["version"]["number"]
            rows: list[dict[str, Any]] = []
            for query_id, text in queries.items():
                ours = [hit.doc_id for hit in text_hits(embedded, text, k)]
                lucene = [hit.doc_id for hit in text_hits(elasticsearch, text, k)]
                one_field = _text_field_top(client, loaded.index, text, k)
                rows.append(
                    {
                        "query_id": query_id,
                        "query": text,
                        "overlap": overlap(ours, lucene),
                        "overlap_text_field": overlap(ours, one_field),
                        "embedded": ours,
                        "elasticsearch": lucene,
                        "elasticsearch_text_field": one_field,
                    }
                )
            worst = sorted(rows, key=lambda row: row["overlap"])[:show]
            for row in worst:
                analysed = client.indices.analyze(index=loaded.index, analyzer=ANALYZER, text=row["query"])
                row["tokens"] = tokenize(row["query"])
                row["es_tokens"] = [token["token"] for token in analysed["tokens"]]
        finally:
            client.options(ignore_status=404).indices.delete(index=loaded.index)
    values = [row["overlap"] for row in rows]
    text_field = [row["overlap_text_field"] for row in rows]
    figures: dict[str, Any] = {
        "split": split,
        "queries": len(rows),
        "k": k,
        "elasticsearch": server,
        "documents": loaded.n_docs,
        "mean_overlap": statistics.fmean(values) if values else None,
        "median_overlap": statistics.median(values) if values else None,
        "share_at_least_0.8": sum(value >= 0.8 for value in values) / len(values) if values else None,
        "identical_sets": sum(value == 1.0 for value in values),
        "mean_overlap_text_field": statistics.fmean(text_field) if text_field else None,
        "share_at_least_0.8_text_field": sum(value >= 0.8 for value in text_field) / len(text_field) if rows else None,
        "machine": machine_description(),
    }
    click.echo(f"NFCorpus {split}: {len(rows)} queries, top-{k}, embedded (tantivy) vs Elasticsearch {server}")
    click.echo(
        f"mean overlap {figures['mean_overlap']:.3f}, median {figures['median_overlap']:.3f}, "
        f"{figures['share_at_least_0.8']:.1%} of queries >= 0.8, {figures['identical_sets']} identical sets"
    )
    click.echo(
        f"the same model on both sides (Elasticsearch's 'text' field, title and abstract as one, k1 1.2, "
        f"b 0.75): mean overlap {figures['mean_overlap_text_field']:.3f}, "
        f"{figures['share_at_least_0.8_text_field']:.1%} of queries >= 0.8"
    )
    click.echo("least overlap with the Elasticsearch backend's query:")
    for row in worst:
        differ = "" if row["tokens"] == row["es_tokens"] else f"; tokens {row['tokens']} vs ES {row['es_tokens']}"
        click.echo(f"  {row['overlap']:.2f} {row['query_id']} {row['query'][:70]!r}{differ}")
    if json_out is not None:
        json_out.write_text(json.dumps({**figures, "worst": worst, "per_query": rows}, indent=1), encoding="utf-8")

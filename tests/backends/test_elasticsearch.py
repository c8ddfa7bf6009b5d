"""The Elasticsearch backend and its versioned index, against noida-db or ESRR_TEST_ES_URL.

noida-db ignores custom BM25 k1/b, so nothing here depends on their effect.
"""

from __future__ import annotations

import itertools
import socket
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
from elasticsearch import Elasticsearch

from es_rerank.backends.base import MAX_K, BackendError, text_body, text_hits
from es_rerank.backends.elasticsearch import ElasticsearchBackend
from es_rerank.backends.es_client import connect
from es_rerank.backends.es_layout import BUILD_META_KEY, META_KEY, stats_dir, stats_root
from es_rerank.settings import CommonSettings
from es_rerank.stats import DocTerms, Document
from es_rerank.text import tokenize
from index_setup.es_index import (
    ANALYZER,
    current_version,
    delete_old_versions,
    index_name,
    list_indices,
    list_versions,
    load_index,
    use_version,
)
from index_setup.readers import read_beir_corpus
from tests.conftest import ranked
from tests.engines import report

pytestmark = pytest.mark.es

NFCORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "nfcorpus" / "corpus.jsonl.gz"
N_NFCORPUS = 60

HANDWRITTEN = [
    Document(
        "ZZ-1",
        "Zymurgy of xylophagous beetles",
        "Xylophagous beetles ferment wood; zymurgy explains IL-6 levels in U.S. larvae (3.5% rise).",
    ),
    Document("TIE-b", "Quokka habitat survey", "A quokka census on Rottnest island."),
    Document("TIE-a", "Quokka habitat survey", "A quokka census on Rottnest island."),
    Document("EMPTY-1", "", ""),
]


@pytest.fixture(scope="module")
def corpus() -> list[Document]:
    """60 NFCorpus documents plus a few hand-written ones (distinctive words, ties, empty)."""
    docs = list(itertools.islice(read_beir_corpus(NFCORPUS), N_NFCORPUS))
    return docs + HANDWRITTEN


@pytest.fixture(scope="module")
def served(es_url, es_backend, es_client, corpus, tmp_path_factory):
    """One loaded index shared by the read-only tests: (settings, load result, backend)."""
    alias = f"esrr-test-ro-{uuid.uuid4().hex[:10]}"
    settings = CommonSettings(
        home=tmp_path_factory.mktemp("home"), backend=es_backend, es_url=es_url, es_alias=alias, es_bulk_chunk_size=25
    )
    result = load_index(es_client, corpus, settings, progress=False)
    yield settings, result, ElasticsearchBackend(es_client, alias, stats_root(settings))
    for name in es_client.indices.get(index=f"{alias}*").body:
        es_client.options(ignore_status=404).indices.delete(index=name)


def _failing_after(documents, n, action=None):
    """Yield ``documents``; after ``n`` of them run ``action`` or raise."""
    for i, doc in enumerate(documents):
        if i == n:
            if action is None:
                raise RuntimeError("corpus reader broke")
            action()
        yield doc


def test_load_creates_versioned_index_behind_alias(served, es_client, corpus):
    settings, result, backend = served
    assert result.n_docs == len(corpus)
    assert result.index == index_name(settings.es_alias, result.version)
    assert result.previous == ()
    assert es_client.indices.get_alias(name=settings.es_alias).body.keys() == {result.index}
    mapping = es_client.indices.get_mapping(index=result.index).body[result.index]["mappings"]
    assert mapping["_meta"] == {META_KEY: result.version, BUILD_META_KEY: backend.stats.build_id}
    assert mapping["properties"]["title_ids"]["index"] in (False, "false")
    similarity = es_client.indices.get_settings(index=result.index).body[result.index]["settings"]["index"]
    assert float(similarity["similarity"]["esrr_bm25_title"]["k1"]) == settings.bm25_title_k1
    assert (stats_dir(stats_root(settings), result.version) / "meta.json").is_file()
    assert backend.version == result.version == current_version(es_client, settings.es_alias)
    assert backend.stats.n_docs == len(corpus)


def test_distinctive_query_finds_its_document(served):
    hits = text_hits(served[2], "zymurgy xylophagous beetles", 5)
    assert hits[0].doc_id == "ZZ-1"
    assert hits[0].title == "Zymurgy of xylophagous beetles"
    assert hits[0].score > 0
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_nfcorpus_title_query_ranks_its_document_first(served, corpus):
    hits = text_hits(served[2], "alkylphenols human milk Taiwan", 10)
    assert hits[0].doc_id == "MED-118"


def test_ties_broken_by_ascending_doc_id(served):
    hits = text_hits(served[2], "quokka rottnest", 10)
    assert [h.doc_id for h in hits[:2]] == ["TIE-a", "TIE-b"]
    assert hits[0].score == hits[1].score


def test_stored_terms_equal_the_statistics_that_hits_carry(served, es_client):
    """Hits take their precomputed data from the statistics: the load stored the same ids in each document."""
    backend = served[2]
    stats = backend.stats
    hits = text_hits(backend, "statin breast cancer survival methylmercury phosphorus", 30)
    assert len(hits) >= 5
    stored = {
        doc["_source"]["doc_id"]: DocTerms.from_json(doc["_source"])
        for doc in es_client.search(
            index=backend.index, size=len(hits), query={"terms": {"doc_id": [h.doc_id for h in hits]}}
        )["hits"]["hits"]
    }
    assert len(stored) == len(hits)
    for hit in hits:
        expected = stats.doc_terms(stats.row(hit.doc_id))
        for name in ("title_ids", "abstract_ids", "first_ids"):
            got = getattr(hit.terms, name)
            assert got.dtype == np.int32
            np.testing.assert_array_equal(got, getattr(expected, name), err_msg=f"{hit.doc_id} {name}")
            np.testing.assert_array_equal(getattr(stored[hit.doc_id], name), got, err_msg=f"{hit.doc_id} {name}")


def test_searches_fetch_no_stored_ids(served, monkeypatch):
    """The ids come from the statistics; fetching them too made a top-500 response 5.7 times larger."""
    backend = served[2]
    responses, search = [], backend.client.search

    def kept(**request):  # the real client's answer, kept to look at
        response = search(**request)
        responses.append(response.body)
        return response

    monkeypatch.setattr(backend.client, "search", kept)
    assert text_hits(backend, "statin breast cancer survival", 30)
    first_stage = responses[0]["hits"]["hits"]
    assert first_stage and all(set(hit["_source"]) == {"doc_id", "title"} for hit in first_stage)


def test_a_document_written_behind_esrrs_back_is_refused_with_the_fix(es_client, es_settings, corpus):
    load_index(es_client, corpus[:5], es_settings, version="v1", progress=False)
    backend = ElasticsearchBackend(es_client, es_settings.es_alias, stats_root(es_settings))
    es_client.index(
        index=backend.index, document={"doc_id": "INTRUDER-1", "title": "zymurgy", "abstract": "zymurgy"}, refresh=True
    )
    with pytest.raises(BackendError, match="returned a hit its statistics lack: document 'INTRUDER-1' .*rebuild"):
        text_hits(backend, "zymurgy", 10)


def test_empty_and_unmatched_queries_return_no_hits(served):
    assert text_hits(served[2], "qwertyuiopasdf", 10) == []
    assert text_hits(served[2], "?!", 10) == []


@pytest.mark.parametrize("k", [0, -1, MAX_K + 1])
def test_k_out_of_range(served, k):
    with pytest.raises(BackendError, match="out of range"):
        text_hits(served[2], "statin", k)


def test_analyzer_mirrors_the_tokenizer(served, es_client, corpus):
    index = served[1].index

    def analyze(text: str) -> list[str]:
        tokens = es_client.indices.analyze(index=index, analyzer=ANALYZER, text=text).body["tokens"]
        return [t["token"] for t in tokens]

    exact = (
        "IL-6 levels in U.S. patients (n = 1,024) rose 3.5% (p<0.05) over 18-65 years; "
        "Müller's well-known TNF-α, 5-HT2A and COVID-19 data, 10(-6), $ 20, .5 and 1,000-fold"
    )
    assert analyze(exact) == tokenize(exact)
    # Drift alarm: if es_rerank/text.py changes, update TOKEN_PATTERN in index_setup/es_index.py.
    fields = [text for doc in corpus for text in (doc.title, doc.abstract) if text]
    agree = sum(analyze(text) == tokenize(text) for text in fields)
    assert agree / len(fields) >= 0.9, f"only {agree}/{len(fields)} fields analyse like tokenize()"


def test_reindex_swaps_alias_and_keeps_old_index(es_client, es_settings, corpus):
    alias = es_settings.es_alias
    first = load_index(es_client, corpus[:30], es_settings, version="v1", progress=False)
    old_backend = ElasticsearchBackend(es_client, alias, stats_root(es_settings))
    second = load_index(es_client, corpus, es_settings, version="v2", progress=False)

    assert second.previous == (first.index,)
    assert es_client.indices.get_alias(name=alias).body.keys() == {second.index}
    assert list_versions(es_client, alias) == ["v1", "v2"]
    assert [(v.index, v.serving) for v in list_indices(es_client, alias)] == [
        (first.index, False),
        (second.index, True),
    ]
    new_backend = ElasticsearchBackend(es_client, alias, stats_root(es_settings))
    assert new_backend.version == "v2" and new_backend.stats.n_docs == len(corpus)
    assert text_hits(new_backend, "zymurgy", 1)[0].doc_id == "ZZ-1"
    # The old backend stays on v1 (hits and statistics of one load) until told otherwise.
    assert old_backend.version == "v1" and text_hits(old_backend, "zymurgy", 1) == []

    # Roll back and forward with one alias move each.
    assert use_version(es_client, es_settings, "v1") == first.index
    assert current_version(es_client, alias) == "v1"
    assert use_version(es_client, es_settings, "v2") == second.index
    with pytest.raises(BackendError, match="no index"):
        use_version(es_client, es_settings, "v9")
    assert str(second).startswith(f"{second.index} (version v2)")

    assert delete_old_versions(es_client, alias, keep=1, settings=es_settings) == ["v1"]
    assert not es_client.indices.exists(index=first.index)
    assert not (stats_root(es_settings) / "v1").exists()
    # Its index gone, the old backend follows the alias by itself.
    assert text_hits(old_backend, "zymurgy", 1)[0].doc_id == "ZZ-1"
    assert old_backend.version == "v2"


def test_the_gateway_follows_an_alias_swap_without_a_restart(es_client, es_settings, corpus):
    from es_rerank.gateway.app import create_app
    from es_rerank.gateway.config import GatewaySettings
    from es_rerank.ranking.pipeline import SearchPipeline
    from es_rerank.ranking.served import ServedSearch

    load_index(es_client, corpus[:30], es_settings, version="v1", progress=False)
    backend = ElasticsearchBackend(es_client, es_settings.es_alias, stats_root(es_settings))
    served = ServedSearch(SearchPipeline(backend, 0), check_every_s=0)
    gateway = create_app(served, GatewaySettings(**es_settings.model_dump())).test_client()
    path = f"/{es_settings.es_alias}/_search"
    assert gateway.post(path, json={"query": {"match": {"text": "zymurgy"}}}).get_json()["hits"]["hits"] == []
    loaded = backend.stats
    assert backend.current() is backend and backend.stats is loaded  # no reindex: the statistics stay loaded
    second = load_index(es_client, corpus, es_settings, version="v2", progress=False)
    hits = gateway.post(path, json={"query": {"match": {"text": "zymurgy"}}}).get_json()["hits"]["hits"]
    assert [(hit["_id"], hit["_index"]) for hit in hits] == [("ZZ-1", second.index)]


def test_a_prune_under_the_gateway_leaves_no_search_with_mixed_versions(es_client, es_settings, corpus):
    from es_rerank.gateway.app import create_app
    from es_rerank.gateway.config import GatewaySettings
    from es_rerank.ranking.feedback import FeedbackParams
    from es_rerank.ranking.pipeline import SearchPipeline
    from es_rerank.ranking.served import ServedSearch

    load_index(es_client, corpus[:30], es_settings, version="v1", progress=False)
    backend = ElasticsearchBackend(es_client, es_settings.es_alias, stats_root(es_settings))
    # The feedback reads every hit's terms under the statistics: a v2 hit under v1's would fail.
    served = ServedSearch(SearchPipeline(backend, 10, feedback=FeedbackParams(5, 0.5)), check_every_s=3600)
    gateway = create_app(served, GatewaySettings(**es_settings.model_dump())).test_client()
    second = load_index(es_client, corpus, es_settings, version="v2", progress=False)
    delete_old_versions(es_client, es_settings.es_alias, keep=1, settings=es_settings)  # before the gateway looks
    response = gateway.get(f"/{es_settings.es_alias}/_search?q=zymurgy")
    assert response.status_code == 200, response.get_json()
    assert [(hit["_id"], hit["_index"]) for hit in response.get_json()["hits"]["hits"]] == [("ZZ-1", second.index)]


def test_searches_running_through_a_reindex_and_a_prune_all_succeed(es_client, es_settings, corpus, pytestconfig):
    """Issue 36: an index build with its alias swap, then a prune of the old index, while three clients search
    through the gateway: no search fails, and those after the swap come from the new index."""
    from es_rerank.gateway.app import create_app
    from es_rerank.gateway.config import GatewaySettings
    from es_rerank.ranking.feedback import FeedbackParams
    from es_rerank.ranking.pipeline import SearchPipeline
    from es_rerank.ranking.served import ServedSearch

    load_index(es_client, corpus[:30], es_settings, version="v1", progress=False)
    backend = ElasticsearchBackend(es_client, es_settings.es_alias, stats_root(es_settings))
    served = ServedSearch(SearchPipeline(backend, 10, feedback=FeedbackParams(5, 0.5)), check_every_s=0)
    app = create_app(served, GatewaySettings(**es_settings.model_dump()))
    path = f"/{es_settings.es_alias}/_search"
    stop = threading.Event()
    lock = threading.Lock()
    answered: list[str] = []  # the index of each answer's first hit
    failed: list[tuple[int, object]] = []

    def search() -> None:
        client = app.test_client()
        while not stop.is_set():
            response = client.post(path, json={"query": {"match": {"text": "cancer diet"}}, "size": 5})
            with lock:
                if response.status_code != 200:
                    failed.append((response.status_code, response.get_json()))
                else:
                    answered.append(response.get_json()["hits"]["hits"][0]["_index"])

    searchers = [threading.Thread(target=search, daemon=True) for _ in range(3)]
    for thread in searchers:
        thread.start()
    try:
        deadline = time.monotonic() + 60
        while len(answered) < 3 and not failed and time.monotonic() < deadline:
            time.sleep(0.01)
        before = len(answered)
        second = load_index(es_client, corpus, es_settings, version="v2", progress=False)
        delete_old_versions(es_client, es_settings.es_alias, keep=1, settings=es_settings)
        swapped = len(answered)
        while len(answered) < swapped + 2 * len(searchers) and not failed and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        stop.set()
        for thread in searchers:
            thread.join(30)
    server = es_client.info()["version"]["number"]
    report(
        pytestconfig,
        f"{swapped - before} searches during a reindex and a prune (server {server}), {len(failed)} failed",
    )
    assert failed == []
    assert before >= 3 and swapped > before, "no search ran while the index was rebuilt"
    # The searches in flight at the prune (one per thread) may still answer from v1; every later one is v2's.
    assert set(answered[swapped + len(searchers) :]) == {second.index}


def test_a_search_answered_before_another_followed_the_alias_is_searched_again(es_client, es_settings, corpus):
    """Thread A's hits come from v1; before A reads the statistics, B's search meets v1 deleted and follows to v2."""
    from es_rerank.ranking.pipeline import SearchPipeline

    # Term ids follow the load's order of first appearance: the reversed corpus numbers its terms otherwise.
    load_index(es_client, corpus[::-1], es_settings, version="v1", progress=False)
    backend = ElasticsearchBackend(es_client, es_settings.es_alias, stats_root(es_settings))
    second = load_index(es_client, corpus, es_settings, version="v2", progress=False)
    searched = backend.first_stage

    def search_then_another_thread_follows(prepared, k: int):
        answer = searched(prepared, k)
        if backend.index != second.index:  # the interleaving, once: a prune, then thread B's search
            delete_old_versions(es_client, es_settings.es_alias, keep=1, settings=es_settings)
            searched(backend.prepare(text_body("cancer")), 1)
        return answer

    backend.first_stage = search_then_another_thread_follows
    checker = _StatsCheckingReranker()
    ranking = ranked(SearchPipeline(backend, 50, checker), "cancer diet", 10)
    assert backend.index == second.index and ranking.ranked
    assert checker.seen and all(agrees for doc_id, agrees in checker.seen[-1]), checker.seen[-1]


def test_a_search_that_follows_the_alias_itself_is_ranked_under_the_statistics_it_followed_to(
    es_client, es_settings, corpus
):
    """The served index is pruned before a search: the first stage follows the alias to v2 while the statistics
    read before it were v1's; the pipeline's one retry searches again under v2's."""
    from es_rerank.ranking.pipeline import SearchPipeline

    load_index(es_client, corpus[::-1], es_settings, version="v1", progress=False)  # other term ids than v2's
    backend = ElasticsearchBackend(es_client, es_settings.es_alias, stats_root(es_settings))
    second = load_index(es_client, corpus, es_settings, version="v2", progress=False)
    delete_old_versions(es_client, es_settings.es_alias, keep=1, settings=es_settings)
    checker = _StatsCheckingReranker()
    ranking = ranked(SearchPipeline(backend, 50, checker), "cancer diet", 10)
    assert backend.index == second.index and ranking.ranked
    assert checker.seen and all(agrees for doc_id, agrees in checker.seen[-1]), checker.seen[-1]


def test_a_version_name_built_again_after_a_prune_is_followed(es_client, es_settings, corpus):
    """Same index name, another load: the build id in _meta tells them apart (was: stale statistics, 500s)."""
    load_index(es_client, corpus[:30], es_settings, version="z1", progress=False)
    backend = ElasticsearchBackend(es_client, es_settings.es_alias, stats_root(es_settings))
    load_index(es_client, corpus[:40], es_settings, version="z2", progress=False)
    delete_old_versions(es_client, es_settings.es_alias, keep=1, settings=es_settings)
    load_index(es_client, corpus, es_settings, version="z1", progress=False)
    followed = backend.current()
    assert followed is not backend and followed.index == backend.index == index_name(es_settings.es_alias, "z1")
    assert followed.stats.n_docs == len(corpus) and followed.stats.build_id != backend.stats.build_id
    assert text_hits(followed, "zymurgy", 1)[0].doc_id == "ZZ-1"
    assert followed.current() is followed


def test_prune_keeps_the_statistics_of_a_served_copy_under_another_name(es_client, es_settings, corpus):
    """A snapshot restored under another name serves the version its _meta records: that version stays."""
    from index_setup.es_index import index_mappings, index_settings

    first = load_index(es_client, corpus[:30], es_settings, version="r1", progress=False)
    build = ElasticsearchBackend(es_client, es_settings.es_alias, stats_root(es_settings)).stats.build_id
    load_index(es_client, corpus[:30], es_settings, version="r2", progress=False)
    restored = f"restored-{first.index}"
    es_client.indices.create(index=restored, settings=index_settings(es_settings), mappings=index_mappings("r1", build))
    es_client.indices.update_aliases(
        actions=[
            {"remove": {"index": index_name(es_settings.es_alias, "r2"), "alias": es_settings.es_alias}},
            {"add": {"index": restored, "alias": es_settings.es_alias}},
        ]
    )
    try:
        assert delete_old_versions(es_client, es_settings.es_alias, keep=1, settings=es_settings) == []
        assert (stats_root(es_settings) / "r1" / "stats" / "meta.json").is_file()
        assert ElasticsearchBackend(es_client, es_settings.es_alias, stats_root(es_settings)).index == restored
    finally:
        es_client.options(ignore_status=404).indices.delete(index=restored)


def test_use_refuses_statistics_of_another_load(es_client, es_settings, corpus):
    import json

    load_index(es_client, corpus[:30], es_settings, version="u1", progress=False)
    served = load_index(es_client, corpus[:30], es_settings, version="u2", progress=False)
    meta_path = stats_root(es_settings) / "u1" / "stats" / "meta.json"
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    meta_path.write_text(json.dumps({**meta, "build_id": "another-load"}), encoding="utf-8")
    with pytest.raises(BackendError, match="come from different loads"):
        use_version(es_client, es_settings, "u1")
    assert es_client.indices.get_alias(name=es_settings.es_alias).body.keys() == {served.index}


def _assert_still_serving(es_client, settings, served_index, failed_version):
    alias = settings.es_alias
    assert es_client.indices.get_alias(name=alias).body.keys() == {served_index}
    assert not es_client.indices.exists(index=index_name(alias, failed_version))
    assert not (stats_root(settings) / failed_version).exists()
    backend = ElasticsearchBackend(es_client, alias, stats_root(settings))
    assert backend.index == served_index
    assert text_hits(backend, "alkylphenols human milk", 3)[0].doc_id == "MED-118"


def test_a_reindex_that_reads_no_document_keeps_old_index(es_client, es_settings, corpus):
    first = load_index(es_client, corpus[:30], es_settings, version="v1", progress=False)
    with pytest.raises(ValueError, match="no documents were read"):
        load_index(es_client, [], es_settings, version="v2", progress=False)
    _assert_still_serving(es_client, es_settings, first.index, "v2")


def test_failed_reindex_from_reader_error_keeps_old_index(es_client, es_settings, corpus):
    first = load_index(es_client, corpus[:30], es_settings, version="v1", progress=False)
    with pytest.raises(RuntimeError, match="corpus reader broke"):
        # chunk size 20: the first chunks are already in the new index when the reader fails
        load_index(es_client, _failing_after(corpus, 45), es_settings, version="v2", progress=False)
    _assert_still_serving(es_client, es_settings, first.index, "v2")


def test_failed_reindex_from_bulk_rejections_keeps_old_index(es_client, es_settings, corpus):
    first = load_index(es_client, corpus[:30], es_settings, version="v1", progress=False)
    new_index = index_name(es_settings.es_alias, "v2")

    def block_writes():
        es_client.indices.put_settings(index=new_index, settings={"index.blocks.write": True})

    with pytest.raises(BackendError, match="rejected while loading"):
        load_index(es_client, _failing_after(corpus, 45, block_writes), es_settings, version="v2", progress=False)
    _assert_still_serving(es_client, es_settings, first.index, "v2")


def test_duplicate_ids_fail_and_leave_nothing(es_client, es_settings, corpus):
    with pytest.raises(ValueError, match="duplicate document id"):
        load_index(es_client, corpus[:5] + corpus[:1], es_settings, version="v1", progress=False)
    assert not es_client.indices.exists(index=index_name(es_settings.es_alias, "v1"))
    assert not es_client.indices.exists_alias(name=es_settings.es_alias)


def test_existing_version_is_refused(es_client, es_settings, corpus):
    load_index(es_client, corpus[:5], es_settings, version="v1", progress=False)
    with pytest.raises(BackendError, match="already exists"):
        load_index(es_client, corpus[:5], es_settings, version="v1", progress=False)
    with pytest.raises(ValueError, match="bad version name"):
        load_index(es_client, corpus[:5], es_settings, version="V/2", progress=False)
    with pytest.raises(ValueError, match="index name"):  # valid elsewhere, but ES index names are lower case
        load_index(es_client, corpus[:5], es_settings, version="V2", progress=False)


def test_prune_keep_0_deletes_every_version_but_the_served_one(es_client, es_settings, corpus):
    for version in ("k1", "k2", "k3"):
        load_index(es_client, corpus[:5], es_settings, version=version, progress=False)
    use_version(es_client, es_settings, "k2")  # rolled back: the newest is not the served one
    assert delete_old_versions(es_client, es_settings.es_alias, keep=0, settings=es_settings) == ["k1", "k3"]
    assert list_versions(es_client, es_settings.es_alias) == ["k2"]
    with pytest.raises(ValueError, match="0 or more"):
        delete_old_versions(es_client, es_settings.es_alias, keep=-1, settings=es_settings)


def test_prune_leaves_a_version_that_is_still_loading(es_client, es_settings, corpus):
    load_index(es_client, corpus[:5], es_settings, version="p1", progress=False)
    deleted: list[list[str]] = []

    def prune_meanwhile():
        deleted.append(delete_old_versions(es_client, es_settings.es_alias, keep=0, settings=es_settings))

    loaded = load_index(
        es_client, _failing_after(corpus, 30, prune_meanwhile), es_settings, version="p2", progress=False
    )
    assert deleted == [[]]  # p1 is served, p2 is loading: neither goes
    assert current_version(es_client, es_settings.es_alias) == "p2" and loaded.n_docs == len(corpus)


def test_an_index_deleted_under_its_load_is_not_swapped_in(es_client, es_settings, corpus):
    settings = es_settings.model_copy(update={"es_bulk_chunk_size": 500})  # one bulk request, after the delete
    first = load_index(es_client, corpus[:30], settings, version="v1", progress=False)
    doomed = index_name(settings.es_alias, "v2")

    def delete_meanwhile():
        es_client.indices.delete(index=doomed)

    with pytest.raises(BackendError, match="was deleted while it was loading"):
        load_index(es_client, _failing_after(corpus, 40, delete_meanwhile), settings, version="v2", progress=False)
    _assert_still_serving(es_client, settings, first.index, "v2")


def test_prune_keeps_statistics_that_another_aliass_load_wrote_under_the_version_name(
    es_client, es_settings, corpus, tmp_path
):
    other = es_settings.model_copy(update={"es_alias": f"{es_settings.es_alias}-b", "home": tmp_path / "other"})
    load_index(es_client, corpus[:5], es_settings, version="v", progress=False)
    load_index(es_client, corpus[:5], es_settings, version="w", progress=False)
    load_index(es_client, corpus[:5], other, version="v", progress=False)
    # A prune of the first alias run with the other alias's ESRR_HOME: its index goes, not their statistics.
    assert delete_old_versions(
        es_client, es_settings.es_alias, keep=0, settings=es_settings.model_copy(update={"home": other.home})
    ) == ["v"]
    assert text_hits(ElasticsearchBackend(es_client, other.es_alias, stats_root(other)), "alkylphenols", 1)


def test_a_load_killed_outright_is_listed_as_interrupted_and_pruned_outside_keep(es_client, es_settings, corpus):
    from index_setup.es_index import index_mappings, index_settings, unfinished_loads

    for version in ("g1", "g2"):
        load_index(es_client, corpus[:5], es_settings, version=version, progress=False)
    # What a load killed with SIGKILL leaves: its index (with its _meta) and an empty statistics folder, unlocked.
    es_client.indices.create(
        index=index_name(es_settings.es_alias, "k"),
        settings=index_settings(es_settings),
        mappings=index_mappings("k", "killed-load"),
    )
    (stats_root(es_settings) / "k").mkdir()
    assert unfinished_loads(list_indices(es_client, es_settings.es_alias), es_settings) == {"k": True}
    assert delete_old_versions(es_client, es_settings.es_alias, keep=2, settings=es_settings) == ["k"]
    assert list_versions(es_client, es_settings.es_alias) == ["g1", "g2"]
    assert not (stats_root(es_settings) / "k").exists()


def test_a_failed_load_keeps_the_statistics_of_another_alias_that_built_its_version_name(
    es_client, es_settings, corpus
):
    other = es_settings.model_copy(update={"es_alias": f"{es_settings.es_alias}-other"})
    built: list = []

    def the_other_alias_builds_v1_meanwhile():
        with pytest.raises(BackendError, match="is building or has built version 'v1'"):
            load_index(es_client, corpus[:5], other, version="v1", progress=False)
        built.append(load_index(es_client, corpus[:5], other, version="v2", progress=False))
        raise RuntimeError("corpus reader broke")

    with pytest.raises(RuntimeError, match="corpus reader broke"):
        load_index(
            es_client,
            _failing_after(corpus, 3, the_other_alias_builds_v1_meanwhile),
            es_settings,
            version="v1",
            progress=False,
        )
    assert not (stats_root(es_settings) / "v1").exists()  # this load's own folder went with it
    backend = ElasticsearchBackend(es_client, other.es_alias, stats_root(other))
    assert backend.index == built[0].index and text_hits(backend, "alkylphenols human milk", 1)


def test_alias_name_taken_by_concrete_index(es_client, es_settings, corpus):
    es_client.indices.create(index=es_settings.es_alias)
    with pytest.raises(BackendError, match="concrete index, not an alias.*ESRR_ES_ALIAS"):
        load_index(es_client, corpus[:5], es_settings, progress=False)
    with pytest.raises(BackendError, match="concrete index, not an alias"):
        ElasticsearchBackend(es_client, es_settings.es_alias, stats_root(es_settings))
    assert list_versions(es_client, es_settings.es_alias) == []


def test_missing_alias_says_build_first(es_client, es_settings):
    with pytest.raises(BackendError, match="esrr index build --backend elasticsearch"):
        ElasticsearchBackend(es_client, es_settings.es_alias, stats_root(es_settings))
    assert current_version(es_client, es_settings.es_alias) is None


def test_an_alias_on_two_indices_is_refused_with_the_repair(es_client, es_settings, corpus):
    first = load_index(es_client, corpus[:5], es_settings, version="v1", progress=False)
    second = load_index(es_client, corpus[:5], es_settings, version="v2", progress=False)
    es_client.indices.put_alias(index=first.index, name=es_settings.es_alias)  # now on both
    for call in (
        lambda: ElasticsearchBackend(es_client, es_settings.es_alias, stats_root(es_settings)),
        lambda: current_version(es_client, es_settings.es_alias),
    ):
        with pytest.raises(BackendError, match=r"points at 2 indices.*rebuild the index"):
            call()
    assert second.index != first.index


def test_missing_statistics_name_the_fix(es_client, es_settings, corpus, tmp_path):
    load_index(es_client, corpus[:5], es_settings, version="v1", progress=False)
    with pytest.raises(BackendError, match="ESRR_HOME"):
        ElasticsearchBackend(es_client, es_settings.es_alias, tmp_path / "elsewhere")


def test_unreachable_cluster_names_the_fix(tmp_path, corpus):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    client = Elasticsearch(url, request_timeout=2, max_retries=0)
    settings = CommonSettings(home=tmp_path, es_url=url)
    with pytest.raises(BackendError, match=f"cannot reach Elasticsearch at {url}.*ESRR_ES_URL"):
        ElasticsearchBackend(client, settings.es_alias, stats_root(settings))
    with pytest.raises(BackendError, match=f"cannot reach Elasticsearch at {url}.*ESRR_ES_URL"):
        load_index(client, corpus[:3], settings, progress=False)
    assert not (stats_root(settings)).exists() or not any(stats_root(settings).iterdir())


def test_a_search_refused_after_the_backend_opened_names_the_fix(served, es_stub):
    settings, _result, _backend = served
    backend = ElasticsearchBackend(connect(settings), settings.es_alias, stats_root(settings))
    denied = {"error": {"type": "security_exception", "reason": "no read privilege"}, "status": 403}
    backend.client = Elasticsearch(es_stub(403, denied), max_retries=0)  # privileges revoked since
    with pytest.raises(
        BackendError,
        match=r"HTTP 403 \(security_exception: no read privilege\).*lack "
        "privileges",
    ):
        text_hits(backend, "zymurgy", 3)


def test_both_backends_return_the_same_precomputed_data(served, corpus, tmp_path):
    """The embedded index built from the same documents hands out identical DocTerms and _source."""
    from es_rerank.backends.embedded import EmbeddedBackend
    from index_setup.embedded_index import build_embedded_index

    build_embedded_index(corpus, tmp_path, progress=False)
    embedded = EmbeddedBackend.open_current(tmp_path)
    es_backend = served[2]
    compared = 0
    for query in ("xylophagous beetles", "quokka census", "cancer", "vitamin d", "cholesterol", "diet risk"):
        es_hits = {h.doc_id: h for h in text_hits(es_backend, query, 50)}
        embedded_hits = text_hits(embedded, query, 50)
        for hit, entry in zip(embedded_hits, embedded.page(None, embedded_hits)):
            if hit.doc_id not in es_hits:
                continue
            other = es_hits[hit.doc_id]
            assert other.title == entry["_source"]["title"]
            assert es_backend.page(None, [other])[0]["_source"] == entry["_source"]
            for field in ("title_ids", "abstract_ids", "first_ids"):
                assert np.array_equal(getattr(other.terms, field), getattr(hit.terms, field)), (hit.doc_id, field)
            compared += 1
    assert compared >= 20


class _StatsCheckingReranker:
    """Scores 0, and records for each hit whether its term data is the statistics' own (the ones it was ranked
    under)."""

    name = "checks"

    def __init__(self) -> None:
        self.seen: list[list[tuple[str, bool]]] = []

    def skipping(self) -> None:
        return None

    def __call__(self, query, hits, stats, clock=None):
        self.seen.append(
            [
                (
                    h.doc_id,
                    h.doc_id in stats
                    and np.array_equal(h.terms.abstract_ids, stats.doc_terms(stats.row(h.doc_id)).abstract_ids),
                )
                for h in hits
            ]
        )
        return np.zeros(len(hits), dtype=np.float32)

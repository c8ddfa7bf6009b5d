"""Word2vec artifact, Embeddings loading, and the text-source readers (all fast)."""

from __future__ import annotations

import csv
import gzip
import json
import random
from itertools import islice
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from es_rerank.embeddings import PAD, UNK, Embeddings, EmbeddingsError, current_version, load_current
from es_rerank.settings import CommonSettings
from es_rerank.versions import CURRENT_FILE
from index_setup import text_sources as ts
from index_setup.embeddings import (
    Word2VecParams,
    coverage,
    embeddings,
    fast_workers,
    nfcorpus_query_tokens,
    train_embeddings,
    train_from_data,
)

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
FAST = Word2VecParams(vector_size=16, min_count=1, epochs=1, workers=1)


def tiny_sentences(n: int = 60, seed: int = 0) -> list[list[str]]:
    """A few hundred tokens of repetitive biomedical-ish sentences."""
    rng = random.Random(seed)
    words = "vitamin d deficiency bone loss calcium breast cancer statin cholesterol risk <int> <pct>".split()
    return [[rng.choice(words) for _ in range(rng.randint(3, 9))] for _ in range(n)]


@pytest.fixture
def trained(tmp_path: Path) -> tuple[Path, Embeddings]:
    emb_dir = tmp_path / "embeddings"
    emb = train_embeddings(tiny_sentences(), emb_dir, FAST, version="v1", progress=False)
    return emb_dir, emb


# ------------------------------------------------------------------ artifact


def test_artifact_layout(trained: tuple[Path, Embeddings]) -> None:
    emb_dir, emb = trained
    assert sorted(p.name for p in emb_dir.iterdir()) == [CURRENT_FILE, "v1"]
    assert sorted(p.name for p in (emb_dir / "v1").iterdir()) == ["meta.json", "vectors.npy", "vocab.txt"]
    vocab = (emb_dir / "v1" / "vocab.txt").read_text(encoding="utf-8").splitlines()
    vectors = np.load(emb_dir / "v1" / "vectors.npy")
    assert vocab[:2] == ["<pad>", "<unk>"]
    assert len(set(vocab)) == len(vocab) == len(vectors) == 15  # 13 words + PAD + UNK
    assert vectors.dtype == np.float32 and vectors.shape[1] == 16
    meta = json.loads((emb_dir / "v1" / "meta.json").read_text())
    assert meta["version"] == "v1" and meta["params"]["sg"] == 1 and meta["params"]["hs"] == 1
    assert meta["params"]["negative"] == 0 and meta["params"]["window"] == 5
    assert meta["corpus"]["tokens"] == sum(map(len, tiny_sentences()))
    assert meta["corpus"]["sentences"] == 60 and meta["rows"] == 15
    assert len(meta["epochs"]) == 1 and meta["seconds"]["total"] >= 0
    assert (emb_dir / CURRENT_FILE).read_text().strip() == "v1"


def test_pad_zero_unk_uniform_and_seeded(trained: tuple[Path, Embeddings], tmp_path: Path) -> None:
    _, emb = trained
    assert not np.any(emb.vectors[PAD])
    unk = np.asarray(emb.vectors[UNK])
    assert np.all(np.abs(unk) <= 0.25) and np.abs(unk).max() > 0.05
    other = train_embeddings(tiny_sentences(seed=1), tmp_path / "other", FAST, version="v1", progress=False)
    np.testing.assert_array_equal(other.vectors[UNK], unk)  # fixed seed, whatever the corpus
    assert np.abs(np.asarray(emb.vectors[2:])).sum() > 0  # the words were trained


def test_lookup_and_reload(trained: tuple[Path, Embeddings]) -> None:
    emb_dir, emb = trained
    ids = emb.lookup(["vitamin", "never-seen-word", "<int>"])
    assert ids.dtype == np.int64
    assert ids[1] == UNK and ids[0] == emb.index["vitamin"] >= 2 and emb.vocab[ids[2]] == "<int>"
    assert emb.lookup([]).shape == (0,)
    loaded = Embeddings.load(emb_dir / "v1")
    assert isinstance(loaded.vectors, np.memmap) and not loaded.vectors.flags.writeable
    assert loaded.dim == 16 and loaded.version == "v1" and loaded.vocab == emb.vocab
    in_memory = Embeddings.load(emb_dir / "v1", mmap=False)
    assert not isinstance(in_memory.vectors, np.memmap)
    np.testing.assert_array_equal(in_memory.vectors, loaded.vectors)
    assert loaded.nearest("vitamin", 3)[0][0] != "vitamin"
    for reserved in loaded.vocab[:2]:  # PAD and UNK have no neighbours
        with pytest.raises(KeyError):
            loaded.nearest(reserved)


def test_one_worker_trains_bit_identical_vectors(trained: tuple[Path, Embeddings], tmp_path: Path) -> None:
    _, emb = trained  # FAST trains with one worker thread
    again = train_embeddings(tiny_sentences(), tmp_path / "again", FAST, version="v1", progress=False)
    np.testing.assert_array_equal(again.vectors, emb.vectors)


def test_load_current(trained: tuple[Path, Embeddings], tmp_path: Path) -> None:
    emb_dir, _ = trained
    settings = CommonSettings(home=emb_dir.parent)
    assert load_current(settings).version == "v1"
    with pytest.raises(EmbeddingsError, match="esrr embeddings train") as missing:
        load_current(CommonSettings(home=tmp_path / "empty"))
    assert f"no trained embeddings in {tmp_path / 'empty' / 'embeddings'} " in str(missing.value)
    assert "cd to the es-rerank folder or set ESRR_HOME=/path/to/artifacts" in str(missing.value)
    with pytest.raises(EmbeddingsError, match="missing"):
        Embeddings.load(tmp_path / "nowhere")


@pytest.mark.parametrize("damage", ["meta.json", "vectors.npy"])
def test_a_damaged_artifact_is_an_embeddings_error(
    trained: tuple[Path, Embeddings], tmp_path: Path, damage: str
) -> None:
    import shutil

    emb_dir, emb = trained
    copy = shutil.copytree(emb_dir / emb.version, tmp_path / "copy")
    (copy / damage).write_text("{not json, not numpy")
    with pytest.raises(EmbeddingsError, match=r"damaged.*esrr embeddings train"):
        Embeddings.load(copy)


@pytest.mark.parametrize(
    ("vectors", "problem"),
    [
        (np.zeros(0, dtype=np.float32), "shape"),
        (np.zeros(5, dtype=np.float32), "shape"),
        (np.zeros((5, 2, 2), dtype=np.float32), "shape"),
        (np.array(["a"] * 5), "<U1"),
        (None, "vectors.npy or vocab.txt"),
        (np.array([[0, 1]] * 4 + [[np.nan, 0]], dtype=np.float32), "NaN or infinite"),
        (np.array([[0, 1]] * 4 + [[np.inf, 0]], dtype=np.float32), "NaN or infinite"),
    ],
)
def test_vectors_of_the_wrong_shape_or_kind_are_damaged(
    trained: tuple[Path, Embeddings], tmp_path: Path, vectors: np.ndarray | None, problem: str
) -> None:
    """An empty file, a flat row, a 3-D block or strings: each named, none a traceback later on."""
    import shutil

    emb_dir, emb = trained
    copy = shutil.copytree(emb_dir / emb.version, tmp_path / "copy")
    (copy / "vocab.txt").write_text("\n".join(emb.vocab[:5]), encoding="utf-8")
    if vectors is None:
        (copy / "vectors.npy").write_bytes(b"")
    else:
        np.save(copy / "vectors.npy", vectors)
    with pytest.raises(EmbeddingsError, match=r"vectors.npy .*damaged.*esrr embeddings train") as refused:
        Embeddings.load(copy)
    assert problem in str(refused.value)


def test_current_written_last_and_failure_keeps_old(
    trained: tuple[Path, Embeddings], monkeypatch: pytest.MonkeyPatch
) -> None:
    emb_dir, _ = trained
    files = list((emb_dir / "v1").iterdir())
    assert (emb_dir / CURRENT_FILE).stat().st_mtime_ns >= max(f.stat().st_mtime_ns for f in files)

    import index_setup.embeddings as module

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(module.np, "save", broken)
    with pytest.raises(OSError):
        train_embeddings(tiny_sentences(), emb_dir, FAST, version="v2", progress=False)
    assert current_version(emb_dir) == "v1"
    assert sorted(p.name for p in emb_dir.iterdir()) == [CURRENT_FILE, "v1"]  # no partial left


def test_refuses_existing_version_and_empty_corpus(trained: tuple[Path, Embeddings]) -> None:
    emb_dir, _ = trained
    with pytest.raises(EmbeddingsError, match="already exists"):
        train_embeddings(tiny_sentences(), emb_dir, FAST, version="v1", progress=False)
    with pytest.raises(EmbeddingsError, match="empty"):
        train_embeddings([[], []], emb_dir, FAST, version="v3", progress=False)
    with pytest.raises(EmbeddingsError, match="min-count"):
        params = Word2VecParams(min_count=5, epochs=1)
        train_embeddings([["a", "b"]], emb_dir, params, version="v4", progress=False)
    assert current_version(emb_dir) == "v1"


def test_a_training_of_the_same_version_is_refused_while_one_runs(tmp_path: Path) -> None:
    emb_dir, refusals = tmp_path / "embeddings", []

    def sentences_while_another_starts():
        yield from tiny_sentences(30)
        with pytest.raises(EmbeddingsError, match="another `esrr embeddings train` is training version 'v1'"):
            train_embeddings(tiny_sentences(), emb_dir, FAST, version="v1", progress=False)
        refusals.append("v1")
        yield from tiny_sentences(30, seed=1)

    emb = train_embeddings(sentences_while_another_starts(), emb_dir, FAST, version="v1", progress=False)
    assert refusals == ["v1"] and emb.version == "v1" and current_version(emb_dir) == "v1"


def test_a_finished_training_takes_its_version_name_under_the_root_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import index_setup.embeddings as module
    from es_rerank.versions import is_locked

    emb_dir, renames = tmp_path / "embeddings", []
    real_replace = module.os.replace

    def replace_checking_the_lock(source, target):
        if Path(target).name == "v1":  # not CURRENT's own atomic replace
            renames.append(is_locked(emb_dir))  # where another training checks that the name is free
        real_replace(source, target)

    monkeypatch.setattr(module.os, "replace", replace_checking_the_lock)
    train_embeddings(tiny_sentences(), emb_dir, FAST, version="v1", progress=False)
    assert renames == [True]


def test_the_leftovers_of_trainings_that_died_are_deleted(tmp_path: Path) -> None:
    emb_dir = tmp_path / "embeddings"
    for name in ("v1", "w2v-20261124t000000000000z"):  # the same name, and another: nothing else would find it
        (emb_dir / f".{name}.partial").mkdir(parents=True)
        (emb_dir / f".{name}.partial" / "corpus.txt").write_text("half written", encoding="utf-8")
    assert train_embeddings(tiny_sentences(), emb_dir, FAST, version="v1", progress=False).version == "v1"
    assert sorted(p.name for p in emb_dir.iterdir()) == [CURRENT_FILE, "v1"]


def test_line_corpus_never_splits_a_token_differently(tmp_path: Path) -> None:
    from gensim.models.word2vec import LineSentence

    from index_setup.embeddings import write_line_corpus

    counts = write_line_corpus([["ci", "95\xa0%", "of"], ["", "a"], [], ["x\u2009y"]], tmp_path / "c.txt")
    assert list(LineSentence(str(tmp_path / "c.txt"))) == [["ci", "95%", "of"], ["a"], ["xy"]]
    assert counts.tokens == 5 and counts.sentences == 3 and counts.tokens_with_whitespace == 2
    assert counts.words == {"ci": 1, "95%": 1, "of": 1, "a": 1, "xy": 1}


def test_coverage() -> None:
    cov = coverage({"a", "b"}, [["a", "b"], ["a", "c"]])
    assert cov["token_coverage"] == 0.75 and cov["type_coverage"] == pytest.approx(2 / 3)
    assert cov["all_known"] == 0.5


# ------------------------------------------------------------------ text sources


def _jsonl_gz(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)


def write_tiny_data(root: Path) -> None:
    """One small file per source format.

    NFCorpus MED-2 repeats MED-1 and medical-abstracts row 2 repeats the OHSUMED
    doc, up to case, punctuation and spacing.
    """
    _jsonl_gz(
        root / "nfcorpus" / "corpus.jsonl.gz",
        [
            {"_id": "MED-1", "title": "Statins and Breast Cancer", "text": "Statins lower LDL. They cut risk by 12%."},
            {"_id": "MED-2", "title": "Statins and breast cancer.", "text": "Statins lower LDL; they cut risk by 12%"},
        ],
    )
    _jsonl_gz(
        root / "ohsumed-single23" / "docs.jsonl.gz",
        [
            {
                "id": "test/C01/1",
                "split": "test",
                "category": "C01",
                "title": "Infection in joints.",
                "abstract": "Most infections arise at operation. Antibiotics help.",
            },
        ],
    )
    (root / "medical-abstracts-tc").mkdir()
    with gzip.open(root / "medical-abstracts-tc" / "medical_tc_test.csv.gz", "wt", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["condition_label", "medical_abstract"])
        w.writerow(["3", "Obstructive sleep apnea in snorers. Eight snorers, age 39 +/- 5.3 yr, were studied."])
        w.writerow(["1", "Infection in joints. Most infections arise at operation.  Antibiotics help."])
    (root / "bc5cdr").mkdir()
    (root / "bc5cdr" / "CDR_TestSet.PubTator.txt").write_text(
        "8701013|t|Famotidine-associated delirium.\n"
        "8701013|a|Famotidine is a histamine H2-receptor antagonist.\n"
        "8701013\t0\t10\tFamotidine\tChemical\tD015738\n"
        "8701013\tCID\tD015738\tD003693\n\n"
        "439781|t|Naloxone reverses clonidine.\n"
        "439781|a|In rats the decrease was 10 mmHg.\n",
        encoding="utf-8",
    )
    _jsonl_gz(
        root / "evidence-inference-pmc" / "docs.jsonl.gz",
        [
            {
                "pmcid": "PMC1",
                "title": "Diclofenac and codeine",
                "abstract": "Background text. Methods text.",
                "abstract_sections": [["BACKGROUND", "Background text."], ["METHODS", "Methods text."]],
                "body_sections": [["INTRO", "Body one. Body two."], ["METHODS", ""]],
            },
            {"pmcid": "PMC2", "title": "", "abstract": "", "abstract_sections": [], "body_sections": []},
        ],
    )


def test_readers_each_format(tmp_path: Path) -> None:
    write_tiny_data(tmp_path)
    nf = list(ts.read_nfcorpus(tmp_path / "nfcorpus" / "corpus.jsonl.gz"))
    assert nf[0] == ts.TextDoc(
        "nfcorpus", "MED-1", ("Statins and Breast Cancer", "Statins lower LDL. They cut risk by 12%.")
    )
    oh = list(ts.read_ohsumed(tmp_path / "ohsumed-single23" / "docs.jsonl.gz"))
    assert oh[0].doc_id == "test/C01/1" and oh[0].parts[0] == "Infection in joints."
    ma = list(ts.read_medical_abstracts(tmp_path / "medical-abstracts-tc" / "medical_tc_test.csv.gz"))
    assert len(ma) == 2 and ma[0].parts[0].startswith("Obstructive sleep apnea in snorers. Eight")
    bc = list(ts.read_pubtator(tmp_path / "bc5cdr" / "CDR_TestSet.PubTator.txt"))
    assert [d.doc_id for d in bc] == ["8701013", "439781"]
    assert bc[0].parts == ("Famotidine-associated delirium.", "Famotidine is a histamine H2-receptor antagonist.")
    ev = list(ts.read_evidence_inference(tmp_path / "evidence-inference-pmc" / "docs.jsonl.gz"))
    assert ev[0].parts == ("Diclofenac and codeine", "Background text.", "Methods text.", "Body one. Body two.", "")
    assert not ev[1].text.strip()


def test_dedup_across_and_within_sources(tmp_path: Path) -> None:
    write_tiny_data(tmp_path)
    dedup = ts.Deduplicator()
    docs = list(ts.iter_documents(tmp_path, dedup=dedup))
    ids = ["MED-1", "test/C01/1", "medical_tc_test.csv.gz#1", "8701013", "439781", "PMC1"]  # PMC2 is empty
    assert [d.doc_id for d in docs] == ids
    assert dedup.dropped == {"nfcorpus": 1, "medical-abstracts": 1}  # case/punctuation-only copies
    assert ts.normalised_hash("A  b, C.") == ts.normalised_hash("a b c")
    assert len(list(ts.iter_documents(tmp_path, limit_docs=1))) == 5


def test_a_damaged_source_file_is_a_text_source_error_naming_it(tmp_path: Path) -> None:
    ohsumed = ts.Source("ohsumed", "ohsumed-single23/docs.jsonl.gz", ts.read_ohsumed)
    path = tmp_path / "ohsumed-single23" / "docs.jsonl.gz"
    _jsonl_gz(path, [{"title": "no id here", "abstract": "text"}])
    with pytest.raises(ts.TextSourceError, match=r"cannot read it as ohsumed data \(missing field 'id'\)"):
        list(ts.iter_documents(tmp_path, sources=[ohsumed]))
    _jsonl_gz(path, [{"id": str(i), "title": "t", "abstract": "a " * 50} for i in range(200)])
    path.write_bytes(path.read_bytes()[:-200])  # a download cut short
    with pytest.raises(ts.TextSourceError, match=r"docs.jsonl.gz: cannot read it as ohsumed data \(EOFError"):
        list(ts.iter_documents(tmp_path, sources=[ohsumed]))


def test_sentences_and_token_lists(tmp_path: Path) -> None:
    write_tiny_data(tmp_path)
    text = "It fell. By 3.5 mg, e.g. in rats.\nNext line"
    assert ts.split_sentences(text) == ["It fell.", "By 3.5 mg, e.g. in rats.", "Next line"]
    doc = ts.TextDoc("x", "1", ("Statins cut LDL by 12%. In 2003 it cost $5.", ""))
    first, second = ["statins", "cut", "ldl", "by", "<pct>"], ["in", "<year20>", "it", "cost", "<dollar>"]
    assert list(ts.sentences(doc)) == [first, second]
    assert list(ts.document_tokens(doc)) == [first + second]
    long_doc = ts.TextDoc("x", "2", (" ".join(["word"] * 25_000),))
    assert [len(c) for c in ts.sentences(long_doc)] == [10_000, 10_000, 5_000]
    dedup = ts.Deduplicator()
    sentence_lists = [tokens for _, tokens in ts.iter_token_lists(ts.iter_documents(tmp_path, dedup=dedup))]
    assert ["famotidine", "associated", "delirium"] in sentence_lists
    assert dedup.kept["bc5cdr"] == 2
    documents = ts.iter_token_lists(ts.iter_documents(tmp_path), unit="document")
    assert next(documents)[1][:4] == ["statins", "and", "breast", "cancer"]
    with pytest.raises(ts.TextSourceError, match="no text source"):
        list(ts.iter_documents(tmp_path / "nothing"))


def test_train_from_data_and_cli(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_tiny_data(data)
    emb = train_from_data(data, tmp_path / "emb", FAST, version="t", progress=False)
    assert emb.meta["sources"]["medical-abstracts"]["duplicates_dropped"] == 1
    assert emb.meta["sources"]["bc5cdr"]["docs"] == 2
    assert sum(s["tokens"] for s in emb.meta["sources"].values()) == emb.meta["corpus"]["tokens"]
    runner = CliRunner()
    out = str(tmp_path / "cli")
    args = ["--min-count", "1", "--epochs", "1", "--version", "c1", "--limit-docs", "1"]
    result = runner.invoke(embeddings, ["train", "--data", str(data), "--out", out, *args])
    assert result.exit_code == 0, result.output
    assert current_version(tmp_path / "cli") == "c1"
    result = runner.invoke(embeddings, ["info", "--out", out, "-n", "famotidine", "-n", "zzz"])
    assert result.exit_code == 0, result.output
    assert "c1" in result.output and "famotidine:" in result.output and "not in the vocabulary" in result.output
    result = runner.invoke(embeddings, ["info", "--out", str(tmp_path / "none")])
    assert result.exit_code != 0 and "esrr embeddings train" in result.output
    assert f"no trained embeddings in {tmp_path / 'none'}." in result.output
    assert "cd to the es-rerank folder or set ESRR_HOME=/path/to/artifacts" in result.output
    result = runner.invoke(embeddings, ["info", "--out", out, "--version", "../cli/c1"])
    assert result.exit_code == 1 and "bad version name '../cli/c1'" in result.output
    meta_path = tmp_path / "cli" / "c1" / "meta.json"
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    del meta["corpus"]["sentences"]  # hand-edited, or written by an older version
    meta_path.write_text(json.dumps(meta), encoding="utf-8")
    result = runner.invoke(embeddings, ["info", "--out", out])
    assert result.exit_code == 0 and result.exception is None, result.output
    assert "'corpus' entry is incomplete: KeyError 'sentences'" in result.output and "min_count=1" in result.output


def test_the_cli_trains_on_every_core_unless_asked_to_be_deterministic(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_tiny_data(data)
    runner = CliRunner()
    out = tmp_path / "cli"
    args = ["--data", str(data), "--out", str(out), "--min-count", "1", "--epochs", "1", "--limit-docs", "1"]

    def meta(version: str) -> dict:
        return json.loads((out / version / "meta.json").read_text(encoding="utf-8"))

    result = runner.invoke(embeddings, ["train", *args, "--version", "fast"])
    assert result.exit_code == 0, result.output
    assert meta("fast")["params"]["workers"] == fast_workers()
    assert (meta("fast")["recipe"], meta("fast")["reproducible"]) == (
        ("fast", False) if fast_workers() > 1 else ("deterministic", True)
    )
    result = runner.invoke(embeddings, ["train", *args, "--version", "det", "--deterministic"])
    assert result.exit_code == 0, result.output
    assert meta("det")["params"]["workers"] == 1 and (meta("det")["recipe"], meta("det")["reproducible"]) == (
        "deterministic",
        True,
    )
    assert "deterministic (one thread): the same vectors on every run" in result.output
    result = runner.invoke(embeddings, ["train", *args, "--version", "both", "--deterministic", "--workers", "2"])
    assert result.exit_code == 2 and "--deterministic trains on one thread" in result.output
    assert not (out / "both").exists()


def test_cli_names_bad_sources_without_a_traceback(tmp_path: Path) -> None:
    runner = CliRunner()
    out = str(tmp_path / "emb")
    result = runner.invoke(embeddings, ["train", "--data", str(tmp_path), "--out", out])
    assert result.exit_code == 1 and "no text source under" in result.output and "--data" in result.output
    assert not isinstance(result.exception, ts.TextSourceError)  # turned into a usage message, not raised
    corpus = tmp_path / "nfcorpus" / "corpus.jsonl.gz"
    _jsonl_gz(corpus, [{"_id": "MED-1", "title": "Statins", "text": "Statins lower LDL."}])
    with gzip.open(corpus, "at", encoding="utf-8") as f:
        f.write("{broken\n")
    result = runner.invoke(embeddings, ["train", "--data", str(tmp_path), "--out", out])
    assert result.exit_code == 1 and "corpus.jsonl.gz, line 2: not valid JSON" in result.output
    assert "--strict" not in result.output  # the index loader's option; this command has none
    assert not (tmp_path / "emb" / "CURRENT").exists()
    (tmp_path / "nfcorpus" / "queries.jsonl").write_text('{"_id": "q1", "text": 7}\n', encoding="utf-8")
    with pytest.raises(ts.TextSourceError, match='queries.jsonl, line 1: "text" is a int'):
        nfcorpus_query_tokens(tmp_path)


# ------------------------------------------------------------------ the real shared data


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="../shared/data is absent")
@pytest.mark.parametrize("source", ts.SOURCES, ids=lambda s: s.name)
def test_real_source_parses(source: ts.Source) -> None:
    files = source.files(SHARED_DATA)
    assert files, f"no {source.pattern} under {SHARED_DATA}"
    docs = list(islice(source.reader(files[0]), 5))
    assert len(docs) == 5
    for doc in docs:
        assert doc.source == source.name and doc.doc_id and doc.text.strip()
        assert any(ts.sentences(doc))

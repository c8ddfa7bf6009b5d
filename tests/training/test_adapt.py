"""`esrr train --adapt`: the served model fine-tuned on a collection's own titles, written beside it, and
`esrr eval --adapted` on held-out titles; a collection without titles is refused with the reason."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from es_rerank.cli import main
from es_rerank.lex import LEX3
from es_rerank.stats import Document
from tests.artifact_home import home_without_index
from training.adapt import AdaptationError, adapted_checkpoint_path, plan_adaptation, pseudo_collection
from training.shift import pseudo_queries
from worker.model import Checkpoint


def _corpus(directory: Path, documents) -> Path:
    """A BEIR folder with a corpus only: no queries, no judgments."""
    directory.mkdir(parents=True)
    with gzip.open(directory / "corpus.jsonl.gz", "wt", encoding="utf-8") as out:
        for doc in documents:
            out.write(json.dumps({"_id": doc.doc_id, "title": doc.title, "text": doc.abstract}) + "\n")
    return directory


@pytest.mark.slow
def test_adapt_fine_tunes_beside_the_served_model_and_reports_with_eval(
    artifacts, corpus_documents, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # the report goes to ./reports/adapt/NAME
    home = home_without_index(artifacts, tmp_path)
    served = home / "models" / "delta-32-lex3.pt"
    served_bytes = served.read_bytes()
    data = _corpus(tmp_path / "My Collection", corpus_documents[:100])
    env = {"ESRR_HOME": str(home)}
    result = CliRunner().invoke(
        main,
        ["train", "--adapt", str(data), "--max-epochs", "1", "--adapt-queries", "30"],
        env=env,
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    adapted = home / "models" / "delta-32-lex3-adapted-my-collection.pt"
    assert adapted.is_file() and served.read_bytes() == served_bytes  # beside it, never over it
    record = json.loads(adapted.with_suffix(".json").read_text(encoding="utf-8"))
    assert tuple(record["lex_features"]) == LEX3  # what the served model reads
    assert record["train_queries"] == 30 and record["dev_queries"] == 10 and len(record["history"]) == 1
    before, after = Checkpoint.load(served), Checkpoint.load(adapted)
    assert before.config == after.config
    assert torch.equal(before.state_dict["lex_mean"], after.state_dict["lex_mean"])  # the served scale
    assert any(not torch.equal(before.state_dict[k], after.state_dict[k]) for k in before.state_dict)
    # Test: 20 held-out titles over the blank-titled copy, none of them trained on or chosen with.
    pseudo = home / "adapt" / "my-collection-pseudo"
    splits = {s: set((pseudo / "qrels" / f"{s}.tsv").read_text().splitlines()[1:]) for s in ("train", "dev", "test")}
    assert [len(splits[s]) for s in ("train", "dev", "test")] == [30, 10, 20]
    assert not (splits["test"] & splits["train"]) and not (splits["test"] & splits["dev"])
    with gzip.open(pseudo / "corpus.jsonl.gz", "rt", encoding="utf-8") as corpus:
        assert {json.loads(line)["title"] for line in corpus} == {""}
    text = (tmp_path / "reports" / "adapt" / "my-collection" / "table.md").read_text(encoding="utf-8")
    assert "| served default: delta-32-lex3 + BM25 guard + candidate feedback |" in text
    assert "| adapted: served default: delta-32-lex3-adapted-my-collection + BM25 guard + candidate feedback |" in text
    last = result.output.rstrip().splitlines()[-1]
    assert last.startswith("the adapted model ") and "against the served model's" in last, last
    assert text.rstrip().endswith(last)
    report = tmp_path / "reports" / "adapt" / "my-collection"
    results = json.loads((report / "results.json").read_text(encoding="utf-8"))
    assert results["adaptation"] == last and results["adapted_default"].startswith("adapted: served default: ")


def test_adapt_refuses_a_collection_without_titles_and_names_why(artifacts, corpus_documents, tmp_path):
    home = home_without_index(artifacts, tmp_path)
    data = _corpus(tmp_path / "untitled", [Document(d.doc_id, "", d.abstract) for d in corpus_documents[:100]])
    result = CliRunner().invoke(main, ["train", "--adapt", str(data)], env={"ESRR_HOME": str(home)})
    assert result.exit_code != 0
    assert "only 0 of the 100 records have both a title and an abstract" in result.output
    assert "keep the served model" in result.output
    assert not list((home / "models").glob("*adapted*"))


def test_adapt_takes_no_options_of_training_from_judgments(artifacts, tmp_path):
    result = CliRunner().invoke(
        main, ["train", "--adapt", str(tmp_path), "--variant", "delta-32"], env={"ESRR_HOME": str(artifacts.home)}
    )
    assert result.exit_code == 2 and "--variant do not apply" in result.output


def test_the_adapted_checkpoint_is_named_after_the_served_one_and_the_collection(tmp_path):
    served = tmp_path / "models" / "delta-32-lex3-window.pt"
    assert adapted_checkpoint_path(served, "ohsumed") == tmp_path / "models" / "delta-32-lex3-window-adapted-ohsumed.pt"
    plan = plan_adaptation(tmp_path / "docs.jsonl.gz", served, tmp_path)
    assert plan.name == "docs" and plan.checkpoint != served


def test_pseudo_query_splits_keep_the_test_draw_and_do_not_overlap(corpus_documents, tmp_path):
    documents = corpus_documents[:200]
    alone = pseudo_queries("x", documents, n_queries=40, seed=13)
    split = pseudo_queries("x", documents, n_queries=40, seed=13, n_dev=20, n_train=100)
    assert split.qrels["test"] == alone.qrels["test"]  # esrr shift's test queries are adapt's
    ids = {s: set(split.qrels[s]) for s in ("train", "dev", "test")}
    assert [len(ids[s]) for s in ("train", "dev", "test")] == [100, 20, 40]
    assert not (ids["train"] & ids["dev"]) and not ((ids["train"] | ids["dev"]) & ids["test"])
    plan = plan_adaptation(tmp_path, tmp_path / "m.pt", tmp_path, train_queries=10_000)
    sized = pseudo_collection(plan, documents)  # fewer records than asked: a fifth to test, a tenth to dev
    assert [len(sized.qrels[s]) for s in ("train", "dev", "test")] == [140, 20, 40]
    with pytest.raises(AdaptationError, match="only 10 of the 10 records"):
        pseudo_collection(plan, documents[:10])

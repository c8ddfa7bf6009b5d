"""The model recipe end to end on a tiny NFCorpus-shaped collection: index build, train
(Delta with either loss, and DRMM), greedy feature selection, eval with an extra checkpoint and an ensemble."""

from __future__ import annotations

import json
import shutil
from itertools import groupby
from pathlib import Path

import click
import ir_measures
import numpy as np
import pytest
from click.testing import CliRunner

from es_rerank.cli import main
from es_rerank.lex import LEX3, LEX3_WINDOW
from es_rerank.ranking.feedback import FeedbackParams, document_vectors, with_feedback
from es_rerank.settings import CommonSettings
from es_rerank.versions import write_pointer
from training.commands.workspace import open_workspace


def _read_run(path: Path) -> dict[str, dict[str, float]]:
    return {
        query_id: {doc.doc_id: doc.score for doc in docs}
        for query_id, docs in groupby(ir_measures.read_trec_run(str(path)), key=lambda doc: doc.query_id)
    }


def _assert_feedback_of(runs: Path, row: str, stats) -> None:
    """The row's "+ candidate feedback" run is the feedback of that row's own scores, not another's."""
    base, fed = _read_run(runs / f"{row}.run"), _read_run(runs / f"{row}_candidate_feedback.run")
    assert base.keys() == fed.keys()
    for query_id, scores in base.items():
        doc_ids = sorted(scores)
        vectors = document_vectors([stats.doc_terms(stats.row(d)) for d in doc_ids], stats)
        expected = with_feedback(
            np.array([scores[d] for d in doc_ids]), vectors, FeedbackParams.from_settings(CommonSettings())
        )
        # run files keep 6 decimals of each score
        assert [fed[query_id][d] for d in doc_ids] == pytest.approx(expected, abs=1e-4), (row, query_id)


def _tiny_nfcorpus(directory: Path, documents) -> Path:
    """A BEIR-layout collection: every query is a document's title, that document grade 2,
    the next one grade 1."""
    (directory / "qrels").mkdir(parents=True)
    with (directory / "corpus.jsonl").open("w", encoding="utf-8") as out:
        for doc in documents:
            out.write(json.dumps({"_id": doc.doc_id, "title": doc.title, "text": doc.abstract}) + "\n")
    splits = {"train": range(0, 16), "dev": range(16, 22), "test": range(22, 28)}
    with (directory / "queries.jsonl").open("w", encoding="utf-8") as out:
        for i in range(28):
            out.write(json.dumps({"_id": f"Q{i}", "text": documents[i].title}) + "\n")
    for split, rows in splits.items():
        lines = ["query-id\tcorpus-id\tscore"]
        for i in rows:
            lines += [f"Q{i}\t{documents[i].doc_id}\t2", f"Q{i}\t{documents[i + 1].doc_id}\t1"]
        (directory / "qrels" / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return directory


@pytest.mark.slow  # whole processes: the full run has it, the fast lane not
def test_eval_data_searches_an_index_of_its_own_and_refuses_judgments_of_other_documents(
    artifacts, corpus_documents, tmp_path
):
    home = tmp_path / "home"
    shutil.copytree(artifacts.home, home)
    (version,) = [d.name for d in (home / "embeddings").iterdir()]
    write_pointer(home / "embeddings", version)
    data = _tiny_nfcorpus(tmp_path / "nfcorpus", corpus_documents[:30])  # test judges documents 22-28
    runner, env = CliRunner(), {"ESRR_HOME": str(home)}
    served = tmp_path / "served.jsonl"  # the served index holds another corpus: eval --data does not use it
    served.write_text(
        "".join(
            json.dumps({"_id": d.doc_id, "title": d.title, "text": d.abstract}) + "\n" for d in corpus_documents[30:33]
        ),
        encoding="utf-8",
    )
    assert runner.invoke(main, ["index", "build", "--data", str(served)], env=env).exit_code == 0
    first = runner.invoke(main, ["eval", "--data", str(data), "--out", str(tmp_path / "r")], env=env)
    assert first.exit_code == 0, first.output
    (index,) = [d for d in (home / "indexes").iterdir() if d.name.startswith("eval-nfcorpus-")]
    assert f"built the index of {data} at {index / index.name} (30 documents)" in first.output
    assert first.output.rstrip().splitlines()[-1].startswith("the reranker ")  # the verdict comes last
    again = runner.invoke(main, ["eval", "--data", str(data), "--out", str(tmp_path / "r")], env=env)
    assert again.exit_code == 0 and f"reusing the index of {data}" in again.output
    assert sorted(d.name for d in (home / "indexes").iterdir()) == ["embedded", index.name]

    for indexed, name in ((25, "most"), (28, "one")):
        other = shutil.copytree(data, tmp_path / f"{name}-missing")
        (other / "corpus.jsonl").write_text(
            "".join(
                json.dumps({"_id": d.doc_id, "title": d.title, "text": d.abstract}) + "\n"
                for d in corpus_documents[:indexed]
            ),
            encoding="utf-8",
        )
        result = runner.invoke(main, ["eval", "--data", str(other), "--out", str(tmp_path / f"r-{name}")], env=env)
        missing = f"of the 7 documents judged relevant in {other / 'qrels' / 'test.tsv'}"
        if name == "most":  # 4 of 7 missing: judgments of other documents, no report
            assert result.exit_code == 1 and f"4 {missing}" in result.output, result.output
            assert "check that the judgments are of" in result.output
            assert not (tmp_path / "r-most" / "table.md").exists()
        else:  # 1 of 7: said, and evaluated
            assert result.exit_code == 0 and f"warning: 1 {missing}" in result.output, result.output


@pytest.mark.slow
def test_train_select_and_eval_commands(artifacts, corpus_documents, tmp_path, monkeypatch):
    home = tmp_path / "home"
    shutil.copytree(artifacts.home, home)
    (version,) = [d.name for d in (home / "embeddings").iterdir()]
    write_pointer(home / "embeddings", version)  # the fixture's embeddings become the current ones
    data = _tiny_nfcorpus(tmp_path / "nfcorpus", corpus_documents[:30])
    runner = CliRunner()
    env = {"ESRR_HOME": str(home)}

    def esrr(*args: str) -> str:
        result = runner.invoke(main, list(args), env=env)
        assert result.exit_code == 0, result.output
        return result.output

    esrr("index", "build", "--data", str(data))
    dev = open_workspace(data, CommonSettings(home=home)).split_candidates("dev", progress=False)
    assert [c.query_id for c in dev] == [f"Q{i}" for i in range(16, 22)]  # what the experiment scripts train on
    assert all(c.lex.shape[1] == 3 and c.grades.max() == 2 for c in dev)
    esrr("train", "--data", str(data), "--variant", "all", "--variant", "drmm", "--max-epochs", "2")
    esrr(
        "train",
        "--data",
        str(data),
        "--variant",
        "delta-32-lex3",
        "--lex-features",
        "text_bm25,title_jaccard",
        "--max-epochs",
        "1",
        "--loss",
        "softmax",
        "--suffix=-lexg",
    )
    assert json.loads((home / "models" / "drmm.json").read_text())["best_epoch"] >= 1
    lexg = json.loads((home / "models" / "delta-32-lex3-lexg.json").read_text())["train"]
    assert (lexg["loss"], lexg["negatives_per_positive"]) == ("softmax", 8)
    assert json.loads((home / "models" / "delta-32-lex3.json").read_text())["train"]["negatives_per_positive"] == 1
    assert json.loads((home / "models" / "delta-32-lex3.json").read_text())["lex_features"] == list(LEX3)
    assert json.loads((home / "models" / "delta-32-lex3-lexg.json").read_text())["lex_features"] == [
        "text_bm25",
        "title_jaccard",
    ]
    header = esrr("search", "vitamin", "--no-feedback", "--no-neighbours").splitlines()[0]
    assert header.endswith("→ delta-32-lex3 + BM25 guard")  # the paper's model is served while it is the only one
    esrr("train", "--data", str(data), "--max-epochs", "1")  # the default: the window variant
    assert json.loads((home / "models" / "delta-32-lex3-window.json").read_text())["lex_features"] == list(LEX3_WINDOW)
    header = esrr("search", "vitamin", "--no-feedback", "--no-neighbours").splitlines()[0]
    assert header.endswith("→ delta-32-lex3-window + BM25 guard")  # served by default once trained, guarded
    selection = esrr(
        "select-features",
        "--data",
        str(data),
        "--ranker",
        "linear",
        "--max-features",
        "2",
        "--max-epochs",
        "1",
        "--out",
        str(tmp_path / "selection"),
    )
    assert "| 2 |" in selection and (tmp_path / "selection" / "selection-linear.json").is_file()

    report = tmp_path / "report"
    models = home / "models"
    esrr(
        "eval",
        "--data",
        str(data),
        "--out",
        str(report),
        "--baselines",
        "--extra",
        f"Delta-32-LexG={models / 'delta-32-lex3-lexg.pt'}",
        "--ensemble",
        f"Lex3+LexG={models / 'delta-32-lex3.pt'},{models / 'delta-32-lex3-lexg.pt'}",
    )
    table = (report / "table.md").read_text(encoding="utf-8")
    for row in ("| BM25 |", "| DRMM |", "| Delta-32 |", "| Delta-32-Lex3 |", "| Delta-32-LexG |", "| Lex3+LexG |"):
        assert row in table
    results = json.loads((report / "results.json").read_text())
    assert {r["name"] for r in results["rows"]} >= {"BM25", "DRMM", "Delta-32-LexG", "Lex3+LexG"}

    esrr("neighbours", "build", "--data", str(data))
    table = esrr(
        "eval",
        "--data",
        str(data),
        "--out",
        str(tmp_path / "with-votes"),
        "--baselines",
        "--extra",
        f"LexG={models / 'delta-32-lex3-lexg.pt'}",
        "--ensemble",
        f"Both={models / 'delta-32-lex3.pt'},{models / 'delta-32-lex3-lexg.pt'}",
    )
    for row in ("BM25", "Delta-32-Lex3", "LexG", "Both"):
        for twin in (" + judged neighbours", " + candidate feedback", " + candidate feedback + judged neighbours"):
            assert f"| {row}{twin} |" in table
    assert "| Delta-32 + judged neighbours |" not in table and "| DRMM + judged neighbours |" not in table
    assert "| Delta-32 + candidate feedback |" not in table
    stats = open_workspace(data, CommonSettings(home=home)).backend.stats
    (runs,) = (home / "runs").glob("eval-nfcorpus-*/test")  # the runs of --data's own index
    _assert_feedback_of(runs, "Delta-32-Lex3", stats)
    _assert_feedback_of(runs, "Both", stats)
    leaky = shutil.copytree(data, tmp_path / "leaky")
    with (leaky / "qrels" / "train.tsv").open("a", encoding="utf-8") as train_qrels:  # test judgments vote too
        train_qrels.write((data / "qrels" / "test.tsv").read_text(encoding="utf-8").split("\n", 1)[1])
    esrr("neighbours", "build", "--data", str(leaky))
    leaking = runner.invoke(main, ["eval", "--data", str(data), "--out", str(tmp_path / "r1")], env=env)
    assert leaking.exit_code == 1 and "votes with judgments of 6 evaluated queries" in leaking.output, leaking.output
    (models / "judged-neighbours.json").unlink()
    monkeypatch.chdir(tmp_path)  # the default --out is relative: reports/nfcorpus-SPLIT
    served_elsewhere = runner.invoke(
        main,
        ["eval", "--data", str(data), "--split", "dev", "--baselines"],
        env={**env, "ESRR_CHECKPOINT": str(models / "delta-32-lex3-lexg.pt")},
    )
    assert served_elsewhere.exit_code == 0 and "note: ESRR_CHECKPOINT is set" in served_elsewhere.output
    (dev_report,) = (tmp_path / "reports").glob("eval-nfcorpus-*-dev")
    assert json.loads((dev_report / "results.json").read_text())["split"] == "dev"
    assert "served: delta-32-lex3-lexg" in (dev_report / "table.md").read_text()  # the model ESRR_CHECKPOINT serves
    assert not list((tmp_path / "reports").glob("*-test"))  # a dev run leaves the test report alone

    for args, message in [
        (["train", "--lex-features", "title_bm25,nonsense", "--suffix=-x"], "unknown Lex feature(s) ['nonsense']"),
        (["train", "--lex-features", "title_bm25"], "--lex-features needs --suffix"),
        (
            ["train", "--variant", "delta-32", "--variant", "drmm", "--lex-features", "title_bm25", "--suffix=-x"],
            "the variant(s) delta-32, drmm read none",
        ),
        (["eval", "--data", str(data), "--extra", f"BM25={models / 'drmm.pt'}"], "built-in rows"),
        (["eval", "--extra", f"X + judged neighbours={models / 'drmm.pt'}"], "built-in rows"),
        (["eval", "--extra", f"X + candidate feedback={models / 'drmm.pt'}"], "built-in rows"),
        (["eval", "--extra", f"BM25 candidate feedback={models / 'drmm.pt'}"], "would share a run file"),
        (
            ["eval", "--extra", f"A/B={models / 'delta-32.pt'}", "--extra", f"A_B={models / 'drmm.pt'}"],
            "would share a run file",
        ),
        (["eval", "--extra", f"Delta-32 no Delta features={models / 'drmm.pt'}"], "would share a run file"),
        (["eval", "--extra", f"BM25 judged neighbours={models / 'drmm.pt'}"], "would share a run file"),
        (
            ["eval", "--extra", f"A={models / 'drmm.pt'}", "--extra", f"A judged neighbours={models / 'drmm.pt'}"],
            "would share a run file",
        ),
        (["eval", "--ensemble", f"E={models / 'delta-32.pt'}"], "at least two existing checkpoint files"),
        (["eval", "--ensemble", f"E={models / 'delta-32.pt'},{models / 'nope.pt'}"], "no such file: "),
        (
            [
                "eval",
                "--extra",
                f"E={models / 'delta-32.pt'}",
                "--ensemble",
                f"E={models / 'delta-32.pt'},{models / 'delta-32-lex3.pt'}",
            ],
            "['E'] given twice",
        ),
        (["eval", "--extra", f"E={models / 'delta-32.pt'}", "--extra", f"E={models / 'drmm.pt'}"], "['E'] given twice"),
        (["select-features", "--max-features", "19"], "19 is not in the range"),
        (["select-features", "--max-epochs", "0"], "0 is not in the range"),
        (["train", "--max-epochs", "0"], "0 is not in the range"),
        (["train", "--learning-rate", "nan"], "not a finite number"),
        (["train", "--learning-rate", "-1"], "is not in the range"),
        (["train", "--dropout", "1"], "is not in the range"),
        (["train", "--seed", "-1"], "is not in the range"),
        (["train", "--max-positives", "0"], "is not in the range"),
        (["train", "--train-queries", "0"], "is not in the range"),
        (["train", "--suffix=/../../x"], "letters, digits"),
        (["train", "--lex-features", "", "--suffix=-x"], "no feature given"),
        (["train", "--lex-features", "title_bm25,title_bm25", "--suffix=-x"], "given twice"),
        (["eval", "--out", str(report / "table.md")], "is a file"),
        (["train", "--variant", "delta-32", "--suffix=-lex3"], "delta-32-lex3.pt, the checkpoint of another variant"),
        (["train", "--variant", "delta-32", "--suffix=-no-difference"], "the checkpoint of another variant"),
        (["eval", "--extra", f"{'L' * 250}={models / 'delta-32.pt'}"], "longer than 255 bytes"),
    ]:
        bad = runner.invoke(main, args, env=env)
        assert bad.exit_code == 2 and message in bad.output, bad.output
    wrong_kind = runner.invoke(main, ["eval", "--data", str(data), "--extra", f"D={models / 'drmm.pt'}"], env=env)
    assert wrong_kind.exit_code == 1 and "is a drmm checkpoint, not a delta model's" in wrong_kind.output
    import torch

    saved = torch.load(models / "delta-32-lex3.pt", weights_only=True)
    del saved["state_dict"]["lex_mean"]
    torch.save(saved, tmp_path / "unfit.pt")
    unfit = runner.invoke(main, ["eval", "--data", str(data), "--extra", f"U={tmp_path / 'unfit.pt'}"], env=env)
    assert unfit.exit_code == 1 and "unfit.pt does not fit embeddings" in unfit.output, unfit.output
    assert "Traceback" not in unfit.output
    served = (models / "delta-32-lex3.pt").read_bytes()
    shutil.copy(models / "delta-32.pt", models / "delta-32-lex3.pt")  # a hand copy over the served model
    mislabelled = runner.invoke(
        main, ["eval", "--data", str(data), "--out", str(tmp_path / "r2"), "--baselines"], env=env
    )
    assert mislabelled.exit_code == 1 and "is not a delta-32-lex3 model" in mislabelled.output, mislabelled.output
    (models / "delta-32-lex3.pt").write_bytes(served)

    unjudged = shutil.copytree(data, tmp_path / "unjudged")
    (unjudged / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\n", encoding="utf-8")
    empty_dev = runner.invoke(main, ["train", "--data", str(unjudged), "--suffix=-x"], env=env)
    assert empty_dev.exit_code == 1 and "no dev query has both judgments" in empty_dev.output, empty_dev.output
    lines = (data / "qrels" / "dev.tsv").read_text(encoding="utf-8").splitlines()
    (unjudged / "qrels" / "dev.tsv").write_text(
        "\n".join([lines[0], *(line[:-1] + "0" for line in lines[1:])]), encoding="utf-8"
    )  # every grade 0: nothing relevant
    for command, said in (
        (["train", "--suffix=-x"], "no dev query has a relevant"),
        (["eval", "--split", "dev", "--out", str(tmp_path / "r0")], "judges a document relevant"),
    ):
        none_relevant = runner.invoke(main, [*command, "--data", str(unjudged)], env=env)
        assert none_relevant.exit_code == 1 and said in none_relevant.output, none_relevant.output


@pytest.fixture
def no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stop the test if a command starts its work (reading the data, the index) before checking its outputs."""

    def started(*args: object, **kwargs: object) -> None:
        raise AssertionError("the work started before the output location was checked")

    for command in ("train", "evaluate", "select_features"):
        monkeypatch.setattr(f"training.commands.{command}.open_workspace", started)


@pytest.mark.parametrize("command", [["eval"], ["select-features"]])
def test_an_out_folder_under_a_file_fails_before_the_work(command: list[str], no_work: None, tmp_path: Path):
    blocker = tmp_path / "report.md"
    blocker.write_text("kept\n", encoding="utf-8")
    result = CliRunner().invoke(
        main, [*command, "--out", str(blocker / "report")], env={"ESRR_HOME": str(tmp_path / "home")}
    )
    assert result.exit_code == 1, result.output
    assert f"cannot write in {blocker / 'report'}: {blocker} is a file, not a folder" in result.output
    assert "as --out" in result.output and "Traceback" not in result.output
    assert blocker.read_text(encoding="utf-8") == "kept\n"


@pytest.mark.parametrize("command, blocked", [(["train"], "models"), (["eval", "--out", "{tmp}/report"], "runs")])
def test_a_blocked_esrr_home_folder_fails_before_the_work(
    command: list[str], blocked: str, no_work: None, tmp_path: Path
):
    home = tmp_path / "home"
    home.mkdir()
    (home / blocked).write_text("not a folder\n", encoding="utf-8")
    result = CliRunner().invoke(main, [arg.format(tmp=tmp_path) for arg in command], env={"ESRR_HOME": str(home)})
    assert result.exit_code == 1, result.output
    assert f"{home / blocked} is a file, not a folder" in result.output and "ESRR_HOME" in result.output


def test_output_checks_create_missing_folders_and_leave_no_probe(tmp_path: Path):
    from es_rerank.cli_options import writable_dir, writable_file

    out = writable_dir(tmp_path / "a" / "b", "fix")
    assert out.is_dir() and list(out.iterdir()) == []
    assert writable_file(tmp_path / "c" / "rows.json", "fix").parent.is_dir()
    with pytest.raises(click.ClickException, match="it is a folder; fix"):
        writable_file(out, "fix")


@pytest.mark.parametrize(
    "cuda_devices, args, message",
    [
        (0, ["--device", "gpu"], "'gpu': use cpu, cuda or cuda:N"),
        (0, ["--device", "cuda"], "device cuda requested but CUDA is not available"),
        (1, ["--device", "cuda:1"], "cuda:1 requested but this machine has 1 CUDA device(s)"),
        (1, ["--device", "cuda", "--variant", "drmm"], "DRMM trains on the CPU only"),
    ],
)
def test_train_device_is_checked_before_the_work(
    cuda_devices: int, args: list[str], message: str, no_work: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: cuda_devices)
    result = CliRunner().invoke(main, ["train", *args], env={"ESRR_HOME": str(tmp_path / "home")})
    assert result.exit_code == 2 and message in result.output, result.output

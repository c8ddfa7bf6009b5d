"""Corpus, query and qrels readers on small files written by each test."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from es_rerank.stats import Document
from index_setup.readers import (
    CorpusFormatError,
    CorpusNotFoundError,
    DamagedFileError,
    LoadReport,
    read_beir_corpus,
    read_corpus,
    read_pubmed_xml,
    read_qrels,
    read_queries,
)

BEIR_LINES = [
    {"_id": "MED-1", "title": "Statins and breast cancer", "text": "We studied statins.", "metadata": {}},
    {"_id": "MED-2", "title": "", "text": "No title here."},
    {"_id": 3, "text": "An integer id, no title key."},
]


def write_jsonl(path: Path, records: list, extra_lines: tuple[str, ...] = ()) -> Path:
    text = "".join(json.dumps(r) + "\n" for r in records) + "".join(extra_lines)
    if path.name.endswith(".gz"):
        with gzip.open(path, "wt", encoding="utf-8") as out:
            out.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


EXPECTED_BEIR = [
    Document("MED-1", "Statins and breast cancer", "We studied statins."),
    Document("MED-2", "", "No title here."),
    Document("3", "", "An integer id, no title key."),
]


@pytest.mark.parametrize("name", ["corpus.jsonl", "corpus.jsonl.gz"])
def test_beir_corpus_file_and_directory(tmp_path: Path, name: str) -> None:
    path = write_jsonl(tmp_path / name, BEIR_LINES)
    report = LoadReport()
    assert list(read_corpus(path, report=report)) == EXPECTED_BEIR
    assert list(read_corpus(tmp_path)) == EXPECTED_BEIR  # a BEIR directory
    assert list(read_beir_corpus(path)) == EXPECTED_BEIR
    assert (report.read, report.skipped, report.problems) == (3, 0, [])


def test_a_beir_directory_with_both_corpus_files_is_refused_as_ambiguous(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "corpus.jsonl", BEIR_LINES)
    write_jsonl(tmp_path / "corpus.jsonl.gz", BEIR_LINES[:1])
    with pytest.raises(CorpusNotFoundError, match="holds both corpus.jsonl and corpus.jsonl.gz; pass the one"):
        read_corpus(tmp_path)
    assert list(read_corpus(tmp_path / "corpus.jsonl.gz")) == EXPECTED_BEIR[:1]
    from index_setup.nfcorpus import NFCorpus

    with pytest.raises(CorpusNotFoundError, match="holds both"):  # what train, eval and embeddings train read
        _ = NFCorpus(tmp_path).corpus_path


def test_bad_beir_records_are_skipped_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "corpus.jsonl"
    path.write_text(
        "\n".join(
            [
                json.dumps(BEIR_LINES[0]),  # 1 ok
                '{"_id": "MED-9", "title": "cut off',  # 2 bad JSON
                "",  # 3 blank: ignored
                json.dumps({"title": "no id", "text": "x"}),  # 4 missing _id
                json.dumps({"_id": "MED-4", "title": ["a", "list"]}),  # 5 non-string title
                json.dumps(["not", "an", "object"]),  # 6 not an object
                json.dumps({"_id": "", "text": "empty id"}),  # 7 empty _id
                json.dumps({"_id": "MED-5", "title": None, "text": 5}),  # 8 non-string text
                json.dumps(BEIR_LINES[1]),  # 9 ok
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    report = LoadReport()
    docs = list(read_corpus(path, report=report))
    assert [d.doc_id for d in docs] == ["MED-1", "MED-2"]
    assert (report.read, report.skipped) == (2, 6)
    assert [p.location for p in report.problems] == ["line 2", "line 4", "line 5", "line 6", "line 7", "line 8"]
    assert all(p.path == str(path) for p in report.problems)
    messages = [p.message for p in report.problems]
    assert "not valid JSON" in messages[0]
    assert 'no "_id"' in messages[1]
    assert '"title" is a list' in messages[2]
    assert "expected a JSON object" in messages[3]
    assert '"text" is a int' in messages[5]
    assert "skipped 6" in report.summary()


def test_unpaired_surrogate_escapes_are_replaced_in_text_and_refused_in_ids(tmp_path: Path) -> None:
    """JSON may spell half a UTF-16 pair; no index can store it (tantivy refused the whole build)."""
    from index_setup.embedded_index import build_embedded_index

    path = tmp_path / "corpus.jsonl"
    path.write_text(
        '{"_id": "A", "title": "a\\ud800b", "text": "paired \\ud83d\\ude00 and lone \\udfff"}\n'
        '{"_id": "B\\ud800", "title": "t", "text": "x"}\n',
        encoding="utf-8",
    )
    report = LoadReport()
    documents = list(read_corpus(path, report=report))
    assert documents == [Document("A", "a\ufffdb", "paired \U0001f600 and lone \ufffd")]
    assert report.skipped == 1 and "unpaired UTF-16 surrogate" in report.problems[0].message
    assert build_embedded_index(documents, tmp_path / "index").n_docs == 1


def test_strict_mode_raises_at_the_first_bad_record(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "corpus.jsonl", BEIR_LINES[:1], ("{broken\n",))
    documents = read_corpus(path, strict=True)
    assert next(documents).doc_id == "MED-1"
    with pytest.raises(CorpusFormatError) as caught:
        next(documents)
    error = caught.value
    assert (error.path, error.location) == (str(path), "line 2")
    assert str(error).startswith(f"{path}, line 2: not valid JSON") and "--strict" not in str(error)


def test_invalid_utf8_costs_one_line(tmp_path: Path) -> None:
    path = tmp_path / "corpus.jsonl"
    path.write_bytes(b'{"_id": "1", "text": "caf\xe9"}\n' + json.dumps(BEIR_LINES[0]).encode() + b"\n")
    report = LoadReport()
    assert [d.doc_id for d in read_corpus(path, report=report)] == ["MED-1"]
    assert report.problems[0].location == "line 1" and "not UTF-8" in report.problems[0].message


def test_a_truncated_gzip_stops_the_load_with_or_without_strict(tmp_path: Path) -> None:
    whole = write_jsonl(
        tmp_path / "whole.jsonl.gz", [{**r, "_id": f"{r['_id']}-{i}"} for i in range(200) for r in BEIR_LINES]
    )
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    for strict in (False, True):  # skipping the rest would index part of the corpus as if it were whole
        with pytest.raises(
            DamagedFileError,
            match=r"cut\.jsonl\.gz, after line \d+: the gzip stream is truncated "
            r"or corrupt .*download or compress the file again$",
        ):
            list(read_corpus(cut, strict=strict))


def test_missing_paths_name_what_was_expected(tmp_path: Path) -> None:
    with pytest.raises(CorpusNotFoundError, match=r"nope\.jsonl does not exist; expected a BEIR"):
        read_corpus(tmp_path / "nope.jsonl")  # raised at the call, not at the first next()
    with pytest.raises(CorpusNotFoundError, match="neither corpus.jsonl"):
        read_corpus(tmp_path)
    (tmp_path / "notes.txt").write_text("x", encoding="utf-8")
    with pytest.raises(CorpusNotFoundError, match="unknown corpus format"):
        read_corpus(tmp_path / "notes.txt")
    with pytest.raises(CorpusNotFoundError, match="qrels"):
        read_qrels(tmp_path / "qrels" / "test.tsv")
    with pytest.raises(CorpusNotFoundError, match="queries"):
        read_queries(tmp_path / "queries.jsonl")
    with pytest.raises(CorpusNotFoundError, match="PubMed"):
        read_pubmed_xml(tmp_path / "pubmed.xml")
    assert issubclass(CorpusNotFoundError, FileNotFoundError)


def test_queries_jsonl_and_tsv(tmp_path: Path) -> None:
    jsonl = write_jsonl(
        tmp_path / "queries.jsonl",
        [
            {"_id": "PLAIN-3", "text": "Breast Cancer Cells Feed on Cholesterol", "metadata": {"url": "u"}},
            {"_id": "PLAIN-4", "text": "Using Diet to Treat Asthma"},
            {"_id": "PLAIN-3", "text": "duplicate"},
            {"_id": "PLAIN-5"},
        ],
    )
    report = LoadReport()
    assert read_queries(jsonl, report=report) == {
        "PLAIN-3": "Breast Cancer Cells Feed on Cholesterol",
        "PLAIN-4": "Using Diet to Treat Asthma",
        "PLAIN-5": "",
    }
    assert report.skipped == 1 and "appears again" in report.problems[0].message
    tsv = tmp_path / "dev.titles.queries"
    tsv.write_text("PLAIN-1\twhy deep fried foods may cause cancer\nno tab here\nPLAIN-2\tddt\n", encoding="utf-8")
    report = LoadReport()
    assert read_queries(tsv, report=report) == {"PLAIN-1": "why deep fried foods may cause cancer", "PLAIN-2": "ddt"}
    assert report.problems[0].location == "line 2"


def test_beir_qrels_tsv(tmp_path: Path) -> None:
    path = tmp_path / "test.tsv"
    path.write_text(
        "query-id\tcorpus-id\tscore\nPLAIN-1\tMED-1\t2\nPLAIN-1\tMED-2\t1\nPLAIN-2\tMED-1\t1\n", encoding="utf-8"
    )
    assert read_qrels(path) == {"PLAIN-1": {"MED-1": 2, "MED-2": 1}, "PLAIN-2": {"MED-1": 1}}


def test_a_byte_order_mark_and_crlf_line_ends_are_read_as_text(tmp_path: Path) -> None:
    qrels = tmp_path / "test.tsv"
    qrels.write_bytes(b"\xef\xbb\xbfquery-id\tcorpus-id\tscore\r\nPLAIN-1\tMED-1\t2\r\n")
    assert read_qrels(qrels) == {"PLAIN-1": {"MED-1": 2}}
    queries = tmp_path / "queries.jsonl"
    queries.write_bytes(b"\xef\xbb\xbf" + json.dumps({"_id": "PLAIN-1", "text": "statins"}).encode() + b"\r\n")
    assert read_queries(queries) == {"PLAIN-1": "statins"}


def test_trec_qrels(tmp_path: Path) -> None:
    path = tmp_path / "train.2-1-0.qrel"
    path.write_text(
        "PLAIN-3 0 MED-2436 2\nPLAIN-3\t0\tMED-2437\t1\nPLAIN-4 Q0 MED-1 0\nPLAIN-3 0 MED-2436 2\n", encoding="utf-8"
    )
    report = LoadReport()
    assert read_qrels(path, report=report) == {"PLAIN-3": {"MED-2436": 2, "MED-2437": 1}, "PLAIN-4": {"MED-1": 0}}
    assert report.read == 3 and not report.problems  # a judgment repeated word for word is read once


def test_bad_qrels_lines(tmp_path: Path) -> None:
    path = tmp_path / "dev.tsv"
    path.write_text(
        "query-id\tcorpus-id\tscore\nQ1\tD1\t1\nQ1\tD2\nQ1\tD3\thigh\nQ1\tD1\t2\nQ1\tD4\t2.0\n"
        f"Q1\tD5\t{10**400}\nQ1\tD6\t-1001\n",
        encoding="utf-8",
    )
    report = LoadReport()
    assert read_qrels(path, report=report) == {"Q1": {"D1": 1, "D4": 2}}
    assert [p.location for p in report.problems] == ["line 3", "line 4", "line 5", "line 7", "line 8"]
    assert "2 columns" in report.problems[0].message
    assert "not an integer" in report.problems[1].message
    assert "judged again" in report.problems[2].message
    assert "'10000000000000000000' is outside -1000..1000" in report.problems[3].message
    assert "'-1001' is outside" in report.problems[4].message
    with pytest.raises(CorpusFormatError, match="line 3"):
        read_qrels(path, strict=True)


# --- PubMed XML ----------------------------------------------------------------

PUBMED = """<?xml version="1.0" encoding="utf-8"?>
<!DOCTYPE PubmedArticleSet PUBLIC "-//NLM//DTD PubMedArticle, 1st January 2025//EN" "https://dtd.nlm.nih.gov/ncbi/pubmed/out/pubmed_250101.dtd">
<PubmedArticleSet>
  <PubmedArticle>
    <MedlineCitation Status="MEDLINE" Owner="NLM">
      <PMID Version="1">101</PMID>
      <Article PubModel="Print">
        <ArticleTitle>Effect of <i>in vivo</i> IL-6 on
          α-synuclein.</ArticleTitle>
        <Abstract>
          <AbstractText Label="BACKGROUND" NlmCategory="BACKGROUND">Levels rose 10<sup>3</sup>-fold.</AbstractText>
          <AbstractText Label="RESULTS" NlmCategory="RESULTS">p&lt;0.05 &amp; more.</AbstractText>
          <CopyrightInformation>Copyright 2020 Elsevier.</CopyrightInformation>
        </Abstract>
      </Article>
      <CommentsCorrectionsList>
        <CommentsCorrections RefType="Cites"><PMID Version="1">999</PMID></CommentsCorrections>
      </CommentsCorrectionsList>
    </MedlineCitation>
    <PubmedData><ArticleIdList><ArticleId IdType="pubmed">101</ArticleId></ArticleIdList></PubmedData>
  </PubmedArticle>
  <PubmedArticle>
    <MedlineCitation><PMID Version="1">102</PMID>
      <Article><ArticleTitle>No abstract.</ArticleTitle></Article></MedlineCitation>
  </PubmedArticle>
  <PubmedArticle>
    <MedlineCitation><Article><ArticleTitle>Lost its PMID.</ArticleTitle></Article></MedlineCitation>
  </PubmedArticle>
  <DeleteCitation><PMID Version="1">5</PMID><PMID Version="1">6</PMID></DeleteCitation>
  <PubmedArticle>
    <MedlineCitation><PMID Version="1">103</PMID>
      <Article><ArticleTitle></ArticleTitle><VernacularTitle>Titre.</VernacularTitle>
        <Abstract><AbstractText>Unlabelled abstract.</AbstractText></Abstract></Article></MedlineCitation>
  </PubmedArticle>
  <PubmedBookArticle>
    <BookDocument><PMID Version="1">104</PMID><Book><BookTitle>A Book</BookTitle></Book>
      <Abstract><AbstractText>Book abstract.</AbstractText></Abstract></BookDocument>
  </PubmedBookArticle>
</PubmedArticleSet>
"""

EXPECTED_PUBMED = [
    Document(
        "101", "Effect of in vivo IL-6 on α-synuclein.", "BACKGROUND: Levels rose 103-fold. RESULTS: p<0.05 & more."
    ),
    Document("102", "No abstract.", ""),
    Document("103", "Titre.", "Unlabelled abstract."),
    Document("104", "A Book", "Book abstract."),
]


def write_pubmed(path: Path, text: str = PUBMED) -> Path:
    data = text.encode("utf-8")
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


@pytest.mark.parametrize("name", ["pubmed25n0001.xml", "pubmed25n0001.xml.gz"])
def test_pubmed_xml(tmp_path: Path, name: str) -> None:
    path = write_pubmed(tmp_path / name)
    report = LoadReport()
    assert list(read_corpus(path, report=report)) == EXPECTED_PUBMED
    assert (report.read, report.skipped, report.deleted) == (4, 1, 2)
    assert report.problems[0].location == "record 3"
    assert "without MedlineCitation/PMID" in report.problems[0].message
    with pytest.raises(CorpusFormatError, match="record 3"):
        list(read_pubmed_xml(path, strict=True))


def test_pubmed_directory_reads_files_in_name_order(tmp_path: Path) -> None:
    one = PUBMED.replace(">101<", ">201<")
    write_pubmed(tmp_path / "pubmed25n0002.xml.gz")
    write_pubmed(tmp_path / "pubmed25n0001.xml.gz", one)
    write_pubmed(tmp_path / "pubmed25n0001.xml", "not even XML")  # shadowed by its .gz
    (tmp_path / "README.txt").write_text("ignored", encoding="utf-8")
    report = LoadReport()
    ids = [d.doc_id for d in read_corpus(tmp_path, report=report)]
    # A flat folder holds baseline files only: a repeated PMID is a duplicate, reported with its file and record.
    assert ids == ["201", "102", "103", "104", "101"]
    assert (report.read, report.skipped, report.deleted) == (5, 2 + 3, 4)
    repeat = next(p for p in report.problems if "read before" in p.message)
    assert repeat.path.endswith("pubmed25n0002.xml.gz") and repeat.location == "record 2"


def test_a_pubmed_parse_error_mid_file_stops_the_load(tmp_path: Path) -> None:
    broken = PUBMED.replace('<PMID Version="1">103</PMID>', '<PMID Version="1">103</PMI>')
    write_pubmed(tmp_path / "pubmed25n0001.xml.gz", broken)
    write_pubmed(tmp_path / "pubmed25n0002.xml.gz")
    with pytest.raises(DamagedFileError) as caught:
        list(read_corpus(tmp_path))
    error = caught.value
    assert error.path.endswith("pubmed25n0001.xml.gz") and error.location.startswith("line ")
    assert "XML syntax error after record 4 (mismatched tag); download the file again" in str(error)
    assert "--strict" not in str(error)  # it does not help here
    early = write_pubmed(tmp_path / "early.xml", "<PubmedArticleSet><PubmedArticle></PubmedArticleSet>")
    with pytest.raises(CorpusFormatError, match=r"line 1, column \d+: XML syntax error after record 0"):
        list(read_corpus(early, strict=True))


def test_xml_that_is_not_pubmed(tmp_path: Path) -> None:
    path = tmp_path / "other.xml"
    path.write_text("<rss><item>x</item></rss>", encoding="utf-8")
    report = LoadReport()
    assert list(read_corpus(path, report=report)) == []
    assert "expected <PubmedArticleSet>" in report.problems[0].message


def test_pubmed_streaming_releases_finished_records(tmp_path: Path) -> None:
    article = (
        "<PubmedArticle><MedlineCitation><PMID>{}</PMID><Article><ArticleTitle>t</ArticleTitle>"
        "</Article></MedlineCitation></PubmedArticle>"
    )
    body = "".join(article.format(i) for i in range(2000))
    path = write_pubmed(tmp_path / "big.xml.gz", f"<PubmedArticleSet>{body}</PubmedArticleSet>")
    documents = read_pubmed_xml(path)
    seen = [next(documents) for _ in range(1500)]  # the parser's tree holds only the current record
    root = documents.gi_frame.f_locals["records"].gi_frame.f_locals["root"]
    assert len(root) <= 1
    assert len(seen) + sum(1 for _ in documents) == 2000


PUBMED_METADATA = """<PubmedArticleSet>
  <PubmedArticle>
    <MedlineCitation Status="MEDLINE" Owner="NLM"><PMID Version="1">201</PMID>
      <Article PubModel="Print">
        <Journal><JournalIssue CitedMedium="Print"><PubDate><MedlineDate>1998 Dec-1999 Jan</MedlineDate></PubDate>
          </JournalIssue><Title>The American journal of clinical nutrition</Title>
          <ISOAbbreviation>Am J Clin Nutr</ISOAbbreviation></Journal>
        <ArticleTitle>Green tea.</ArticleTitle>
        <AuthorList CompleteYN="Y">
          <Author ValidYN="Y"><LastName>Smith</LastName><ForeName>John A</ForeName><Initials>JA</Initials></Author>
          <Author ValidYN="Y"><LastName>van der Berg</LastName><Initials>P</Initials></Author>
          <Author ValidYN="Y"><CollectiveName>EPIC Study Group</CollectiveName></Author>
        </AuthorList>
        <PublicationTypeList><PublicationType UI="D016428">Journal Article</PublicationType>
          <PublicationType UI="D016454">Review</PublicationType></PublicationTypeList>
      </Article>
      <MeshHeadingList>
        <MeshHeading><DescriptorName UI="D013662" MajorTopicYN="Y">Tea</DescriptorName>
          <QualifierName UI="Q000032">analysis</QualifierName></MeshHeading>
        <MeshHeading><DescriptorName UI="D006801">Humans</DescriptorName></MeshHeading>
      </MeshHeadingList>
    </MedlineCitation>
    <PubmedData><ArticleIdList><ArticleId IdType="pubmed">201</ArticleId>
      <ArticleId IdType="doi">10.1093/ajcn/68.6.1</ArticleId></ArticleIdList></PubmedData>
  </PubmedArticle>
  <PubmedArticle>
    <MedlineCitation><PMID Version="1">202</PMID>
      <Article><Journal><JournalIssue><PubDate><Year>2021</Year><Month>Mar</Month></PubDate></JournalIssue>
        <Title>Nutrients</Title></Journal><ArticleTitle>Coffee.</ArticleTitle>
        <ELocationID EIdType="pii" ValidYN="Y">nu13030001</ELocationID>
        <ELocationID EIdType="doi" ValidYN="Y">10.3390/nu13030001</ELocationID></Article></MedlineCitation>
  </PubmedArticle>
  <PubmedArticle>
    <MedlineCitation><PMID Version="1">203</PMID><Article><ArticleTitle>Bare.</ArticleTitle></Article>
    </MedlineCitation>
  </PubmedArticle>
</PubmedArticleSet>
"""


def test_pubmed_metadata_people_read(tmp_path: Path) -> None:
    documents = list(read_corpus(write_pubmed(tmp_path / "meta.xml", PUBMED_METADATA)))
    first, second, bare = documents
    assert first.source() == {
        "doc_id": "201",
        "title": "Green tea.",
        "abstract": "",
        "journal": "The American journal of clinical nutrition",
        "year": 1998,
        "authors": ["Smith JA", "van der Berg P", "EPIC Study Group"],
        "mesh": ["Tea", "Humans"],
        "publication_types": ["Journal Article", "Review"],
        "doi": "10.1093/ajcn/68.6.1",
    }
    assert (second.journal, second.year, second.doi) == ("Nutrients", 2021, "10.3390/nu13030001")
    assert bare.source() == {
        "doc_id": "203",
        "title": "Bare.",
        "abstract": "",
        "journal": "",
        "authors": [],
        "mesh": [],
        "publication_types": [],
    }  # no year, DOI or metadata: absent


def test_beir_metadata_passes_through(tmp_path: Path) -> None:
    path = tmp_path / "corpus.jsonl"
    path.write_text(
        "\n".join(
            json.dumps(record)
            for record in [
                {
                    "_id": "m1",
                    "title": "t",
                    "text": "a",
                    "metadata": {"url": "https://x.org/1", "pubmed_id": 7, "k": [1, 2]},
                },
                {"_id": "m2", "title": "t", "text": "a", "metadata": {}},
                {"_id": "m3", "title": "t", "text": "a"},
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    documents = list(read_beir_corpus(path))
    assert documents[0].source()["metadata"] == {"url": "https://x.org/1", "pubmed_id": 7, "k": [1, 2]}
    assert "metadata" not in documents[1].source() and "metadata" not in documents[2].source()

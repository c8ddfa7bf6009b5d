"""An interleaving experiment (``ESRR_EXPERIMENT``): a candidate ranker beside the served one, and a search's first
page drawn from both by team-draft interleaving (``interleaving``).

Two candidates: ``bm25``, BM25's own order (the first stage's hits, as a window of 0 serves
them), and ``votes:<path>``, the served pipeline with another judged-neighbour votes file
(the one ``esrr learn`` writes, say). Neither costs a second search: both are read off the
served ranking, the votes one by fusing its votes into the window's scores before the served
votes (``SearchPipeline.score_window``'s stages), so the model and the feedback run once.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from es_rerank.ranking.interleaving import team_draft
from es_rerank.ranking.merge import REPLACE, Combination, RankedHit, merge
from es_rerank.ranking.neighbours import JudgedNeighbours, NeighboursError, fuse
from es_rerank.ranking.pipeline import Ranking
from es_rerank.ranking.ranker_name import Refinement
from es_rerank.stats import CorpusStats

SETTING = "ESRR_EXPERIMENT"
BM25, VOTES = "bm25", "votes"
_FORMS = "bm25 (BM25's order) or votes:/path/to/judged-neighbours.json (the served pipeline with those votes)"


class ExperimentError(ValueError):
    """An experiment that cannot run; the message names the setting and the fix."""


@dataclass(frozen=True)
class ExperimentSpec:
    """What ``ESRR_EXPERIMENT`` asks for: the candidate's kind and, for votes, their file."""

    kind: str
    path: Path | None = None

    @property
    def name(self) -> str:
        """The experiment's name, the impressions' ``arm``: ``bm25`` or ``votes:<file name>``."""
        return BM25 if self.kind == BM25 else f"{VOTES}:{self.path.name if self.path else ''}"


def parse_experiment(value: str) -> ExperimentSpec | None:
    """The experiment ``value`` names (None for none, the empty string); ``ExperimentError`` names the fix."""
    value = value.strip()
    if not value:
        return None
    if value.lower() == BM25:
        return ExperimentSpec(BM25)
    kind, _, path = value.partition(":")
    if kind.lower() != VOTES or not path.strip():
        raise ExperimentError(
            f"{SETTING}={value!r} is no candidate this gateway serves; set {_FORMS}, or leave it "
            "empty for no experiment"
        )
    file = Path(path.strip()).expanduser()
    if not file.is_file():
        raise ExperimentError(
            f"{SETTING} names the votes file {file}, which does not exist; write it with `esrr "
            "learn` (or `esrr neighbours build`) or fix the path, or leave it empty for no "
            "experiment"
        )
    return ExperimentSpec(VOTES, file)


@dataclass(frozen=True)
class Experiment:
    """The running experiment: its spec and, for a votes candidate, its votes."""

    spec: ExperimentSpec
    neighbours: JudgedNeighbours | None = None

    @property
    def name(self) -> str:
        """The experiment's name (the impressions' ``arm``)."""
        return self.spec.name

    @classmethod
    def load(cls, spec: ExperimentSpec, stats: CorpusStats) -> Experiment:
        """The experiment ``spec`` names, its votes read and checked against the served index's ``stats``."""
        if spec.kind == BM25 or spec.path is None:  # votes always name their file
            return cls(spec)
        try:
            neighbours = JudgedNeighbours.load(spec.path)
        except NeighboursError as error:
            raise ExperimentError(f"{SETTING}: {error}") from None
        problem = neighbours.mismatch(stats)
        if problem:
            raise ExperimentError(
                f"{SETTING} names votes of another corpus ({problem}); learn them again over the "
                "served index (`esrr learn`), or leave it empty for no experiment"
            )
        return cls(spec, neighbours)

    def applies(self, stats: CorpusStats) -> bool:
        """Whether the candidate can rank the index of ``stats``: votes of another corpus cannot (after a reindex
        to another collection; the check is cached per build)."""
        return self.neighbours is None or self.neighbours.mismatch(stats) is None

    def candidate(self, ranking: Ranking, query: str, k: int, combination: Combination = REPLACE) -> list[RankedHit]:
        """The candidate's top ``k`` for the search the served ``ranking`` answered (``query``: what it scored)."""
        hits, stages = ranking.first_stage_hits(), ranking.window_stages()
        scored = len(stages[0][1]) if stages else 0
        if self.neighbours is None or not scored:  # BM25, or nothing reordered: BM25's order
            return merge(hits, None, 0, combination, k)
        served_votes = stages[-1][0].last is Refinement.NEIGHBOURS and len(stages) > 1
        before_votes = stages[-2][1] if served_votes else stages[-1][1]
        votes = self.neighbours.scores(query, [hit.doc_id for hit in hits[:scored]])
        return merge(hits, fuse(before_votes, votes, self.neighbours.params.weight), scored, combination, k)

    def interleave(
        self, ranking: Ranking, query: str, k: int, rng: random.Random, combination: Combination = REPLACE
    ) -> list[tuple[RankedHit, str]]:
        """The first ``k`` hits of the served ranking and the candidate's, team-draft interleaved, each with its
        team."""
        served = ranking.ranked[:k]
        candidate = self.candidate(ranking, query, k, combination)
        by_id = {item.hit.doc_id: item for item in candidate}
        by_id.update({item.hit.doc_id: item for item in served})  # the served hit's score where both show it
        drafted = team_draft([item.hit.doc_id for item in served], [item.hit.doc_id for item in candidate], k, rng)
        return [(by_id[doc], team) for doc, team in drafted]

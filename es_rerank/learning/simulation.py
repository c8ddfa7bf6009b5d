"""Simulated users: cascade click models over judged results, and sessions driven through a real gateway.

A user scans a page of results from the top; on a result of relevance grade g it clicks
with probability ``click[g]`` and, after a click, stops with probability ``stop[g]``;
otherwise it goes on down the page. The three models and their parameters are those of
the online learning-to-rank literature (Hofmann, Whiteson and de Rijke, 2013, grades
0/1/2). ``run_sessions`` plays sessions against a running gateway through the same JSON
API and events endpoint the site page uses: one ``_search`` for a query drawn from the
judged ones, then its impression (with the experiment's arm and teams when the answer was
interleaved, ``ESRR_EXPERIMENT``) and the simulated clicks to ``POST /_esrr/events``.
Every draw comes from one seeded generator, so a run is repeatable.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

MAX_GRADE = 2
PAGE = 10


@dataclass(frozen=True)
class CascadeClickModel:
    """P(click | grade) and P(stop after a click | grade), for grades 0, 1 and 2."""

    name: str
    click: tuple[float, float, float]
    stop: tuple[float, float, float]

    def clicks(self, grades: Sequence[int], rng: random.Random) -> list[int]:
        """The 0-based ranks clicked on a page whose results have ``grades`` (above 2 counts as 2), top first."""
        clicked = []
        for rank, grade in enumerate(grades):
            grade = min(max(grade, 0), MAX_GRADE)
            if rng.random() < self.click[grade]:
                clicked.append(rank)
                if rng.random() < self.stop[grade]:
                    break
        return clicked


CLICK_MODELS = {
    model.name: model
    for model in (
        CascadeClickModel("perfect", (0.0, 0.5, 1.0), (0.0, 0.0, 0.0)),
        CascadeClickModel("navigational", (0.05, 0.5, 0.95), (0.2, 0.5, 0.9)),
        CascadeClickModel("informational", (0.4, 0.7, 0.9), (0.1, 0.3, 0.5)),
    )
}


@dataclass
class SimulationTally:
    """What a run did: sessions played, clicks made, and the clicks per grade of the clicked result."""

    sessions: int = 0
    impressions: int = 0
    clicks: int = 0
    clicks_by_grade: dict[int, int] = field(default_factory=lambda: {0: 0, 1: 0, 2: 0})
    rankers: set[str] = field(default_factory=set)

    def as_dict(self) -> dict[str, Any]:
        """The tally as JSON-ready values."""
        return {
            "sessions": self.sessions,
            "impressions": self.impressions,
            "clicks": self.clicks,
            "clicks_by_grade": {str(grade): count for grade, count in self.clicks_by_grade.items()},
            "rankers": sorted(self.rankers),
        }


class GatewayRefused(RuntimeError):
    """The gateway did not answer a simulated search or did not take its events; the message says which and why."""


Post = Callable[[str, dict | list], tuple[int, Any]]


def session_events(
    query: str,
    ids: Sequence[str],
    ranker: str,
    clicked: Sequence[int],
    session_id: str,
    impression_id: str,
    *,
    experiment: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """The events the site page would report for one page of ``ids``: its impression, then each click; on an
    interleaved page (the answer's ``esrr.experiment``), the impression's arm and each result's team."""
    results = [{"id": doc, "position": rank + 1} for rank, doc in enumerate(ids)]
    impression = {
        "type": "impression",
        "impression_id": impression_id,
        "session_id": session_id,
        "query": query,
        "ranker": ranker,
        "results": results,
    }
    if experiment:
        impression["arm"] = str(experiment["name"])
        for result, team in zip(results, experiment["teams"]):
            result["team"] = team
    events: list[dict[str, Any]] = [impression]
    events += [
        {
            "type": "click",
            "impression_id": impression_id,
            "session_id": session_id,
            "id": ids[rank],
            "position": rank + 1,
        }
        for rank in clicked
    ]
    return events


def run_sessions(
    post: Post,
    queries: Mapping[str, str],
    qrels: Mapping[str, Mapping[str, int]],
    model: CascadeClickModel,
    sessions: int,
    seed: int,
    *,
    advance: Callable[[int], object] = lambda count: None,
) -> SimulationTally:
    """Play ``sessions`` simulated sessions through ``post(path, body) -> (status, decoded answer)``: each draws a
    judged query, searches a page of ``PAGE`` results, and reports the impression and the model's clicks."""
    rng = random.Random(seed)
    ordered = sorted(query_id for query_id in queries if query_id in qrels)
    if not ordered:
        raise ValueError("no query has both a text and judgments; check the queries and the qrels of the split")
    tally = SimulationTally()
    for _ in range(sessions):
        query_id = rng.choice(ordered)
        text = queries[query_id]
        status, answer = post("/_search", {"query": {"match": {"text": text}}, "size": PAGE, "_source": False})
        if status != 200:
            raise GatewayRefused(f"the search for query {query_id} answered HTTP {status}: {_reason(answer)}")
        ids = [hit["_id"] for hit in answer["hits"]["hits"]]
        ranker = str(answer.get("esrr", {}).get("ranker", "unknown"))
        grades = [qrels[query_id].get(doc, 0) for doc in ids]
        clicked = model.clicks(grades, rng)
        events = session_events(
            text,
            ids,
            ranker,
            clicked,
            f"{rng.getrandbits(128):032x}",
            f"{rng.getrandbits(64):016x}",
            experiment=answer.get("esrr", {}).get("experiment"),
        )
        status, answer = post("/_esrr/events", events)
        if status != 202:
            raise GatewayRefused(f"the events of query {query_id} answered HTTP {status}: {_reason(answer)}")
        tally.sessions += 1
        tally.impressions += 1
        tally.clicks += len(clicked)
        for rank in clicked:
            tally.clicks_by_grade[min(max(grades[rank], 0), MAX_GRADE)] += 1
        tally.rankers.add(ranker)
        advance(1)
    return tally


def _reason(answer: Any) -> str:
    if isinstance(answer, dict) and isinstance(answer.get("error"), dict):
        return str(answer["error"].get("reason", answer["error"]))
    return json.dumps(answer)[:200]

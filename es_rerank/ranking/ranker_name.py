"""What made a window's scores, as a value: the first scorer and the refinements after it, in order.

Search output, ``esrr.ranker`` and the evaluation rows show it as text ("delta-32-lex3 + BM25
guard + candidate feedback"); code asks the value which stages ran instead of reading suffixes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum


class Refinement(Enum):
    """A stage that refines the scores before it, named after them."""

    GUARD = "BM25 guard"  # the model's scores blended with BM25's (ranking/guard.py)
    FEEDBACK = "candidate feedback"  # the window's hits vote (ranking/feedback.py)
    NEIGHBOURS = "judged neighbours"  # similar judged queries vote (ranking/neighbours.py)

    @property
    def suffix(self) -> str:
        """How the refinement follows a ranker's name: " + candidate feedback"."""
        return f" + {self.value}"


@dataclass(frozen=True)
class RankerName:
    """The first scorer ("BM25", or the model's name as its reranker gives it) and the refinements after it."""

    scorer: str
    refinements: tuple[Refinement, ...] = ()

    def then(self, refinement: Refinement) -> RankerName:
        """This ranker refined by ``refinement``."""
        return replace(self, refinements=(*self.refinements, refinement))

    @property
    def last(self) -> Refinement | None:
        """The refinement that ran last, None for the scorer alone."""
        return self.refinements[-1] if self.refinements else None

    def __str__(self) -> str:
        return self.scorer + "".join(refinement.suffix for refinement in self.refinements)


BM25 = RankerName("BM25")

"""Index names and wildcards (``es_rerank.gateway.index_names``): as fnmatch with ``*`` alone, in linear time."""

from __future__ import annotations

import fnmatch
import random
import time

from es_rerank.gateway.index_names import unserved_name, wildcard_matches


def test_wildcards_match_as_fnmatch_does_with_star_alone():
    rng = random.Random(0)
    for _ in range(20_000):
        pattern = "".join(rng.choice("ab*") for _ in range(rng.randint(0, 7)))
        name = "".join(rng.choice("ab") for _ in range(rng.randint(0, 7)))
        assert wildcard_matches(pattern, name) == fnmatch.fnmatchcase(name, pattern), (pattern, name)
    assert not wildcard_matches("esrr-?ocs", "esrr-docs")  # ? and [ are plain characters, as in Elasticsearch
    assert wildcard_matches("esrr-[d]ocs", "esrr-[d]ocs")


def test_a_pathological_pattern_costs_milliseconds():
    # This thread's CPU (other threads of the test process do not count), with a wide margin: milliseconds
    # where a backtracking matcher would take longer than the test run.
    started = time.thread_time()
    assert not wildcard_matches("a*" * 100_000 + "b", "esrr-docs" + "a" * 200)
    assert time.thread_time() - started < 0.5


def test_the_first_unserved_name_is_named():
    served = ("v1", "esrr-docs")
    assert unserved_name("esrr-docs,v1,_all,*,esrr-*,*1", served) is None
    assert unserved_name("esrr-docs,pubmed,x", served) == "pubmed"
    assert unserved_name("esrr-docs,", served) == ""
    assert unserved_name("e" * 256 + "*", served) == "e" * 256 + "*"  # over Elasticsearch's 255 bytes

"""Fixtures of the training tests: the worker tests' tiny artifact home and, for the one test that compares
``esrr eval``'s runner with a served gateway, their real Redis broker.

They are the worker tests' own fixtures (tests/worker/conftest.py), declared here too so that the training
room's tests can sit beside its code.
"""

from tests.worker.conftest import artifacts, broker, corpus_documents, key_prefix, redis_url

__all__ = ["artifacts", "broker", "corpus_documents", "key_prefix", "redis_url"]

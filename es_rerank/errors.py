"""The errors a library caller of es-rerank sees when a search cannot be set up (``es_rerank.open_search``).

Domain errors, not a command line's: the ``esrr`` commands turn them into CLI errors
(``es_rerank.cli``), the gateway's start-up lets them stop it with their message.
"""

from __future__ import annotations


class SetupError(Exception):
    """What was asked cannot be served with these settings and files (no index, a missing checkpoint, a bad
    setting); the message names the fix."""


class OptionsError(SetupError):
    """Options that contradict each other or the settings (``--worker`` with ``--no-rerank``, a stage over a
    window of 0): on a command line, a usage error."""

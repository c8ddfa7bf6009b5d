"""Reasons fit for an HTTP body: absolute file paths cut down to their last name.

Errors of the backends and the index versions name the files they are about, which is
what an admin needs in the log; an HTTP client learns the server's layout from them. The
gateway logs the whole text and answers this one.
"""

from __future__ import annotations

import re

# An absolute path: a '/' that starts a word (not the '//' of a URL, not inside a relative path).
_ABSOLUTE_PATH = re.compile(r"(?<![\w.:/~-])/[^\s'\"`,;()\[\]{}<>]+")


def without_paths(text: str) -> str:
    """``text`` with each absolute path replaced by its last component (``/srv/esrr/indexes/CURRENT`` -> ``CURRENT``)."""
    def last_name(match: re.Match[str]) -> str:
        path = match.group(0)
        trail = len(path) - len(path.rstrip("."))  # a sentence's full stop is not part of the path
        name = path.rstrip(".").rstrip("/").rsplit("/", 1)[-1]
        return (name or "/") + "." * trail
    return _ABSOLUTE_PATH.sub(last_name, text)

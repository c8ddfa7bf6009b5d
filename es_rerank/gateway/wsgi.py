"""The gateway as a WSGI ``app`` for a server other than ``esrr serve`` (``gunicorn 'es_rerank.gateway.wsgi:app'``).

Built from the ``ESRR_*`` settings when imported, as ``esrr serve`` builds it. ``esrr serve``
is what the README recommends: docs/operations.md has what another server was measured to do
with slow clients.
"""

from __future__ import annotations

from es_rerank.cli_options import load_settings
from es_rerank.gateway.app import create_app
from es_rerank.gateway.cli import served_search
from es_rerank.gateway.config import GatewaySettings

settings = load_settings(GatewaySettings)
app = create_app(served_search(settings), settings)

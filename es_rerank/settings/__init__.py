"""Settings shared by every process, read from ``ESRR_*`` environment variables: the one place they live.

Process-specific settings (gateway, worker) subclass ``CommonSettings`` next to
the code that uses them; everything is validated at start-up. One module per group,
every public name importable from here:

- ``common``: ``CommonSettings``, where artifacts live and which backend serves BM25;
- ``broker``: ``BrokerSettings``, what a caller and a worker agree on;
- ``checkpoints``: the served checkpoint's names and the Lex features it reads;
- ``checks``: checks of single values and the messages naming a bad setting.
"""

from es_rerank.settings.broker import AMQP_SCHEMES, REDIS_SCHEMES, RESULT_ONLY_SCHEMES, BrokerSettings
from es_rerank.settings.checkpoints import (
    DEFAULT_CHECKPOINT_NAME,
    WINDOW_CHECKPOINT_NAME,
    checkpoint_lex_features,
    checkpoint_list,
)
from es_rerank.settings.checks import (
    ALIAS_FORBIDDEN,
    MAX_ALIAS_BYTES,
    SSL_CERT_REQS,
    alias_problem,
    check_redis_url,
    missing_from_home,
    not_empty_path,
    require_port_number,
    settings_problems,
)
from es_rerank.settings.common import (
    API_KEY_ENCODED,
    API_KEY_PART,
    DEFAULT_NFCORPUS,
    MAX_GATEWAY_THREADS,
    MAX_VOTE_WEIGHT,
    CommonSettings,
)

__all__ = [
    "ALIAS_FORBIDDEN",
    "AMQP_SCHEMES",
    "API_KEY_ENCODED",
    "API_KEY_PART",
    "DEFAULT_CHECKPOINT_NAME",
    "DEFAULT_NFCORPUS",
    "MAX_ALIAS_BYTES",
    "MAX_GATEWAY_THREADS",
    "MAX_VOTE_WEIGHT",
    "REDIS_SCHEMES",
    "RESULT_ONLY_SCHEMES",
    "SSL_CERT_REQS",
    "WINDOW_CHECKPOINT_NAME",
    "BrokerSettings",
    "CommonSettings",
    "alias_problem",
    "check_redis_url",
    "checkpoint_lex_features",
    "checkpoint_list",
    "missing_from_home",
    "not_empty_path",
    "require_port_number",
    "settings_problems",
]

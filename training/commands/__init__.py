"""The training room's commands: ``esrr train``, ``eval``, ``select-features`` and ``shift``.

``es_rerank/cli.py`` registers them by name and imports them only when one is run, so the serving code
never imports this room.
"""

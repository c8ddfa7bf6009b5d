#!/usr/bin/env bash
# The test suite. Broker tests need redis-server (installed here if missing and
# possible); Elasticsearch-API tests start noida-db themselves. In CI both must run.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v redis-server >/dev/null && [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    (apt-get update -qq && apt-get install -y -qq redis-server) >/dev/null
fi
bash scripts/setup.sh model,test
. .venv/bin/activate
python -m pytest -q "$@"

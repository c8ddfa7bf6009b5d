#!/usr/bin/env bash
# The test suite. Broker tests need redis-server, the compose tests docker-compose (both
# installed here if missing and possible); Elasticsearch-API tests start noida-db
# themselves. In CI all of them must run.
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
command -v docker-compose >/dev/null || missing+=(docker-compose)
if (( ${#missing[@]} )) && [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    (apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}") >/dev/null
fi
bash scripts/setup.sh model,test
. .venv/bin/activate
python -m pytest -q "$@"

#!/usr/bin/env bash
# The test suite. Broker tests need redis-server, the compose tests docker-compose, the proxy
# tests Debian's nginx (they start their own on a loopback port), the site page's
# browser test Debian's chromium (all installed here if missing and possible: Playwright cannot
# download its own browsers on a closed network), the event store's PostgreSQL tests Debian's
# postgresql (they start their own server); Elasticsearch-API tests start noida-db
# themselves. In CI all of them must run.
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
command -v docker-compose >/dev/null || missing+=(docker-compose)
command -v nginx >/dev/null || [[ -x /usr/sbin/nginx ]] || missing+=(nginx)
[[ -x /usr/bin/chromium ]] || missing+=(chromium)
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || missing+=(postgresql)
if (( ${#missing[@]} )) && [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    (apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}") >/dev/null
fi
bash scripts/setup.sh model,test
. .venv/bin/activate
python -m pytest -q "$@"

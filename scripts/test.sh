#!/usr/bin/env bash
# The test suite. Broker tests need redis-server, the compose tests docker-compose, the proxy
# tests Debian's nginx (they start their own on a loopback port), the site page's
# browser test Debian's chromium (all installed here if missing and possible: Playwright cannot
# download its own browsers on a closed network), the event store's PostgreSQL tests Debian's
# postgresql and the RabbitMQ test Debian's rabbitmq-server (they start their own server); the application libraries'
# tests (tests/apps) the apps extra, the 9.x Python client in a venv of its own (tests/apps/python9) and Node with
# npm (the Node packages installed with `npm ci` from the lock file in tests/apps/node); Elasticsearch-API tests
# start noida-db and a
# real Elasticsearch 7.17, the launcher's test an OpenSearch 2.19 (scripts/engine.sh: Java 17
# and Maven, jars from Maven Central resolved here once, so the tests time only the node's
# start). In CI all of them must run.
#
# `--fast` (first argument) runs the unit and in-process tests only: none marked as needing a
# service or as slow (FAST below; pyproject.toml lists the markers, tests/conftest.py marks a test by
# the service fixtures it uses), and it installs and prepares no service. Other arguments go to pytest.
# Both run the lint, format and type checks first (pyproject.toml: [tool.ruff], [tool.mypy]); a finding
# stops the run before any test, with the command that fixes it.
set -euo pipefail
cd "$(dirname "$0")/.."
FAST="not (es or broker or browser or gpu or proxy or postgres or apps or slow)"

checks() {  # in the activated .venv
    ruff check . || { echo "ruff check failed: run 'ruff check --fix .' and fix by hand what it leaves" >&2; return 1; }
    ruff format --check . || { echo "ruff format --check failed: run 'ruff format .'" >&2; return 1; }
    mypy || { echo "mypy failed: fix the types it names (config: [tool.mypy] in pyproject.toml)" >&2; return 1; }
}
if [[ ${1:-} == --fast ]]; then
    shift
    bash scripts/setup.sh model,test
    . .venv/bin/activate
    checks
    exec python -m pytest -q -n auto -m "$FAST" "$@"  # pytest-xdist: one process per core
fi
missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
command -v docker-compose >/dev/null || missing+=(docker-compose)
command -v nginx >/dev/null || [[ -x /usr/sbin/nginx ]] || missing+=(nginx)
[[ -x /usr/bin/chromium ]] || missing+=(chromium)
command -v javac >/dev/null || missing+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null || missing+=(maven)
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || missing+=(postgresql)
[[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ]] || missing+=(rabbitmq-server)
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
if (( ${#missing[@]} )) && [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    (apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}") >/dev/null
fi
bash scripts/setup.sh model,test,apps
# tests/apps/test_python_client_9.py: the 9.x Python client, in an environment of its own (the core pins 8.x).
(python3 -m venv tests/apps/python9/.venv && tests/apps/python9/.venv/bin/python -m pip install --quiet \
    -r tests/apps/python9/requirements.txt) || echo "the 9.x client's environment failed: its tests will say why" >&2
if command -v npm >/dev/null; then  # tests/apps/test_node_clients.py; without npm those tests say what is missing
    (cd tests/apps/node && npm ci --no-audit --no-fund --loglevel=error) || echo "npm ci in tests/apps/node failed: its tests will say why" >&2
fi
if command -v mvn >/dev/null && command -v javac >/dev/null; then
    for engine in elasticsearch opensearch; do
        bash scripts/engine.sh prepare "$engine" || echo "scripts/engine.sh prepare $engine failed: its tests will say why" >&2
    done
fi
. .venv/bin/activate
checks
python -m pytest -q "$@"

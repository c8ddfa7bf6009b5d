#!/usr/bin/env bash
# Create .venv and install es-rerank with the given extras (idempotent).
# torch is installed first at the exact pinned version: any range would pull the
# newest CUDA build (gigabytes) instead of the local CPU wheel.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-model}"
python3 -m venv .venv
. .venv/bin/activate
python -m pip install --quiet --upgrade pip
if [[ ",$extras," == *",model,"* ]] && ! python -c "import torch" 2>/dev/null; then
    python -m pip install --quiet "torch==2.13.0"
fi
python -m pip install --quiet -e ".[$extras]"

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
    # ESRR_TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu: the CPU build where no local wheel exists.
    python -m pip install --quiet ${ESRR_TORCH_INDEX_URL:+--index-url "$ESRR_TORCH_INDEX_URL"} "torch==2.13.0"
fi
python -m pip install --quiet -e ".[$extras]"

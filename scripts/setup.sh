#!/usr/bin/env bash
# Create .venv and install es-rerank with the given extras (idempotent).
# torch is installed first at the exact pinned version: any range would pull the
# newest CUDA build (gigabytes) instead of the local CPU wheel.
# A stamp in .venv (a hash of pyproject.toml, the Python version, the torch index and this
# folder, then the extras installed) skips every pip call when none of them changed, so
# a second run takes a moment; `rm .venv/.esrr-setup` forces a reinstall.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-model}"
stamp=.venv/.esrr-setup
key=$( { cat pyproject.toml; python3 --version; echo "${ESRR_TORCH_INDEX_URL:-}"; pwd; } | sha256sum | cut -d' ' -f1)
installed=""
if [[ -x .venv/bin/python && -f $stamp ]]; then
    read -r stamped_key stamped_extras < "$stamp" || true
    if [[ ${stamped_key:-} == "$key" ]]; then
        installed="${stamped_extras:-}"
        missing=0
        for extra in ${extras//,/ }; do
            [[ ",$installed," == *",$extra,"* ]] || missing=1
        done
        [[ $missing == 0 ]] && exit 0  # nothing changed since the last install
    fi
fi
extras="${installed:+$installed,}$extras"  # keep what the same pyproject.toml installed before
extras=$(tr ',' '\n' <<< "$extras" | sed '/^$/d' | sort -u | paste -sd, -)
python3 -m venv .venv
. .venv/bin/activate
rm -f "$stamp"  # until this install has finished
python -m pip install --quiet --upgrade pip
if [[ ",$extras," == *",model,"* ]] && ! python -c "import torch" 2>/dev/null; then
    # ESRR_TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu: the CPU build where no local wheel exists.
    python -m pip install --quiet ${ESRR_TORCH_INDEX_URL:+--index-url "$ESRR_TORCH_INDEX_URL"} "torch==2.13.0"
fi
# Without setuptools' editable-install banner ("Please be careful with folders in your working
# directory..."), which pip relays as a warning on every install.
PYTHONWARNINGS="ignore:::setuptools.command.editable_wheel" python -m pip install --quiet -e ".[$extras]"
echo "$key $extras" > "$stamp"

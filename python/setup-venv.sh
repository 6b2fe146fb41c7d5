#!/usr/bin/env bash
# Creates the Python binding's virtual environment, target/py-venv (or $GUIDELOOM_PY_VENV), with
# maturin, pytest, numpy, mypy, grain, awkward and numba from PyPI (awkward and numba for
# guideloom.oamap's Awkward view and compiled scans), then builds the binding (python/, a release
# build) and installs it there with `pip install ./python`. Idempotent: an existing venv that
# imports its packages is reused; the binding is rebuilt only when a file under python/ or a crate
# it depends on is newer than the installed build (cargo's own checks make a rebuild of an
# unchanged tree cost seconds).
#
# GUIDELOOM_PY_PACKAGES_ONLY=1 installs the packages and stops before the binding.
#
# torch only with GUIDELOOM_PY_TORCH=1 (.ci/run sets it): the CPU-only build from PyTorch's index
# when it answers (about 200 MB), else PyPI's Linux wheel, the CUDA build (about 4 GB of nvidia-*
# packages; 3 minutes here), as benches/venv.sh does. The torch tests are skipped without it.
#
# Prints the venv's python executable on success.
#
#   bash python/setup-venv.sh
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${GUIDELOOM_PY_VENV:-target/py-venv}"
pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)
if ! "$venv/bin/python" -c 'import maturin, pytest, numpy, mypy, grain, awkward, numba' 2>/dev/null; then
  python3 -m venv "$venv" >&2
  "${pip[@]}" 'maturin>=1.9.4,<2' pytest numpy mypy grain awkward numba >&2
fi
if [ "${GUIDELOOM_PY_TORCH:-0}" = 1 ] && ! "$venv/bin/python" -c 'import torch' 2>/dev/null; then
  index=${GUIDELOOM_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
  if [ "$index" != pypi ] && curl -s -o /dev/null --max-time 15 -f "$index/torch/"; then
    "${pip[@]}" --no-cache-dir --index-url "$index" torch >&2
  else
    echo "setup-venv: $index unreachable; torch from PyPI (the CUDA build: about 4 GB, 3 minutes here)" >&2
    "${pip[@]}" --no-cache-dir torch >&2
  fi
fi
if [ "${GUIDELOOM_PY_PACKAGES_ONLY:-0}" = 1 ]; then
  # The packages alone (.ci/run installs them in the background while Rust builds).
  echo "$venv/bin/python"
  exit 0
fi
case "$venv" in /*) bin="$venv/bin" ;; *) bin="$PWD/$venv/bin" ;; esac
export PATH="$bin:$PATH"
stamp="$venv/.guideloom-build"
newest=$(find python/src python/guideloom python/Cargo.toml python/pyproject.toml formats/src storage/src loader/src interop/src oamap/src src/lib.rs -newer "$stamp" -print -quit 2>/dev/null || echo rebuild)
if [ ! -e "$stamp" ] || [ -n "$newest" ] || ! "$venv/bin/python" -c 'import guideloom' 2>/dev/null; then
  # --no-build-isolation: maturin comes from the venv (no download per build).
  "${pip[@]}" --no-build-isolation --force-reinstall --no-deps ./python >&2
  touch "$stamp"
fi
echo "$venv/bin/python"

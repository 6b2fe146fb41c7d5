#!/usr/bin/env bash
# Creates benches/.venv (the benchmarks' Python peers) and installs PACKAGES
# (default: numpy torch grain matplotlib, what benches/run.sh needs). Idempotent: packages already
# installed are kept, so a second call costs a few seconds.
#
# torch comes from PyTorch's CPU-only index (https://download.pytorch.org/whl/cpu, about 200 MB)
# when that index answers; otherwise from PyPI, whose Linux wheel is the CUDA build and pulls about
# 3 GB of nvidia-* packages (run on the CPU all the same). Set GUIDELOOM_TORCH_INDEX to another
# index, or to "pypi" to skip the CPU index. Wheels are not cached (--no-cache-dir: disk is tight).
#
#   benches/venv.sh [PACKAGE...]
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x benches/.venv/bin/python ]; then
  python3 -m venv benches/.venv
fi
pip=(benches/.venv/bin/pip install -q --disable-pip-version-check --no-cache-dir)
if [ $# -eq 0 ]; then
  set -- numpy torch grain matplotlib
fi
rest=()
for p in "$@"; do
  if [ "$p" = torch ]; then
    if benches/.venv/bin/python -c 'import torch' 2>/dev/null; then
      continue
    fi
    index=${GUIDELOOM_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
    if [ "$index" != pypi ] && curl -s -o /dev/null --max-time 15 -f "$index/torch/"; then
      echo "venv: torch (CPU-only) from $index"
      "${pip[@]}" --index-url "$index" torch
    else
      echo "venv: $index unreachable; torch from PyPI (the CUDA build, about 3 GB)"
      "${pip[@]}" torch
    fi
  else
    rest+=("$p")
  fi
done
if [ ${#rest[@]} -gt 0 ]; then
  # pip skips what is installed already.
  "${pip[@]}" "${rest[@]}"
fi
du -sh benches/.venv | sed 's/^/venv: /'

#!/usr/bin/env bash
# The loss curve of the candle example (adapters/candle/examples/candle_lm.rs): trains it for
# STEPS steps (default 300) in a release build, writes its per-step losses to
# docs/candle-loss.txt (`step loss f32-bits` lines) and plots them to docs/candle-loss.png.
# `--plot-only` re-plots the committed numbers without training. Creates the Python venv
# benches/.venv (matplotlib from PyPI) when it is missing.
#
#   benches/plot_loss.sh [STEPS | --plot-only]
set -euo pipefail
cd "$(dirname "$0")/.."

losses=docs/candle-loss.txt
if [ "${1:-}" != "--plot-only" ]; then
  cargo run --release -p guideloom-candle --example candle_lm -- --steps "${1:-300}" --losses "$losses"
fi

if [ ! -x benches/.venv/bin/python ]; then
  python3 -m venv benches/.venv
fi
if ! benches/.venv/bin/python -c 'import matplotlib' 2>/dev/null; then
  benches/.venv/bin/pip install -q --disable-pip-version-check matplotlib
fi

benches/.venv/bin/python - "$losses" docs/candle-loss.png <<'PY'
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

src, out = sys.argv[1], sys.argv[2]
steps, losses = [], []
with open(src) as f:
    for line in f:
        step, loss, _bits = line.split()
        steps.append(int(step))
        losses.append(float(loss))
fig, ax = plt.subplots(figsize=(7, 4), dpi=120)
ax.plot(steps, losses, linewidth=1.2)
ax.set_xlabel("step (batch of 16 x 64 bytes)")
ax.set_ylabel("training loss (cross-entropy, nats)")
ax.set_title("guideloom-candle example: byte-level transformer on Austen")
ax.grid(alpha=0.3)
fig.tight_layout()
fig.savefig(out)
print(f"{out}: {len(steps)} steps, loss {losses[0]:.3f} -> {losses[-1]:.3f}")
PY

#!/usr/bin/env bash
# Installs the distributed engines guideloom's adapters plug into (guideloom.spark, guideloom.ray)
# into the binding's venv (target/py-venv, or $GUIDELOOM_PY_VENV; make it first with
# python/setup-venv.sh): pyspark (Spark >= 4: the Python Data Source API) with pyarrow and pandas
# (Spark's Arrow batches), and ray[data] (ray.data.Datasink), from PyPI. tiktoken too, for the
# Spark tokenizing example (python/examples/spark_tokenize.py), which falls back to bytes without it.
#
# Spark needs a Java runtime (17+). A `java` on PATH (or $JAVA_HOME/bin/java) is used as it is;
# where none is found and the user is root, Debian's openjdk-17-jre-headless is installed with apt;
# otherwise the script fails saying so.
#
# With GUIDELOOM_BENCH_ENGINES=1 also mosaicml-streaming (its `dataframe_to_mds`, the ingest
# benchmark's reference: benches/engine_ingest.py); CI does not install it. Streaming 0.13 pins
# numpy < 2.2 (it downgrades the venv's numpy, under which mypy --strict of guideloom fails) and
# depends on torch (PyPI's CUDA build where PyTorch's CPU index is unreachable): give the bench a
# venv of its own (GUIDELOOM_PY_VENV=target/bench-venv, made by python/setup-venv.sh).
#
# Idempotent: packages that already import are not reinstalled. pyspark is an sdist (about 430 MB,
# its jars): pip builds a wheel of it once and keeps it in its cache. On a fresh venv here it took
# 14.5 minutes of wall time (49 s of CPU) while four other builds loaded the machine and its disk.
#
#   bash python/setup-engines.sh
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${GUIDELOOM_PY_VENV:-target/py-venv}"
if [ ! -x "$venv/bin/python" ]; then
  echo "setup-engines: no venv at $venv (run python/setup-venv.sh first)" >&2
  exit 1
fi
pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)
if ! "$venv/bin/python" -c 'import pyspark, pyarrow, pandas, ray.data, tiktoken
import sys; sys.exit(int(pyspark.__version__.split(".")[0]) < 4)' 2>/dev/null; then
  "${pip[@]}" 'pyspark>=4.0,<5' 'pyarrow>=15' pandas 'ray[data]>=2.40,<3' tiktoken >&2
fi
if [ "${GUIDELOOM_BENCH_ENGINES:-0}" = 1 ] && ! "$venv/bin/python" -c 'import streaming' 2>/dev/null; then
  "${pip[@]}" --no-cache-dir mosaicml-streaming >&2
fi
java_bin=""
if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; then
  java_bin="$JAVA_HOME/bin/java"
elif command -v java >/dev/null 2>&1; then
  java_bin="$(command -v java)"
elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "setup-engines: no Java runtime; installing openjdk-17-jre-headless with apt" >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openjdk-17-jre-headless >&2
  java_bin="$(command -v java)"
else
  echo "setup-engines: Spark needs a Java runtime (17+): none on PATH or in JAVA_HOME, and not root to install openjdk-17-jre-headless" >&2
  exit 1
fi
major="$("$java_bin" -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)"
if [ -z "$major" ] || [ "$major" -lt 17 ]; then
  echo "setup-engines: $java_bin is Java ${major:-of an unknown version}; Spark 4 needs 17+" >&2
  exit 1
fi
echo "$java_bin"

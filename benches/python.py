"""The Python binding's benchmarks (issue 27, item 8): guideloom.Loader from Python against the CLI
on the same data and workload (2,049-token u16 windows, batch 32, shuffled, warm page cache).

Rows: the CLI's `guideloom bench` (the ceiling); `guideloom.Loader` at workers 0/1/2 with a consumer
that only takes each batch and one that sums it with numpy; the per-batch overhead of the binding in
microseconds; and the GIL test: a consumer that holds the GIL for k ms per batch (a pure-Python
busy loop) or sleeps k ms, whose loader throughput must follow the consumer's own rate. Prints a
Markdown table and writes benches/out/python.json.

    bash python/setup-venv.sh && cargo build --release --bin guideloom
    target/py-venv/bin/python benches/python.py [--mib 256] [--seconds 3] [--workers 0,1,2]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import time
from pathlib import Path

import numpy as np

import guideloom as gl

ROOT = Path(__file__).resolve().parents[1]
SEQ, BATCH = 2049, 32


class U16:
    stream_dtype = np.dtype("<u2")

    def pack(self, data):
        return data

    def unpack(self, stream, shard_lengths, shards):
        return stream


def make_data(path: Path, mib: int) -> Path:
    tokens = mib * 2**20 // 2
    if (path / "manifest.json").exists() and len(gl.StreamStorage(path, storage_format=U16())) == tokens:
        return path
    import shutil

    shutil.rmtree(path, ignore_errors=True)
    rng = np.random.default_rng(0)
    chunk = 2**22
    with gl.StreamStorage(path, storage_format=U16(), mode="w") as st:
        for i, start in enumerate(range(0, tokens, chunk)):
            st.writer.append(rng.integers(0, 50_000, min(chunk, tokens - start), dtype=np.uint16), shard=i % 8)
    return path


def cli_rate(cli: Path, data: Path, workers: int, seconds: float, backend: str) -> float:
    out = subprocess.run(
        [str(cli), "bench", str(data), "--seq-len", str(SEQ), "--batch-size", str(BATCH), "--shuffle",
         "--workers", str(workers), "--seconds", str(seconds), "--backend", backend],
        check=True, capture_output=True, text=True,
    )
    text = out.stdout + out.stderr
    m = re.search(r"([0-9.]+) windows/s", text)
    if not m:
        raise RuntimeError(f"no rate in the CLI's output: {text}")
    return float(m.group(1))


def loader_rate(ts: gl.TokenWindows, workers: int, seconds: float, consume) -> float:
    loader = gl.Loader(ts, batch_size=BATCH, shuffle=True, seed=0, epochs=None, workers=workers)
    it = iter(loader)
    warm = time.perf_counter() + min(1.0, seconds / 3)
    while time.perf_counter() < warm:
        consume(next(it))
    n = 0
    t0 = time.perf_counter()
    end = t0 + seconds
    while True:
        consume(next(it))
        n += 1
        if n % 16 == 0 and time.perf_counter() >= end:
            break
    dt = time.perf_counter() - t0
    loader.close()
    return n * BATCH / dt


def take(b) -> None:
    b.data


def numpy_sum(b) -> None:
    b.data.sum()


def hold_gil(ms: float):
    def consume(b) -> None:
        end = time.perf_counter() + ms / 1000
        while time.perf_counter() < end:
            pass
    return consume


def sleep(ms: float):
    def consume(b) -> None:
        time.sleep(ms / 1000)
    return consume


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--workers", default="0,1,2")
    ap.add_argument("--cli", default=str(ROOT / "target" / "release" / "guideloom"))
    ap.add_argument("--gil-ms", default="1,5")
    a = ap.parse_args()
    workers = [int(w) for w in a.workers.split(",")]
    data = make_data(ROOT / "benches" / "out" / "data" / f"py-u16-{a.mib}mib", a.mib)
    ts = gl.TokenWindows(data, seq_len=SEQ)
    ts.read_batch(range(len(ts)))  # warm the page cache
    rows = []
    # The binding reads with the library's default backend (io_uring, else pread; never mmap);
    # the CLI's default `auto` is the hybrid mmap backend, so both are measured.
    print("| workers | CLI io-uring windows/s | CLI auto (hybrid mmap) | Loader take-only | ratio to CLI io-uring "
          "| overhead us/batch | Loader numpy-sum |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for w in workers:
        cli = cli_rate(Path(a.cli), data, w, a.seconds, "io-uring")
        hybrid = cli_rate(Path(a.cli), data, w, a.seconds, "auto")
        py = loader_rate(ts, w, a.seconds, take)
        sm = loader_rate(ts, w, a.seconds, numpy_sum)
        overhead = (BATCH / py - BATCH / cli) * 1e6
        rows.append({"workers": w, "cli": cli, "cli_hybrid": hybrid, "take": py, "sum": sm, "overhead_us": overhead})
        print(f"| {w} | {cli:,.0f} | {hybrid:,.0f} | {py:,.0f} | {py / cli:.2f} | {overhead:.1f} | {sm:,.0f} |")
    print()
    print("| consumer | k ms | consumer's own rate (windows/s) | Loader workers=2 | ratio |")
    print("| --- | --- | --- | --- | --- |")
    gil = []
    for ms in [float(x) for x in a.gil_ms.split(",")]:
        own = BATCH / (ms / 1000)
        for name, consume in (("holds the GIL", hold_gil(ms)), ("sleeps", sleep(ms))):
            r = loader_rate(ts, 2, a.seconds, consume)
            gil.append({"consumer": name, "ms": ms, "own": own, "loader": r})
            print(f"| {name} | {ms:g} | {own:,.0f} | {r:,.0f} | {r / own:.3f} |")
    out = ROOT / "benches" / "out" / "python.json"
    out.write_text(json.dumps({"seq_len": SEQ, "batch": BATCH, "mib": a.mib, "rows": rows, "gil": gil}, indent=1))


if __name__ == "__main__":
    main()

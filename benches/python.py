"""The Python binding's benchmarks (issue 27, item 8): guideloom from Python against the CLI and the
Python peers, on one data set and one workload (2,049-token u16 windows, batch 32, shuffled, warm
page cache).

Rows:
- the ceiling: the CLI's `guideloom bench` (io-uring, the binding's backend; and its default
  `auto`, the hybrid mmap backend);
- `guideloom.Loader` over `TokenWindows` at workers 0/1/2, with a consumer that only takes each
  batch and one that sums it with numpy; the binding's per-batch overhead in microseconds (against
  the CLI, and of the Python layer alone: `Loader.__next__` against `_Loader.next`);
- guideloom's `TokenWindows` inside torch's `DataLoader` (its `__getitems__`, workers 0 and 2) and
  Grain (`MapDataset.source(...).shuffle(...).batch(...)`, and `grain.DataLoader` at worker_count
  0 and 2);
- the peers at their best settings over the same tokens in one raw file (benches/peers.py: torch
  DataLoader with a batched `__getitems__`, Grain's DataLoader and MapDataset without read
  threads, the numpy gather loop), which sum every batch as the numpy-sum consumer does;
- the GIL test: a consumer that holds the GIL for k ms per batch (a pure-Python busy loop) and one
  that sleeps k ms, each against its own rate measured alone on the same machine in the same run.

Prints Markdown tables, writes benches/out/python.json, and with `--report FILE` replaces the
block between `<!-- BEGIN PYTHON` and `<!-- END PYTHON -->` in FILE (docs/BENCHMARKS.md).

    bash python/setup-venv.sh (GUIDELOOM_PY_TORCH=1 for torch) && cargo build --release --bin guideloom
    target/py-venv/bin/python benches/python.py [--mib 256] [--seconds 3] [--workers 0,1,2] [--report docs/BENCHMARKS.md]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import guideloom as gl

ROOT = Path(__file__).resolve().parents[1]
SEQ, BATCH = 2049, 32


class U16:
    """Token ids as they are (a Python format: the writer's `pack` is the identity)."""

    stream_dtype = np.dtype("<u2")

    def pack(self, data):
        return data

    def unpack(self, stream, shard_lengths, shards):
        return stream


def make_data(base: Path, mib: int) -> tuple[Path, Path]:
    """`mib` MiB of u16 tokens, as a raw file (the peers' np.memmap) and as a guideloom storage
    written from Python (8 shards): the same tokens in both."""
    tokens = mib * 2**20 // 2
    raw, storage = base / f"py-u16-{mib}mib.bin", base / f"py-u16-{mib}mib"
    if raw.exists() and raw.stat().st_size == 2 * tokens and (storage / "manifest.json").exists() \
            and len(gl.StreamStorage(storage, storage_format=U16())) == tokens:
        return raw, storage
    import shutil

    shutil.rmtree(storage, ignore_errors=True)
    base.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    chunk = 2**22
    with open(raw, "wb") as f, gl.StreamStorage(storage, storage_format=U16(), mode="w") as st:
        for i, start in enumerate(range(0, tokens, chunk)):
            part = rng.integers(0, 50_000, min(chunk, tokens - start), dtype=np.uint16)
            f.write(part.tobytes())
            st.writer.append(part, shard=i % 8)
    return raw, storage


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


def steady_rate(it, seconds: float, consume, batch_of=lambda b: b) -> float:
    """Windows/s of `consume` over batches of the iterator `it`, after a warm-up of a third of
    `seconds` (at most 1 s): worker start-up is not in the figure."""
    warm = time.perf_counter() + min(1.0, seconds / 3)
    while time.perf_counter() < warm:
        consume(next(it))
    n = windows = 0
    t0 = time.perf_counter()
    end = t0 + seconds
    while True:
        b = next(it)
        consume(b)
        windows += len(batch_of(b))
        n += 1
        if n % 8 == 0 and time.perf_counter() >= end:
            break
    return windows / (time.perf_counter() - t0)


def loader_rate(ts: gl.TokenWindows, workers: int, seconds: float, consume) -> float:
    loader = gl.Loader(ts, batch_size=BATCH, shuffle=True, seed=0, epochs=None, workers=workers)
    try:
        return steady_rate(iter(loader), seconds, consume, lambda b: b.indices)
    finally:
        loader.close()


def python_layer_us(ts: gl.TokenWindows, batches: int = 2000) -> tuple[float, float]:
    """(µs per batch of `_Loader.next()` alone, of `Loader.__next__`), workers 0."""
    loader = gl.Loader(ts, batch_size=BATCH, shuffle=True, seed=0, epochs=None, workers=0)
    it = iter(loader)
    for _ in range(100):
        next(it)
    rust = loader._rust
    t0 = time.perf_counter()
    for _ in range(batches):
        rust.next()
    raw = (time.perf_counter() - t0) / batches * 1e6
    t0 = time.perf_counter()
    for _ in range(batches):
        next(it)
    full = (time.perf_counter() - t0) / batches * 1e6
    loader.close()
    return raw, full


def repeat_forever(make):
    while True:
        yield from make()


def torch_rate(ts: gl.TokenWindows, workers: int, seconds: float) -> float | None:
    try:
        import torch
        from torch.utils.data import DataLoader
    except ImportError:
        return None
    g = torch.Generator()
    g.manual_seed(0)
    extra = dict(persistent_workers=True, prefetch_factor=4) if workers else {}
    # TokenWindows has __getitems__: the DataLoader's fetcher reads a whole batch in one call;
    # the collate stacks the rows into one tensor as a training loop gets it.
    loader = DataLoader(ts, batch_size=BATCH, shuffle=True, generator=g, num_workers=workers,
                        collate_fn=lambda rows: torch.from_numpy(np.stack(rows)), **extra)
    return steady_rate(repeat_forever(lambda: iter(loader)), seconds, lambda b: b.numpy().sum())


def grain_ds_rate(ts: gl.TokenWindows, seconds: float) -> float:
    import grain

    ds = grain.MapDataset.source(ts).shuffle(seed=0).batch(BATCH).repeat()
    it = iter(ds.to_iter_dataset(grain.ReadOptions(num_threads=0)))
    return steady_rate(it, seconds, lambda b: b.sum())


def grain_dl_rate(ts: gl.TokenWindows, workers: int, seconds: float) -> float:
    import grain.python as gp

    sampler = gp.IndexSampler(num_records=len(ts), shard_options=gp.NoSharding(), shuffle=True,
                              num_epochs=None, seed=0)
    loader = gp.DataLoader(data_source=ts, sampler=sampler, operations=[gp.Batch(batch_size=BATCH)],
                           worker_count=workers, read_options=gp.ReadOptions(num_threads=0, prefetch_buffer_size=0))
    return steady_rate(iter(loader), seconds, lambda b: b.sum())


def peer_rate(system: str, raw: Path, workers: int, seconds: float, guess: float) -> float | None:
    """Windows/s of benches/peers.py's `system` after its first batch, run for about `seconds`
    (its batch count from `guess` windows/s); None when its packages are missing."""
    batches = max(20, int(guess * seconds / BATCH))
    try:
        out = subprocess.run([sys.executable, str(ROOT / "benches" / "peers.py"), system, str(raw), "u16", str(SEQ),
                              str(BATCH), str(workers), str(batches), "0"],
                             capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        return None
    line = next((x for x in out.stdout.splitlines() if x.startswith("{")), None)
    if line is None:
        if "No module named" in out.stderr:
            return None
        raise RuntimeError(f"peers.py {system}: {out.stderr[-2000:]}")
    r = json.loads(line)
    return (r["windows"] - BATCH) / max(1e-9, r["seconds"] - r["first_batch_s"])


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


def own_rate(consume, seconds: float, batch) -> float:
    """Windows/s of `consume` alone over one ready batch (no loader)."""
    return steady_rate(repeat_forever(lambda: [batch]), seconds, consume, lambda b: b.indices)


def fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:,.0f}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--workers", default="0,1,2")
    ap.add_argument("--cli", default=os.environ.get("GUIDELOOM_BENCH_CLI", str(ROOT / "target" / "release" / "guideloom")))
    ap.add_argument("--gil-ms", default="1,5")
    ap.add_argument("--report", default=None, help="replace the PYTHON block of this Markdown file")
    a = ap.parse_args()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load_start = os.getloadavg()[0]
    workers = [int(w) for w in a.workers.split(",")]
    raw, data = make_data(ROOT / "benches" / "out" / "data", a.mib)
    ts = gl.TokenWindows(data, seq_len=SEQ)
    ts.read_batch(range(len(ts)))  # warm the page cache
    np.fromfile(raw, dtype=np.uint16).sum()
    lines: list[str] = []

    def out(line: str = "") -> None:
        print(line, flush=True)
        lines.append(line)

    rows = []
    out("| workers | CLI io-uring | CLI auto (hybrid mmap) | Loader take-only | take-only / CLI io-uring | overhead vs CLI µs/batch | Loader numpy-sum |")
    out("| --- | --- | --- | --- | --- | --- | --- |")
    for w in workers:
        cli = cli_rate(Path(a.cli), data, w, a.seconds, "io-uring")
        hybrid = cli_rate(Path(a.cli), data, w, a.seconds, "auto")
        take = loader_rate(ts, w, a.seconds, lambda b: b.data)
        sm = loader_rate(ts, w, a.seconds, lambda b: b.data.sum())
        overhead = (BATCH / take - BATCH / cli) * 1e6
        rows.append({"workers": w, "cli": cli, "cli_hybrid": hybrid, "take": take, "sum": sm, "overhead_us": overhead})
        out(f"| {w} | {cli:,.0f} | {hybrid:,.0f} | {take:,.0f} | {take / cli:.2f} | {overhead:.1f} | {sm:,.0f} |")
    raw_us, full_us = python_layer_us(ts)
    out()
    out(f"Python layer, workers 0: `_Loader.next()` {raw_us:.1f} µs a batch, `Loader.__next__` {full_us:.1f} µs "
        f"(the `Batch` object and the tuple unpacking: {full_us - raw_us:.1f} µs).")
    out()
    best_sum = max(r["sum"] for r in rows)
    peers = []
    out("| system (every batch summed with numpy) | workers | windows/s | guideloom.Loader numpy-sum (best) / this |")
    out("| --- | --- | --- | --- |")

    def peer(name: str, w: int | str, rate: float | None) -> None:
        peers.append({"system": name, "workers": w, "rate": rate})
        ratio = "n/a" if not rate else f"{best_sum / rate:.1f}x"
        out(f"| {name} | {w} | {fmt(rate)} | {ratio} |")

    for w in (0, 2):
        peer("torch DataLoader over guideloom TokenWindows (`__getitems__`)", w, torch_rate(ts, w, a.seconds))
    peer("grain MapDataset over guideloom TokenWindows (no read threads)", 0, grain_ds_rate(ts, a.seconds))
    for w in (0, 2):
        peer("grain.DataLoader over guideloom TokenWindows", w, grain_dl_rate(ts, w, a.seconds))
    for system, w in (("torch-best", 0), ("torch-best", 2), ("torch", 2), ("grain-dl-best", 0), ("grain-dl-best", 2),
                      ("grain-ds-best", 0), ("numpy", 0)):
        peer(f"peer: {system} (np.memmap of the same tokens)", w, peer_rate(system, raw, w, a.seconds, best_sum / 4))
    out()
    out("| consumer | k ms | its own rate alone (windows/s) | guideloom.Loader workers=2 | ratio |")
    out("| --- | --- | --- | --- | --- |")
    gil = []
    probe = next(iter(gl.Loader(ts, batch_size=BATCH, shuffle=True, seed=0, epochs=1)))
    for ms in [float(x) for x in a.gil_ms.split(",")]:
        for name, consume in (("holds the GIL", hold_gil(ms)), ("sleeps", sleep(ms))):
            own = own_rate(consume, a.seconds, probe)
            r = loader_rate(ts, 2, a.seconds, consume)
            gil.append({"consumer": name, "ms": ms, "own": own, "loader": r})
            out(f"| {name} | {ms:g} | {own:,.0f} | {r:,.0f} | {r / own:.3f} |")
    load_end = os.getloadavg()[0]
    result = {"seq_len": SEQ, "batch": BATCH, "mib": a.mib, "seconds": a.seconds, "started": started,
              "load_start": load_start, "load_end": load_end, "rows": rows, "python_layer_us": [raw_us, full_us],
              "peers": peers, "gil": gil}
    (ROOT / "benches" / "out").mkdir(exist_ok=True)
    (ROOT / "benches" / "out" / "python.json").write_text(json.dumps(result, indent=1))
    if a.report:
        def rel(arg: str) -> str:
            # Paths inside the repository as the reader's clone has them (relative to its root).
            try:
                return str(Path(arg).resolve().relative_to(ROOT.resolve()))
            except ValueError:
                return arg
        cmd = " ".join(["target/py-venv/bin/python", "benches/python.py", *(rel(x) for x in sys.argv[1:])])
        head = [f"<!-- BEGIN PYTHON generated by benches/python.py: do not edit by hand -->", "",
                f"`{cmd}`, started {started} on {platform.machine()} ({os.cpu_count()} CPUs), load average "
                f"{load_start:.1f} at the start and {load_end:.1f} at the end; {a.mib} MiB of u16 tokens "
                f"({len(ts):,} windows of {SEQ}), {a.seconds:g} s a figure after a warm-up, windows/s.", ""]
        block = "\n".join(head + lines + ["", "<!-- END PYTHON -->"])
        path = Path(a.report)
        text = path.read_text()
        begin, end = text.find("<!-- BEGIN PYTHON"), text.find("<!-- END PYTHON -->")
        if begin < 0 or end < 0:
            raise SystemExit(f"{path} has no <!-- BEGIN PYTHON ... END PYTHON --> block")
        path.write_text(text[:begin] + block + text[end + len("<!-- END PYTHON -->"):])


if __name__ == "__main__":
    main()

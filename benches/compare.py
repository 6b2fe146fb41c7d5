"""guideloom benchmark driver: runs every system on the same workload, interleaved, and writes the
tables of docs/BENCHMARKS.md (between the SUMMARY and GENERATED markers) and
docs/benchmarks_window_size.png.

Run through benches/run.sh (it creates the venv and builds the programs). Results of every run
are appended to benches/out/results.jsonl; the whole set is kept in benches/out/results.json,
each record tagged with the run (`run_id`) that produced it.

    python benches/compare.py [--all] [--quick] [--runs N] [--runs-other N]
                              [--sections main,u32,verify,sweep,cold,scaling,memory,startup,resume,python]
                              [--backends auto,mmap] [--keep-data] [--workers 0,1,2]
                              [--skip SYSTEM,...] [--report-to FILE] [--merge] [--report-only]

`--sections interop` alone (benches/interop.sh) measures foreign datasets read in place (a
Megatron .bin/.idx and a nanoGPT train.bin over the same 1 GiB of u16 tokens) against the
native storage, megatron-core's IndexedDataset and nanoGPT's memmap gather, and rewrites only
the INTEROP block of docs/BENCHMARKS.md. `--sections python` (also the last section of a full
run) runs benches/python.py in the binding's venv and rewrites the PYTHON block. `--sections
formats` alone (benches/formats.sh; benches/run.sh runs it after the others) measures issue 28's
layouts (Hugging Face Arrow, Parquet, ArrayRecord, TFRecord, WebDataset: the same documents,
written by benches/formats.py) against the native storage and their Python peers, warm and cold,
and rewrites only the FORMATS block.
"""
import argparse
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "benches", "out")
DATA = os.path.join(OUT, "data")
# GUIDELOOM_BENCH_CLI / GUIDELOOM_BENCH_TARGET point at other builds (a CARGO_TARGET_DIR of
# one's own; a "before" binary for an A/B run); the defaults are benches/run.sh's.
_RELEASE = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release")
TARGET = os.environ.get("GUIDELOOM_BENCH_TARGET", _RELEASE)
CLI = os.environ.get("GUIDELOOM_BENCH_CLI", os.path.join(_RELEASE, "guideloom"))
CLI_BEFORE = os.environ.get("GUIDELOOM_BENCH_CLI_BEFORE")
NATIVE = os.path.join(TARGET, "guideloom_benches")
# The C equivalent of `guideloom_benches raw` (benches/raw_limit.c, -O3 -march=native), the check
# that the raw limit is the machine's: its rate is listed beside the Rust raw limit's.
RAW_C = os.path.join(TARGET, "raw_limit_c")
BURN = os.path.join(TARGET, "burn_loader")
PY = os.path.join(ROOT, "benches", ".venv", "bin", "python")
PEERS = os.path.join(ROOT, "benches", "peers.py")
DOC = os.path.join(ROOT, "docs", "BENCHMARKS.md")
PLOT = os.path.join(ROOT, "docs", "benchmarks_window_size.png")
BATCH = 32
SEED = 1
GIB = 1 << 30
# Bytes of each token data set (1 GiB; --quick: 64 MiB).
DATA_BYTES = GIB
# Every section, in the order they run (the default of --sections).
ALL_SECTIONS = ("main", "u32", "verify", "sweep", "layouts", "batches", "cold", "scaling", "memory", "startup", "resume",
                "python")
# The shard layouts of the layouts section (issue 31): data set name -> (bytes, shards), u16
# tokens of the same corpus; the main data set is 1 GiB in 8 shards. --quick divides the bytes
# by 16.
LAYOUTS = {"u16-16x24MB": (16 * 24_000_000, 16), "u16-1024x256KiB": (1024 * 262_144, 1024)}
# The batch sizes of the batches section: (window tokens, batch, batches per run; 0 = an epoch).
BATCH_SIZES = ((2049, 1, 0), (2049, 4, 0), (2049, 8, 0), (2049, 32, 0), (129, 256, 4096))
# Start-up at scale: shards of the many-shard storage (1,000 u16 tokens each) and sparse shard
# files of 10^6 u16 tokens (10^11 elements at 100,000); --quick makes them smaller.
MANY_SHARDS = 100_000
SPARSE_SHARDS = 100_000
SPARSE_ELEMENTS = 1_000_000
STARTUP_BYTES = 256 << 20
MEMORY_SECONDS = 5
# This invocation: its id (UTC start time) tags every record it makes.
RUN_ID = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
HZ = os.sysconf("SC_CLK_TCK")


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


# ---------------------------------------------------------------- dataset

MEGATRON_PREFIX = os.path.join(DATA, "megatron", "u16_text_document")


def make_data(dtypes=("u16", "u32")):
    os.makedirs(DATA, exist_ok=True)
    for dtype, tok in (("u16", "gpt2"), ("u32", "cl100k")):
        if dtype not in dtypes:
            continue
        src = os.path.join(DATA, f"austen-{dtype}")
        if not os.path.exists(os.path.join(src, "manifest.json")):
            sh([CLI, "ingest", "text", "--out", src, "--tokenizer", tok, "--dtype", dtype, "--eos",
                os.path.join(ROOT, "data", "austen")])
        store, binf = os.path.join(DATA, dtype), os.path.join(DATA, f"{dtype}.bin")
        if not (os.path.exists(os.path.join(store, "manifest.json")) and os.path.getsize(binf) == DATA_BYTES
                if os.path.exists(binf) else False):
            print(f"writing {DATA_BYTES / 2**20:,.0f} MiB of {dtype} tokens (8 shards + raw .bin)", flush=True)
            sh([NATIVE, "mkdata", src, dtype, str(DATA_BYTES), "8", store, binf])


def make_layouts():
    """The data sets of the layouts section (LAYOUTS), each with its raw .bin."""
    src = os.path.join(DATA, "austen-u16")
    for name, (nbytes, shards) in LAYOUTS.items():
        store, binf = os.path.join(DATA, name), os.path.join(DATA, f"{name}.bin")
        if not (os.path.exists(os.path.join(store, "manifest.json")) and os.path.exists(binf)
                and os.path.getsize(binf) == nbytes):
            print(f"writing {nbytes / 2**20:,.0f} MiB of u16 tokens in {shards} shards + raw .bin ({name})", flush=True)
            sh([NATIVE, "mkdata", src, "u16", str(nbytes), str(shards), store, binf])


def expected_epoch_sum(dtype, seq):
    # In a child process: a child's ru_maxrss starts from the RSS of the process that spawned it
    # (Linux carries the high-water mark over exec), so this driver must stay small.
    code = ("import numpy as np, sys; a = np.memmap(sys.argv[1], dtype=sys.argv[2], mode='r'); n = len(a) // int(sys.argv[3]); "
            "print(int(a[: n * int(sys.argv[3])].sum(dtype=np.uint64)), n)")
    s, n = sh([PY, "-c", code, os.path.join(DATA, f"{dtype}.bin"), "uint16" if dtype == "u16" else "uint32", str(seq)]).split()
    return s, int(n)


# ---------------------------------------------------------------- systems


def command(system, dtype, seq, workers, k, backend=None, method=None, data=None, batch=None):
    """The command line of one run; k = batches (0 = one epoch); data: the data set's name
    (default: the main one of `dtype`); batch: windows per batch (default BATCH)."""
    name = data or dtype
    binf, store = os.path.join(DATA, f"{name}.bin"), os.path.join(DATA, name)
    env = dict(os.environ)
    BATCH = batch or globals()["BATCH"]
    if system in ("guideloom-cli", "guideloom-cli-before"):
        cmd = [CLI if system == "guideloom-cli" else CLI_BEFORE, "bench", store, "--seq-len", str(seq), "--batch-size", str(BATCH), "--shuffle", "--seed", str(SEED),
               "--workers", str(workers), "--backend", backend, "--json"]
        if k:
            cmd += ["--max-batches", str(k)]
    elif system in ("guideloom-lib", "guideloom-lib-generic", "guideloom-lib-mapped"):
        cmd = [NATIVE, {"guideloom-lib": "lib", "guideloom-lib-generic": "lib-generic", "guideloom-lib-mapped": "lib-mapped"}[system], store, dtype, str(seq), str(BATCH), str(workers), str(k), str(SEED)]
        if backend and backend != "auto":
            env["GUIDELOOM_IO"] = backend.replace("-", "_")
    elif system in ("guideloom-megatron", "guideloom-nanogpt"):
        path = MEGATRON_PREFIX if system == "guideloom-megatron" else binf
        cmd = [CLI, "bench", path, "--seq-len", str(seq), "--batch-size", str(BATCH), "--shuffle", "--seed", str(SEED),
               "--workers", str(workers), "--backend", backend, "--json"]
        if system == "guideloom-nanogpt":
            cmd += ["--format", "nanogpt", "--dtype", "u16"]
        if k:
            cmd += ["--max-batches", str(k)]
    elif system in ("gl-format", "py-format"):
        cmd = format_command(system, seq, workers, k, backend, method)
    elif system in ("megatron", "nanogpt"):
        path = MEGATRON_PREFIX + ".bin" if system == "megatron" else binf
        cmd = [PY, PEERS, system, path, dtype, str(seq), str(BATCH), "0", str(k), str(SEED)]
    elif system == "guideloom-cpumap":
        cmd = [NATIVE, "cpu-map", str(CPU_RECORDS), str(CPU_ROUNDS), str(BATCH), str(workers), str(SEED)]
    elif system == "burn-cpumap":
        cmd = [BURN, "cpu-map", str(CPU_RECORDS), str(CPU_ROUNDS), str(BATCH), str(workers), str(SEED)]
    elif system == "raw" and method == "c-mmap":
        cmd = [RAW_C, binf, dtype, str(seq), str(BATCH), str(max(workers, 1)), str(k), str(SEED), "mmap"]
    elif system == "raw":
        cmd = [NATIVE, "raw", binf, dtype, str(seq), str(BATCH), str(max(workers, 1)), str(k), str(SEED), method]
    elif system == "burn":
        cmd = [BURN, binf, dtype, str(seq), str(BATCH), str(workers), str(k), str(SEED)]
    elif system.endswith("-1p"):  # a peer's configuration in one process (0 workers), whatever the table's workers
        cmd = [PY, PEERS, system[:-3], binf, dtype, str(seq), str(BATCH), "0", str(k), str(SEED)]
    else:
        cmd = [PY, PEERS, system, binf, dtype, str(seq), str(BATCH), str(workers), str(k), str(SEED)]
    return cmd, env


def label(system, backend=None, method=None):
    if system in ("gl-format", "py-format"):
        return FORMAT_LABELS[method] if system == "gl-format" else FORMAT_PEER_LABELS[method]
    if system == "guideloom-cli":
        return f"guideloom CLI ({backend})"
    if system == "guideloom-cli-before":
        return f"guideloom CLI before ({backend})"
    if system == "guideloom-lib":
        return f"guideloom lib TokenWindows ({backend})"
    if system == "guideloom-lib-mapped":
        return "guideloom lib zero-copy views (mmap)"
    if system == "guideloom-lib-generic":
        return f"guideloom lib StreamWindows ({backend})"
    if system == "raw":
        return f"raw limit ({method})"
    if system == "guideloom-megatron":
        return f"guideloom CLI, Megatron .bin/.idx in place ({backend})"
    if system == "guideloom-nanogpt":
        return f"guideloom CLI, nanoGPT train.bin in place ({backend})"
    return {"megatron": "megatron-core IndexedDataset (get per sequence)", "nanogpt": "nanoGPT get_batch (np.memmap gather)",
            "torch": "torch DataLoader", "grain-dl": "Grain DataLoader", "grain-ds": "Grain MapDataset",
            "torch-best": "torch DataLoader, batched __getitems__, persistent workers, prefetch 4",
            "grain-dl-best": "Grain DataLoader, ReadOptions(num_threads=0, prefetch_buffer_size=0)",
            "torch-best-1p": "torch DataLoader, batched __getitems__, 0 workers (1 process)",
            "grain-dl-best-1p": "Grain DataLoader, ReadOptions(num_threads=0, prefetch_buffer_size=0), 0 workers (1 process)",
            "grain-ds-best": "Grain MapDataset, ReadOptions(num_threads=0), 1 process", "numpy": "numpy memmap gather (np.stack), 1 process",
            "burn": "burn DataLoader", "guideloom-cpumap": "guideloom Loader, CPU-heavy map",
            "burn-cpumap": "burn DataLoader, CPU-heavy get"}[system]


def cpu_busy():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v) - v[3] - v[4]) / HZ


def run_one(cmd, env, timeout=600):
    """Runs one measured command in its own process group; returns (json, rusage, other_load)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        b0, t0 = cpu_busy(), time.time()
        p = subprocess.Popen(cmd, env=env, stdout=out, stderr=err, start_new_session=True)
        deadline = t0 + timeout
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.time() > deadline:
                os.killpg(p.pid, signal.SIGKILL)
                pid, status, ru = os.wait4(p.pid, 0)
                break
            time.sleep(0.005)
        wall, b1 = time.time() - t0, cpu_busy()
        try:  # worker processes a peer left behind (its teardown is not measured)
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out.seek(0)
        err.seek(0)
        text = out.read()
        lines = [l for l in text.splitlines() if l.startswith("{")]
        if os.waitstatus_to_exitcode(status) != 0 or not lines:
            raise RuntimeError(f"{' '.join(cmd)} failed ({status}): {err.read()[-2000:]}")
        own = ru.ru_utime + ru.ru_stime
        other = max(0.0, (b1 - b0 - own) / wall) if wall > 0 else 0.0
        return json.loads(lines[-1]), ru, other


def fadvise_dontneed(paths):
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def data_files(name):
    store = os.path.join(DATA, name)
    return [os.path.join(DATA, f"{name}.bin")] + [os.path.join(store, f) for f in os.listdir(store) if f.endswith(".stream")]


def measure(section, configs, runs, results, cold=False):
    """configs: list of dicts (system, dtype, seq, workers, k, backend, method). Interleaved:
    every round runs every configuration once, in a rotated order."""
    for r in range(runs):
        order = configs[r % len(configs):] + configs[: r % len(configs)]
        for c in order:
            cmd, env = command(c["system"], c["dtype"], c["seq"], c["workers"], c["k"], c.get("backend"), c.get("method"),
                               c.get("data"), c.get("batch"))
            if cold:
                fadvise_dontneed(data_files(c.get("data") or c["dtype"]))
            load1 = os.getloadavg()[0]
            try:
                j, ru, other = run_one(cmd, env)
            except RuntimeError as e:
                print(f"  FAILED {label(c['system'], c.get('backend'), c.get('method'))}: {e}", flush=True)
                rec = dict(c, section=section, run=r, run_id=RUN_ID, error=str(e)[:500])
                results.append(rec)
                continue
            w, s, f = j["windows"], j["seconds"], j["first_batch_s"]
            bsz = c.get("batch") or BATCH
            steady = (w - bsz) / (s - f) if s > f and w > bsz else w / s
            rec = dict(c, section=section, run=r, run_id=RUN_ID, cold=cold, windows=w, seconds=s, first_batch_s=f,
                       windows_per_s=w / s, steady_windows_per_s=steady, tokens_per_s=w * c["seq"] / s,
                       checksum=j["checksum"], epoch_windows=j.get("epoch_windows"),
                       rss_kb=j.get("rss_kb") or ru.ru_maxrss, rss_clean=True, cpu_s=ru.ru_utime + ru.ru_stime,
                       other_load=other, loadavg1=load1, label=label(c["system"], c.get("backend"), c.get("method")),
                       cmd=" ".join(os.path.relpath(x, ROOT) if x.startswith(ROOT) else x for x in cmd))
            results.append(rec)
            with open(os.path.join(OUT, "results.jsonl"), "a") as fh:
                fh.write(json.dumps(rec) + "\n")
            print(f"  [{section} {r + 1}/{runs}] {rec['label']:<32} {c['dtype']} L={c['seq']} W={c['workers']}: "
                  f"{steady / 1e3:8.1f} k windows/s, first {f * 1e3:7.1f} ms, rss {rec['rss_kb'] / 1024:6.0f} MiB, "
                  f"other load {other:.2f}", flush=True)


# ---------------------------------------------------------------- sections

# Batches per run for the Python peers (chosen so a run takes 1-3 s here at 2,049 tokens); the
# Rust systems read one whole epoch at 2,049 tokens (8,188 batches of the 1 GiB set).
PY_K = {("torch", 0): 1500, ("torch", 1): 1500, ("torch", 2): 1500,
        ("torch-best", 0): 3000, ("torch-best", 1): 3000, ("torch-best", 2): 3000,
        ("grain-dl", 0): 100, ("grain-dl", 1): 200, ("grain-dl", 2): 300,
        ("grain-dl-best", 0): 1000, ("grain-dl-best", 1): 1000, ("grain-dl-best", 2): 1000,
        ("grain-ds", 0): 500, ("grain-ds", 1): 500, ("grain-ds", 2): 500,
        ("numpy", 0): 4000, ("grain-ds-best", 0): 2000, ("torch-best-1p", 0): 3000, ("grain-dl-best-1p", 0): 1000}
# The Python peers of the main section and the worker counts each runs with (the default
# configuration and the best one found in their documentation: see benches/peers.py).
# (Their settings with 0 workers are the one-process systems "torch-best-1p", "grain-dl-best-1p".)
PY_MAIN = {"torch": (0, 2), "torch-best": (1, 2), "grain-dl": (0, 2), "grain-dl-best": (2,), "grain-ds": (0, 2)}
# Peers that run in one process whatever `workers` says (listed in the lowest workers table).
PY_ONE_PROCESS = ("numpy", "grain-ds-best", "torch-best-1p", "grain-dl-best-1p")
# The peers of the other sections: the best configurations of the main section on 2 cores (all
# in one process: worker processes cost more than they bring there, for torch and Grain alike).
PY_BEST = ("torch-best-1p", "grain-dl-best-1p")
# Peer families of the summary: a family's best configuration is its fastest measured row.
FAMILIES = (("burn DataLoader", ("burn",)), ("numpy memmap gather", ("numpy",)),
            ("torch DataLoader", ("torch", "torch-best", "torch-best-1p")), ("Grain MapDataset", ("grain-ds", "grain-ds-best")),
            ("Grain DataLoader", ("grain-dl", "grain-dl-best", "grain-dl-best-1p")))
# Systems left out (--skip).
SKIP = set()


def rust_k(seq):
    # One epoch from 513 tokens up (262,016 windows at 2,049); 32,768 batches (1 M windows, a
    # quarter of the epoch) at 129 tokens.
    return 0 if seq >= 513 else 32768


def configs_for(dtype, seq, workers_list, backends, k_py=None, generic=False, mapped=True, py=None):
    """The configurations of one table. py: {peer: worker counts} (default PY_MAIN); the one-process
    peers (PY_ONE_PROCESS) run once, in the lowest workers table."""
    py = PY_MAIN if py is None else py
    k_py = k_py or PY_K
    cs = []
    for w in workers_list:
        for b in backends:
            cs.append(dict(system="guideloom-cli", backend=b, dtype=dtype, seq=seq, workers=w, k=rust_k(seq)))
        cs.append(dict(system="guideloom-lib", backend="auto", dtype=dtype, seq=seq, workers=w, k=rust_k(seq)))
        if mapped:
            cs.append(dict(system="guideloom-lib-mapped", backend="auto", dtype=dtype, seq=seq, workers=w, k=rust_k(seq)))
        if generic:
            cs.append(dict(system="guideloom-lib-generic", backend="auto", dtype=dtype, seq=seq, workers=w, k=rust_k(seq)))
        if w != 1:
            for m in ("mmap", "pread") + (("c-mmap",) if os.path.exists(RAW_C) else ()):
                cs.append(dict(system="raw", method=m, dtype=dtype, seq=seq, workers=w, k=rust_k(seq)))
        cs.append(dict(system="burn", dtype=dtype, seq=seq, workers=w, k=rust_k(seq)))
        for s, ws in py.items():
            if w in ws:
                cs.append(dict(system=s, dtype=dtype, seq=seq, workers=w, k=k_py[(s, w)]))
        if w == min(workers_list):
            for s in PY_ONE_PROCESS:
                # One process whatever `workers` says (listed in this workers table).
                cs.append(dict(system=s, dtype=dtype, seq=seq, workers=w, k=k_py[(s, 0)]))
        if CLI_BEFORE:
            for b in backends:
                cs.append(dict(system="guideloom-cli-before", backend=b, dtype=dtype, seq=seq, workers=w, k=rust_k(seq)))
    return [c for c in cs if c["system"] not in SKIP]


# The scaling section: records whose map costs a fixed chain of integer-hash steps.
CPU_RECORDS = 32_000
CPU_ROUNDS = 12_000


def scaling_section(runs, results):
    cs = [dict(system=s, dtype="-", seq=0, workers=w, k=0) for w in (0, 1, 2) for s in ("guideloom-cpumap", "burn-cpumap")]
    cs = [c for c in cs if c["system"] not in SKIP]
    measure("scaling", cs, runs, results)


def scaling_table(results):
    g = group(results, "scaling", key=lambda r: (r["label"], r["workers"]))
    if not g:
        return []
    rate = {k: med([x["windows"] / x["seconds"] for x in v]) for k, v in g.items()}
    out = [f"{CPU_RECORDS:,} records, batch {BATCH}, shuffled; each record's `map` (guideloom) or `get` (burn) runs "
           f"{CPU_ROUNDS:,} steps of a dependent integer-hash chain (`work` in benches/native and benches/burn_loader); "
           "the consumer sums the results. Records/s over the whole run (start-up included); ideal = "
           "max(workers, 1) x the rate with 0 workers (one thread).", "",
           "| system | workers | k records/s median (min–max) | µs of CPU per record (1 thread) | share of ideal linear scaling | runs | other load |",
           "|---|---|---|---|---|---|---|"]
    for (lab, w), rs in sorted(g.items()):
        xs = [x["windows"] / x["seconds"] for x in rs]
        base = rate.get((lab, 0))
        us = f"{1e6 / base:.1f}" if base else "?"
        share = f"{rate[(lab, w)] / (max(w, 1) * base):.0%}" if base else "?"
        out.append(f"| {lab} | {w} | {fmt_k(med(xs))} ({fmt_k(min(xs))}–{fmt_k(max(xs))}) | {us} | {share} | {len(rs)} | "
                   f"{med([x['other_load'] for x in rs]):.2f} |")
    return out + [""]


def time_rss(cmd):
    """Runs cmd under /usr/bin/time (a small parent, so the peak RSS is the command's own, not
    this driver's carried over an exec); returns (wall s, peak RSS KiB, stdout)."""
    t0 = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-f", "RSS_KB %M"] + cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr[-2000:]}")
    rss = int(re.findall(r"^RSS_KB (\d+)$", p.stderr, re.M)[-1])
    return wall, rss, p.stdout


def make_sparse(d, shards, elements):
    """A u16 stream storage of `shards` sparse shard files of `elements` tokens each (zeros, a
    hole on disk): the manifest of a 1-shard storage made by benches/native mkdata, its shard
    list replaced. Checksums are 0 (reading does not check them; `guideloom verify` would refuse
    the storage)."""
    tmpl = d + ".template"
    sh([NATIVE, "mkdata", os.path.join(DATA, "austen-u16"), "u16", str(2 * 1000), "1", tmpl])
    m = json.load(open(os.path.join(tmpl, "manifest.json")))
    one = m["shards"][0]
    assert one["bytes"] == 2 * one["elements"] and not one.get("files"), one
    sh(["rm", "-rf", d])
    os.makedirs(d)
    for f in os.listdir(tmpl):
        if f != "manifest.json" and not f.endswith(".stream"):
            sh(["cp", "-r", os.path.join(tmpl, f), d])
    sh(["rm", "-rf", tmpl])
    m["shards"] = [dict(id=i, elements=elements, bytes=2 * elements, checksum=0) for i in range(shards)]
    for i in range(shards):
        with open(os.path.join(d, f"shard-{i:05}.stream"), "wb") as f:
            f.truncate(2 * elements)
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump(m, f)


def startup_section(runs, results):
    """Open and first-batch time and the CLI's wall time and peak RSS against the number of
    shards: 1-10,000 shards of one 256 MiB u16 stream, MANY_SHARDS shards of 1,000 tokens, and
    SPARSE_SHARDS sparse shards of SPARSE_ELEMENTS tokens (10^11 elements by default)."""
    stores = [(f"{n:,} shard{'s' if n > 1 else ''}, {STARTUP_BYTES >> 20} MiB", n, "mkdata", STARTUP_BYTES)
              for n in (1, 10, 100, 1000, 10000)]
    stores.append((f"{MANY_SHARDS:,} shards of 1,000 tokens", MANY_SHARDS, "mkdata", 2000 * MANY_SHARDS))
    stores.append((f"{SPARSE_SHARDS * SPARSE_ELEMENTS:.0e} elements in {SPARSE_SHARDS:,} sparse shards".replace("e+", "e"),
                   SPARSE_SHARDS, "sparse", 2 * SPARSE_SHARDS * SPARSE_ELEMENTS))
    for name, shards, how, nbytes in stores:
        d = os.path.join(DATA, f"startup-{how}-{shards}")
        t0 = time.time()
        if how == "mkdata":
            sh([NATIVE, "mkdata", os.path.join(DATA, "austen-u16"), "u16", str(nbytes), str(shards), d])
        else:
            make_sparse(d, shards, SPARSE_ELEMENTS)
        print(f"  made {name} in {time.time() - t0:.1f} s", flush=True)
        for r in range(runs):
            j, ru, other = run_one([NATIVE, "lib", d, "u16", "2049", str(BATCH), "2", "1", str(SEED)], dict(os.environ))
            wall, rss_kb, _ = time_rss([CLI, "bench", d, "--seq-len", "2049", "--batch-size", str(BATCH), "--shuffle",
                                        "--seed", str(SEED), "--workers", "2", "--max-batches", "1", "--json"])
            results.append(dict(section="startup", run_id=RUN_ID, storage=name, shards=shards, bytes=nbytes, run=r,
                                open_s=j["open_s"], first_batch_s=j["first_batch_s"], records=j["epoch_windows"],
                                cli_wall_s=wall, cli_rss_kb=rss_kb, other_load=other, loadavg1=os.getloadavg()[0]))
            print(f"  [startup {r + 1}/{runs}] {name}: open {j['open_s'] * 1e3:.1f} ms, first batch "
                  f"{j['first_batch_s'] * 1e3:.1f} ms, CLI {wall * 1e3:.0f} ms, {rss_kb / 1024:.1f} MiB", flush=True)
        sh(["rm", "-rf", d])


def memory_section(results):
    """Peak RSS of `guideloom bench` (io_uring backend, workers 2, shuffled u16 windows of 2,049
    tokens) against prefetch and batch size, for 20 batches and for MEMORY_SECONDS s (epochs
    repeating). Not the CLI's default backend: it maps warm shards, whose page-cache pages count
    in RSS although the loader allocates none of them. Was benches/memory.sh."""
    store = os.path.join(DATA, "u16")
    for batch in (32, 1024):
        for prefetch in (1, 4, 16):
            for run in ("short", "long"):
                lim = ["--max-batches", "20"] if run == "short" else ["--seconds", str(MEMORY_SECONDS)]
                cmd = [CLI, "bench", store, "--seq-len", "2049", "--batch-size", str(batch), "--shuffle", "--seed", str(SEED),
                       "--workers", "2", "--prefetch", str(prefetch), "--backend", "io-uring"] + lim + ["--json"]
                try:
                    wall, rss_kb, out = time_rss(cmd)
                except RuntimeError as e:
                    print(f"  FAILED memory batch {batch} prefetch {prefetch} {run}: {e}", flush=True)
                    continue
                j = json.loads([l for l in out.splitlines() if l.startswith("{")][-1])
                results.append(dict(section="memory", run_id=RUN_ID, batch=batch, prefetch=prefetch, run=run,
                                    batches=j["batches"], rss_kb=rss_kb, loadavg1=os.getloadavg()[0]))
                print(f"  [memory] batch {batch} prefetch {prefetch} {run}: {j['batches']} batches, "
                      f"{rss_kb / 1024:.1f} MiB", flush=True)


def resume_section(runs, results):
    store = os.path.join(DATA, "u16")
    for pos in (1, 1000, 1_000_000, 1_000_000_000):
        for r in range(runs):
            j, ru, other = run_one([NATIVE, "resume", store, "u16", "2049", str(BATCH), str(pos)], dict(os.environ))
            results.append(dict(section="resume", run_id=RUN_ID, position=pos, run=r, state_bytes=j["state_bytes"],
                                resume_s=j["resume_s"], loadavg1=os.getloadavg()[0]))
    # The CLI's state file after 1,000 batches.
    with tempfile.TemporaryDirectory() as t:
        f = os.path.join(t, "state.json")
        sh([CLI, "batches", store, "--seq-len", "2049", "--batch-size", str(BATCH), "--shuffle", "--workers", "2",
            "--max-batches", "1000", "--no-tokens", "--save-state", f])
        results.append(dict(section="resume-cli", run_id=RUN_ID, state_bytes=os.path.getsize(f)))


def make_megatron():
    """A Megatron dataset over the bytes of u16.bin (hard-linked as its .bin), with an .idx of
    MMIDIDX v1 written by numpy: sequences (= documents) of 64..8,192 tokens (seeded)."""
    os.makedirs(os.path.dirname(MEGATRON_PREFIX), exist_ok=True)
    binf = MEGATRON_PREFIX + ".bin"
    if not os.path.exists(binf):
        os.link(os.path.join(DATA, "u16.bin"), binf)
    code = r"""
import numpy as np, os, sys
prefix = sys.argv[1]
total = os.path.getsize(prefix + '.bin') // 2
rng = np.random.default_rng(13)
lengths = rng.integers(64, 8193, size=total // 64 + 2).astype(np.int64)
cum = np.cumsum(lengths)
n = int(np.searchsorted(cum, total)) + 1
lengths = lengths[:n]
lengths[-1] -= int(lengths.sum()) - total
pointers = np.concatenate([[0], np.cumsum(lengths[:-1] * 2)]).astype(np.int64)
docs = np.arange(n + 1, dtype=np.int64)
with open(prefix + '.idx', 'wb') as f:
    f.write(b'MMIDIDX\x00\x00')
    f.write(np.array([1], '<u8').tobytes()); f.write(bytes([8]))
    f.write(np.array([n, n + 1], '<u8').tobytes())
    f.write(lengths.astype('<i4').tobytes()); f.write(pointers.astype('<i8').tobytes()); f.write(docs.astype('<i8').tobytes())
print(n)
"""
    if not os.path.exists(MEGATRON_PREFIX + ".idx"):
        print("writing the Megatron .idx", sh([PY, "-c", code, MEGATRON_PREFIX]).strip(), "sequences", flush=True)


def interop_section(runs, results):
    make_megatron()
    seq, k_py = 2049, 500
    cs = []
    for w in (0, 2):
        cs.append(dict(system="guideloom-cli", backend="auto", dtype="u16", seq=seq, workers=w, k=0))
        for s in ("guideloom-megatron", "guideloom-nanogpt"):
            cs.append(dict(system=s, backend="auto", dtype="u16", seq=seq, workers=w, k=0))
    for s in ("megatron", "nanogpt"):
        cs.append(dict(system=s, dtype="u16", seq=seq, workers=0, k=k_py))
    measure("interop", cs, runs, results)


def python_section(quick):
    """The Python binding's section (benches/python.py, in the binding's venv target/py-venv with
    torch and Grain, made by python/setup-venv.sh): guideloom from Python against the CLI and the
    Python peers, and the GIL test; it rewrites the PYTHON block of the report itself."""
    env = dict(os.environ, GUIDELOOM_PY_TORCH="1")
    py = sh(["bash", os.path.join(ROOT, "python", "setup-venv.sh")], env=env, cwd=ROOT).strip().splitlines()[-1]
    args = ["--mib", "64", "--seconds", "1"] if quick else ["--mib", "256", "--seconds", "3"]
    subprocess.run([os.path.join(ROOT, py), os.path.join(ROOT, "benches", "python.py"), *args,
                    "--cli", CLI, "--report", DOC], check=True, cwd=ROOT, env=dict(os.environ, GUIDELOOM_BENCH_CLI=CLI))


def write_interop_report(results, args):
    g = group(results, "interop")
    if not g:
        return
    with open(MEGATRON_PREFIX + ".idx", "rb") as f:
        nseq = int.from_bytes(f.read(26)[18:26], "little")
    pyv = sh([PY, "-c", "import numpy, torch, importlib.metadata as m; print('numpy', numpy.__version__, '| torch', "
              "torch.__version__, '| megatron-core', m.version('megatron-core'))"]).strip()
    lines = ["<!-- BEGIN INTEROP generated by benches/compare.py --sections interop: do not edit by hand -->", "",
             f"Generated {time.strftime('%Y-%m-%d %H:%M %Z')} by `benches/interop.sh --runs {args.runs}` on this machine "
             f"({os.cpu_count()} vCPUs, kernel {platform.release()}); guideloom "
             f"{sh(['git', '-C', ROOT, 'rev-parse', '--short', 'HEAD']).strip()}, Python {platform.python_version()}: {pyv}.", "",
             f"1 GiB of u16 tokens (the same bytes in all three layouts: the native storage's 8 shards, a nanoGPT "
             f"`train.bin`, and a Megatron `.bin` hard-linked to it with an `.idx` of {nseq:,} sequences of 64-8,192 tokens), "
             "warm page cache, shuffled non-overlapping 2,049-token windows, batch 32. guideloom reads one epoch "
             "(262,016 windows); the two Python peers read 500 batches in their own process. guideloom's native "
             "batches are u16, its foreign ones i64 (widened in the batch buffer), the peers' i64 tensors.", "",
             "| system | workers | k windows/s median (min–max) | M tokens/s | first batch ms | peak RSS MiB | vs native guideloom (same workers) | checksum | runs | other load |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    native = {w: med([x["steady_windows_per_s"] for x in rs]) for (lab, _, _, w), rs in g.items() if lab == "guideloom CLI (auto)"}
    for (lab, dtype, seq, w), rs in sorted(g.items(), key=lambda kv: (kv[0][3], -med([x["steady_windows_per_s"] for x in kv[1]]))):
        m = med([x["steady_windows_per_s"] for x in rs])
        ck = {x["checksum"] for x in rs if x.get("k") == 0}
        ck = ("= " + next(iter(ck))) if len(ck) == 1 else ("differs!" if ck else "(500 batches)")
        ws = [x["steady_windows_per_s"] for x in rs]
        lines.append(f"| {lab.replace('guideloom CLI (auto)', 'guideloom CLI, native storage (auto)')} | {w} | "
                     f"{fmt_k(m)} ({fmt_k(min(ws))}–{fmt_k(max(ws))}) | "
                     f"{m * seq / 1e6:,.0f} | {fmt_ms(med([x['first_batch_s'] for x in rs]))} | {rss(rs)} | "
                     f"{m / native[w]:.2f}x | {ck} | {len(rs)} | {med([x['other_load'] for x in rs]):.2f} |" if w in native else "")
    lines += ["", "Commands: " + "; ".join(sorted({f"`{r['cmd']}`" for rs in g.values() for r in rs[:1]})), "",
              "<!-- END INTEROP -->"]
    write_block("INTEROP", "Foreign datasets read in place (issue 13)", "\n".join(lines))


def write_block(name, heading, gen):
    """Replaces the generated block `name` of DOC with `gen` (added at the end under `heading`
    when DOC has none)."""
    doc = open(DOC).read()
    if f"<!-- BEGIN {name}" not in doc:
        doc += f"\n## {heading}\n\n<!-- BEGIN {name} -->\n<!-- END {name} -->\n"
    doc = re.sub(rf"<!-- BEGIN {name}.*?<!-- END {name} -->", lambda _: gen, doc, flags=re.S)
    open(DOC, "w").write(doc)
    print(f"wrote the {name} block of {os.path.relpath(DOC, ROOT)}")


# ---------------------------------------------------------------- formats (issue 28)

FORMAT_PEERS = os.path.join(ROOT, "benches", "formats.py")
# MiB of u16 tokens in every layout (--quick: 16): 64 MiB, 16,376 windows of 2,049 tokens (every layout
# is written by its Python writer, the TFRecord one taking most of the time).
FORMATS_MIB = 64
# Batches of every measured run (the same windows for the sequential systems; a full epoch is
# read once per system by the check that precedes the runs).
FORMATS_K = 200
# The directory under formats_dir() of each layout, of the guideloom systems and of the peers.
FORMAT_DIRS = {"native": "native", "native-seq": "native", "arrow": "hf_arrow", "parquet": "parquet",
               "arrayrecord": "arrayrecord", "tfrecord": "tfrecord", "webdataset": "webdataset"}
FORMAT_OF_PEER = {"hf-torch": "hf_arrow", "parquet-torch": "parquet", "grain-arrayrecord": "arrayrecord",
                  "grain-arrayrecord-batched": "arrayrecord",
                  "tfrecord-torch": "tfrecord", "wds": "webdataset"}
FORMAT_LABELS = {"native": "guideloom CLI, native storage (shuffled)",
                 "native-seq": "guideloom CLI, native storage (in order)",
                 "arrow": "guideloom CLI, HF save_to_disk Arrow in place (--format arrow)",
                 "parquet": "guideloom CLI, Parquet (--format parquet)",
                 "arrayrecord": "guideloom CLI, ArrayRecord (--format arrayrecord --dtype u16)",
                 "tfrecord": "guideloom CLI, TFRecord (--sequential --tfrecord)",
                 "webdataset": "guideloom CLI, WebDataset (--sequential --webdataset)"}
FORMAT_PEER_LABELS = {"hf-torch": "datasets load_from_disk + torch DataLoader (batched __getitems__, 1 process)",
               "parquet-torch": "datasets Dataset.from_parquet + torch DataLoader (batched __getitems__, 1 process)",
               "grain-arrayrecord": "Grain ArrayRecordDataSource + MapDataset, a record read per window, ReadOptions(num_threads=0), 1 process",
               "grain-arrayrecord-batched": "Grain ArrayRecordDataSource + MapDataset, a batch's records in one __getitems__, ReadOptions(num_threads=0), 1 process",
               "tfrecord-torch": "tfrecord TFRecordDataset + torch DataLoader, 1 process",
               "wds": "webdataset WebDataset + WebLoader, 1 process"}
FORMATS_RANDOM = ("native", "arrow", "parquet", "arrayrecord")
FORMATS_SEQUENTIAL = ("native-seq", "tfrecord", "webdataset")


def formats_dir():
    return os.path.join(DATA, "formats")


def format_cli(layout, seq, workers, k):
    """guideloom's command line for one layout: shuffled windows from the random-access layouts,
    windows in order from the sequential ones."""
    d = os.path.join(formats_dir(), FORMAT_DIRS[layout])
    common = ["--seq-len", str(seq), "--batch-size", str(BATCH), "--workers", str(workers), "--json"]
    if k:
        common += ["--max-batches", str(k)]
    shuffled = ["--shuffle", "--seed", str(SEED)]
    if layout == "native":
        return [CLI, "bench", d] + shuffled + common
    if layout == "native-seq":
        return [CLI, "bench", d] + common
    if layout in ("arrow", "parquet"):
        return [CLI, "bench", d, "--format", layout] + shuffled + common
    if layout == "arrayrecord":
        return [CLI, "bench", os.path.join(d, "*.array_record"), "--format", "arrayrecord", "--dtype", "u16"] + shuffled + common
    return [CLI, "bench", "--sequential", f"--{layout}", d] + common


def format_files(c):
    """The data files a configuration of the formats section reads (dropped from the page
    cache before a cold run)."""
    sub = FORMAT_DIRS[c["method"]] if c["system"] == "gl-format" else FORMAT_OF_PEER[c["method"]]
    d = os.path.join(formats_dir(), sub)
    return [os.path.join(dp, f) for dp, _, fs in os.walk(d) for f in fs]


def make_formats(seq):
    """The same documents in every layout (benches/formats.py write) and a native storage
    imported from the Arrow copy by the CLI; reused while the size matches."""
    d = formats_dir()
    stamp = os.path.join(d, "written.json")
    if os.path.exists(stamp):
        info = json.load(open(stamp))
        if info.get("mib") == FORMATS_MIB and info.get("seq") == seq:
            return info
    sh(["rm", "-rf", d])
    t0 = time.time()
    out = sh([PY, FORMAT_PEERS, "write", austen_u16(), d, str(FORMATS_MIB), str(seq), str(SEED)])
    info = json.loads(out.strip().splitlines()[-1])
    sh([CLI, "import", os.path.join(d, "hf_arrow"), "--format", "arrow", "--out", os.path.join(d, "native"),
        "--out-dtype", "u16"])
    info.update(mib=FORMATS_MIB, seq=seq, seconds=time.time() - t0,
                bytes={k: sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(os.path.join(d, k)) for f in fs)
                       for k in sorted(set(FORMAT_DIRS.values()))})
    json.dump(info, open(stamp, "w"))
    print(f"  wrote the layouts ({info['documents']:,} documents, {info['tokens']:,} tokens) in {info['seconds']:.0f} s",
          flush=True)
    return info


def formats_section(runs, results):
    seq, w = 2049, 2
    info = make_formats(seq)
    rand = [dict(system="gl-format", method=l, dtype="u16", seq=seq, workers=w, k=FORMATS_K) for l in FORMATS_RANDOM]
    rand += [dict(system="py-format", method=p, dtype="u16", seq=seq, workers=0, k=FORMATS_K)
             for p in ("hf-torch", "parquet-torch", "grain-arrayrecord", "grain-arrayrecord-batched")]
    seqs = [dict(system="gl-format", method=l, dtype="u16", seq=seq, workers=w, k=FORMATS_K) for l in FORMATS_SEQUENTIAL]
    seqs += [dict(system="py-format", method=p, dtype="u16", seq=seq, workers=0, k=FORMATS_K) for p in ("tfrecord-torch", "wds")]
    rand = [c for c in rand if c["method"] not in SKIP]
    seqs = [c for c in seqs if c["method"] not in SKIP]
    # One full epoch of every system: every token is delivered (the sum of the writer's tokens).
    for c in rand + seqs:
        c0 = dict(c, k=0)
        cmd, env = command(c0["system"], c0["dtype"], seq, c0["workers"], 0, None, c0["method"])
        try:
            j, ru, other = run_one(cmd, env, timeout=900)
        except RuntimeError as e:
            print(f"  FAILED epoch check {label(c0['system'], method=c0['method'])}: {e}", flush=True)
            results.append(dict(c0, section="formats-epoch", run_id=RUN_ID, error=str(e)[:500]))
            continue
        ok = j["checksum"] == info["checksum"] and j["windows"] == info["windows"]
        results.append(dict(c0, section="formats-epoch", run_id=RUN_ID, windows=j["windows"], seconds=j["seconds"],
                            checksum=j["checksum"], expected=info["checksum"], equal=ok,
                            label=label(c0["system"], method=c0["method"])))
        print(f"  [epoch] {results[-1]['label']}: {j['windows']:,} windows in {j['seconds']:.1f} s, checksum "
              f"{'equal' if ok else 'DIFFERS: ' + j['checksum'] + ' != ' + info['checksum']}", flush=True)
    for name, cs in (("formats-random", rand), ("formats-sequential", seqs)):
        measure(name, cs, runs, results)
        # Cold: the run's files dropped from the page cache by the command itself (format_command).
        measure(name + "-cold", [dict(c, backend="cold") for c in cs], runs, results)
    results.append(dict(section="formats-info", run_id=RUN_ID, **info))


def write_formats_report(results, args):
    g_info = [r for r in results if r.get("section") == "formats-info"]
    if not g_info:
        return
    info = g_info[-1]
    pyv = sh([PY, "-c", "import importlib.metadata as m; print(' | '.join(p + ' ' + m.version(p) for p in "
              "('numpy', 'torch', 'datasets', 'pyarrow', 'grain', 'array_record', 'tfrecord', 'webdataset')))"]).strip()
    mib = lambda b: f"{b / 2**20:,.0f}"
    lines = ["<!-- BEGIN FORMATS generated by benches/compare.py --sections formats: do not edit by hand -->", "",
             f"Generated {time.strftime('%Y-%m-%d %H:%M %Z')} by `{os.environ.get('GUIDELOOM_BENCH_CMD', 'benches/compare.py ' + ' '.join(sys.argv[1:]))}` "
             f"on this machine ({os.cpu_count()} vCPUs, kernel {platform.release()}) **while other jobs loaded it** (load "
             f"average {info.get('load_start', 0):.1f} at the start, {os.getloadavg()[0]:.1f} at the end; the *other load* "
             "column is the CPU time of other processes during each run, in cores): every figure is the median of runs "
             "interleaved with the other systems of its table (round r runs each system once, in a rotated order), and the "
             "*vs native* column is the median over rounds of the ratio to the native storage's run of the same round, "
             "which the load disturbs less than the absolute rates. "
             f"guideloom {sh(['git', '-C', ROOT, 'rev-parse', '--short', 'HEAD']).strip()}, Python {platform.python_version()}: {pyv}.", "",
             f"The same {info['documents']:,} documents ({info['tokens']:,} u16 token ids of the Austen corpus, tiled; 64-8,192 "
             "tokens each) in every layout, written by each project's own writer (benches/formats.py): "
             + ", ".join(f"{k} {mib(v)} MiB" for k, v in info["bytes"].items()) + ". Non-overlapping windows of "
             f"{info['seq']:,} tokens, batch {BATCH}; guideloom with 2 workers (its default configuration on 2 cores), the "
             f"peers in one process (their fastest configuration on 2 cores in the main section). Each measured run reads "
             f"{FORMATS_K} batches ({FORMATS_K * BATCH:,} windows); *cold* drops the layout's files from the page cache "
             "(posix_fadvise DONTNEED) before each run. Rates are steady windows/s (after the first batch); "
             "*first batch* includes the open.", ""]
    ep = [r for r in results if r.get("section") == "formats-epoch"]
    if ep:
        lines += ["Every system first read one whole epoch; its checksum (the sum of every token id delivered) against the "
                  f"writer's sum of all {info['tokens']:,} tokens ({info['windows']:,} windows):", "",
                  "| system | windows | seconds | checksum |", "|---|---|---|---|"]
        for r in ep:
            if "error" in r:
                lines.append(f"| {label(r['system'], method=r['method'])} | failed | | {r['error'][:120]} |")
            else:
                lines.append(f"| {r['label']} | {r['windows']:,} | {r['seconds']:.2f} | "
                             f"{'= ' + r['checksum'] if r['equal'] else 'DIFFERS: ' + r['checksum']} |")
        lines.append("")
    titles = {"formats-random": "Random access, shuffled windows, warm page cache",
              "formats-random-cold": "Random access, shuffled windows, cold page cache",
              "formats-sequential": "Sequential, windows in order, warm page cache",
              "formats-sequential-cold": "Sequential, windows in order, cold page cache",
              "formats-grain": "Random access, Grain's two ways of reading ArrayRecord windows (a second interleaved set), warm",
              "formats-grain-cold": "Random access, Grain's two ways of reading ArrayRecord windows (a second interleaved set), cold"}
    for sec, title in titles.items():
        rs_all = [r for r in results if r.get("section") == sec and "error" not in r]
        if not rs_all:
            continue
        shuffled = "random" in sec or "grain" in sec
        base = "guideloom CLI, native storage (shuffled)" if shuffled else "guideloom CLI, native storage (in order)"
        by_round = {r["run"]: r["steady_windows_per_s"] for r in rs_all if r["label"] == base}
        g = {}
        for r in rs_all:
            g.setdefault(r["label"], []).append(r)
        lines += [f"**{title}**", "",
                  "| system | k windows/s median (min–max) | M tokens/s | first batch ms | peak RSS MiB | vs native (median of per-round ratios) | checksum of the runs | runs | other load |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for lab, rs in sorted(g.items(), key=lambda kv: -med([x["steady_windows_per_s"] for x in kv[1]])):
            ws = [x["steady_windows_per_s"] for x in rs]
            m = med(ws)
            ratios = [x["steady_windows_per_s"] / by_round[x["run"]] for x in rs if x["run"] in by_round]
            cks = {x["checksum"] for x in rs}
            ck = ("= " + next(iter(cks))) if len(cks) == 1 else "differ between runs"
            if shuffled:
                ck = "(own order)" if len(cks) != 1 or not lab.startswith("guideloom") else ck
            lines.append(f"| {lab} | {fmt_k(m)} ({fmt_k(min(ws))}–{fmt_k(max(ws))}) | {m * info['seq'] / 1e6:,.1f} | "
                         f"{fmt_ms(med([x['first_batch_s'] for x in rs]))} | {rss(rs)} | "
                         f"{med(ratios):.2f}x | {ck} | {len(rs)} | {med([x['other_load'] for x in rs]):.2f} |")
        lines.append("")
    for r in results:
        if r.get("section", "").startswith("formats-") and "error" in r:
            lines.append(f"- failed: {label(r['system'], method=r['method'])} "
                         f"({r['section']}): {r['error'][:200]}")
    cmds = sorted({r["cmd"] for r in results if r.get("section") == "formats-random" and "cmd" in r}
                  | {r["cmd"] for r in results if r.get("section") == "formats-sequential" and "cmd" in r})
    lines += ["", "Commands of the measured runs (data under benches/out/data/formats): " + "; ".join(f"`{c}`" for c in cmds), "",
              "<!-- END FORMATS -->"]
    write_block("FORMATS", "Hugging Face Arrow, Parquet, ArrayRecord, TFRecord and WebDataset (issue 28)", "\n".join(lines))


def austen_u16():
    """The bundled Austen corpus as a u16 storage (gpt2) under DATA, made by the CLI once, as
    make_data makes it."""
    src = os.path.join(DATA, "austen-u16")
    if not os.path.exists(os.path.join(src, "manifest.json")):
        os.makedirs(DATA, exist_ok=True)
        sh([CLI, "ingest", "text", "--out", src, "--tokenizer", "gpt2", "--dtype", "u16", "--eos",
            os.path.join(ROOT, "data", "austen")])
    return src


def format_command(system, seq, workers, k, backend, method):
    """The command of a configuration of the formats section: method is the layout
    (gl-format) or the peer (py-format); backend "cold" drops its files from the page cache
    first (benches/formats.py drop, which then execs the command)."""
    if system == "gl-format":
        cmd = format_cli(method, seq, workers, k)
    else:
        cmd = [PY, FORMAT_PEERS, method, os.path.join(formats_dir(), FORMAT_OF_PEER[method]), str(seq), str(BATCH), str(k),
               str(SEED)]
    if backend == "cold":
        cmd = [PY, FORMAT_PEERS, "drop", *format_files(dict(system=system, method=method)), "--", *cmd]
    return cmd


def formats_main(args):
    """`--sections formats`, alone: the formats section and its report block."""
    global DATA, DOC, FORMATS_MIB, FORMATS_K
    runs = args.runs or (1 if args.quick else 3)
    if args.quick:
        DATA, FORMATS_MIB, FORMATS_K = os.path.join(OUT, "data-quick"), 16, 30
    if args.quick and not args.report_to:
        args.report_to = os.path.join(OUT, "quick.md")
    if args.report_to:
        DOC = os.path.abspath(args.report_to)
        if not os.path.exists(DOC):
            sh(["cp", os.path.join(ROOT, "docs", "BENCHMARKS.md"), DOC])
    results = []
    open(os.path.join(OUT, "results.jsonl"), "w").close()
    load_start = os.getloadavg()[0]
    formats_section(runs, results)
    results[-1]["load_start"] = load_start
    json.dump(results, open(os.path.join(OUT, "formats-quick.json" if args.quick else "formats.json"), "w"), indent=0)
    write_formats_report(results, args)
    if not args.keep_data:
        sh(["rm", "-rf", formats_dir()])


# ---------------------------------------------------------------- report


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def fmt_k(x):
    return f"{x / 1e3:,.1f}" if x >= 1e4 else f"{x / 1e3:,.2f}"


def fmt_ms(x):
    return f"{x * 1e3:,.1f}" if x >= 0.01 else f"{x * 1e3:,.2f}"


def group(results, section, key=lambda r: (r["label"], r["dtype"], r["seq"], r["workers"])):
    g = {}
    for r in results:
        if r.get("section") == section and "error" not in r:
            g.setdefault(key(r), []).append(r)
    return g


def rss(rs):
    # Runs made before the driver computed checksums in a child process carry the driver's RSS
    # (about 1 GiB of a mapped file) after the verify section: not shown.
    if not all(x.get("rss_clean") or x["section"] in ("main", "u32") for x in rs):
        return "n/a"
    return f"{med([x['rss_kb'] for x in rs]) / 1024:,.0f}"


def throughput_table(results, section, title_rows, cold=False):
    g = group(results, section)
    if not g:
        return ""
    lines = []
    by_w = {}
    for (lab, dtype, seq, w), rs in g.items():
        by_w.setdefault((dtype, seq, w), {})[lab] = rs
    out = []
    for (dtype, seq, w) in sorted(by_w):
        labs = by_w[(dtype, seq, w)]
        gl = [v for k, v in labs.items() if k == "guideloom CLI (auto)"]  # the default backend
        gl_best = max((med([x["steady_windows_per_s"] for x in v]) for v in gl), default=float("nan"))
        raws = [v for k, v in labs.items() if k.startswith("raw limit")]
        note = " (raw limit: threads = max(workers, 1))"
        if not raws:  # workers 1: the raw limit with 1 thread (measured in the workers-0 rounds)
            raws = [v for k, v in by_w.get((dtype, seq, 0), {}).items() if k.startswith("raw limit")]
            note = " (vs raw limit: the 1-thread raw limit of the workers-0 table)" if raws else ""
        raw_best = max((med([x["steady_windows_per_s"] for x in v]) for v in raws), default=float("nan"))
        out.append(f"\n**{dtype}, {seq:,}-token windows, batch {BATCH}, workers {w}**" + note + "\n")
        out.append("| system | k windows/s median (min–max) | M tokens/s | first batch ms median (min–max) | peak RSS MiB | "
                   "vs guideloom CLI (auto) | vs best raw limit | epoch checksum | runs | other load |")
        out.append("|---|---|---|---|---|---|---|---|---|---|")
        rows = sorted(labs.items(), key=lambda kv: -med([x["steady_windows_per_s"] for x in kv[1]]))
        for lab, rs in rows:
            ws = [x["steady_windows_per_s"] for x in rs]
            fs = [x["first_batch_s"] for x in rs]
            m = med(ws)
            ck = {x["checksum"] for x in rs if x["windows"] == x.get("epoch_windows") or (x.get("k") == 0 and not cold)}
            ck = ("= " + next(iter(ck))) if len(ck) == 1 else ("differs!" if ck else "(partial epoch)")
            out.append(f"| {lab} | {fmt_k(m)} ({fmt_k(min(ws))}–{fmt_k(max(ws))}) | {m * seq / 1e6:,.0f} | "
                       f"{fmt_ms(med(fs))} ({fmt_ms(min(fs))}–{fmt_ms(max(fs))}) | {rss(rs)} | "
                       f"{m / gl_best:.2f}x | {m / raw_best:.2f}x | {ck} | {len(rs)} | {med([x['other_load'] for x in rs]):.2f} |")
    return "\n".join(out) + "\n"


def provenance(rs):
    """One line saying which run(s) produced these records, how many runs per figure and the load."""
    ids = sorted({r.get("run_id", "an older run (no run id)") for r in rs})
    runs = max((r.get("run", 0) if isinstance(r.get("run"), int) else 0) for r in rs) + 1 if rs else 0
    loads = [r["loadavg1"] for r in rs if "loadavg1" in r]
    others = [r["other_load"] for r in rs if "other_load" in r]
    txt = f"*Run {', '.join(ids)}*"
    if runs > 1:
        txt += f"; {runs} interleaved runs per figure"
    elif any(isinstance(r.get("run"), int) for r in rs):
        txt += "; 1 run per figure"
    if loads:
        txt += f"; 1-min load average {min(loads):.2f}–{max(loads):.2f}"
    if others:
        txt += f"; other processes' CPU use during the runs median {med(others):.2f} cores (max {max(others):.2f})"
    return txt + "."


def family_best(results, section, systems, dtype="u16", seq=2049):
    """The fastest configuration (median steady windows/s) of any of `systems` in `section`."""
    best = None
    for (lab, d, q, w), rs in group(results, section).items():
        if d != dtype or q != seq or rs[0]["system"] not in systems:
            continue
        m = med([x["steady_windows_per_s"] for x in rs])
        if best is None or m > best[0]:
            best = (m, lab, w, rs)
    return best


def rate_of(results, section, label_, w, dtype="u16", seq=2049):
    rs = group(results, section).get((label_, dtype, seq, w))
    return (med([x["steady_windows_per_s"] for x in rs]), rs) if rs else (None, None)


def span(rs):
    ws = [x["steady_windows_per_s"] for x in rs]
    return f"{fmt_k(med(ws))} ({fmt_k(min(ws))}–{fmt_k(max(ws))})"


def summary_block(results):
    """The SUMMARY block: the main workload at 2 workers, the raw limit, each peer at its best
    measured configuration, and the goals of issues 7 and 20."""
    main = [r for r in results if r.get("section") == "main" and "error" not in r]
    if not main:
        return None
    gl, gl_rs = rate_of(results, "main", "guideloom CLI (auto)", 2)
    mm, mm_rs = rate_of(results, "main", "guideloom CLI (mmap)", 2)
    rawm, rawm_rs = rate_of(results, "main", "raw limit (mmap)", 2)
    rawp, rawp_rs = rate_of(results, "main", "raw limit (pread)", 2)
    rawc, rawc_rs = rate_of(results, "main", "raw limit (c-mmap)", 2)
    if not (gl and rawm):
        return None
    # The raw limit: the fastest of its readers (mmap + memcpy, pread, and the C check) at 2
    # threads.
    raw_name = max([("mmap", rawm), ("pread", rawp or 0), ("C, mmap", rawc or 0)], key=lambda x: x[1])[0]
    rawb = max(rawm, rawp or 0, rawc or 0)
    out = ["<!-- BEGIN SUMMARY generated by benches/compare.py: do not edit by hand -->", "",
           provenance([r for r in main if r["workers"] == 2 or r["system"] in PY_ONE_PROCESS + tuple(PY_MAIN)]), "",
           "Warm page cache, u16, 2,049-token windows, batch 32, shuffled, every token summed; k windows/s, median "
           "(min–max) of the interleaved runs. guideloom's default configuration is `guideloom bench` with the default "
           "backend and 2 workers (2 cores); the raw limit is `benches/native raw` with 2 threads; each peer is shown at "
           "its fastest measured configuration (any worker count, any of the settings tried; the full tables list all).", "",
           f"| system | configuration | k windows/s | guideloom default is | of raw limit ({raw_name}) |", "|---|---|---|---|---|"]

    def row(name, conf, m, rs):
        out.append(f"| {name} | {conf} | {span(rs)} | {gl / m:.2f}x | {m / rawb:.0%} |")

    row("raw limit, mmap + memcpy", "2 threads", rawm, rawm_rs)
    if rawp:
        row("raw limit, pread", "2 threads", rawp, rawp_rs)
    if rawc:
        row("raw limit in C (benches/raw_limit.c, -O3 -march=native), mmap + memcpy", "2 threads", rawc, rawc_rs)
    out.append(f"| **guideloom CLI, default backend** | 2 workers | **{span(gl_rs)}** | 1x | **{gl / rawb:.0%}** |")
    if mm:
        row("guideloom CLI, `--backend mmap`", "2 workers", mm, mm_rs)
    zc, zc_rs = rate_of(results, "main", "guideloom lib zero-copy views (mmap)", 2)
    if zc:
        row("guideloom lib, zero-copy views", "2 workers", zc, zc_rs)
    peers = []
    for fam, systems in FAMILIES:
        b = family_best(results, "main", systems)
        if b:
            m, lab, w, rs = b
            one = rs[0]["system"] in PY_ONE_PROCESS
            conf = lab[len(fam):].lstrip(", ") if lab.startswith(fam) else lab
            conf = re.sub(r",? ?(0 workers )?\(?1 process\)?$", "", conf)
            where = "1 process" if one else f"{w} workers"
            row(fam, f"{conf}; {where}" if conf else f"default settings; {where}", m, rs)
            peers.append((fam, gl / m))
    out.append("")
    ok = gl / rawb >= 0.9
    out.append(f"**Acceptance (issue 20): guideloom's default configuration reads {gl / rawb:.2f} of the raw limit "
               f"({raw_name}, 2 threads) on the main workload: the 0.9 goal is {'met' if ok else 'missed'}**"
               + (f" (it would have to be {0.9 * rawb / gl:.2f}x faster)" if not ok else "")
               + f"; {gl / rawm:.2f} of the raw mmap limit" + (f", {gl / rawp:.2f} of the raw pread limit" if rawp else "")
               + (f"; the mmap backend {mm / rawb:.2f}" if mm else "") + ". Against each peer at its best configuration: "
               + ", ".join(f"{x:.2f}x {fam}" for fam, x in peers) + ".")
    out.append("")
    # Goals of issue 7.
    goals = []
    for fam, factor in (("Grain DataLoader", 20), ("Grain MapDataset", 20), ("torch DataLoader", 10), ("burn DataLoader", 3)):
        x = dict(peers).get(fam)
        if x is not None:
            goals.append(f"| >= {factor}x {fam} (at its best) | {x:.2f}x | {'met' if x >= factor else 'missed'} |")
    st = [r for r in results if r.get("section") == "startup" and r["shards"] == 10000 and "bytes" in r]
    if st:
        f = med([r["first_batch_s"] for r in st])
        goals.append(f"| start-up with 10,000 shards < 50 ms (open + first batch, library) | {fmt_ms(f)} ms "
                     f"(open {fmt_ms(med([r['open_s'] for r in st]))} ms) | {'met' if f < 0.05 else 'missed'} |")
    rz = [r for r in results if r.get("section") == "resume"]
    if rz:
        b = max(r["state_bytes"] for r in rz)
        goals.append(f"| checkpoint state < 1 KiB | at most {b} bytes (position 1 to 10^9) | {'met' if b < 1024 else 'missed'} |")
        t = max(med([r["resume_s"] for r in rz if r["position"] == p]) for p in {r["position"] for r in rz})
        goals.append(f"| resume without replay | at most {fmt_ms(t)} ms at any position (median), checked equal to "
                     "`Loader::batch(position)` | met |")
    if goals:
        out += ["| goal (issue 7) | figure | verdict |", "|---|---|---|"] + goals + [""]
    out.append("<!-- END SUMMARY -->")
    return "\n".join(out)


def sweep_table(results):
    """One row per window length: the median k windows/s of each system with 2 workers (the
    one-process peers in their one process); the 2,049-token row is the main section's."""
    pts = {}
    for sec in ("sweep", "main"):
        for (lab, dtype, seq, w), rs in group(results, sec).items():
            one = rs[0]["system"] in PY_ONE_PROCESS
            if dtype != "u16" or not (w == 2 or one) or (sec == "main" and seq != 2049):
                continue
            if sec == "main" and any(k[0] == seq for k in pts if k[1] == lab and k[2] == "sweep"):
                continue
            pts[(seq, lab, sec)] = med([x["steady_windows_per_s"] for x in rs])
    if not any(k[2] == "sweep" for k in pts):
        return []
    labs = sorted({k[1] for k in pts if k[2] == "sweep"}, key=lambda l: -max(v for k, v in pts.items() if k[1] == l))
    seqs = sorted({k[0] for k in pts})
    out = ["| window (tokens) | " + " | ".join(labs) + " |", "|---" * (len(labs) + 1) + "|"]
    for q in seqs:
        cells = []
        for l in labs:
            v = pts.get((q, l, "sweep"), pts.get((q, l, "main")))
            cells.append(fmt_k(v) if v is not None else "–")
        out.append(f"| {q:,} | " + " | ".join(cells) + " |")
    return out + ["", "(k windows/s, medians; 2 workers, or one process for the peers that run in one; the "
                  "2,049-token row is the main section's workers-2 table.)", ""]


def layouts_table(results):
    """Per shard layout: each system's steady rate, its share of the best raw limit on the same
    bytes, its first batch; the default's first batch against io_uring's (issue 31 goals)."""
    rs = [r for r in results if r.get("section") == "layouts" and "error" not in r]
    if not rs:
        return None
    out = ["| layout | system | k windows/s median (min–max) | of best raw limit | first batch ms | epoch windows | runs |",
           "|---|---|---|---|---|---|---|"]
    goals = []
    for name in ("u16",) + tuple(LAYOUTS):
        mine = [r for r in rs if (r.get("data") or "u16") == name]
        if not mine:
            continue
        g = group(mine, "layouts", key=lambda r: r["label"])
        raws = [med([x["steady_windows_per_s"] for x in v]) for k, v in g.items() if k.startswith("raw limit")]
        raw_best = max(raws, default=float("nan"))
        desc = "8 x 128 MiB (main)" if name == "u16" else name[4:].replace("x", " x ")
        for lab, v in sorted(g.items()):
            m = med([x["steady_windows_per_s"] for x in v])
            out.append(f"| {desc} | {lab} | {span(v)} | {m / raw_best:.2f} | {fmt_ms(med([x['first_batch_s'] for x in v]))} | "
                       f"{v[0].get('epoch_windows') or 0:,} | {len(v)} |")
        d, u, z = (g.get(x) for x in ("guideloom CLI (auto)", "guideloom CLI (io-uring)", "guideloom lib zero-copy views (mmap)"))
        if d:
            dm = med([x["steady_windows_per_s"] for x in d])
            goals.append(f"| {desc} | default >= 0.9 of the raw limit | {dm / raw_best:.2f} | {'met' if dm / raw_best >= 0.9 else 'missed'} |")
        if z:
            zm = med([x["steady_windows_per_s"] for x in z])
            goals.append(f"| {desc} | zero-copy views >= 1.0 of the raw limit | {zm / raw_best:.2f} | {'met' if zm / raw_best >= 1.0 else 'missed'} |")
        if d and u:
            fd, fu = med([x["first_batch_s"] for x in d]), med([x["first_batch_s"] for x in u])
            goals.append(f"| {desc} | default's first batch <= 1.5 x io_uring's + 1 ms | {fmt_ms(fd)} ms vs {fmt_ms(fu)} ms "
                         f"(bound {fmt_ms(1.5 * fu + 0.001)} ms) | {'met' if fd <= 1.5 * fu + 0.001 else 'missed'} |")
    return out + ["", "| layout | goal (issue 31) | measured | |", "|---|---|---|---|", *goals, ""]


def batches_table(results):
    """Per batch size: the default's and the raw limits' steady rates, and the fixed cost per
    batch from a least-squares line through time per batch against batch size (2,049 tokens)."""
    rs = [r for r in results if r.get("section") == "batches" and "error" not in r]
    if not rs:
        return None
    g = group(rs, "batches", key=lambda r: (r["label"], r["seq"], r["batch"]))
    labels = sorted({k[0] for k in g})
    out = ["| window tokens | batch | " + " | ".join(f"{l} k windows/s" for l in labels) + " | default / best raw |",
           "|---|---|" + "---|" * len(labels) + "---|"]
    for seq, b, _ in BATCH_SIZES:
        rates = {l: med([x["steady_windows_per_s"] for x in g[(l, seq, b)]]) for l in labels if (l, seq, b) in g}
        raws = [v for l, v in rates.items() if l.startswith("raw limit")]
        d = rates.get("guideloom CLI (auto)")
        ratio = f"{d / max(raws):.2f}" if d and raws else "–"
        out.append(f"| {seq:,} | {b} | " + " | ".join(f"{rates[l] / 1e3:,.1f}" if l in rates else "–" for l in labels)
                   + f" | {ratio} |")
    out.append("")
    fixed = []
    for l in labels:
        pts = [(b, b / med([x["steady_windows_per_s"] for x in g[(l, 2049, b)]])) for seq, b, _ in BATCH_SIZES
               if seq == 2049 and (l, 2049, b) in g]
        if len(pts) >= 2:
            n = len(pts)
            mx, my = sum(p[0] for p in pts) / n, sum(p[1] for p in pts) / n
            slope = sum((p[0] - mx) * (p[1] - my) for p in pts) / sum((p[0] - mx) ** 2 for p in pts)
            fixed.append(f"{l}: {max(0.0, my - slope * mx) * 1e9:,.0f} ns per batch + {slope * 1e9:,.0f} ns per window")
    if fixed:
        out += ["Fixed cost per batch (least squares over batch 1/4/8/32 at 2,049 tokens: seconds per batch = a + b x batch): "
                + "; ".join(fixed) + ".", ""]
    return out


def write_report(results, args):
    def v(cmd):
        try:
            return sh(cmd).strip()
        except Exception as e:  # noqa: BLE001
            return f"? ({e})"

    def lock_version(lock, name):
        try:
            t = open(lock).read()
            m = re.search(r'name = "%s"\nversion = "([^"]+)"' % re.escape(name), t)
            return m.group(1) if m else "?"
        except OSError:
            return "?"

    mem = open("/proc/meminfo").read().split("\n")[0].split()[1]
    cpu = [l for l in open("/proc/cpuinfo").read().splitlines() if l.startswith("model name")]
    dev = v(["sh", "-c", f"df -h {DATA} | tail -1"])
    pyv = v([PY, "-c", "import numpy, torch, grain, importlib.metadata as m; print('numpy', numpy.__version__, '| torch', "
             "torch.__version__, '| grain', m.version('grain'), '| matplotlib', m.version('matplotlib'))"])
    metas = [r for r in results if r.get("section") == "_meta"]
    lines = ["<!-- BEGIN GENERATED by benches/compare.py: do not edit by hand -->", "",
             "Every table below says which run produced it. The runs:", ""]
    for m in metas:
        lines.append(f"- *Run {m['run_id']}*: `{m['cmd'].strip()}` at guideloom {m.get('commit', '?')} ({m['runs']} interleaved run{'s' if m['runs'] > 1 else ''} per figure "
                     f"on the main section, {m['runs_other']} elsewhere; sections {', '.join(m['sections'])}; "
                     f"{m['seconds'] / 60:.1f} min; 1-min load average {m['load_start']:.2f} at the start, "
                     f"{m['load_end']:.2f} at the end; data sets of {m.get('data_mib', 1024):,} MiB)")
    for rid in sorted({r["run_id"] for r in results if "run_id" in r} - {m["run_id"] for m in metas}):
        lines.append(f"- *Run {rid}*: interrupted before it ended (its finished sections were kept with `--merge`)")
    if any("run_id" not in r for r in results if r.get("section") != "_meta"):
        lines.append("- *an older run (no run id)*: results of a run made before the driver recorded its runs")
    lines += ["", "### Machine and versions", "",
              f"- {os.cpu_count()} vCPUs ({cpu[0].split(':', 1)[1].strip() if cpu else '?'}), {int(mem) / 2**20:.1f} GiB RAM, "
              f"kernel {platform.release()}; data on `{dev}` (virtio-blk, ext4)",
              f"- {v(['rustc', '--version'])}, "
              f"burn-core {lock_version(os.path.join(ROOT, 'benches', 'burn_loader', 'Cargo.lock'), 'burn-core')}, "
              f"Python {platform.python_version()}: {pyv}", ""]
    for sec, title in (("main", "Warm page cache, u16, 2,049-token windows, workers 0/1/2"),
                       ("u32", "Warm page cache, u32 (cl100k), 2,049-token windows"),
                       ("sweep", "Window size sweep (u16, workers 2)"),
                       ("cold", "Cold page cache (posix_fadvise DONTNEED on every data file before each run), u16, 2,049 tokens")):
        t = throughput_table(results, sec, title, cold=(sec == "cold"))
        if t:
            lines += [f"### {title}", "", provenance([r for r in results if r.get("section") == sec]), t]
        if sec == "sweep":
            sw = sweep_table(results)
            if sw:
                lines += ["**Windows/s against window length** (plotted in "
                          "[benchmarks_window_size.png](benchmarks_window_size.png))", "", *sw]
    lt = layouts_table(results)
    if lt:
        lines += ["### Shard layouts (u16, 2,049 tokens, batch 32, workers 2, warm)", "",
                  provenance([r for r in results if r.get("section") == "layouts"]), "", *lt]
    bt = batches_table(results)
    if bt:
        lines += ["### Small batches (u16, workers 2, warm): the fixed cost per batch", "",
                  provenance([r for r in results if r.get("section") == "batches"]), "", *bt]
    ver = [r for r in results if r.get("section") == "verify" and "error" not in r]
    if ver:
        lines += ["### Epoch checksum (one full epoch per system, u16, 2,049 tokens, workers 2)", "", provenance(ver), "",
                  f"Expected: sum of the first {ver[0]['expect_windows']:,} × 2,049 tokens of the stream = **{ver[0]['expect']}**.", "",
                  "| system | windows | checksum | equal |", "|---|---|---|---|"]
        for r in ver:
            lines.append(f"| {r['label']} | {r['windows']:,} | {r['checksum']} | {'yes' if r['checksum'] == r['expect'] else 'NO'} |")
        lines.append("")
    sc = scaling_table(results)
    if sc:
        lines += ["### Scaling with a CPU-heavy map (no I/O)", "", provenance([r for r in results if r.get("section") == "scaling"]), ""] + sc
    mr = [r for r in results if r.get("section") == "memory"]
    if mr:
        lines += ["### Memory: peak RSS against prefetch and batch size", "", provenance(mr), "",
                  "`guideloom bench DIR --seq-len 2049 --shuffle --workers 2 --prefetch P --batch-size B --backend io-uring` "
                  "(u16 storage of 8 shards; not the default backend, which maps warm shards: their page-cache pages "
                  "count in RSS although the loader allocates none of them) under `/usr/bin/time -f %M`; short = 20 batches, long = "
                  f"{max((r.get('seconds', MEMORY_SECONDS) for r in mr), default=MEMORY_SECONDS)} s (`--seconds`, epochs repeating). "
                  "The last column is the batch buffers the loader may hold: (prefetch + workers) x batch x 2,049 x 2 bytes.", "",
                  "| batch | prefetch | run | batches | peak RSS MiB | (prefetch + workers) x batch MiB |", "|---|---|---|---|---|---|"]
        for r in mr:
            lines.append(f"| {r['batch']} | {r['prefetch']} | {r['run']} | {r['batches']:,} | {r['rss_kb'] / 1024:.1f} | "
                         f"{(r['prefetch'] + 2) * r['batch'] * 2049 * 2 / 2**20:.1f} |")
        lines.append("")
    st = [r for r in results if r.get("section") == "startup"]
    if st:
        lines += ["### Start-up vs shards (u16, workers 2)", "", provenance(st), "",
                  "Open and open + first batch: `benches/native lib` (`TokenWindows::open`, `Loader` with shuffle, 2 workers); "
                  "CLI: `guideloom bench DIR --seq-len 2049 --shuffle --workers 2 --max-batches 1 --json`, process start to exit, "
                  "and its peak RSS (`/usr/bin/time -f %M`). The sparse storage's shard files are holes on disk and its "
                  "manifest's checksums 0 (reading does not check them).", "",
                  "| storage | open ms median (min–max) | open + first batch ms | CLI process wall ms | CLI peak RSS MiB |",
                  "|---|---|---|---|---|"]
        names = []
        for r in st:
            if r.get("storage", r["shards"]) not in names:
                names.append(r.get("storage", r["shards"]))
        for n in names:
            rs = [r for r in st if r.get("storage", r["shards"]) == n]
            o, f, c = [r["open_s"] for r in rs], [r["first_batch_s"] for r in rs], [r["cli_wall_s"] for r in rs]
            m = [r["cli_rss_kb"] for r in rs if "cli_rss_kb" in r]
            lines.append(f"| {n if isinstance(n, str) else f'{n:,} shards'} | {fmt_ms(med(o))} ({fmt_ms(min(o))}–{fmt_ms(max(o))}) | "
                         f"{fmt_ms(med(f))} ({fmt_ms(min(f))}–{fmt_ms(max(f))}) | "
                         f"{fmt_ms(med(c))} ({fmt_ms(min(c))}–{fmt_ms(max(c))}) | {f'{med(m) / 1024:.1f}' if m else 'n/a'} |")
        lines.append("")
    rz = [r for r in results if r.get("section") == "resume"]
    if rz:
        lines += ["### Checkpoint size and resume time vs position (u16, 2,049 tokens, batch 32)", "", provenance(rz), "",
                  "| position (batch) | state bytes | resume ms median (min–max): parse state + open + `iter_from` + first batch |",
                  "|---|---|---|"]
        for p in sorted({r["position"] for r in rz}):
            rs = [r for r in rz if r["position"] == p]
            t = [r["resume_s"] for r in rs]
            lines.append(f"| {p:,} | {rs[0]['state_bytes']} | {fmt_ms(med(t))} ({fmt_ms(min(t))}–{fmt_ms(max(t))}) |")
        cli = [r for r in results if r.get("section") == "resume-cli"]
        if cli:
            lines.append(f"\n`guideloom batches ... --save-state` after 1,000 batches wrote {cli[0]['state_bytes']} bytes.")
        lines.append("")
    lines.append("<!-- END GENERATED -->")
    gen = "\n".join(lines)
    os.makedirs(os.path.dirname(DOC), exist_ok=True)
    doc = open(DOC).read() if os.path.exists(DOC) else "# Benchmarks\n\n<!-- BEGIN SUMMARY -->\n<!-- END SUMMARY -->\n\n<!-- BEGIN GENERATED -->\n<!-- END GENERATED -->\n"
    doc = re.sub(r"<!-- BEGIN GENERATED.*?<!-- END GENERATED -->", lambda _: gen, doc, flags=re.S)
    summ = summary_block(results)
    if summ:
        doc = re.sub(r"<!-- BEGIN SUMMARY.*?<!-- END SUMMARY -->", lambda _: summ, doc, flags=re.S)
    open(DOC, "w").write(doc)
    print(f"wrote {os.path.relpath(DOC, ROOT)}")


def plot(results):
    g = group(results, "sweep", key=lambda r: r["label"])
    main = group(results, "main", key=lambda r: (r["label"], r["workers"]))
    if not g:
        return
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(13, 5.5))
    for lab, rs in sorted(g.items()):
        pts = {}
        for r in rs:
            pts.setdefault(r["seq"], []).append(r["steady_windows_per_s"])
        for (l2, w), rs2 in main.items():
            if l2 == lab and (w == 2 or rs2[0]["system"] in PY_ONE_PROCESS):
                for r in rs2:
                    pts.setdefault(r["seq"], []).append(r["steady_windows_per_s"])
        xs = sorted(pts)
        ax.plot(xs, [med(pts[x]) for x in xs], marker="o", label=lab)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("window size (tokens, u16)")
    ax.set_ylabel("windows/s (median, warm cache, 2 workers, batch 32)")
    ids = sorted({r.get("run_id", "?") for rs in g.values() for r in rs})
    ax.set_title(f"guideloom vs peers: windows/s vs window size\n{os.cpu_count()} vCPUs; run {', '.join(ids)}", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, bbox_to_anchor=(1.02, 1), loc="upper left")
    fig.tight_layout()
    fig.savefig(PLOT, dpi=110)
    print(f"wrote {os.path.relpath(PLOT, ROOT)}")


def section_verify(ok, results):
    expect, n = expected_epoch_sum("u16", 2049)
    cs = ([dict(system="guideloom-cli", backend=b) for b in ok] + [dict(system="guideloom-lib", backend="auto"),
          dict(system="raw", method="mmap"), dict(system="raw", method="pread"), dict(system="burn")]
          + [dict(system=s) for s in PY_ONE_PROCESS])
    for c in cs:
        if c["system"] in SKIP:
            continue
        cmd, env = command(c["system"], "u16", 2049, 2, 0, c.get("backend"), c.get("method"))
        try:
            j, ru, other = run_one(cmd, env)
            results.append(dict(section="verify", run_id=RUN_ID, label=label(c["system"], c.get("backend"), c.get("method")),
                                windows=j["windows"], checksum=j["checksum"], expect=expect, expect_windows=n,
                                loadavg1=os.getloadavg()[0], other_load=other))
            print(f"  {results[-1]['label']}: {j['windows']} windows, checksum {j['checksum']} (expected {expect})", flush=True)
        except RuntimeError as e:
            print(f"  FAILED {c}: {e}", flush=True)


def main():
    global DATA_BYTES, MANY_SHARDS, SPARSE_SHARDS, STARTUP_BYTES, MEMORY_SECONDS, CPU_RECORDS
    ap = argparse.ArgumentParser()
    ap.add_argument("--all", action="store_true", help="every section (the default; spelled out for scripts)")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke test of every section: 64 MiB data sets, 1 run, 2,000-shard start-up storages; "
                         "writes to benches/out/quick.md unless --report-to says otherwise")
    ap.add_argument("--runs", type=int, default=None, help="interleaved runs per figure of the main section (default 5)")
    ap.add_argument("--runs-other", type=int, default=None, help="runs per figure of the other sections (default: --runs)")
    ap.add_argument("--sections", default=",".join(ALL_SECTIONS))
    ap.add_argument("--backends", default="auto,mmap", help="CLI backends of the main section (verify runs every one)")
    ap.add_argument("--keep-data", action="store_true")
    ap.add_argument("--report-to", default=None,
                    help="write the generated tables to this file instead of docs/BENCHMARKS.md (the plot beside it)")
    ap.add_argument("--workers", default="0,1,2", help="worker counts of the main section")
    ap.add_argument("--skip", default="", help="systems left out, e.g. burn,torch,grain-dl,guideloom-lib-generic")
    ap.add_argument("--report-only", action="store_true", help="rebuild the tables from benches/out/results.json")
    ap.add_argument("--merge", action="store_true",
                    help="keep the results of the sections not run now from benches/out/results.json")
    args = ap.parse_args()
    if args.sections == "formats":
        return formats_main(args)
    t_start = time.time()
    secs = args.sections.split(",")
    unknown = [x for x in secs if x not in ALL_SECTIONS + ("interop",)]
    if unknown:
        ap.error(f"unknown sections {unknown}; known: {', '.join(ALL_SECTIONS)} (and interop alone)")
    if args.quick:
        DATA_BYTES, MANY_SHARDS, SPARSE_SHARDS, STARTUP_BYTES, MEMORY_SECONDS = 64 << 20, 2000, 2000, 16 << 20, 1
        CPU_RECORDS = 3200
        for name, (nbytes, shards) in LAYOUTS.items():
            LAYOUTS[name] = (nbytes // 16, shards)
        for k in PY_K:
            PY_K[k] = max(10, PY_K[k] // 10)
        args.report_to = args.report_to or os.path.join(OUT, "quick.md")
    args.runs = args.runs or (1 if args.quick else 5)
    args.runs_other = args.runs_other or (1 if args.quick else args.runs)
    global DOC, PLOT, DATA
    if args.report_to:
        DOC = os.path.abspath(args.report_to)
        PLOT = os.path.splitext(DOC)[0] + ".png"
        if args.quick and not os.path.exists(DOC):
            sh(["cp", os.path.join(ROOT, "docs", "BENCHMARKS.md"), DOC])
    if args.quick:
        DATA = os.path.join(OUT, "data-quick")
    SKIP.update(x for x in args.skip.split(",") if x)
    backends = args.backends.split(",")
    res_path = os.path.join(OUT, "quick.json" if args.quick else "results.json")
    if args.report_only:
        results = json.load(open(res_path))
        write_report(results, args)
        plot(results)
        return
    if secs == ["python"]:
        python_section(args.quick)
        return
    if secs == ["interop"]:
        make_data(("u16",))
        results = []
        open(os.path.join(OUT, "results.jsonl"), "w").close()
        interop_section(args.runs, results)
        json.dump(results, open(os.path.join(OUT, "interop.json"), "w"), indent=0)
        write_interop_report(results, args)
        if not args.keep_data:
            for d in os.listdir(DATA):
                if d not in ("austen-u16", "austen-u32"):
                    sh(["rm", "-rf", os.path.join(DATA, d)])
        return
    print(f"run {RUN_ID}: sections {','.join(secs)}; {args.runs} runs on main, {args.runs_other} elsewhere; "
          f"data sets of {DATA_BYTES >> 20} MiB in {os.path.relpath(DATA, ROOT)}", flush=True)
    make_data(("u16", "u32") if "u32" in secs else ("u16",))
    # Backends this build accepts.
    ok = []
    for b in ("auto", "pread", "io-uring", "mmap"):
        try:
            sh([CLI, "bench", os.path.join(DATA, "u16"), "--seq-len", "2049", "--max-batches", "1", "--backend", b, "--json"])
            ok.append(b)
        except subprocess.CalledProcessError as e:
            print(f"backend {b} not available in this build: {e.stderr.strip()}", flush=True)
    backends = [b for b in backends if b in ok]
    results = []
    if args.merge and os.path.exists(res_path):
        sec_of = {"resume-cli": "resume"}
        results = [r for r in json.load(open(res_path)) if sec_of.get(r.get("section"), r.get("section")) not in secs]
        # An older run's record stays only while some of its tables do.
        kept = {r.get("run_id") for r in results if r.get("section") != "_meta"}
        results = [r for r in results if r.get("section") != "_meta" or r.get("run_id") in kept]
    open(os.path.join(OUT, "results.jsonl"), "w").close()
    load_start = os.getloadavg()[0]
    ro = args.runs_other
    timings = []

    def run_section(name, title, fn):
        if name not in secs:
            return
        t0 = time.time()
        print(f"== [{len(timings) + 1}/{len(secs)}] {name}: {title} ({time.time() - t_start:.0f} s so far; "
              f"load {os.getloadavg()[0]:.2f})", flush=True)
        fn()
        timings.append((name, time.time() - t0))
        print(f"   {name} took {time.time() - t0:.0f} s", flush=True)
        # Partial results survive an interrupted run (--report-only rebuilds the tables from them).
        json.dump(results, open(res_path, "w"), indent=0)

    workers = tuple(int(w) for w in args.workers.split(","))
    run_section("main", f"warm, u16, 2,049 tokens, workers {args.workers}, {args.runs} interleaved runs",
                lambda: measure("main", configs_for("u16", 2049, workers, backends), args.runs, results))
    run_section("u32", "warm, u32, 2,049 tokens, workers 2",
                lambda: measure("u32", configs_for("u32", 2049, (2,), ["auto"], mapped=False,
                                                   py={}), ro, results))
    run_section("verify", "one full epoch per system (checksum)", lambda: section_verify(ok, results))

    def sweep():
        cs = []
        for seq in (129, 513, 8193):
            k_py = {kk: (vv if seq <= 2049 else max(50, vv // 4)) for kk, vv in PY_K.items()}
            cs += configs_for("u16", seq, (2,), ["auto"], k_py, py={})
        measure("sweep", cs, ro, results)

    run_section("sweep", "window length 129/513/8,193 tokens, u16, workers 2", sweep)

    def layouts():
        make_layouts()
        cs = []
        for name in ("u16",) + tuple(LAYOUTS):
            data = None if name == "u16" else name
            for b in ("auto", "io-uring"):
                cs.append(dict(system="guideloom-cli", backend=b, dtype="u16", seq=2049, workers=2, k=0, data=data))
            cs.append(dict(system="guideloom-lib-mapped", backend="auto", dtype="u16", seq=2049, workers=2, k=0, data=data))
            for m in ("mmap",) + (("c-mmap",) if os.path.exists(RAW_C) else ()):
                cs.append(dict(system="raw", method=m, dtype="u16", seq=2049, workers=2, k=0, data=data))
        measure("layouts", cs, ro, results)

    run_section("layouts", "shard layouts: 8 x 128 MiB, 16 x 24 MB, 1,024 x 256 KiB; u16, 2,049 tokens, workers 2", layouts)

    def batches():
        cs = []
        for seq, b, k in BATCH_SIZES:
            for c in (dict(system="guideloom-cli", backend="auto"), dict(system="raw", method="mmap")) + \
                     ((dict(system="raw", method="c-mmap"),) if os.path.exists(RAW_C) else ()):
                cs.append(dict(c, dtype="u16", seq=seq, workers=2, k=k, batch=b))
        measure("batches", cs, ro, results)

    run_section("batches", "batch 1/4/8/32 of 2,049 tokens and 256 of 129 tokens; u16, workers 2", batches)

    def cold():
        k = 300
        cs = [dict(system="guideloom-cli", backend=b, dtype="u16", seq=2049, workers=2, k=k) for b in ok]
        cs += [dict(system="raw", method=m, dtype="u16", seq=2049, workers=2, k=k) for m in ("direct", "pread", "mmap-lazy")]
        cs += [dict(system="burn", dtype="u16", seq=2049, workers=2, k=k)]
        cs += [dict(system=s, dtype="u16", seq=2049, workers=2, k=k) for s in PY_BEST]
        measure("cold", [c for c in cs if c["system"] not in SKIP], ro, results, cold=True)

    run_section("cold", "cold page cache, u16, 2,049 tokens, workers 2, 300 batches", cold)
    run_section("scaling", "CPU-heavy map, workers 0/1/2", lambda: scaling_section(ro, results))
    run_section("memory", "peak RSS against prefetch and batch size", lambda: memory_section(results))
    run_section("startup", "start-up against shards (1 to 100,000; 10^11 elements)", lambda: startup_section(ro, results))
    run_section("resume", "checkpoint size and resume time", lambda: resume_section(ro, results))
    run_section("python", "the Python binding against the CLI and the Python peers, the GIL test",
                lambda: python_section(args.quick))
    total = time.time() - t_start
    results.append(dict(section="_meta", run_id=RUN_ID, cmd=os.environ.get("GUIDELOOM_BENCH_CMD", "benches/compare.py " + " ".join(sys.argv[1:])),
                        sections=secs, runs=args.runs, runs_other=ro, seconds=total, load_start=load_start,
                        load_end=os.getloadavg()[0], data_mib=DATA_BYTES >> 20, timings=timings,
                        commit=sh(["git", "-C", ROOT, "describe", "--always", "--dirty"]).strip()))
    json.dump(results, open(res_path, "w"), indent=0)
    write_report(results, args)
    plot(results)
    if not args.keep_data:
        for d in os.listdir(DATA):
            if d not in ("austen-u16", "austen-u32"):
                sh(["rm", "-rf", os.path.join(DATA, d)])
        print("deleted the data sets (pass --keep-data to keep them)")
    print("section times: " + ", ".join(f"{n} {t:.0f} s" for n, t in timings))
    print(f"total {total / 60:.1f} min (run {RUN_ID})", flush=True)


if __name__ == "__main__":
    main()

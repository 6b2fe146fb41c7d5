"""guideloom benchmark driver: runs every system on the same workload, interleaved, and writes the
tables of docs/BENCHMARKS.md (between the GENERATED markers) and docs/benchmarks_window_size.png.

Run through benches/run.sh (it creates the venv and builds the programs). Results of every run
are appended to benches/out/results.jsonl.

    python benches/compare.py [--runs N] [--sections main,u32,sweep,cold,scaling,startup,resume,verify]
                              [--backends auto,pread,io-uring,mmap] [--keep-data] [--workers 0,1,2]
                              [--skip SYSTEM,...] [--report-to FILE]

`--sections interop` alone (benches/interop.sh) measures foreign datasets read in place (a
Megatron .bin/.idx and a nanoGPT train.bin over the same 1 GiB of u16 tokens) against the
native storage, megatron-core's IndexedDataset and nanoGPT's memmap gather, and rewrites only
the INTEROP block of docs/BENCHMARKS.md.
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
TARGET = os.environ.get("GUIDELOOM_BENCH_TARGET", os.path.join(OUT, "target", "release"))
CLI = os.environ.get("GUIDELOOM_BENCH_CLI", os.path.join(ROOT, "target", "release", "guideloom"))
CLI_BEFORE = os.environ.get("GUIDELOOM_BENCH_CLI_BEFORE")
NATIVE = os.path.join(TARGET, "guideloom_benches")
BURN = os.path.join(TARGET, "burn_loader")
PY = os.path.join(ROOT, "benches", ".venv", "bin", "python")
PEERS = os.path.join(ROOT, "benches", "peers.py")
DOC = os.path.join(ROOT, "docs", "BENCHMARKS.md")
PLOT = os.path.join(ROOT, "docs", "benchmarks_window_size.png")
BATCH = 32
SEED = 1
GIB = 1 << 30
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
        if not (os.path.exists(os.path.join(store, "manifest.json")) and os.path.getsize(binf) == GIB
                if os.path.exists(binf) else False):
            print(f"writing 1 GiB of {dtype} tokens (8 shards + raw .bin)", flush=True)
            sh([NATIVE, "mkdata", src, dtype, str(GIB), "8", store, binf])


def expected_epoch_sum(dtype, seq):
    # In a child process: a child's ru_maxrss starts from the RSS of the process that spawned it
    # (Linux carries the high-water mark over exec), so this driver must stay small.
    code = ("import numpy as np, sys; a = np.memmap(sys.argv[1], dtype=sys.argv[2], mode='r'); n = len(a) // int(sys.argv[3]); "
            "print(int(a[: n * int(sys.argv[3])].sum(dtype=np.uint64)), n)")
    s, n = sh([PY, "-c", code, os.path.join(DATA, f"{dtype}.bin"), "uint16" if dtype == "u16" else "uint32", str(seq)]).split()
    return s, int(n)


# ---------------------------------------------------------------- systems


def command(system, dtype, seq, workers, k, backend=None, method=None):
    """The command line of one run; k = batches (0 = one epoch)."""
    binf, store = os.path.join(DATA, f"{dtype}.bin"), os.path.join(DATA, dtype)
    env = dict(os.environ)
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
    elif system in ("megatron", "nanogpt"):
        path = MEGATRON_PREFIX + ".bin" if system == "megatron" else binf
        cmd = [PY, PEERS, system, path, dtype, str(seq), str(BATCH), "0", str(k), str(SEED)]
    elif system == "guideloom-cpumap":
        cmd = [NATIVE, "cpu-map", str(CPU_RECORDS), str(CPU_ROUNDS), str(BATCH), str(workers), str(SEED)]
    elif system == "burn-cpumap":
        cmd = [BURN, "cpu-map", str(CPU_RECORDS), str(CPU_ROUNDS), str(BATCH), str(workers), str(SEED)]
    elif system == "raw":
        cmd = [NATIVE, "raw", binf, dtype, str(seq), str(BATCH), str(max(workers, 1)), str(k), str(SEED), method]
    elif system == "burn":
        cmd = [BURN, binf, dtype, str(seq), str(BATCH), str(workers), str(k), str(SEED)]
    else:
        cmd = [PY, PEERS, system, binf, dtype, str(seq), str(BATCH), str(workers), str(k), str(SEED)]
    return cmd, env


def label(system, backend=None, method=None):
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


def data_files(dtype):
    store = os.path.join(DATA, dtype)
    return [os.path.join(DATA, f"{dtype}.bin")] + [os.path.join(store, f) for f in os.listdir(store) if f.endswith(".stream")]


def measure(section, configs, runs, results, cold=False):
    """configs: list of dicts (system, dtype, seq, workers, k, backend, method). Interleaved:
    every round runs every configuration once, in a rotated order."""
    for r in range(runs):
        order = configs[r % len(configs):] + configs[: r % len(configs)]
        for c in order:
            cmd, env = command(c["system"], c["dtype"], c["seq"], c["workers"], c["k"], c.get("backend"), c.get("method"))
            if cold:
                fadvise_dontneed(data_files(c["dtype"]))
            load1 = os.getloadavg()[0]
            try:
                j, ru, other = run_one(cmd, env)
            except RuntimeError as e:
                print(f"  FAILED {label(c['system'], c.get('backend'), c.get('method'))}: {e}", flush=True)
                rec = dict(c, section=section, run=r, error=str(e)[:500])
                results.append(rec)
                continue
            w, s, f = j["windows"], j["seconds"], j["first_batch_s"]
            steady = (w - BATCH) / (s - f) if s > f and w > BATCH else w / s
            rec = dict(c, section=section, run=r, cold=cold, windows=w, seconds=s, first_batch_s=f,
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

# Batches per run for the Python peers (chosen so a run takes a few seconds here); the Rust
# systems read one whole epoch at 2,049 tokens (8,188 batches).
PY_K = {("torch", 0): 2000, ("torch", 1): 2000, ("torch", 2): 2000,
        ("grain-dl", 0): 200, ("grain-dl", 1): 600, ("grain-dl", 2): 1000,
        ("grain-ds", 0): 1000, ("grain-ds", 1): 500, ("grain-ds", 2): 500}
PY_K.update({("numpy", 0): 4000, ("grain-ds-best", 0): 2000})
PY_SYSTEMS = ("torch", "grain-dl", "grain-ds")
# Peers at their best configuration, measured once per section (in the workers-0 rounds: one
# process each).
PY_BEST = ("numpy", "grain-ds-best")
# Systems left out (--skip).
SKIP = set()


def rust_k(seq):
    # One epoch from 513 tokens up (262,016 windows at 2,049); 32,768 batches (1 M windows, a
    # quarter of the epoch) at 129 tokens.
    return 0 if seq >= 513 else 32768


def configs_for(dtype, seq, workers_list, backends, k_py=None, generic=False):
    cs = []
    for w in workers_list:
        for b in backends:
            cs.append(dict(system="guideloom-cli", backend=b, dtype=dtype, seq=seq, workers=w, k=rust_k(seq)))
        cs.append(dict(system="guideloom-lib", backend="auto", dtype=dtype, seq=seq, workers=w, k=rust_k(seq)))
        cs.append(dict(system="guideloom-lib-mapped", backend="auto", dtype=dtype, seq=seq, workers=w, k=rust_k(seq)))
        if generic:
            cs.append(dict(system="guideloom-lib-generic", backend="auto", dtype=dtype, seq=seq, workers=w, k=rust_k(seq)))
        if w != 1:
            for m in ("mmap", "pread"):
                cs.append(dict(system="raw", method=m, dtype=dtype, seq=seq, workers=w, k=rust_k(seq)))
        cs.append(dict(system="burn", dtype=dtype, seq=seq, workers=w, k=rust_k(seq)))
        for s in PY_SYSTEMS:
            if s == "grain-ds" and w == 1:
                continue
            cs.append(dict(system=s, dtype=dtype, seq=seq, workers=w, k=(k_py or PY_K)[(s, w)]))
        if w == min(workers_list):
            for s in PY_BEST:
                # One process whatever `workers` says (listed in this workers table).
                cs.append(dict(system=s, dtype=dtype, seq=seq, workers=w, k=(k_py or PY_K)[(s, 0)]))
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


def startup_section(runs, results):
    rows = []
    for shards in (1, 10, 100, 1000, 10000):
        d = os.path.join(DATA, f"shards-{shards}")
        sh([NATIVE, "mkdata", os.path.join(DATA, "austen-u16"), "u16", str(256 << 20), str(shards), d])
        for r in range(runs):
            j, ru, other = run_one([NATIVE, "lib", d, "u16", "2049", str(BATCH), "2", "1", str(SEED)], dict(os.environ))
            t0 = time.perf_counter()
            sh([CLI, "bench", d, "--seq-len", "2049", "--batch-size", str(BATCH), "--shuffle", "--workers", "2",
                "--max-batches", "1", "--json"])
            cli_wall = time.perf_counter() - t0
            rows.append(dict(section="startup", shards=shards, run=r, open_s=j["open_s"], first_batch_s=j["first_batch_s"],
                             records=j["epoch_windows"], cli_wall_s=cli_wall, other_load=other))
        sh(["rm", "-rf", d])
    results.extend(rows)


def resume_section(runs, results):
    store = os.path.join(DATA, "u16")
    for pos in (1, 1000, 1_000_000, 1_000_000_000):
        for r in range(runs):
            j, ru, other = run_one([NATIVE, "resume", store, "u16", "2049", str(BATCH), str(pos)], dict(os.environ))
            results.append(dict(section="resume", position=pos, run=r, state_bytes=j["state_bytes"], resume_s=j["resume_s"]))
    # The CLI's state file after 1,000 batches.
    with tempfile.TemporaryDirectory() as t:
        f = os.path.join(t, "state.json")
        sh([CLI, "batches", store, "--seq-len", "2049", "--batch-size", str(BATCH), "--shuffle", "--workers", "2",
            "--max-batches", "1000", "--no-tokens", "--save-state", f])
        results.append(dict(section="resume-cli", state_bytes=os.path.getsize(f)))


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
    gen = "\n".join(lines)
    doc = open(DOC).read()
    if "<!-- BEGIN INTEROP" not in doc:
        doc += "\n## Foreign datasets read in place (issue 13)\n\n<!-- BEGIN INTEROP -->\n<!-- END INTEROP -->\n"
    doc = re.sub(r"<!-- BEGIN INTEROP.*?<!-- END INTEROP -->", lambda _: gen, doc, flags=re.S)
    open(DOC, "w").write(doc)
    print(f"wrote the INTEROP block of {os.path.relpath(DOC, ROOT)}")


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
    lines = ["<!-- BEGIN GENERATED by benches/compare.py: do not edit by hand -->", "",
             f"Generated {time.strftime('%Y-%m-%d %H:%M %Z')} by `benches/run.sh` ({args.runs} interleaved runs per figure).", "",
             "### Machine and versions", "",
             f"- {os.cpu_count()} vCPUs ({cpu[0].split(':', 1)[1].strip() if cpu else '?'}), {int(mem) / 2**20:.1f} GiB RAM, "
             f"kernel {platform.release()}; data on `{dev}` (virtio-blk, ext4)",
             f"- guideloom {v(['git', '-C', ROOT, 'rev-parse', '--short', 'HEAD'])} ({v(['rustc', '--version'])}), "
             f"burn-core {lock_version(os.path.join(ROOT, 'benches', 'burn_loader', 'Cargo.lock'), 'burn-core')}, "
             f"Python {platform.python_version()}: {pyv}",
             f"- load average when the run ended: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", ""]
    for sec, title in (("main", "Warm page cache, u16, 2,049-token windows, workers 0/1/2"),
                       ("u32", "Warm page cache, u32 (cl100k), 2,049-token windows"),
                       ("sweep", "Window size sweep (u16, workers 2)"),
                       ("cold", "Cold page cache (posix_fadvise DONTNEED on every data file before each run), u16, 2,049 tokens")):
        t = throughput_table(results, sec, title, cold=(sec == "cold"))
        if t:
            lines += [f"### {title}", t]
    ver = [r for r in results if r.get("section") == "verify" and "error" not in r]
    if ver:
        lines += ["### Epoch checksum (one full epoch per system, u16, 2,049 tokens, workers 2)", "",
                  f"Expected: sum of the first {ver[0]['expect_windows']:,} × 2,049 tokens of the stream = **{ver[0]['expect']}**.", "",
                  "| system | windows | checksum | equal |", "|---|---|---|---|"]
        for r in ver:
            lines.append(f"| {r['label']} | {r['windows']:,} | {r['checksum']} | {'yes' if r['checksum'] == r['expect'] else 'NO'} |")
        lines.append("")
    sc = scaling_table(results)
    if sc:
        lines += ["### Scaling with a CPU-heavy map (no I/O)", ""] + sc
    st = [r for r in results if r.get("section") == "startup"]
    if st:
        lines += ["### Start-up vs shards (u16, 256 MiB, 65,504 windows of 2,049; workers 2)", "",
                  "| shards | open ms median (min–max) | open + first batch ms | CLI process wall ms (`bench --max-batches 1`) |",
                  "|---|---|---|---|"]
        for n in sorted({r["shards"] for r in st}):
            rs = [r for r in st if r["shards"] == n]
            o, f, c = [r["open_s"] for r in rs], [r["first_batch_s"] for r in rs], [r["cli_wall_s"] for r in rs]
            lines.append(f"| {n:,} | {fmt_ms(med(o))} ({fmt_ms(min(o))}–{fmt_ms(max(o))}) | {fmt_ms(med(f))} ({fmt_ms(min(f))}–{fmt_ms(max(f))}) | "
                         f"{fmt_ms(med(c))} ({fmt_ms(min(c))}–{fmt_ms(max(c))}) |")
        lines.append("")
    rz = [r for r in results if r.get("section") == "resume"]
    if rz:
        lines += ["### Checkpoint size and resume time vs position (u16, 2,049 tokens, batch 32)", "",
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
    doc = open(DOC).read() if os.path.exists(DOC) else "# Benchmarks\n\n<!-- BEGIN GENERATED -->\n<!-- END GENERATED -->\n"
    doc = re.sub(r"<!-- BEGIN GENERATED.*?<!-- END GENERATED -->", lambda _: gen, doc, flags=re.S)
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
    fig, ax = plt.subplots(figsize=(10, 5))
    for lab, rs in sorted(g.items()):
        pts = {}
        for r in rs:
            pts.setdefault(r["seq"], []).append(r["steady_windows_per_s"])
        for r in main.get((lab, 2), []):
            pts.setdefault(r["seq"], []).append(r["steady_windows_per_s"])
        xs = sorted(pts)
        ax.plot(xs, [med(pts[x]) for x in xs], marker="o", label=lab)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("window size (tokens, u16)")
    ax.set_ylabel("windows/s (median, warm cache, 2 workers, batch 32)")
    ax.set_title("guideloom vs peers: windows/s vs window size (2 vCPUs)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, bbox_to_anchor=(1.02, 1), loc="upper left")
    fig.tight_layout()
    fig.savefig(PLOT, dpi=110)
    print(f"wrote {os.path.relpath(PLOT, ROOT)}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--sections", default="main,u32,verify,sweep,cold,scaling,startup,resume")
    ap.add_argument("--backends", default="auto,pread,io-uring,mmap")
    ap.add_argument("--keep-data", action="store_true")
    ap.add_argument("--report-to", default=None,
                    help="write the generated tables to this file instead of docs/BENCHMARKS.md (no plot)")
    ap.add_argument("--workers", default="0,1,2", help="worker counts of the main section")
    ap.add_argument("--skip", default="", help="systems left out, e.g. burn,torch,grain-dl,guideloom-lib-generic")
    ap.add_argument("--report-only", action="store_true", help="rebuild the tables from benches/out/results.json")
    ap.add_argument("--merge", action="store_true",
                    help="keep the results of the sections not run now from benches/out/results.json")
    args = ap.parse_args()
    secs = args.sections.split(",")
    if args.report_to:
        global DOC, PLOT
        DOC = os.path.abspath(args.report_to)
        PLOT = os.path.splitext(DOC)[0] + ".png"
    SKIP.update(x for x in args.skip.split(",") if x)
    backends = args.backends.split(",")
    res_path = os.path.join(OUT, "results.json")
    if args.report_only:
        results = json.load(open(res_path))
        write_report(results, args)
        plot(results)
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
    make_data(("u16", "u32") if "u32" in secs else ("u16",))
    # Backends this build accepts.
    ok = []
    for b in backends:
        try:
            sh([CLI, "bench", os.path.join(DATA, "u16"), "--seq-len", "2049", "--max-batches", "1", "--backend", b, "--json"])
            ok.append(b)
        except subprocess.CalledProcessError as e:
            print(f"backend {b} not available in this build: {e.stderr.strip()}", flush=True)
    results = []
    if args.merge and os.path.exists(res_path):
        sec_of = {"resume-cli": "resume"}
        results = [r for r in json.load(open(res_path)) if sec_of.get(r.get("section"), r.get("section")) not in secs]
    open(os.path.join(OUT, "results.jsonl"), "w").close()
    if "main" in secs:
        print("== warm, u16, 2,049 tokens, workers 0/1/2", flush=True)
        measure("main", configs_for("u16", 2049, tuple(int(w) for w in args.workers.split(",")), ok, generic=True),
                args.runs, results)
    if "u32" in secs:
        print("== warm, u32, 2,049 tokens, workers 2", flush=True)
        measure("u32", configs_for("u32", 2049, (2,), ["auto"]), args.runs, results)
    if "verify" in secs:
        print("== one full epoch per system (checksum)", flush=True)
        expect, n = expected_epoch_sum("u16", 2049)
        for c in ([dict(system="guideloom-cli", backend=b) for b in ok] + [dict(system="guideloom-lib", backend="auto"),
                  dict(system="raw", method="mmap"), dict(system="raw", method="pread"), dict(system="burn")]
                  + [dict(system=s) for s in PY_SYSTEMS]):
            cmd, env = command(c["system"], "u16", 2049, 2, 0, c.get("backend"), c.get("method"))
            try:
                j, ru, other = run_one(cmd, env)
                results.append(dict(section="verify", label=label(c["system"], c.get("backend"), c.get("method")),
                                    windows=j["windows"], checksum=j["checksum"], expect=expect, expect_windows=n))
                print(f"  {results[-1]['label']}: {j['windows']} windows, checksum {j['checksum']} (expected {expect})", flush=True)
            except RuntimeError as e:
                print(f"  FAILED {c}: {e}", flush=True)
    if "sweep" in secs:
        print("== window size sweep, u16, workers 2", flush=True)
        cs = []
        for seq in (129, 513, 8193):
            k_py = {kk: (vv if seq <= 2049 else max(100, vv // 4)) for kk, vv in PY_K.items()}
            cs += configs_for("u16", seq, (2,), ["auto"], k_py)
        measure("sweep", cs, args.runs, results)
    if "cold" in secs:
        print("== cold page cache, u16, 2,049 tokens, workers 2, 300 batches", flush=True)
        k = 300
        cs = [dict(system="guideloom-cli", backend=b, dtype="u16", seq=2049, workers=2, k=k) for b in ok]
        cs += [dict(system="raw", method=m, dtype="u16", seq=2049, workers=2, k=k) for m in ("direct", "pread", "mmap-lazy")]
        cs += [dict(system="burn", dtype="u16", seq=2049, workers=2, k=k)]
        cs += [dict(system=s, dtype="u16", seq=2049, workers=2, k=k) for s in ("torch", "grain-dl")]
        measure("cold", cs, args.runs, results, cold=True)
    if "scaling" in secs:
        print("== scaling with a CPU-heavy map, workers 0/1/2", flush=True)
        scaling_section(args.runs, results)
    if "startup" in secs:
        print("== start-up vs shards", flush=True)
        startup_section(args.runs, results)
    if "resume" in secs:
        print("== checkpoint size and resume time", flush=True)
        resume_section(args.runs, results)
    json.dump(results, open(res_path, "w"), indent=0)
    write_report(results, args)
    plot(results)
    if not args.keep_data:
        for d in os.listdir(DATA):
            if d not in ("austen-u16", "austen-u32"):
                sh(["rm", "-rf", os.path.join(DATA, d)])
        print("deleted the 1 GiB data sets (pass --keep-data to keep them)")


if __name__ == "__main__":
    main()

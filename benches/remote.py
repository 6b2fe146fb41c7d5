"""Remote-storage comparison (issue 18, item 7): guideloom reading a storage on an S3 server
(cold cache, warm cache), guideloom on local disk, and MosaicML Streaming's StreamingDataset
over the same tokens written as MDS to the same server, all through the project's fault proxy
(testkit/examples/fault_proxy.rs) adding the same latency to every request. Run by
benches/remote.sh, which installs the peers and builds the programs; this script starts
moto's S3 server and the proxy on 127.0.0.1 (nothing else is reached) and prints a Markdown
table.

    python benches/remote.py GUIDELOOM_BIN FAULT_PROXY_BIN MOTO_SERVER_BIN
        [--latency-ms 20] [--shards 8] [--shard-tokens 4194304] [--seq-len 2049]
        [--batch-size 32] [--workers 2]

The data: `--shards` x `--shard-tokens` pseudo-random u16 tokens (numpy, seed 0), as .npy
files imported into a guideloom storage (one shard per file) and uploaded, and the same
token stream cut into non-overlapping `--seq-len` windows written as MDS samples (one
`ndarray:uint16:SEQ` column, uncompressed, shards of 4 MiB) by Streaming's own MDSWriter
to the same bucket. Every system reads one shuffled epoch of the same windows in batches of
`--batch-size`, and the consumer sums every token (the sums are compared).

Figures per row: time to the first batch (from opening the storage / constructing the
dataset), steady windows/s (windows after the first batch over the time after it), bytes
the seconds of the whole epoch, the requests
the proxy received, bytes fetched per byte delivered (2xx body bytes counted at the proxy over
the bytes of the windows delivered), the peak size of the local cache directory (sampled every 20 ms), and the
1-minute load average before the row.
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

BUCKET = "bench"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def local_env(endpoint):
    """An environment whose S3 clients reach `endpoint` on 127.0.0.1 and nothing else."""
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env.update(
        AWS_ACCESS_KEY_ID="test",
        AWS_SECRET_ACCESS_KEY="test",
        AWS_REGION="us-east-1",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_EC2_METADATA_DISABLED="true",
        AWS_ENDPOINT_URL=endpoint,
        AWS_ALLOW_HTTP="true",
        S3_ENDPOINT_URL=endpoint,
        NO_PROXY="127.0.0.1",
        HF_HUB_OFFLINE="1",
    )
    return env


def tree_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.stat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


class PeakSampler:
    """Samples the size of a directory every 20 ms in a thread; `peak` is the largest seen."""

    def __init__(self, path):
        self.path, self.peak, self._stop = path, 0, threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, tree_bytes(self.path))
            self._stop.wait(0.02)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, tree_bytes(self.path))


class Proxy:
    """testkit/examples/fault_proxy.rs in front of moto; `stats()` reads its counters."""

    def __init__(self, exe, upstream_port, latency_ms):
        self.p = subprocess.Popen(
            [exe, str(upstream_port), str(latency_ms)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.port = int(self.p.stdout.readline())
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def stats(self):
        self.p.stdin.write("stats\n")
        self.p.stdin.flush()
        return json.loads(self.p.stdout.readline())

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=10)


def start_moto(exe):
    port = free_port()
    p = subprocess.Popen(
        [exe, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return p, port
        except OSError:
            time.sleep(0.1)
    p.kill()
    sys.exit("moto_server did not start")


def write_data(args, work, gl_bin, moto_endpoint):
    """The .npy files, the guideloom storage (local and uploaded), and the MDS dataset."""
    import numpy as np

    rng = np.random.default_rng(0)
    npy = os.path.join(work, "npy")
    os.makedirs(npy)
    stream = []
    for s in range(args.shards):
        t = rng.integers(0, 50_000, size=args.shard_tokens, dtype=np.uint16)
        np.save(os.path.join(npy, f"part-{s:03}.npy"), t)
        stream.append(t)
    stream = np.concatenate(stream)
    local = os.path.join(work, "guideloom")
    subprocess.run([gl_bin, "import", npy, "--out", local], check=True, stdout=subprocess.DEVNULL)
    env = local_env(moto_endpoint)
    subprocess.run([gl_bin, "upload", local, f"s3://{BUCKET}/guideloom"], check=True, env=env)

    # MDS with Streaming's own writer, straight to the server.
    os.environ.update(env)
    from streaming import MDSWriter

    n = len(stream) // args.seq_len
    with MDSWriter(
        out=f"s3://{BUCKET}/mds",
        columns={"tokens": f"ndarray:uint16:{args.seq_len}"},
        compression=None,
        size_limit=4 << 20,
        progress_bar=False,
    ) as w:
        for i in range(n):
            w.write({"tokens": stream[i * args.seq_len : (i + 1) * args.seq_len]})
    expected = int(stream[: n * args.seq_len].astype(np.uint64).sum())
    import boto3

    listing = boto3.client("s3", endpoint_url=moto_endpoint).list_objects_v2(Bucket=BUCKET, Prefix="mds/")
    mds_shards = sum(1 for o in listing.get("Contents", []) if o["Key"].endswith(".mds"))
    return local, n, expected, mds_shards


def run_guideloom(args, gl_bin, storage, env):
    out = subprocess.run(
        [
            gl_bin,
            "bench",
            storage,
            "--seq-len",
            str(args.seq_len),
            "--stride",
            str(args.seq_len),
            "--batch-size",
            str(args.batch_size),
            "--shuffle",
            "--seed",
            "1",
            "--workers",
            str(args.workers),
            "--json",
        ],
        check=True,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    ).stdout
    r = json.loads(out)
    steady = (r["windows"] - args.batch_size) / (r["seconds"] - r["first_batch_s"])
    return dict(
        first_ms=r["first_batch_s"] * 1e3,
        steady=steady,
        windows=r["windows"],
        checksum=int(r["checksum"]),
        seconds=r["seconds"],
    )


# Streaming's configurations measured: its defaults, and a tuned one (see BENCHMARKS.md).
STREAMING_CONFIGS = {
    "defaults": dict(shuffle_algo="py1e", predownload=None, cache_limit=None),
    "tuned": dict(shuffle_algo="py1e", predownload=1 << 14, cache_limit=None),
}


def _stack(batch):
    import numpy as np

    return np.stack([s["tokens"] for s in batch])


def _trace_worker(_):
    import faulthandler

    faulthandler.dump_traceback_later(float(os.environ["REMOTE_BENCH_TRACE_S"]), exit=False)


def streaming_child(argv):
    """One Streaming epoch in its own process (its shared memory and locks start clean);
    prints the figures as JSON. With REMOTE_BENCH_TRACE_S set, every process of it dumps its
    Python stacks to stderr after that many seconds (to see where a stall waits)."""
    import numpy as np
    from streaming import StreamingDataset
    from streaming.base.util import clean_stale_shared_memory
    from torch.utils.data import DataLoader

    conf, local, batch_size, workers = argv[0], argv[1], int(argv[2]), int(argv[3])
    clean_stale_shared_memory()
    trace = os.environ.get("REMOTE_BENCH_TRACE_S")
    if trace:
        _trace_worker(None)
    t0 = time.perf_counter()
    ds = StreamingDataset(
        remote=f"s3://{BUCKET}/mds",
        local=local,
        shuffle=True,
        shuffle_seed=1,
        batch_size=batch_size,
        num_canonical_nodes=1,
        **STREAMING_CONFIGS[conf],
    )
    dl = DataLoader(
        ds,
        batch_size=batch_size,
        num_workers=workers,
        collate_fn=_stack,
        worker_init_fn=_trace_worker if trace else None,
    )
    first = None
    windows, checksum = 0, 0
    for b in dl:
        windows += b.shape[0]
        checksum += int(b.sum(dtype=np.uint64))
        if first is None:
            first = time.perf_counter() - t0
    seconds = time.perf_counter() - t0
    print(
        json.dumps(
            dict(
                first_ms=first * 1e3,
                steady=(windows - batch_size) / (seconds - first),
                windows=windows,
                checksum=checksum,
                seconds=seconds,
            )
        )
    )


def run_streaming(args, conf, local, env):
    # A bound on one epoch: one run of the defaults hung (workers idle) for over 10 minutes.
    out = subprocess.run(
        [
            sys.executable,
            os.path.abspath(__file__),
            "--streaming-child",
            conf,
            local,
            str(args.batch_size),
            str(args.workers),
        ],
        check=True,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        timeout=300,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--streaming-child":
        return streaming_child(sys.argv[2:])
    ap = argparse.ArgumentParser()
    ap.add_argument("guideloom")
    ap.add_argument("fault_proxy")
    ap.add_argument("moto_server")
    ap.add_argument("--latency-ms", type=int, default=20)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--shard-tokens", type=int, default=4 << 20)
    ap.add_argument("--seq-len", type=int, default=2049)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="guideloom-remote-bench-")
    moto, moto_port = start_moto(args.moto_server)
    proxy = None
    try:
        import urllib.request

        req = urllib.request.Request(f"http://127.0.0.1:{moto_port}/{BUCKET}", method="PUT")
        urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req).close()
        local, n, expected, mds_shards = write_data(args, work, args.guideloom, f"http://127.0.0.1:{moto_port}")
        proxy = Proxy(args.fault_proxy, moto_port, args.latency_ms)
        env = local_env(proxy.endpoint)
        token_bytes = 2
        delivered_per_window = args.seq_len * token_bytes
        rows = []

        def row(label, run, cache_dir, remote=True):
            load = os.getloadavg()[0]
            before = proxy.stats()
            os.makedirs(cache_dir, exist_ok=True)
            with PeakSampler(cache_dir) as peak:
                try:
                    r = run()
                except subprocess.TimeoutExpired:
                    print(f"{label}: no epoch within 300 s, row left out", file=sys.stderr, flush=True)
                    return
            after = proxy.stats()
            fetched = after["body_bytes"] - before["body_bytes"]
            requests = after["requests"] - before["requests"]
            delivered = r["windows"] * delivered_per_window
            rows.append(
                dict(
                    label=label,
                    first_ms=r["first_ms"],
                    steady=r["steady"],
                    ratio=(fetched / delivered) if remote else None,
                    fetched=fetched,
                    requests=requests if remote else None,
                    seconds=r["seconds"],
                    delivered=delivered,
                    peak=peak.peak,
                    load=load,
                    checksum_ok=(r["checksum"] == expected) if r["windows"] == n else None,
                    windows=r["windows"],
                )
            )
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)

        gl_cache = os.path.join(work, "gl-cache")
        gl_env = dict(env, GUIDELOOM_CACHE_DIR=gl_cache)
        url = f"s3://{BUCKET}/guideloom"
        row("guideloom remote, cold cache", lambda: run_guideloom(args, args.guideloom, url, gl_env), gl_cache)
        row("guideloom remote, warm cache", lambda: run_guideloom(args, args.guideloom, url, gl_env), gl_cache)
        row(
            "guideloom local disk",
            lambda: run_guideloom(args, args.guideloom, local, env),
            os.path.join(work, "none"),
            remote=False,
        )
        for conf in STREAMING_CONFIGS:
            cache = os.path.join(work, f"mds-cache-{conf}")
            row(f"Streaming 0.13 ({conf}), cold cache", lambda: run_streaming(args, conf, cache, env), cache)
        conf = list(STREAMING_CONFIGS)[-1]
        cache = os.path.join(work, f"mds-cache-{conf}")
        row(f"Streaming 0.13 ({conf}), warm cache", lambda: run_streaming(args, conf, cache, env), cache)

        print(
            f"{args.shards} x {args.shard_tokens} u16 tokens ({n} windows of {args.seq_len}), batch {args.batch_size}, "
            f"{args.workers} workers, {args.latency_ms} ms per request at the proxy; token sum {expected}; "
            f"{mds_shards} MDS shards"
        )
        print()
        print(
            "| system | first batch ms | steady windows/s | epoch s | requests | fetched / delivered | "
            "peak cache | windows | token sum | load (1 min) |"
        )
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for r in rows:
            ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f} ({r['fetched']:,} / {r['delivered']:,})"
            ok = {True: "=", False: "differs", None: "(partial epoch)"}[r["checksum_ok"]]
            print(
                f"| {r['label']} | {r['first_ms']:,.0f} | {r['steady']:,.0f} | {r['seconds']:.2f} | "
                f"{'-' if r['requests'] is None else r['requests']} | {ratio} | "
                f"{r['peak']:,} bytes | {r['windows']:,} | {ok} | {r['load']:.2f} |"
            )
    finally:
        if proxy is not None:
            proxy.close()
        moto.kill()
        moto.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

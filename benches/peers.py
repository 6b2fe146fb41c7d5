"""Python peers of the guideloom benchmark: torch DataLoader and Grain over np.memmap windows.

One run prints one JSON line: batches, windows, tokens, seconds, first_batch_s, checksum (sum of
every token id delivered), epoch_windows, rss_kb (peak RSS of this process plus its worker
processes, from /proc VmHWM).

    python peers.py SYSTEM BIN u16|u32 SEQ_LEN BATCH WORKERS MAX_BATCHES(0 = one epoch) SEED

SYSTEM: torch (DataLoader, per-window `__getitem__`, default settings) | torch-best (DataLoader
with a batched `__getitems__` that gathers a whole batch with one `np.stack` (torch >= 2.1 calls
it instead of one `__getitem__` per index), `collate_fn` that passes the batch through,
`pin_memory=False`, `persistent_workers=True` and `prefetch_factor=4` when WORKERS > 0) |
grain-dl (grain.DataLoader + IndexSampler, default ReadOptions) | grain-dl-best (the same with
`read_options=ReadOptions(num_threads=0, prefetch_buffer_size=0)`: no read threads, the source is
a memmap slice) | grain-ds (MapDataset API) | grain-ds-best (MapDataset through
`to_iter_dataset(grain.ReadOptions(num_threads=0))`, WORKERS ignored) | numpy (one np.memmap,
`np.stack` of each batch's windows, one process) |
megatron (megatron-core's IndexedDataset over BIN's prefix, read as GPTDataset reads a sample:
one `get(sequence, offset, length)` per sequence the window touches, concatenated, as int64) |
nanogpt (nanoGPT's train.py get_batch: a fresh np.memmap per batch, one slice per window,
`torch.stack([torch.from_numpy(x.astype(np.int64))])`). The last two run in this process
(WORKERS must be 0), windows in a shuffled order of numpy's default_rng(SEED).
Window i is tokens [i*L, (i+1)*L) (non-overlapping), as for every other system.
"""
import json
import os
import sys
import time


def vm_hwm_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def descendants(pid):
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                for c in f.read().split():
                    out.append(int(c))
                    out.extend(descendants(int(c)))
    except OSError:
        pass
    return out


def drain(np, it, to_np, t0, max_batches):
    """Reads batches from `it` (each made a numpy array by `to_np`) until it ends or
    `max_batches` (0 = no limit), summing every token id; returns (seconds to the first batch
    from `t0`, batches, windows, checksum)."""
    first = None
    batches = windows = checksum = 0
    for b in it:
        a = to_np(b)
        checksum += int(a.sum(dtype=np.uint64))
        if first is None:
            first = time.perf_counter() - t0
        batches += 1
        windows += a.shape[0]
        if max_batches and batches >= max_batches:
            break
    return first, batches, windows, checksum


def passthrough(batch):
    """collate_fn of torch-best: `__getitems__` has stacked the batch already."""
    return batch


def main():
    system, path, dtype, seq, batch, workers, max_batches, seed = sys.argv[1:9]
    seq, batch, workers, max_batches, seed = int(seq), int(batch), int(workers), int(max_batches), int(seed)
    import numpy as np

    np_dtype = np.uint16 if dtype == "u16" else np.uint32
    n = os.path.getsize(path) // np.dtype(np_dtype).itemsize // seq

    class Windows:
        """Map-style source: window i of a raw token file, memmapped once per process."""

        def __init__(self):
            self.data = None

        def __len__(self):
            return n

        def __getitem__(self, i):
            if self.data is None:
                self.data = np.memmap(path, dtype=np_dtype, mode="r")
            i = int(i)
            return np.array(self.data[i * seq:(i + 1) * seq])

    if system == "numpy":
        return numpy_gather(path, np, np_dtype, n, seq, batch, max_batches, seed)
    if system in ("megatron", "nanogpt"):
        import torch

        if system == "megatron":
            from megatron.core.datasets.indexed_dataset import IndexedDataset
        return in_process(system, path, np, torch, seq, batch, max_batches, seed)
    if system in ("torch", "torch-best"):  # imports are not part of the measured start-up
        import torch
        from torch.utils.data import DataLoader, Dataset, RandomSampler
    elif system in ("grain-dl", "grain-dl-best"):
        import grain.python as gp
    else:
        import grain
    t0 = time.perf_counter()
    if system == "torch":

        class TorchWindows(Dataset):
            def __init__(self):
                self.w = Windows()

            def __len__(self):
                return n

            def __getitem__(self, i):
                return torch.from_numpy(self.w[i])

        g = torch.Generator()
        g.manual_seed(seed)
        loader = DataLoader(TorchWindows(), batch_size=batch, sampler=RandomSampler(range(n), generator=g),
                            num_workers=workers, persistent_workers=False)
        it = iter(loader)
        to_np = lambda b: b.numpy()
    elif system == "torch-best":

        class TorchBatchedWindows(Dataset):
            """`__getitems__`: the DataLoader's fetcher asks for a batch's indices at once."""

            def __init__(self):
                self.w = Windows()

            def __len__(self):
                return n

            def __getitem__(self, i):
                return torch.from_numpy(self.w[i])

            def __getitems__(self, idx):
                if self.w.data is None:
                    self.w.data = np.memmap(path, dtype=np_dtype, mode="r")
                d = self.w.data
                return torch.from_numpy(np.stack([d[int(i) * seq:(int(i) + 1) * seq] for i in idx]))

        g = torch.Generator()
        g.manual_seed(seed)
        extra = dict(persistent_workers=True, prefetch_factor=4) if workers > 0 else {}
        loader = DataLoader(TorchBatchedWindows(), batch_size=batch, sampler=RandomSampler(range(n), generator=g),
                            num_workers=workers, collate_fn=passthrough, pin_memory=False, **extra)
        it = iter(loader)
        to_np = lambda b: b.numpy()
    elif system in ("grain-dl", "grain-dl-best"):
        sampler = gp.IndexSampler(num_records=n, shard_options=gp.NoSharding(), shuffle=True, num_epochs=1, seed=seed)
        extra = dict(read_options=gp.ReadOptions(num_threads=0, prefetch_buffer_size=0)) if system == "grain-dl-best" else {}
        loader = gp.DataLoader(data_source=Windows(), sampler=sampler,
                               operations=[gp.Batch(batch_size=batch, drop_remainder=False)], worker_count=workers, **extra)
        it = iter(loader)
        to_np = lambda b: b
    elif system in ("grain-ds", "grain-ds-best"):
        ds = grain.MapDataset.source(Windows()).shuffle(seed=seed).batch(batch)
        if system == "grain-ds-best":
            # Grain's fastest configuration measured here: no read threads (the source is a
            # memmap slice, already in memory), no worker processes.
            it = iter(ds.to_iter_dataset(grain.ReadOptions(num_threads=0)))
        elif workers > 0:
            it = iter(ds.to_iter_dataset().mp_prefetch(grain.MultiprocessingOptions(num_workers=workers)))
        else:
            it = iter(ds.to_iter_dataset())
        to_np = lambda b: b
    else:
        raise SystemExit(f"unknown system {system}")

    first, batches, windows, checksum = drain(np, it, to_np, t0, max_batches)
    seconds = time.perf_counter() - t0
    rss = vm_hwm_kb(os.getpid()) + sum(vm_hwm_kb(p) for p in descendants(os.getpid()))
    print(json.dumps({"batches": batches, "windows": windows, "tokens": windows * seq, "seconds": seconds,
                      "first_batch_s": first if first is not None else seconds, "checksum": str(checksum),
                      "epoch_windows": n, "rss_kb": rss}), flush=True)
    sys.stdout.flush()
    # Worker teardown is not part of the measured run; the driver kills this process group.
    os._exit(0)


def numpy_gather(path, np, np_dtype, n, seq, batch, max_batches, seed):
    """The plainest nanoGPT-style loop: one np.memmap of the file, and per batch `np.stack` of
    the batch's windows (native dtype), in a shuffled order of numpy's default_rng(SEED); one
    process, no framework."""
    t0 = time.perf_counter()
    data = np.memmap(path, dtype=np_dtype, mode="r")
    order = np.random.default_rng(seed).permutation(n)
    batches_of = (np.stack([data[i * seq:(i + 1) * seq] for i in order[b0:b0 + batch]]) for b0 in range(0, n, batch))
    first, batches, windows, checksum = drain(np, batches_of, lambda a: a, t0, max_batches)
    seconds = time.perf_counter() - t0
    print(json.dumps({"batches": batches, "windows": windows, "tokens": windows * seq, "seconds": seconds,
                      "first_batch_s": first if first is not None else seconds, "checksum": str(checksum),
                      "epoch_windows": n, "rss_kb": vm_hwm_kb(os.getpid())}), flush=True)
    os._exit(0)


def in_process(system, path, np, torch, seq, batch, max_batches, seed):
    """The megatron and nanogpt peers: one process, batches of `batch` shuffled windows."""
    t0 = time.perf_counter()
    if system == "megatron":
        from megatron.core.datasets.indexed_dataset import IndexedDataset

        ds = IndexedDataset(path[: -len(".bin")])
        lengths = ds.sequence_lengths.astype(np.int64)
        starts = np.concatenate([[0], np.cumsum(lengths)])
        total = int(starts[-1])

        def window(s):
            # GPTDataset._query_document_sample_shuffle_indices: one get per sequence touched.
            i = int(np.searchsorted(starts, s, side="right")) - 1
            off, need, parts = s - int(starts[i]), seq, []
            while need > 0:
                take = min(int(lengths[i]) - off, need)
                if take > 0:
                    parts.append(ds.get(i, offset=off, length=take))
                need -= take
                i, off = i + 1, 0
            return torch.from_numpy(np.concatenate(parts).astype(np.int64))

        def get_batch(ix):
            return torch.stack([window(int(s)) for s in ix])
    else:
        total = os.path.getsize(path) // 2

        def get_batch(ix):
            # nanoGPT train.py: recreate the memmap every batch to avoid a memory leak.
            data = np.memmap(path, dtype=np.uint16, mode="r")
            return torch.stack([torch.from_numpy((data[i:i + seq]).astype(np.int64)) for i in ix])

    n = total // seq
    order = np.random.default_rng(seed).permutation(n)
    batches_of = (get_batch(order[b0:b0 + batch] * seq) for b0 in range(0, n, batch))
    first, batches, windows, checksum = drain(np, batches_of, lambda b: b.numpy(), t0, max_batches)
    seconds = time.perf_counter() - t0
    print(json.dumps({"batches": batches, "windows": windows, "tokens": windows * seq, "seconds": seconds,
                      "first_batch_s": first if first is not None else seconds, "checksum": str(checksum),
                      "epoch_windows": n, "rss_kb": vm_hwm_kb(os.getpid())}), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()

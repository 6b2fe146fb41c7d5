"""Python peers of the guideloom benchmark: torch DataLoader and Grain over np.memmap windows.

One run prints one JSON line: batches, windows, tokens, seconds, first_batch_s, checksum (sum of
every token id delivered), epoch_windows, rss_kb (peak RSS of this process plus its worker
processes, from /proc VmHWM).

    python peers.py SYSTEM BIN u16|u32 SEQ_LEN BATCH WORKERS MAX_BATCHES(0 = one epoch) SEED

SYSTEM: torch | grain-dl (grain.DataLoader + IndexSampler) | grain-ds (MapDataset API).
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

    if system == "torch":  # imports are not part of the measured start-up
        import torch
        from torch.utils.data import DataLoader, Dataset, RandomSampler
    elif system == "grain-dl":
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
    elif system == "grain-dl":
        sampler = gp.IndexSampler(num_records=n, shard_options=gp.NoSharding(), shuffle=True, num_epochs=1, seed=seed)
        loader = gp.DataLoader(data_source=Windows(), sampler=sampler,
                               operations=[gp.Batch(batch_size=batch, drop_remainder=False)], worker_count=workers)
        it = iter(loader)
        to_np = lambda b: b
    elif system == "grain-ds":
        ds = grain.MapDataset.source(Windows()).shuffle(seed=seed).batch(batch)
        if workers > 0:
            it = iter(ds.to_iter_dataset().mp_prefetch(grain.MultiprocessingOptions(num_workers=workers)))
        else:
            it = iter(ds.to_iter_dataset())
        to_np = lambda b: b
    else:
        raise SystemExit(f"unknown system {system}")

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
    seconds = time.perf_counter() - t0
    rss = vm_hwm_kb(os.getpid()) + sum(vm_hwm_kb(p) for p in descendants(os.getpid()))
    print(json.dumps({"batches": batches, "windows": windows, "tokens": windows * seq, "seconds": seconds,
                      "first_batch_s": first if first is not None else seconds, "checksum": str(checksum),
                      "epoch_windows": n, "rss_kb": rss}), flush=True)
    sys.stdout.flush()
    # Worker teardown is not part of the measured run; the driver kills this process group.
    os._exit(0)


if __name__ == "__main__":
    main()

"""The formats benchmark (issue 28, `benches/compare.py --sections formats`): the same tokens in each foreign layout guideloom reads in place
(Hugging Face `save_to_disk` Arrow, Parquet, Grain's ArrayRecord, TFRecord, WebDataset tar
shards), and the Python peers that read them, each at its best configuration.

    python formats.py write SRC_STORAGE OUT_DIR MIB SEQ_LEN SEED
    python formats.py PEER DIR SEQ_LEN BATCH MAX_BATCHES(0 = one epoch) SEED
    python formats.py drop FILE... -- COMMAND...

`drop` drops FILEs from the page cache (posix_fadvise DONTNEED) and execs COMMAND (a cold run).

`write` tiles the u16 tokens of the native storage SRC_STORAGE (its shard files, in manifest
order) to about MIB MiB, cuts them into 4 files of a whole number of windows of SEQ_LEN tokens
each, cuts each file into documents of 64..8,192 tokens (numpy default_rng(SEED); a file's last
document shorter), and writes under OUT_DIR, with each project's own writer:

- `hf_arrow/`: `datasets.Dataset(...).save_to_disk(num_shards=4)`, column `input_ids`
  (list of int32, what tokenizers give);
- `parquet/`: 4 files by pyarrow (`input_ids` list of int32, 1,024 rows a row group, pyarrow's
  default pages and codec, with the page index, so a reader can decode one page, not a row group);
- `arrayrecord/`: 4 files by `array_record`'s ArrayRecordWriter with `group_size:1` (the
  option Grain documents for random access; zstd, the writer's default codec), each record
  a document as raw little-endian uint16, plus `lengths.npy` (tokens per record), which a Grain
  pipeline of windows needs and guideloom does not;
- `tfrecord/`: 4 files by the `tfrecord` package's TFRecordWriter, a tf.train.Example a
  document with its tokens in the int64 feature `input_ids`;
- `webdataset/`: 4 tar shards by `webdataset.ShardWriter`, a sample a document, its tokens in
  `npy` (uint16).

Every layout holds the same documents in the same order, so window i (tokens [i*L, (i+1)*L) of
the concatenation, non-overlapping) is the same everywhere. It prints one JSON line: documents,
tokens.

A peer run prints one JSON line as benches/peers.py does: batches, windows, tokens, seconds,
first_batch_s (open included), checksum (sum of every token id delivered), epoch_windows,
rss_kb. Peers (imports are not measured; the open is):

- `hf-torch`: `datasets.load_from_disk` (memory-mapped Arrow), a torch Dataset whose batched
  `__getitems__` slices each window out of the `input_ids` column's flat values (pyarrow
  `ListArray.flatten`, zero-copy on the map) with one `np.concatenate` per batch, DataLoader with
  0 workers (one process: the fastest torch configuration on 2 cores in the main section), a
  `RandomSampler` seeded with SEED;
- `parquet-torch`: `datasets.Dataset.from_parquet` (datasets converts the files into its
  Arrow cache first, in a fresh temporary `cache_dir`: part of the open), then as `hf-torch`;
- `grain-arrayrecord`: Grain's `ArrayRecordDataSource` over the files, `MapDataset.range(windows)
  .shuffle(seed).map(window).batch(BATCH)` through `to_iter_dataset(ReadOptions(num_threads=0))`
  (the fastest Grain configuration of the main section), where `window` reads the records the
  window covers with one `__getitems__` and slices them;
- `grain-arrayrecord-batched`: the same, the shuffled window indices batched first and each
  batch's records read with one `__getitems__` (`MapDataset.range(windows).shuffle(seed)
  .batch(BATCH).map(windows)`): Grain's best here, about 6x the per-window map;
- `tfrecord-torch` (sequential): the `tfrecord` package's torch `TFRecordDataset` per file in
  order (description `{"input_ids": "int"}`), documents packed into windows in a torch
  IterableDataset, DataLoader batches;
- `wds` (sequential): `webdataset.WebDataset(shards, shardshuffle=False).decode()`, the `npy`
  member of each sample packed into windows, `WebLoader` batches.

Sequential peers pack each file's documents on their own (a tail shorter than a window would be
dropped), as guideloom's sequential sources do with each file a shard; each file holds a whole
number of windows, so that is the windows of the concatenation, in order.
"""
import json
import os
import sys
import tempfile
import time

from peers import drain, passthrough, vm_hwm_kb

SHARDS = 4


def source_tokens(np, storage):
    m = json.load(open(os.path.join(storage, "manifest.json")))
    parts = []
    for s in m["shards"]:
        parts.append(np.fromfile(os.path.join(storage, f"shard-{s['id']:05}.stream"), dtype="<u2"))
    return np.concatenate(parts)


def write(storage, out, mib, seq, seed):
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = source_tokens(np, storage)
    # Each file holds a whole number of windows of `seq` tokens, so that packing each file on
    # its own (the sequential sources) gives the windows of the concatenation.
    per_shard = (mib << 20) // 2 // SHARDS // seq * seq
    total = per_shard * SHARDS
    tokens = np.resize(src, total)
    rng = np.random.default_rng(seed)
    lengths = []
    for _ in range(SHARDS):
        ls = rng.integers(64, 8193, size=per_shard // 64 + 2)
        k = int(np.searchsorted(np.cumsum(ls), per_shard)) + 1
        ls = ls[:k]
        ls[-1] -= int(ls.sum()) - per_shard
        assert ls[-1] > 0
        lengths.append(ls)
    counts = [len(ls) for ls in lengths]
    lengths = np.concatenate(lengths)
    n = len(lengths)
    assert int(lengths.sum()) == total
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    os.makedirs(out, exist_ok=True)
    bounds = [int(x) for x in np.concatenate([[0], np.cumsum(counts)])]

    def docs(a, b):
        for i in range(a, b):
            yield i, tokens[offsets[i]:offsets[i + 1]]

    t = time.time()
    values = pa.array(tokens.astype(np.int32))
    col = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), values)
    table = pa.table({"input_ids": col})
    import datasets

    datasets.Dataset(table).save_to_disk(os.path.join(out, "hf_arrow"), num_shards=SHARDS)
    print(f"hf_arrow {time.time() - t:.1f} s", file=sys.stderr, flush=True)
    t = time.time()
    os.makedirs(os.path.join(out, "parquet"), exist_ok=True)
    for k in range(SHARDS):
        pq.write_table(table.slice(bounds[k], bounds[k + 1] - bounds[k]),
                       os.path.join(out, "parquet", f"train-{k:05}-of-{SHARDS:05}.parquet"), row_group_size=1024,
                       write_page_index=True)
    md = pq.ParquetFile(os.path.join(out, "parquet", f"train-00000-of-{SHARDS:05}.parquet")).metadata
    cc = md.row_group(0).column(0)
    parquet = {"row_groups_per_file": md.num_row_groups, "rows_per_row_group": md.row_group(0).num_rows,
               "values_per_row_group": cc.num_values, "encodings": list(cc.encodings), "codec": cc.compression,
               "row_group_encoded_bytes": cc.total_uncompressed_size, "row_group_compressed_bytes": cc.total_compressed_size}
    print(f"parquet {time.time() - t:.1f} s", file=sys.stderr, flush=True)
    t = time.time()
    from array_record.python import array_record_module as arm

    os.makedirs(os.path.join(out, "arrayrecord"), exist_ok=True)
    for k in range(SHARDS):
        w = arm.ArrayRecordWriter(os.path.join(out, "arrayrecord", f"train-{k:05}-of-{SHARDS:05}.array_record"),
                                  "group_size:1")
        for _, d in docs(bounds[k], bounds[k + 1]):
            w.write(d.astype("<u2").tobytes())
        w.close()
    np.save(os.path.join(out, "arrayrecord", "lengths.npy"), lengths.astype(np.int64))
    print(f"arrayrecord {time.time() - t:.1f} s", file=sys.stderr, flush=True)
    t = time.time()
    import tfrecord

    os.makedirs(os.path.join(out, "tfrecord"), exist_ok=True)
    for k in range(SHARDS):
        w = tfrecord.TFRecordWriter(os.path.join(out, "tfrecord", f"train-{k:05}-of-{SHARDS:05}.tfrecord"))
        for _, d in docs(bounds[k], bounds[k + 1]):
            w.write({"input_ids": (d.tolist(), "int")})
        w.close()
    print(f"tfrecord {time.time() - t:.1f} s", file=sys.stderr, flush=True)
    t = time.time()
    import webdataset as wds

    os.makedirs(os.path.join(out, "webdataset"), exist_ok=True)
    for k in range(SHARDS):
        with wds.TarWriter(os.path.join(out, "webdataset", f"train-{k:06}.tar")) as tw:
            for i, d in docs(bounds[k], bounds[k + 1]):
                tw.write({"__key__": f"doc{i:08}", "npy": d.astype("<u2")})
    print(f"webdataset {time.time() - t:.1f} s", file=sys.stderr, flush=True)
    print(json.dumps({"documents": n, "tokens": total, "windows": total // seq, "parquet": parquet,
                      "checksum": str(int(tokens.sum(dtype=np.uint64)))}), flush=True)


def files(d, suffix):
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(suffix))


def gatherer(np, chunks, seq):
    """Window i from the flat token arrays `chunks` (numpy, in order)."""
    starts = np.concatenate([[0], np.cumsum([len(c) for c in chunks])]).astype(np.int64)

    def window(i):
        a, b = i * seq, (i + 1) * seq
        k = int(np.searchsorted(starts, a, side="right")) - 1
        if b <= starts[k + 1]:
            return chunks[k][a - starts[k]:b - starts[k]]
        parts, pos = [], a
        while pos < b:
            e = min(b, int(starts[k + 1]))
            parts.append(chunks[k][pos - starts[k]:e - starts[k]])
            pos, k = e, k + 1
        return np.concatenate(parts)

    return window, int(starts[-1]) // seq


def random_access(peer, d, seq, batch, max_batches, seed):
    import numpy as np

    if peer in ("hf-torch", "parquet-torch"):
        import datasets
        import torch
        from torch.utils.data import DataLoader, Dataset, RandomSampler

        datasets.disable_progress_bars()
    else:
        import grain
    tmp = tempfile.TemporaryDirectory()
    t0 = time.perf_counter()
    if peer in ("hf-torch", "parquet-torch"):
        if peer == "hf-torch":
            ds = datasets.load_from_disk(d)
        else:
            ds = datasets.Dataset.from_parquet(files(d, ".parquet"), cache_dir=tmp.name)
        col = ds.data.table.column("input_ids")
        chunks = [c.flatten().to_numpy(zero_copy_only=True) for c in col.chunks]
        window, n = gatherer(np, chunks, seq)

        class Windows(Dataset):
            def __len__(self):
                return n

            def __getitem__(self, i):
                return torch.from_numpy(window(int(i)))

            def __getitems__(self, idx):
                return torch.from_numpy(np.stack([window(int(i)) for i in idx]))

        g = torch.Generator()
        g.manual_seed(seed)
        it = iter(DataLoader(Windows(), batch_size=batch, sampler=RandomSampler(range(n), generator=g),
                             num_workers=0, collate_fn=passthrough, pin_memory=False))
        to_np = lambda b: b.numpy()
    elif peer == "grain-arrayrecord":
        source = grain.sources.ArrayRecordDataSource(files(d, ".array_record"))
        lengths = np.load(os.path.join(d, "lengths.npy"))
        starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        n = int(starts[-1]) // seq

        def window(i):
            a, b = i * seq, (i + 1) * seq
            r0 = int(np.searchsorted(starts, a, side="right")) - 1
            r1 = int(np.searchsorted(starts, b, side="left"))
            recs = source.__getitems__(list(range(r0, r1)))
            flat = np.concatenate([np.frombuffer(r, dtype="<u2") for r in recs]) if len(recs) > 1 else np.frombuffer(recs[0], dtype="<u2")
            return flat[a - starts[r0]:b - starts[r0]]

        ds = grain.MapDataset.range(n).shuffle(seed=seed).map(window).batch(batch)
        it = iter(ds.to_iter_dataset(grain.ReadOptions(num_threads=0)))
        to_np = lambda b: b
    elif peer == "grain-arrayrecord-batched":
        source = grain.sources.ArrayRecordDataSource(files(d, ".array_record"))
        lengths = np.load(os.path.join(d, "lengths.npy"))
        starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        n = int(starts[-1]) // seq

        def windows(ws):
            """A batch of windows from one `__getitems__` of every record they cover."""
            spans, want = [], []
            for i in ws:
                a, b = int(i) * seq, (int(i) + 1) * seq
                r0 = int(np.searchsorted(starts, a, side="right")) - 1
                r1 = int(np.searchsorted(starts, b, side="left"))
                spans.append((a, r0, r1, len(want)))
                want.extend(range(r0, r1))
            recs = source.__getitems__(want)
            out = np.empty((len(ws), seq), dtype=np.uint16)
            for j, (a, r0, r1, at) in enumerate(spans):
                flat = np.concatenate([np.frombuffer(r, dtype="<u2") for r in recs[at:at + r1 - r0]])
                out[j] = flat[a - starts[r0]:a - starts[r0] + seq]
            return out

        ds = grain.MapDataset.range(n).shuffle(seed=seed).batch(batch).map(windows)
        it = iter(ds.to_iter_dataset(grain.ReadOptions(num_threads=0)))
        to_np = lambda b: b
    else:
        raise SystemExit(f"unknown peer {peer}")
    return consume(np, it, to_np, t0, seq, max_batches, n, tmp)


def sequential(peer, d, seq, batch, max_batches, seed):
    import numpy as np
    import torch
    from torch.utils.data import DataLoader, IterableDataset

    if peer == "wds":
        import webdataset as wds
    else:
        from tfrecord.torch.dataset import TFRecordDataset

    def pack(docs):
        """Windows of `seq` tokens from one file's documents; the tail is dropped."""
        buf, have = [], 0
        for x in docs:
            buf.append(x)
            have += len(x)
            if have >= seq:
                flat = np.concatenate(buf)
                k = len(flat) // seq
                for j in range(k):
                    yield flat[j * seq:(j + 1) * seq]
                rest = flat[k * seq:]
                buf, have = [rest], len(rest)

    t0 = time.perf_counter()
    if peer == "tfrecord-torch":
        paths = files(d, ".tfrecord")

        class Windows(IterableDataset):
            def __iter__(self):
                for p in paths:
                    yield from pack(x["input_ids"] for x in TFRecordDataset(p, None, {"input_ids": "int"}))

        it = iter(DataLoader(Windows(), batch_size=batch, num_workers=0))
    elif peer == "wds":
        paths = files(d, ".tar")

        class Windows(IterableDataset):
            def __iter__(self):
                for p in paths:
                    yield from pack(s["npy"] for s in wds.WebDataset(p, shardshuffle=False).decode())

        it = iter(wds.WebLoader(Windows(), batch_size=batch, num_workers=0))
    else:
        raise SystemExit(f"unknown peer {peer}")
    return consume(np, it, lambda b: b.numpy(), t0, seq, max_batches, None, None)


def consume(np, it, to_np, t0, seq, max_batches, n, tmp):
    first, batches, windows, checksum = drain(np, it, to_np, t0, max_batches)
    seconds = time.perf_counter() - t0
    if tmp is not None:
        tmp.cleanup()
    print(json.dumps({"batches": batches, "windows": windows, "tokens": windows * seq, "seconds": seconds,
                      "first_batch_s": first if first is not None else seconds, "checksum": str(checksum),
                      "epoch_windows": n if n is not None else windows, "rss_kb": vm_hwm_kb(os.getpid())}), flush=True)


def drop(argv):
    cut = argv.index("--")
    for p in argv[:cut]:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    os.execvp(argv[cut + 1], argv[cut + 1:])


def main():
    if sys.argv[1] == "drop":
        return drop(sys.argv[2:])
    if sys.argv[1] == "write":
        return write(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
    peer, d = sys.argv[1], sys.argv[2]
    seq, batch, max_batches, seed = (int(x) for x in sys.argv[3:7])
    if peer in ("tfrecord-torch", "wds"):
        return sequential(peer, d, seq, batch, max_batches, seed)
    return random_access(peer, d, seq, batch, max_batches, seed)


if __name__ == "__main__":
    main()

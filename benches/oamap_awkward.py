"""The OAMap README query with awkward-array 2.x on the same data as guideloom's bench
(oamap/benches/query.rs): for every star, the largest ratio of orbital periods
between two of its planets (nulls skipped).

Run: python3 -m venv benches/.venv && benches/.venv/bin/pip install awkward numpy
     benches/.venv/bin/python benches/oamap_awkward.py
"""
import json
import pathlib
import timeit
import zipfile

import awkward as ak
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
NPZ = ROOT / "data" / "exoplanets" / "planets.npz"


def load():
    """Builds the awkward array of periods straight from the OAMap arrays (starts/stops,
    masks), without Python objects."""
    z = np.load(NPZ)
    pre = "object-L-NStar-Fplanets"
    starts, stops = z[pre + "-B"], z[pre + "-E"]
    per = pre + "-L-NPlanet-Forbital_period-NValueAsymErr"
    rec_mask = z[per + "-M"]
    val_mask = z[per + "-Fval-M"]
    vals = z[per + "-Fval-Df4"]
    # mask indirection (compact form): planet -> record index or -1 -> value index or -1
    val_idx = np.where(rec_mask >= 0, val_mask[np.maximum(rec_mask, 0)], -1)
    content = ak.contents.IndexedOptionArray(ak.index.Index64(val_idx.astype(np.int64)),
                                             ak.contents.NumpyArray(vals))
    lists = ak.contents.ListArray(ak.index.Index64(starts.astype(np.int64)),
                                  ak.index.Index64(stops.astype(np.int64)), content)
    return ak.Array(lists)


def query(periods):
    pairs = ak.cartesian([periods, periods], nested=True)
    one, two = ak.unzip(pairs)
    ratio = ak.flatten(one / two, axis=2)
    best = ak.max(ratio, axis=1)
    ok = ~ak.is_none(best)
    return int(ak.sum(ok)), float(ak.sum(best[ok]))


def main():
    periods = load()
    assert len(periods) == 2660
    n, total = query(periods)
    print(f"stars with a ratio: {n}, sum of best ratios: {total}")
    reps = 20
    t = min(timeit.repeat(lambda: query(periods), number=reps, repeat=5)) / reps
    print(json.dumps({"awkward": ak.__version__, "query_seconds": t, "query_ms": t * 1e3}))
    tl = min(timeit.repeat(lambda: query(load()), number=5, repeat=3)) / 5
    print(json.dumps({"load_and_query_ms": tl * 1e3}))


if __name__ == "__main__":
    main()

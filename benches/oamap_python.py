"""guideloom.oamap from Python (issue 29, item 5): the OAMap README's orbital-period scan (for every
star, the largest ratio of orbital periods between two of its planets, nulls skipped; stars above
200 kept) over the exoplanets sample and over a synthetic dataset 1,000x larger (the sample's
scan columns tiled), as

(a) a pure-Python loop over guideloom's proxies (the seed's code as written),
(b) the same loop over Awkward Array's Python access (``to_awkward`` view, records in Python),
(c) ``@numba.njit`` over the Awkward view (compile time reported apart),

and the time to the first value from a cold open: ``oamap.open(npz)[0].planets[0].name`` (the
columns fetched on demand) against loading every array of the file first. The Rust crate's own
gather (d) is ``cargo bench -p guideloom-oamap --bench query`` (docs/BENCHMARKS.md, "Object-array
mapping query"); it is not reachable from Python.

Prints a Markdown table; ``--large-python N`` bounds (a) and (b) on the large set to its first N
stars ((b) takes about a second per 1,000 stars), reported per star.

    GUIDELOOM_PY_VENV=target/py-venv bash python/setup-venv.sh
    target/py-venv/bin/python benches/oamap_python.py [--repeat 3] [--large-python 2660]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from guideloom import oamap

ROOT = Path(__file__).resolve().parent.parent
# The scans are the ones python/tests/test_oamap.py checks against the seed's extremes.
sys.path.insert(0, str(ROOT / "python" / "tests"))
from test_oamap import period_ratio as scan_numba  # noqa: E402
from test_oamap import period_ratio_python as scan_python  # noqa: E402
NPZ = ROOT / "data" / "exoplanets" / "planets.npz"
PRE = "object-L-NStar-Fplanets"
PER = PRE + "-L-NPlanet-Forbital_period-NValueAsymErr"
# The scan's part of the exoplanets schema, with the file's array names.
SCAN_SCHEMA = {
    "type": "list", "starts": "object-B", "stops": "object-E", "content": {
        "type": "record", "name": "Star", "fields": {"planets": {
            "type": "list", "starts": PRE + "-B", "stops": PRE + "-E", "content": {
                "type": "record", "name": "Planet", "fields": {"orbital_period": {
                    "type": "record", "name": "ValueAsymErr", "nullable": True, "mask": PER + "-M",
                    "fields": {"val": {"type": "primitive", "dtype": "float32", "nullable": True,
                                       "mask": PER + "-Fval-M", "data": PER + "-Fval-Df4"}}}}}}}}}
SCAN = ["object-B", "object-E", PRE + "-B", PRE + "-E", PER + "-M", PER + "-Fval-M", PER + "-Fval-Df4"]


def best(f: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = f()
        times.append(time.perf_counter() - t)
    return min(times), out


def tiled(arrays: dict[str, np.ndarray], copies: int) -> dict[str, np.ndarray]:
    """The scan's columns of ``copies`` back-to-back copies of the sample (offsets shifted)."""
    stars = int(arrays["object-E"][0])
    planets = int(arrays[PRE + "-E"][-1])
    b, e = arrays[PRE + "-B"].astype(np.int64), arrays[PRE + "-E"].astype(np.int64)
    m1, m2 = arrays[PER + "-M"].astype(np.int64), arrays[PER + "-Fval-M"].astype(np.int64)
    n1, n2 = int((m1 >= 0).sum()), int((m2 >= 0).sum())
    k = np.arange(copies, dtype=np.int64)[:, None]

    def shift(a: np.ndarray, by: int) -> np.ndarray:
        return np.where(a >= 0, a + k * by, -1).reshape(-1).astype(np.int32)

    assert len(m1) == planets and len(arrays[PER + "-Fval-Df4"]) == n2
    return {
        "object-B": np.array([0], np.int32),
        "object-E": np.array([stars * copies], np.int32),
        PRE + "-B": (b + k * planets).reshape(-1).astype(np.int32),
        PRE + "-E": (e + k * planets).reshape(-1).astype(np.int32),
        PER + "-M": shift(m1, n1),
        PER + "-Fval-M": shift(m2, n2),
        PER + "-Fval-Df4": np.tile(arrays[PER + "-Fval-Df4"], copies),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--copies", type=int, default=1000)
    ap.add_argument("--large-python", type=int, default=2_660)
    args = ap.parse_args()

    with np.load(NPZ) as z:
        arrays = {k: z[k] for k in z.files}
    dataset = oamap.Dataset.fromjson(arrays["object"].tobytes())
    scan_schema = oamap.Schema.fromjson(SCAN_SCHEMA)
    assert sorted(scan_schema.array_names()) == sorted(SCAN)
    rows: list[tuple[str, str, str, str]] = []

    def row(data: str, how: str, seconds: float, stars: int) -> None:
        shown = f"{seconds * 1e6:,.0f} µs" if seconds < 0.01 else f"{seconds * 1e3:,.1f} ms"
        rows.append((data, how, shown, f"{seconds / stars * 1e9:,.0f} ns"))

    # Time to the first value from a cold open.
    t = time.perf_counter()
    first = oamap.open(NPZ)[0].planets[0].name
    lazy = time.perf_counter() - t
    t = time.perf_counter()
    with np.load(NPZ) as z:
        everything = {k: z[k] for k in z.files}
    eager_first = dataset.schema(everything)[0].planets[0].name
    eager = time.perf_counter() - t
    assert first == eager_first == "Kepler-1239 b"

    for label, source, n_python in (
            ("exoplanets (2,660 stars)", arrays, None),
            (f"synthetic {args.copies:,}x ({2660 * args.copies:,} stars)", tiled(arrays, args.copies),
             args.large_python)):
        stars = scan_schema(source)
        n = len(stars)
        view = oamap.to_awkward(stars)
        sub = stars if n_python is None else stars[:n_python]
        sub_view = view if n_python is None else view[:n_python]
        m = len(sub)
        secs, found_a = best(lambda: scan_python(sub), 1 if n_python else args.repeat)
        row(label, f"(a) Python loop over guideloom proxies ({m:,} stars)", secs, m)
        secs, found_b = best(lambda: scan_python(sub_view), 1)
        row(label, f"(b) Python loop over Awkward records ({m:,} stars)", secs, m)
        assert len(found_a) == len(found_b)
        t = time.perf_counter()
        scan_numba(view[:1])
        compile_s = time.perf_counter() - t
        secs, found_c = best(lambda: list(scan_numba(view)), args.repeat)
        row(label, f"(c) @numba.njit over the Awkward view ({n:,} stars; compile {compile_s:.2f} s "
                   "once)", secs, n)
        t = time.perf_counter()
        oamap.to_awkward(scan_schema(source))
        row(label, "to_awkward (bind + build the view, validity check)", time.perf_counter() - t, n)
        assert found_c[:26] == [284, 466, 469, 472, 484, 502, 510, 559, 651, 665, 674, 728, 1129,
                                1464, 1529, 1567, 1814, 1819, 1953, 1979, 1980, 2305, 2332, 2366,
                                2623, 2654]

    print("| data | scan | best time | per star |")
    print("| --- | --- | ---: | ---: |")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    print()
    print(f"Time to the first value (`open(npz)[0].planets[0].name`): {lazy * 1e3:.1f} ms with "
          f"columns fetched on demand, {eager * 1e3:.1f} ms loading every array of the file first.")


if __name__ == "__main__":
    main()

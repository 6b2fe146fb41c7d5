"""guideloom.oamap (issue 29): the OAMap README walkthrough (seed 003) on the exoplanets sample,
values as the seed prints them; any dict-like source; schema extension sharing arrays; hostile
sources; Awkward Array and Numba; the golden cases."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

# Awkward and Numba come with python/setup-venv.sh; without them these tests skip (and fail in CI,
# where GUIDELOOM_NO_SKIP=1 turns a skip into a failure).
ak = pytest.importorskip("awkward")
numba = pytest.importorskip("numba")

from guideloom import oamap
from guideloom.errors import (
    OamapArrayError,
    OamapError,
    OamapLimitError,
    OamapMissingArrayError,
)

ROOT = Path(__file__).resolve().parents[2]
PLANETS = ROOT / "data" / "exoplanets" / "planets.npz"
GOLDEN = ROOT / "oamap" / "tests" / "data" / "golden"

# The 26 stars with an orbital-period ratio above 200 (the seed's `period_ratio` result).
EXTREMES = [284, 466, 469, 472, 484, 502, 510, 559, 651, 665, 674, 728, 1129, 1464, 1529, 1567,
            1814, 1819, 1953, 1979, 1980, 2305, 2332, 2366, 2623, 2654]

PERIOD_ARRAYS = [
    "object-B",
    "object-E",
    "object-L-NStar-Fplanets-B",
    "object-L-NStar-Fplanets-E",
    "object-L-NStar-Fplanets-L-NPlanet-Forbital_period-NValueAsymErr-M",
    "object-L-NStar-Fplanets-L-NPlanet-Forbital_period-NValueAsymErr-Fval-M",
    "object-L-NStar-Fplanets-L-NPlanet-Forbital_period-NValueAsymErr-Fval-Df4",
]


def np_dtype(name: str | None) -> Any:
    """numpy's dtype for a golden file's dtype name (``>float64``: big-endian float64)."""
    if name is None:
        return None
    if name.startswith(">"):
        return np.dtype(name[1:]).newbyteorder(">")
    return np.dtype(name)


def golden_source(arrays: dict[str, list[Any]], dtypes: dict[str, str]) -> dict[str, np.ndarray]:
    return {k: np.array(v, dtype=np_dtype(dtypes.get(k))) for k, v in arrays.items()}


def f32(x: float) -> np.float32:
    return np.float32(x)


def period_ratio_indices(stars: Any) -> list[int]:
    """The seed's scan, as written there (its Python and its ``@numba.njit`` version have the same
    body): only the loop runs over indices and keeps the index, as Numba cannot return Awkward
    records in a list (``stars[found]`` gives the proxies back)."""
    out = []
    for i in range(len(stars)):
        star = stars[i]
        best_ratio = None
        for one in star.planets:
            for two in star.planets:
                if (one.orbital_period is not None and one.orbital_period.val is not None and
                        two.orbital_period is not None and two.orbital_period.val is not None):
                    ratio = one.orbital_period.val / two.orbital_period.val
                    if best_ratio is None or ratio > best_ratio:
                        best_ratio = ratio
        if best_ratio is not None and best_ratio > 200:
            out.append(i)
    return out


#: The compiled scan (over the Awkward view).
period_ratio = numba.njit(period_ratio_indices)


def period_ratio_python(stars: Any) -> list[Any]:
    """The scan in pure Python over guideloom's proxies (or Awkward records): the stars found."""
    return [stars[i] for i in period_ratio_indices(stars)]


class CountingSource:
    """The seed's HTTP ``DataSource`` with the web site replaced by the sample's arrays: a
    ``__getitem__`` that records every name asked for (and raises ``KeyError`` for a missing one)."""

    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        self.arrays = arrays
        self.requests: list[str] = []

    def __getitem__(self, name: str) -> np.ndarray:
        self.requests.append(name)
        try:
            return self.arrays[name]
        except KeyError as err:
            raise KeyError(str(err)) from None

    def take(self) -> list[str]:
        out, self.requests = self.requests, []
        return out


@pytest.fixture(scope="module")
def planet_arrays() -> dict[str, np.ndarray]:
    with np.load(PLANETS) as z:
        return {k: z[k] for k in z.files}


@pytest.fixture(scope="module")
def description(planet_arrays: dict[str, np.ndarray]) -> str:
    # The npz's member `object` is the dataset description OAMap 0.10 publishes as dataset.json.
    return planet_arrays["object"].tobytes().decode()


def test_issue29_walkthrough_exploring_the_data() -> None:
    stars = oamap.open(PLANETS)
    assert repr(stars) == (
        "[<Star at index 0>, <Star at index 1>, <Star at index 2>, <Star at index 3>, "
        "<Star at index 4>, ..., <Star at index 2655>, <Star at index 2656>, <Star at index 2657>, "
        "<Star at index 2658>, <Star at index 2659>]")
    assert len(stars) == 2660
    assert stars[0].fields == [
        'activity', 'age', 'color', 'dec', 'density', 'distance', 'ecliptic', 'gaia', 'galactic',
        'luminosity', 'mass', 'metallicity', 'name', 'num_amateur_lightcurves',
        'num_general_lightcurves', 'num_images', 'num_planets', 'num_radial_timeseries',
        'num_spectra', 'num_timeseries', 'num_transit_lightcurves', 'opticalband', 'parallax',
        'photometry', 'planets', 'propermotion', 'ra', 'radialvelocity', 'radius',
        'rotational_velocity', 'spectraltype', 'surfacegravity', 'temperature', 'update']
    assert repr((stars[0].ra, stars[0].dec)) == "(293.12738, 42.320103)"
    # (The seed prints the Parquet file's unnamed records; the npz keeps the names.)
    assert repr(stars[0].temperature) == "<ValueAsymErrBlend at index 0>"
    assert stars[0].temperature.fields == ['blend', 'hierr', 'lim', 'loerr', 'val']
    t = stars[0].temperature
    assert repr((t.val, t.loerr, t.hierr)) == "(6564.0, -198.42, 153.47)"
    assert repr(stars[0].planets) == "[<Planet at index 0>]"
    assert stars[0].planets[0].fields == [
        'angular_separation', 'density', 'discovery', 'discovery_method', 'eccentricity',
        'encyclopedia_link', 'equilibrium_temperature', 'explorer_link',
        'has_astrometrical_variations', 'has_binary', 'has_image', 'has_orbital_modulations',
        'has_radial_velocity', 'has_timing_variations', 'has_transits', 'hd_name', 'hip_name',
        'impact_parameter', 'in_k2_data', 'in_kepler_data', 'inclination', 'isolation_flux',
        'letter', 'longitude_periastron', 'mass', 'mass_best', 'mass_sini', 'name', 'num_notes',
        'num_parameters', 'occultation_depth', 'orbital_period', 'periastron', 'publication_date',
        'radial_velocity', 'radius', 'ratio_planetdistance_starradius',
        'ratio_planetradius_starradius', 'reference_link', 'semimajor_axis',
        'timesystem_reference', 'transit_depth', 'transit_duration', 'transit_midpoint']
    assert stars[0].planets[0].name == 'Kepler-1239 b'
    assert stars[0].name == 'Kepler-1239'
    assert stars[0].planets[0].discovery_method == 'Transit'
    td = stars[0].planets[0].transit_duration
    assert repr(td) == "<ValueAsymErr at index 0>"
    assert td.fields == ['hierr', 'lim', 'loerr', 'val']
    # The seed prints float32 with numpy 1.13's 8 significant digits (0.0042900001); the values
    # are the same float32s, printed here in their shortest form.
    assert [f32(x) for x in (td.val, td.loerr, td.hierr)] == [
        f32(0.17783), f32(-0.0042900001), f32(0.0042900001)]
    assert repr(stars[258].planets) == (
        "[<Planet at index 324>, <Planet at index 325>, <Planet at index 326>, "
        "<Planet at index 327>, <Planet at index 328>]")
    assert [x.name for x in stars[258].planets] == [
        'HD 40307 b', 'HD 40307 c', 'HD 40307 d', 'HD 40307 f', 'HD 40307 g']
    assert [x.discovery_method for x in stars[258].planets] == ['Radial Velocity'] * 5


def test_issue29_walkthrough_period_scan_loads_one_column_at_a_time() -> None:
    stars = oamap.open(PLANETS)
    extremes = period_ratio_python(stars)
    # What `print("\n".join(stars._generator.loaded(stars._cache)))` lists (with record names).
    assert oamap.loaded(stars) == PERIOD_ARRAYS
    assert stars.loaded() == PERIOD_ARRAYS
    got = oamap.arrays(stars)
    assert list(got) == PERIOD_ARRAYS
    assert got["object-B"].tolist() == [0]
    assert got["object-E"].tolist() == [2660]
    b, e = got[PERIOD_ARRAYS[2]], got[PERIOD_ARRAYS[3]]
    assert b[:3].tolist() == [0, 1, 2] and b[-3:].tolist() == [3562, 3565, 3570]
    assert e[:3].tolist() == [1, 2, 3] and e[-3:].tolist() == [3565, 3570, 3572]
    m1, m2, val = got[PERIOD_ARRAYS[4]], got[PERIOD_ARRAYS[5]], got[PERIOD_ARRAYS[6]]
    assert m1[:3].tolist() == [0, 1, 2] and m1[-3:].tolist() == [3495, 3496, 3497]
    assert m2[:3].tolist() == [0, 1, 2] and m2[-3:].tolist() == [3487, 3488, 3489]
    assert val.dtype == np.float32
    assert val[:3].tolist() == [f32(5.19104), f32(4.147876), f32(3.5957696)]
    assert val[-3:].tolist() == [f32(87.090195), f32(4.425391), f32(13.193242)]
    # The seed's extremes, examined in Python.
    assert repr(extremes) == "[" + ", ".join(f"<Star at index {i}>" for i in EXTREMES) + "]"
    assert repr(extremes[0].planets) == "[" + ", ".join(
        f"<Planet at index {i}>" for i in range(384, 390)) + "]"
    assert [x.orbital_period.val for x in extremes[0].planets] == [
        5.75969, 16.357, 49.748, 122.744, 604.67, 2205.0]
    assert [x.mass_best.val for x in extremes[0].planets] == [
        0.0416, 0.0378, 0.0805, 0.0722, 0.0732, 0.2066]


def test_issue29_http_example_any_dict_like_source_fetches_each_array_once(
        planet_arrays: dict[str, np.ndarray], description: str) -> None:
    source = CountingSource(planet_arrays)
    dataset = oamap.Dataset.fromjsonfile(io.StringIO(description))
    assert dataset.prefix == "object" and dataset.delimiter == "-"
    stars = dataset.schema(source)
    assert source.take() == ["object-B", "object-E"]
    assert repr(stars).startswith("[<Star at index 0>, <Star at index 1>, ")
    assert repr(stars).endswith(", <Star at index 2658>, <Star at index 2659>]")
    assert source.take() == []
    assert repr((stars[0].ra, stars[0].dec)) == "(293.12738, 42.320103)"
    assert source.take() == ["object-L-NStar-Fra-Df4", "object-L-NStar-Fdec-Df4"]
    assert repr(stars[258].planets) == (
        "[<Planet at index 324>, <Planet at index 325>, <Planet at index 326>, "
        "<Planet at index 327>, <Planet at index 328>]")
    assert source.take() == ["object-L-NStar-Fplanets-B", "object-L-NStar-Fplanets-E"]
    assert [x.name for x in stars[258].planets] == [
        'HD 40307 b', 'HD 40307 c', 'HD 40307 d', 'HD 40307 f', 'HD 40307 g']
    assert source.take() == [
        "object-L-NStar-Fplanets-L-NPlanet-Fname-NUTF8String-B",
        "object-L-NStar-Fplanets-L-NPlanet-Fname-NUTF8String-E",
        "object-L-NStar-Fplanets-L-NPlanet-Fname-NUTF8String-L-Du1"]
    extremes = period_ratio_python(stars)
    # The seed's listing (mask of val, val, mask of orbital_period), in the order asked for.
    assert source.take() == PERIOD_ARRAYS[4:]
    assert [s._index for s in extremes] == EXTREMES
    # Again: everything is cached, nothing is asked for twice.
    assert [s._index for s in period_ratio_python(stars)] == EXTREMES
    assert source.take() == []
    # A missing array: the source's KeyError as a typed error naming the array.
    del_source = CountingSource({k: v for k, v in planet_arrays.items()
                                 if k != "object-L-NStar-Fra-Df4"})
    stars2 = dataset.schema(del_source)
    with pytest.raises(OamapMissingArrayError) as info:
        stars2[0].ra
    assert info.value.array == "object-L-NStar-Fra-Df4"
    assert isinstance(info.value, KeyError)


def test_issue29_extended_schema_shares_the_unchanged_arrays(
        planet_arrays: dict[str, np.ndarray], description: str) -> None:
    class DataSource2:
        def __init__(self, arrays: dict[str, np.ndarray], fallback: Any) -> None:
            self.arrays = arrays
            self.fallback = fallback

        def __getitem__(self, name: str) -> np.ndarray:
            try:
                return self.arrays[name]
            except KeyError:
                return self.fallback[name]

    dataset = oamap.Dataset.fromjson(description)
    base = CountingSource(planet_arrays)
    stars = dataset.schema(base)
    schema = dataset.schema.with_field(
        "id", {"type": "primitive", "dtype": "int64", "data": "id-array"})
    source = DataSource2({"id-array": np.arange(len(stars), dtype=int)}, base)
    stars_v2 = schema(source)
    assert stars_v2[0].id == 0
    assert stars_v2[100].id == 100
    assert stars_v2[-1].id == 2659
    with pytest.raises(AttributeError, match="^'Star' object has no attribute 'id'$"):
        stars[0].id
    # Both read the same unchanged arrays: the very same numpy buffers.
    assert stars_v2[5].name == stars[5].name
    ra = "object-L-NStar-Fname-NUTF8String-L-Du1"
    assert stars_v2.array(ra) is stars.array(ra) is planet_arrays[ra]
    assert "id-array" not in base.requests
    assert "id-array" in schema.array_names() and "id-array" not in dataset.schema.array_names()


def test_issue29_walkthrough_schema_of_the_exoplanets() -> None:
    stars = oamap.open(PLANETS)
    star = dict(oamap.schema_of(stars).tojson()["content"]["fields"])
    planet = dict(star["planets"]["content"]["fields"])
    # `stars.schema.content["planets"].content["discovery"].show()`
    string = {"type": "list", "name": "UTF8String", "content": "uint8"}
    assert planet["discovery"] == {"type": "record", "name": "Discovery", "fields": [
        ["facility", {"type": "pointer", "doc": "Name of facility of planet discovery observations",
                      "target": string}],
        ["instrument", {**string, "doc": "Name of instrument of planet discovery observations"}],
        ["link", {**string, "doc": "Reference name for discovery publication"}],
        ["locale", {"type": "pointer",
                    "doc": "Location of observation of planet discovery (Ground or Space)",
                    "target": string}],
        ["telescope", {**string, "doc": "Name of telescope of planet discovery observations"}],
        ["year", {"type": "primitive", "dtype": "Di4", "doc": "Year the planet was discovered"}]]}
    # `...["discovery_method"].show()`: a pointer to unique strings.
    assert planet["discovery_method"] == {"type": "pointer", "doc": "Discovery Method",
                                          "target": string}
    name = "object-L-NStar-Fplanets-L-NPlanet-Fdiscovery_method"
    assert stars.array(name + "-X-NUTF8String-L-Du1").tobytes() == (
        b"TransitRadial VelocityImagingMicrolensingEclipse Timing VariationsPulsar TimingTransit "
        b"Timing VariationsOrbital Brightness ModulationPulsation Timing VariationsAstrometry")
    positions = stars.array(name + "-P")
    assert positions.dtype == np.int32
    assert positions[:300].tolist() == [
        0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0,
        0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 1, 1, 2, 1, 1, 1, 3, 0, 1, 0,
        0, 1, 1, 0, 1, 2, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 1, 1, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 4, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 0,
        0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]


def test_issue29_list_proxy_indexing_slicing_iteration() -> None:
    stars = oamap.open(PLANETS)
    assert stars[-1]._index == 2659
    assert stars[-2660]._index == 0
    with pytest.raises(IndexError):
        stars[2660]
    with pytest.raises(IndexError):
        stars[-2661]
    s = stars[10:20:3]
    assert len(s) == 4 and [x._index for x in s] == [10, 13, 16, 19]
    assert [x._index for x in s[::-1]] == [19, 16, 13, 10]
    assert [x._index for x in stars[-3:]] == [2657, 2658, 2659]
    assert len(stars[5:5]) == 0 and repr(stars[5:5]) == "[]"
    assert [x._index for x in stars[[3, -1, 0]]] == [3, 2659, 0]
    assert [x._index for x in stars[np.array([7, 8])]] == [7, 8]
    with pytest.raises(TypeError):
        stars["x"]
    assert sum(1 for _ in stars) == 2660
    assert sum(len(x.planets) for x in stars) == 3572
    # Nullable values are None; a masked record is None.
    nulls = [s.age for s in stars[:50]]
    assert None in nulls and any(x is not None for x in nulls)


def test_issue29_directory_of_npy_and_fromdata_npz(tmp_path: Path,
                                                   planet_arrays: dict[str, np.ndarray],
                                                   description: str) -> None:
    d = tmp_path / "planets"
    d.mkdir()
    (d / "dataset.json").write_text(description)
    for name in PERIOD_ARRAYS + ["object-L-NStar-Fname-NUTF8String-B",
                                 "object-L-NStar-Fname-NUTF8String-E",
                                 "object-L-NStar-Fname-NUTF8String-L-Du1"]:
        np.save(d / f"{name}.npy", planet_arrays[name])
    stars = oamap.open(d)
    assert len(stars) == 2660 and stars[258].name == "HD 40307"
    assert [s._index for s in period_ratio_python(stars)] == EXTREMES
    with pytest.raises(OamapMissingArrayError) as info:
        stars[0].ra
    assert info.value.array == "object-L-NStar-Fra-Df4"
    # fromdata -> .npz -> open.
    data = [{"x": 1.5, "tags": ["a", "bc"], "n": None}, {"x": 2.5, "tags": [], "n": 3}]
    arrays = oamap.fromdata(data, path=tmp_path / "small.npz")
    assert arrays["object-B"].tolist() == [0] and arrays["object-E"].tolist() == [2]
    back = oamap.open(tmp_path / "small.npz")
    assert oamap.tolist(back) == data


def test_issue29_seed_schema_examples() -> None:
    schema = oamap.Schema.fromjson({"type": "list", "starts": "b", "stops": "e",
                                    "content": {"type": "primitive", "dtype": "int64",
                                                "data": "p"}})
    obj = schema({"p": [1, 2, 3, 4, 5], "b": [0], "e": [5]})
    assert repr(obj) == "[1, 2, 3, 4, 5]"
    s4 = oamap.Schema.fromjson({"type": "list", "content": "S4"})
    assert repr(s4.fromdata(["one", "two", "three", "four", "five"])) == \
        "[b'one', b'two', b'thre', b'four', b'five']"
    lol = {"type": "list", "content": {"type": "list", "content": "int64"}}
    arrays = oamap.fromdata([[1, 2, 3], [], [4, 5]], lol)
    assert {k: v.tolist() for k, v in arrays.items()} == {
        "object-B": [0], "object-E": [3], "object-L-B": [0, 3, 3], "object-L-E": [3, 3, 5],
        "object-L-L-Di8": [1, 2, 3, 4, 5]}
    assert repr(oamap.Schema.fromjson(lol)(arrays)) == "[[1, 2, 3], [], [4, 5]]"
    tup = {"type": "list", "content": {"type": "tuple", "types": ["int64", "float64"]}}
    arrays = oamap.fromdata([(1, 1.1), (2, 2.2), (3, 3.3)], tup)
    assert {k: v.tolist() for k, v in arrays.items()} == {
        "object-B": [0], "object-E": [3], "object-L-F0-Di8": [1, 2, 3],
        "object-L-F1-Df8": [1.1, 2.2, 3.3]}
    assert repr(oamap.Schema.fromjson(tup)(arrays)) == "[(1, 1.1), (2, 2.2), (3, 3.3)]"
    union = oamap.Schema.fromjson({"type": "list", "content": {"type": "union", "possibilities": [
        "float64", {"type": "list", "content": "int64"}]}})
    obj = union({"object-B": [0], "object-E": [3], "object-L-T": [0, 1, 0],
                 "object-L-O": [0, 0, 1], "object-L-U0-Df8": [1.1, 3.3], "object-L-U1-B": [0],
                 "object-L-U1-E": [4], "object-L-U1-L-Di8": [1, 2, 3, 4]})
    assert repr(obj) == "[1.1, [1, 2, 3, 4], 3.3]"
    particles = oamap.Schema.fromjson({"type": "list", "content": {"type": "union", "possibilities": [
        {"type": "record", "name": "Electron", "fields": {"energy": "float64", "charge": "int64"}},
        {"type": "record", "name": "Photon", "fields": {"energy": "float64"}}]}})
    obj = particles.fromdata([{"energy": 1.1, "charge": 1}, {"energy": 2.2, "charge": -1},
                              {"energy": 3.3}, {"energy": 4.4, "charge": -1}, {"energy": 5.5}])
    assert repr(obj) == ("[<Electron at index 0>, <Electron at index 1>, <Photon at index 0>, "
                         "<Electron at index 2>, <Photon at index 1>]")
    assert [p.energy for p in obj] == [1.1, 2.2, 3.3, 4.4, 5.5]
    strings = oamap.Schema.fromjson({"type": "list", "content": {
        "type": "list", "name": "UTF8String", "content": "uint8"}})
    obj = strings.fromdata(["hello there", "you guys"])
    assert repr(obj) == "['hello there', 'you guys']"
    assert obj.array("object-L-NUTF8String-L-Du1").tobytes() == b"hello thereyou guys"
    nullable = {"type": "list", "content": {"type": "list", "nullable": True, "content": {
        "type": "primitive", "dtype": "int64", "nullable": True}}}
    arrays = oamap.fromdata([[1, None, 3], [], [4, 5]], nullable)
    assert {k: v.tolist() for k, v in arrays.items()} == {
        "object-B": [0], "object-E": [3], "object-L-M": [0, 1, 2], "object-L-B": [0, 3, 3],
        "object-L-E": [3, 3, 5], "object-L-L-M": [0, -1, 1, 2, 3], "object-L-L-Di8": [1, 3, 4, 5]}
    assert repr(oamap.Schema.fromjson(nullable)(arrays)) == "[[1, None, 3], [], [4, 5]]"
    # Inferred schema.
    assert oamap.tolist(oamap.Schema.fromjson(oamap.infer_schema([[1.5, None]]))(
        oamap.fromdata([[1.5, None]]))) == [[1.5, None]]


def test_issue29_partitioned_dataset() -> None:
    case = json.loads((GOLDEN / "dataset_partitions_inmemory.json").read_text())
    dataset = oamap.Dataset(case["dataset_json"])
    sources = [golden_source(p["arrays"], p["dtypes"]) for p in case["partitions"]]
    stars = dataset(sources)
    flat = [x for part in case["partitions_data"] for x in part]
    assert len(stars) == len(flat)
    assert oamap.tolist(stars) == flat
    assert [oamap.tolist(stars[k]) for k in range(-len(flat), 0)] == flat
    assert [len(p) for p in stars.partitions] == [len(p) for p in case["partitions_data"]]
    assert ak.to_list(oamap.to_awkward(stars)) == flat
    assert len(oamap.loaded(stars)) > 0
    with pytest.raises(OamapError, match="partition sources"):
        dataset(sources[:1])


# ---------------------------------------------------------------------------------------------
# Hostile sources (item 6): typed errors naming the array, never a crash.

SMALL = {"type": "list", "content": {"type": "record", "fields": {
    "x": {"type": "list", "content": "float64"}, "s": {
        "type": "list", "name": "UTF8String", "content": "uint8"}}}}


def small_source(**override: Any) -> dict[str, Any]:
    src: dict[str, Any] = dict(oamap.fromdata([{"x": [1.0, 2.0], "s": "ab"}, {"x": [], "s": ""}],
                                              SMALL))
    src.update(override)
    return src


def read_all(source: Any) -> Any:
    return oamap.tolist(oamap.Schema.fromjson(SMALL)(source))


def test_issue29_hostile_sources_give_typed_errors_naming_the_array() -> None:
    assert read_all(small_source()) == [{"x": [1.0, 2.0], "s": "ab"}, {"x": [], "s": ""}]
    cases: list[tuple[dict[str, Any], type[Exception], str]] = [
        ({"object-L-Fx-B": np.array([0.0, 2.0])}, OamapArrayError, "object-L-Fx-B"),  # float starts
        ({"object-L-Fx-L-Df8": np.array([1, 2], np.int32)}, OamapArrayError, "object-L-Fx-L-Df8"),
        ({"object-L-Fx-E": np.array([2], np.int32)}, OamapArrayError, "object-L-Fx-E"),  # short
        ({"object-L-Fx-E": np.array([9, 9], np.int32)}, OamapArrayError, "object-L-Fx-L-Df8"),
        ({"object-L-Fx-B": np.array([0, -4], np.int32)}, OamapArrayError, "object-L-Fx-B"),
        ({"object-L-Fx-B": np.array([3, 3], np.int32)}, OamapArrayError, "object-L-Fx-E"),
        ({"object-L-Fx-L-Df8": "not an array"}, OamapArrayError, "object-L-Fx-L-Df8"),
        ({"object-L-Fx-L-Df8": object()}, OamapArrayError, "object-L-Fx-L-Df8"),
        ({"object-L-Fx-L-Df8": np.zeros((2, 2))}, OamapArrayError, "object-L-Fx-L-Df8"),
        ({"object-L-Fx-L-Df8": np.array(["a", "b"])}, OamapArrayError, "object-L-Fx-L-Df8"),
        ({"object-L-Fs-NUTF8String-L-Du1": np.array([0xff, 0xfe], np.uint8)}, OamapArrayError,
         "object-L-Fs-NUTF8String-L-Du1"),
        ({"object-E": np.array([2**40])}, OamapArrayError, "object-E"),
    ]
    for override, cls, name in cases:
        with pytest.raises(cls) as info:
            read_all(small_source(**override))
        assert info.value.array == name, (override, str(info.value))
        assert name in str(info.value)
    src = small_source()
    del src["object-L-Fx-E"]
    with pytest.raises(OamapMissingArrayError) as missing:
        read_all(src)
    assert missing.value.array == "object-L-Fx-E"


def test_issue29_raising_and_huge_sources() -> None:
    class Raising:
        def __getitem__(self, name: str) -> Any:
            if name == "object-L-Fx-B":
                raise RuntimeError("disk on fire")
            return small_source()[name]

    with pytest.raises(OamapArrayError) as info:
        read_all(Raising())
    assert info.value.array == "object-L-Fx-B"
    assert isinstance(info.value.__cause__, RuntimeError)
    assert str(info.value.__cause__) == "disk on fire"
    # 4 TiB that numpy never allocated (a broadcast view): refused before any copy.
    huge = np.broadcast_to(np.float64(1.0), (1 << 39,))
    with pytest.raises(OamapLimitError) as limit:
        read_all(small_source(**{"object-L-Fx-L-Df8": huge}))
    assert "object-L-Fx-L-Df8" in str(limit.value)
    # The per-partition budget is the caller's to set.
    with pytest.raises(OamapLimitError):
        oamap.tolist(oamap.Schema.fromjson(SMALL)(small_source(), max_bytes=8))
    # Schema of a proxy, as the seed's `stars.schema`.
    assert oamap.schema_of(oamap.Schema.fromjson(SMALL)(small_source())) \
        .array_names() == oamap.Schema.fromjson(SMALL).array_names()
    # Not a mapping at all.
    with pytest.raises(OamapError):
        read_all(42)


def test_issue29_open_refuses_missing_and_damaged_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        oamap.open(tmp_path / "nope.npz")
    (tmp_path / "bad.npz").write_bytes(b"not a zip archive at all")
    with pytest.raises(OamapArrayError):
        oamap.open(tmp_path / "bad.npz")
    # An archive without the schema member.
    np.savez(tmp_path / "bare.npz", x=np.arange(3))
    with pytest.raises(OamapMissingArrayError) as info:
        oamap.open(tmp_path / "bare.npz")
    assert info.value.array == "object"
    (tmp_path / "dir").mkdir()
    with pytest.raises(FileNotFoundError):
        oamap.open(tmp_path / "dir")


def test_issue29_pointer_cycles_and_depth_limits() -> None:
    # A tree whose child pointer leads back to the node itself: lazily, any depth is one step
    # at a time; a full read is Python's RecursionError, not a crash; Awkward refuses the cycle.
    tree = oamap.Schema.fromjson({"type": "record", "name": "Tree", "label": "#0", "fields": {
        "label": "float64", "children": {"type": "list", "content": {
            "type": "pointer", "target": "#0"}}}})
    names = tree.array_names()
    arrays = dict(zip(names, [np.array([0], np.int32), np.array([1], np.int32),
                              np.array([0], np.int32), np.array([1.5])]))
    assert sorted(arrays) == sorted(names)
    node = tree(arrays)
    assert repr(node) == "<Tree at index 0>"
    for _ in range(10_000):
        node = node.children[0]
    assert node.label == 1.5
    with pytest.raises(RecursionError):
        oamap.tolist(tree(arrays))
    with pytest.raises(OamapError, match="ancestor"):
        oamap.to_awkward(tree(arrays))
    # JSON nested past the limit.
    deep = "[" * 5000 + "]" * 5000
    with pytest.raises(OamapError):
        oamap.Schema.fromjson(deep)


# ---------------------------------------------------------------------------------------------
# Awkward Array and Numba (item 3).

# (awkward and numba: installed by python/setup-venv.sh, imported at the top.)


def test_issue29_numba_scan_on_the_awkward_view_finds_the_seeds_extremes(
        planet_arrays: dict[str, np.ndarray], description: str) -> None:
    stars = oamap.Dataset.fromjson(description).schema(planet_arrays)
    view = oamap.to_awkward(stars)
    assert len(view) == 2660
    found = list(period_ratio(view))
    assert found == EXTREMES
    extremes = stars[found]
    assert repr(extremes) == "[" + ", ".join(f"<Star at index {i}>" for i in EXTREMES) + "]"
    assert [x.orbital_period.val for x in extremes[0].planets] == [
        5.75969, 16.357, 49.748, 122.744, 604.67, 2205.0]
    assert view[258].name == "HD 40307"
    assert ak.to_list(view[258].planets.name) == [
        'HD 40307 b', 'HD 40307 c', 'HD 40307 d', 'HD 40307 f', 'HD 40307 g']
    # The buffers are the source's own (checked by pointer): no copy where the layouts agree.
    layout = view.layout
    while not isinstance(layout, ak.contents.RecordArray):
        layout = layout.content
    planets = layout.content("planets")
    starts = planet_arrays["object-L-NStar-Fplanets-B"]
    assert np.asarray(planets.starts.data).ctypes.data == starts.ctypes.data
    period = planets.content.content("orbital_period")
    mask = planet_arrays["object-L-NStar-Fplanets-L-NPlanet-Forbital_period-NValueAsymErr-M"]
    assert np.asarray(period.index.data).ctypes.data == mask.ctypes.data
    val = planet_arrays[PERIOD_ARRAYS[6]]
    assert np.asarray(period.content.content("val").content.data).ctypes.data == val.ctypes.data
    # And back: from_awkward over the same buffers reads the same values.
    back = oamap.from_awkward(view[:300])
    assert back[258].name == "HD 40307"
    assert [s._index for s in period_ratio_python(back)] == [284]


def test_issue29_to_awkward_refuses_damaged_arrays() -> None:
    schema = oamap.Schema.fromjson(SMALL)
    assert oamap.tolist(oamap.from_awkward(oamap.to_awkward(schema(small_source())))) == [
        {"x": [1.0, 2.0], "s": "ab"}, {"x": [], "s": ""}]
    for override in ({"object-L-Fx-E": np.array([9, 9], np.int32)},
                     {"object-L-Fs-NUTF8String-B": np.array([0, 5], np.int32)}):
        with pytest.raises(OamapArrayError):
            oamap.to_awkward(schema(small_source(**override)))
    nullable = oamap.Schema.fromjson({"type": "list", "content": {
        "type": "primitive", "dtype": "float64", "nullable": True}})
    good = {"object-B": [0], "object-E": [2], "object-L-M": np.array([0, -1], np.int32),
            "object-L-Df8": [1.5]}
    assert ak.to_list(oamap.to_awkward(nullable(good))) == [1.5, None]
    with pytest.raises(OamapArrayError) as info:
        oamap.to_awkward(nullable({**good, "object-L-M": np.array([0, -5], np.int32)}))
    assert info.value.array == "object-L-M"
    # A nested list is not a top-level list.
    with pytest.raises(OamapError):
        oamap.to_awkward(schema(small_source())[0].x)


def test_issue29_from_awkward_shares_the_awkward_buffers() -> None:
    arr = ak.Array([[1.5, 2.5], [], [3.5]])
    back = oamap.from_awkward(arr)
    assert repr(back) == "[[1.5, 2.5], [], [3.5]]"
    offsets = np.asarray(arr.layout.offsets.data)
    content = np.asarray(arr.layout.content.data)
    # starts = offsets[:-1] and stops = offsets[1:]: views, no copy.
    assert back.array("object-L-B").ctypes.data == offsets.ctypes.data
    assert back.array("object-L-E").ctypes.data == offsets.ctypes.data + offsets.itemsize
    assert back.array("object-L-L-Df8").ctypes.data == content.ctypes.data
    records = ak.Array([{"x": 1, "s": "ab", "o": None}, {"x": 2, "s": "", "o": 2.5}])
    assert oamap.tolist(oamap.from_awkward(records)) == [
        {"x": 1, "s": "ab", "o": None}, {"x": 2, "s": "", "o": 2.5}]
    # A strided, big-endian source array reads the same (converted once, in Rust).
    strided = {"object-B": [0], "object-E": [3],
               "object-L-Df8": np.arange(6.0).astype(">f8")[::2]}
    schema = oamap.Schema.fromjson({"type": "list", "content": "float64"})
    assert oamap.tolist(schema(strided)) == [0.0, 2.0, 4.0]


def test_issue29_benchmark_script_runs() -> None:
    """benches/oamap_python.py (item 5) on a small synthetic set: its scans agree (it asserts the
    seed's 26 extremes) and it prints its table."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, str(ROOT / "benches" / "oamap_python.py"), "--copies", "2",
                          "--repeat", "1", "--large-python", "20"],
                         capture_output=True, text=True, timeout=600, check=True).stdout
    assert "| (c) @numba.njit over the Awkward view (5,320 stars" in out
    assert "Time to the first value" in out


def golden_cases() -> list[str]:
    return sorted(p.stem for p in GOLDEN.glob("*.json") if p.stem not in ("index",))


# Golden cases Awkward cannot represent, and why.
# (None: every golden case of oamap/tests/data/golden is representable; OAMap's pointer cycles,
# which Awkward cannot hold, are refused by to_awkward, see the pointer test.)
NOT_AWKWARD: dict[str, str] = {}


@pytest.mark.parametrize("name", golden_cases())
def test_issue29_golden_cases_round_trip_through_awkward(name: str) -> None:
    case = json.loads((GOLDEN / f"{name}.json").read_text())
    if "partitions" in case:
        dataset = oamap.Dataset(case["dataset_json"])
        value = dataset([golden_source(p["arrays"], p["dtypes"]) for p in case["partitions"]])
        expect = [x for part in case["partitions_data"] for x in part]
    else:
        schema = oamap.Schema.fromjson(case["schema"])
        dtypes = case.get("dtypes", {})
        value = schema(golden_source(case["arrays"], dtypes))
        expect = case["data"]
    if name in NOT_AWKWARD:
        with pytest.raises(OamapError):
            oamap.to_awkward(value)
        return
    assert oamap.tolist(value) == expect
    view = oamap.to_awkward(value)
    assert _plain(ak.to_list(view)) == _plain(expect)
    back = oamap.from_awkward(view)
    assert _plain(oamap.tolist(back)) == _plain(expect)


@pytest.mark.parametrize("name", [n for n in golden_cases() if "lazy_loading" in json.loads(
    (GOLDEN / f"{n}.json").read_text()) and n != "dataset_partitions_inmemory"])
def test_issue29_golden_lazy_loading_asks_for_what_oamap_asks_for(name: str) -> None:
    """Each step of the golden `lazy_loading` (OAMap 0.12.4's own requests, one dict-like
    source per top-level proxy) asks the Python source for exactly those arrays, in order."""
    case = json.loads((GOLDEN / f"{name}.json").read_text())
    source = CountingSource(golden_source(case["arrays"], case.get("dtypes", {})))
    schema = oamap.Schema.fromjson(case["schema"])
    value: Any = None
    for step in case["lazy_loading"]:
        if step["access"] == "schema(arrays)":
            value = schema(source)
        else:
            got = value
            for k in step["access"]:
                got = got[k] if isinstance(k, int) else getattr(got, k)
        assert source.take() == step["requested"], step["access"]


def _plain(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, bytes):
        return list(x)
    return x

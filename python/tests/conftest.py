"""Shared fixtures: token storages written from Python, the CLI binary, the interop samples."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import guideloom as gl

ROOT = Path(__file__).resolve().parents[2]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):  # type: ignore[no-untyped-def]
    """With ``GUIDELOOM_NO_SKIP=1`` (CI sets it), a skipped test fails: in CI every optional
    dependency (the CLI, moto, grain, torch, the samples) is installed, so a skip means a
    test that did not run."""
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("GUIDELOOM_NO_SKIP") == "1" and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped, but GUIDELOOM_NO_SKIP=1 requires every test to run: {report.longrepr}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):  # type: ignore[no-untyped-def]
    """The same for a whole module skipped while it is collected (a module-level
    ``pytest.importorskip``, as test_oamap.py and test_torchrun.py have): with
    ``GUIDELOOM_NO_SKIP=1`` it is a collection error, not a skip (issue 33)."""
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("GUIDELOOM_NO_SKIP") == "1" and report.skipped:
        report.outcome = "failed"
        report.longrepr = f"skipped, but GUIDELOOM_NO_SKIP=1 requires every test to run: {report.longrepr}"


class U16Tokens:
    """A custom stream format over plain ``<u2`` ids (what the CLI reads as a token stream)."""

    def __init__(self, stream_dtype: np.dtype = np.dtype("<u2")) -> None:
        self.stream_dtype = np.dtype(stream_dtype)

    def pack(self, data):
        return np.asarray(data, dtype=self.stream_dtype)

    def unpack(self, stream, shard_lengths, shards):
        return stream


def write_tokens(path: Path, records: list[np.ndarray], shards: int = 3) -> Path:
    with gl.StreamStorage(path, storage_format=U16Tokens(), mode="w") as st:
        for i, r in enumerate(records):
            st.writer.append(r, shard=i % shards)
    return path


def stream_of(records: list[np.ndarray], shards: int = 3) -> np.ndarray:
    """The stream a storage of ``records`` dealt round-robin over ``shards`` holds (shard order)."""
    return np.concatenate([r for s in range(shards) for r in records[s::shards]]).astype(np.uint16)


@pytest.fixture
def records() -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    return [rng.integers(0, 50_000, size=int(n), dtype=np.uint16) for n in rng.integers(50, 400, size=30)]


@pytest.fixture
def tokens(tmp_path: Path, records) -> Path:
    return write_tokens(tmp_path / "tokens", records)


def interop(name: str) -> Path:
    """A foreign-layout sample kept in the repository (the interop crate's copy, or storage's)."""
    for base in (ROOT / "interop" / "tests" / "data" / "interop", ROOT / "storage" / "tests" / "data" / "interop"):
        if (base / name).exists():
            return base / name
    pytest.skip(f"interop sample {name} not in the repository")


def cli_binary() -> Path:
    """The `guideloom` CLI (GUIDELOOM_CLI, else target/release or target/debug)."""
    env = os.environ.get("GUIDELOOM_CLI")
    candidates = [Path(env)] if env else [ROOT / "target" / "release" / "guideloom", ROOT / "target" / "debug" / "guideloom"]
    for c in candidates:
        if c.is_file():
            return c
    pytest.skip("the guideloom CLI is not built (cargo build --release)")


def run_cli(*args: str) -> str:
    out = subprocess.run([str(cli_binary()), *args], check=True, capture_output=True, text=True)
    return out.stdout


def cli_batches(*args: str) -> list[dict]:
    return [json.loads(line) for line in run_cli("batches", *args).splitlines() if line.strip()]


def write_megatron(prefix: Path, documents: list[np.ndarray]) -> Path:
    """A Megatron-Core ``.bin``/``.idx`` pair of uint16 documents (one sequence per document), in
    the layout megatron-core's ``IndexedDatasetBuilder`` writes (magic ``MMIDIDX\\0\\0``, version 1,
    dtype code 8 = uint16, sizes, byte pointers, document indices)."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    docs = [np.asarray(d, np.uint16) for d in documents]
    Path(f"{prefix}.bin").write_bytes(b"".join(d.tobytes() for d in docs))
    sizes = np.array([len(d) for d in docs], np.int32)
    pointers = np.concatenate([[0], np.cumsum(sizes[:-1], dtype=np.int64) * 2]).astype(np.int64)
    doc_index = np.arange(len(docs) + 1, dtype=np.int64)
    header = b"MMIDIDX\x00\x00" + np.array([1], "<u8").tobytes() + bytes([8])
    header += np.array([len(docs), len(doc_index)], "<u8").tobytes()
    Path(f"{prefix}.idx").write_bytes(header + sizes.tobytes() + pointers.tobytes() + doc_index.tobytes())
    return prefix


def write_llmc(path: Path, tokens: np.ndarray) -> Path:
    """An llm.c v1 token shard (a 256-int32 header: magic 20240520, version 1, token count; then
    uint16 tokens), as llm.c's ``dev/data`` scripts write it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    header = np.zeros(256, "<i4")
    header[:3] = [20240520, 1, len(tokens)]
    path.write_bytes(header.tobytes() + np.asarray(tokens, "<u2").tobytes())
    return path


_KIND_FILES = {"stream": ("stream",), "document": ("docs", "index"), "stream_with_meta": ("stream", "meta", "metaidx")}


def committed_files(root: Path) -> list[tuple[str, bytes]]:
    """Every committed shard file of the storage ``root`` in shard order, as ``(extension, the
    committed bytes)``, read from its manifest as docs/DESIGN.md lays it out: a shard's files are
    ``{path}.{ext}`` where the entry has a ``path`` (a storage committed from parts), else
    ``shard-{id:05}.{ext}``; the main file's committed length is the entry's ``bytes``, the
    others' their ``files[ext].bytes``. Names and paths are left out, so two storages with the
    same bytes in the same order compare equal whatever their job ids."""
    manifest = json.loads((root / "manifest.json").read_text())
    out = []
    for shard in manifest["shards"]:
        for i, ext in enumerate(_KIND_FILES[manifest["kind"]]):
            length = shard["bytes"] if i == 0 else shard["files"][ext]["bytes"]
            stem = shard.get("path") or f"shard-{shard['id']:05}"
            out.append((ext, (root / f"{stem}.{ext}").read_bytes()[:length]))
    return out


def token_documents(n: int, seed: int, high: int = 60_000) -> list[np.ndarray]:
    """``n`` documents of 1..40 uint16 tokens below ``high``, a function of ``seed`` only."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, high, size=int(k), dtype=np.uint16) for k in rng.integers(1, 41, size=n)]


def row_tokens(i: int) -> list[int]:
    """Row ``i``'s token ids in the engine tests (a function of ``i`` only)."""
    return token_documents(1, seed=i)[0].tolist()


def rows_stream(rows: int, *firsts: int) -> list[int]:
    """The token stream of rows ``first .. first + rows`` for each of ``firsts``, in that order."""
    return [t for first in firsts for i in range(first, first + rows) for t in row_tokens(i)]


def read_stream(root: Path) -> np.ndarray:
    """The whole token stream of the storage ``root`` (its windows of one token)."""
    windows = gl.TokenWindows(root, 1)
    return windows.read_batch(range(len(windows))).ravel()


def loader_batches(root: Path, seq_len: int = 8, batch_size: int = 4) -> list[np.ndarray]:
    """Every batch a shuffled loader over the token windows of ``root`` yields in one epoch."""
    source = gl.TokenWindows(root, seq_len)
    with gl.Loader(source, batch_size=batch_size, shuffle=True, seed=3, epochs=1) as loader:
        return [np.array(b.data) for b in loader]


def assert_same_storage(clean: Path, other: Path, tokens: list[int]) -> None:
    """``clean`` and ``other`` both hold the stream ``tokens`` (an independent source: the rows'
    generator), equal byte for byte in every committed shard file and in every batch a shuffled
    loader yields over their windows of 8 tokens, 4 a batch."""
    assert read_stream(clean).tolist() == tokens
    assert read_stream(other).tolist() == tokens
    assert committed_files(other) == committed_files(clean)
    batches = loader_batches(clean)
    assert len(batches) == -(-(len(tokens) // 8) // 4)
    for a, b in zip(batches, loader_batches(other), strict=True):
        np.testing.assert_array_equal(a, b)

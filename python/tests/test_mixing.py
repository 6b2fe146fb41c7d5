"""Mixing and packing from Python (issue 27 item 5): ``TokenDocuments``, ``Mixture`` and ``Packed``
as loader sources give the CLI's ``batches --mix ... --pack ...`` batches and states, and each
record, row and source checks against the documents and windows read directly."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

import guideloom as gl
from conftest import cli_batches, cli_binary, write_megatron, write_tokens


def docs_of(seed: int, n: int, lo: int = 1, hi: int = 12, vocab: int = 1000) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(1, vocab, int(k), dtype=np.uint16) for k in rng.integers(lo, hi, n)]


def ingest_documents(path: Path, docs: list[np.ndarray]) -> Path:
    """A stream-with-meta storage of the documents, as `guideloom ingest jsonl --doc-meta` writes it."""
    src = path.with_suffix(".jsonl")
    src.write_text("".join(json.dumps({"ids": d.tolist()}) + "\n" for d in docs))
    subprocess.run([str(cli_binary()), "ingest", "jsonl", "--out", str(path), "--tokens-field", "ids", "--doc-meta",
                    str(src)], check=True, capture_output=True)
    return path


@pytest.fixture
def two_docs(tmp_path: Path) -> tuple[Path, list[np.ndarray], Path, list[np.ndarray]]:
    a, b = docs_of(1, 40), docs_of(2, 25, 3, 9)
    return ingest_documents(tmp_path / "a", a), a, ingest_documents(tmp_path / "b", b), b


def test_token_documents_are_the_documents_of_each_layout(tmp_path: Path, two_docs) -> None:
    pa, a, _, _ = two_docs
    docs = gl.TokenDocuments(pa)
    assert len(docs) == len(a) and docs.tokens == sum(len(d) for d in a)
    assert [d.tolist() for d in docs.__getitems__(range(len(a)))] == [d.tolist() for d in a]
    assert docs[-1].tolist() == a[-1].tolist() and docs[0].dtype == np.uint32
    # A Megatron dataset read in place: one document per sequence.
    meg = write_megatron(tmp_path / "m_text_document", a)
    assert [d.tolist() for d in gl.TokenDocuments(meg).__getitems__(range(len(a)))] == [d.tolist() for d in a]
    # A plain token stream records no documents.
    plain = write_tokens(tmp_path / "plain", [np.arange(10, dtype=np.uint16)])
    with pytest.raises(gl.errors.ConfigError):
        gl.TokenDocuments(plain)
    with pytest.raises(IndexError):
        docs[len(a)]


@pytest.mark.parametrize("schedule", ["proportional", "greedy"])
def test_mixture_of_windows_is_the_clis_and_each_record_is_its_sources(tmp_path: Path, schedule: str) -> None:
    rng = np.random.default_rng(5)
    pa = write_tokens(tmp_path / "a", [rng.integers(0, 1000, 3000, dtype=np.uint16)])
    pb = write_tokens(tmp_path / "b", [rng.integers(0, 1000, 1000, dtype=np.uint16)])
    wa, wb = gl.TokenWindows(pa, seq_len=16), gl.TokenWindows(pb, seq_len=16)
    mix = gl.Mixture([(wa, 0.7), (wb, 0.3)], schedule=schedule, shuffle_seed=3)
    records, sources, within = mix.read_sourced(range(len(mix)))
    for r, s, i in zip(records, sources, within):
        assert r.tolist() == (wa if s == 0 else wb)[i].tolist()
    # first-exhausted: no source wraps, and the realized share is the weight's (to one record).
    assert sorted(set(zip(sources, within))) == sorted(zip(sources, within))
    assert abs(sources.count(0) - 0.7 * len(mix)) <= 1
    loader = gl.Loader(mix, batch_size=8, shuffle=True, seed=3, workers=2)
    batches = list(loader)
    cli = cli_batches("--mix", f"{pa}=0.7", "--mix", f"{pb}=0.3", "--mix-schedule", schedule, "--seq-len", "16",
                      "--batch-size", "8", "--shuffle", "--seed", "3")
    assert [b.data.tolist() for b in batches] == [line["tokens"] for line in cli]
    assert [b.sources.tolist() for b in batches] == [line["sources"] for line in cli]  # type: ignore[union-attr]
    assert batches[0].data.shape == (8, 16) and batches[0].data.dtype == np.uint32


def test_token_weighted_mixture_realizes_the_token_share(tmp_path: Path) -> None:
    a, b = docs_of(11, 60, 2, 7), docs_of(12, 60, 10, 31)  # mean lengths about 4 and 20
    pa, pb = ingest_documents(tmp_path / "short", a), ingest_documents(tmp_path / "long", b)
    da, db = gl.TokenDocuments(pa), gl.TokenDocuments(pb)
    by_records = gl.Mixture([(da, 0.5), (db, 0.5)], stop="budget:400")
    by_tokens = gl.Mixture([(da, 0.5), (db, 0.5)], unit="tokens", stop="budget:400")

    def token_share(m: gl.Mixture) -> float:
        recs, srcs, _ = m.read_sourced(range(len(m)))
        t0 = sum(len(r) for r, s in zip(recs, srcs) if s == 0)
        return t0 / sum(len(r) for r in recs)

    mean_a, mean_b = np.mean([len(d) for d in a]), np.mean([len(d) for d in b])
    # Half the documents from each source: the token share is mean_a / (mean_a + mean_b).
    assert abs(token_share(by_records) - mean_a / (mean_a + mean_b)) < 0.03
    assert abs(token_share(by_tokens) - 0.5) < 0.03
    assert token_share(by_records) < 0.25  # the two units differ on these sources
    recs, srcs, _ = by_records.read_sourced(range(len(by_records)))
    assert srcs.count(0) == 200  # half the documents


def check_rows(rows: dict[str, np.ndarray], seq_len: int) -> None:
    """Every row's fields agree with each other: contiguous segments, positions from 0, targets
    the next token of the same segment, padding 0 with target -100 and mask 0."""
    for r in range(rows["tokens"].shape[0]):
        tok, tgt, seg, pos, mask = (rows[k][r] for k in ("tokens", "targets", "segment_ids", "positions", "loss_mask"))
        assert len(tok) == seq_len
        for s in sorted(set(seg.tolist()) - {0}):
            at = np.flatnonzero(seg == s)
            assert (np.diff(at) == 1).all(), "a segment is contiguous"
            assert pos[at].tolist() == list(range(len(at)))
            piece = tok[at].tolist()
            assert tgt[at][:-1].tolist() == piece[1:]
            assert mask[at][:-1].tolist() == [1] * (len(at) - 1)
            assert tgt[at][-1] == -100 and mask[at][-1] == 0
        assert (tok[seg == 0] == 0).all() and (tgt[seg == 0] == -100).all() and (mask[seg == 0] == 0).all()


def test_packed_documents_are_the_clis_rows_and_hold_every_document_once(two_docs) -> None:
    pa, a, _, _ = two_docs
    packed = gl.Packed(gl.TokenDocuments(pa), 24, strategy="best-fit", bins=4)
    rows = packed.read_batch(range(len(packed)))
    check_rows(rows, 24)
    # The documents, each exactly once: the segments' tokens, as multisets of documents.
    pieces = []
    for r in range(len(packed)):
        seg = rows["segment_ids"][r]
        for s in sorted(set(seg.tolist()) - {0}):
            pieces.append(tuple(rows["tokens"][r][seg == s].tolist()))
    assert sorted(pieces) == sorted(tuple(d.tolist()) for d in a)
    loader = gl.Loader(packed, batch_size=4, shuffle=True, seed=9, workers=2)
    batches = list(loader)
    cli = cli_batches(str(pa), "--pack", "best-fit", "--bins", "4", "--seq-len", "24", "--batch-size", "4", "--shuffle",
                      "--seed", "9")
    for b, line in zip(batches, cli, strict=True):
        for key in ("tokens", "segment_ids", "positions", "targets"):
            assert b.data[key].tolist() == line[key], key
    assert batches[0].inputs is batches[0].data["tokens"] and batches[0].targets is batches[0].data["targets"]


def test_packed_mixture_carries_each_tokens_source_as_the_cli(two_docs) -> None:
    pa, a, pb, b = two_docs
    mix = gl.Mixture([(gl.TokenDocuments(pa), 0.6), (gl.TokenDocuments(pb), 0.4)])
    packed = gl.Packed(mix, 20, strategy="first-fit", bins=2)
    loader = gl.Loader(packed, batch_size=2, workers=1)
    batches = list(loader)
    cli = cli_batches("--mix", f"{pa}=0.6", "--mix", f"{pb}=0.4", "--pack", "first-fit", "--bins", "2", "--seq-len",
                      "20", "--batch-size", "2")
    content = {0: {tuple(d.tolist()) for d in a}, 1: {tuple(d.tolist()) for d in b}}
    for batch, line in zip(batches, cli, strict=True):
        assert batch.data["tokens"].tolist() == line["tokens"]
        src, seg, tok = batch.data["sources"], batch.data["segment_ids"], batch.data["tokens"]
        per_piece = []
        for r in range(src.shape[0]):
            row = []
            for s in sorted(set(seg[r].tolist()) - {0}):
                at = seg[r] == s
                assert len(set(src[r][at].tolist())) == 1, "one source per segment"
                source = int(src[r][at][0])
                assert tuple(tok[r][at].tolist()) in content[source], "the segment is a document of its source"
                row.append(source)
            assert (src[r][seg[r] == 0] == -1).all()
            per_piece.append(row)
        assert per_piece == line["sources"]


def test_packed_state_resumes_on_another_worker_count_and_in_the_cli(two_docs, tmp_path: Path) -> None:
    pa, a, _, _ = two_docs
    packed = gl.Packed(gl.TokenDocuments(pa), 16, strategy="concat-split")
    whole = [b.data["tokens"].tolist() for b in gl.Loader(packed, batch_size=3, shuffle=True, seed=4, workers=2)]
    first = gl.Loader(packed, batch_size=3, shuffle=True, seed=4)
    it = iter(first)
    taken = [next(it).data["tokens"].tolist() for _ in range(2)]
    again = gl.Loader(packed, batch_size=3, shuffle=True, seed=4, workers=1)
    again.load_state_dict(first.state_dict())
    assert taken + [b.data["tokens"].tolist() for b in again] == whole
    state = tmp_path / "state.json"
    state.write_text(json.dumps(first.state_dict()))
    rest = cli_batches(str(pa), "--pack", "concat-split", "--seq-len", "16", "--batch-size", "3", "--shuffle", "--seed",
                       "4", "--resume", str(state))
    assert [line["tokens"] for line in rest] == whole[2:]


def test_overflow_and_refusals_are_typed(two_docs, tmp_path: Path) -> None:
    pa, a, _, _ = two_docs
    docs = gl.TokenDocuments(pa)
    longest = max(len(d) for d in a)
    with pytest.raises(gl.errors.GuideloomError):
        gl.Packed(docs, longest - 1)  # a document longer than a row, overflow="error"
    cut = gl.Packed(docs, longest - 1, overflow="truncate")
    assert cut.dropped_tokens == sum(max(0, len(d) - (longest - 1)) for d in a)
    split = gl.Packed(docs, longest - 1, overflow="split")
    assert split.dropped_tokens == 0
    for bad in (dict(strategy="worst-fit"), dict(overflow="ignore"), dict(bins=0)):
        with pytest.raises(gl.errors.ConfigError):
            gl.Packed(docs, 8, **bad)  # type: ignore[arg-type]
    w = gl.TokenWindows(write_tokens(tmp_path / "w", [np.arange(100, dtype=np.uint16)]), seq_len=8)
    with pytest.raises(gl.errors.ConfigError):
        gl.Packed(gl.Mixture([(w, 1.0)]), 8)  # windows are not documents
    with pytest.raises(gl.errors.ConfigError):
        gl.Mixture([(w, 1.0), (docs, 1.0)])  # windows and documents together
    for bad_mix in (dict(schedule="random"), dict(stop="forever"), dict(stop="budget:x"), dict(unit="bytes")):
        with pytest.raises(gl.errors.ConfigError):
            gl.Mixture([(w, 1.0)], **bad_mix)  # type: ignore[arg-type]
    with pytest.raises(gl.errors.ConfigError):
        gl.Mixture([(w, -1.0)])
    with pytest.raises(gl.errors.ConfigError):
        gl.Mixture([])

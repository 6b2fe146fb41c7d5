"""TokenWindows and the loader over a storage in an S3 store (moto's server, from
tests/s3/setup.sh; skipped without it unless GUIDELOOM_REQUIRE_S3=1)."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.request

import numpy as np
import pytest

import guideloom as gl

from conftest import ROOT, run_cli


def _moto_server():
    exe = os.environ.get("GUIDELOOM_MOTO_SERVER", str(ROOT / "target" / "s3-venv" / "bin" / "moto_server"))
    if not os.path.exists(exe):
        if os.environ.get("GUIDELOOM_REQUIRE_S3") == "1":
            pytest.fail(f"moto_server not found at {exe} (bash tests/s3/setup.sh)")
        pytest.skip("moto_server not installed (bash tests/s3/setup.sh)")
    return exe


@pytest.fixture
def s3(monkeypatch):
    exe = _moto_server()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                urllib.request.urlopen(endpoint, timeout=1)
                break
            except OSError:
                time.sleep(0.05)
        urllib.request.urlopen(urllib.request.Request(f"{endpoint}/bucket", method="PUT"), timeout=5)
        env = {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ALLOW_HTTP": "true",
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_REGION": "us-east-1",
        }
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(10)


def test_token_windows_and_the_loader_over_s3(s3, tokens):
    run_cli("upload", str(tokens), "s3://bucket/tokens")
    local = gl.TokenWindows(tokens, seq_len=32)
    remote = gl.TokenWindows("s3://bucket/tokens", seq_len=32)
    assert len(remote) == len(local) and remote.fingerprint() == local.fingerprint()
    assert remote.read_batch([5, 0, 7]).tolist() == local.read_batch([5, 0, 7]).tolist()
    assert repr(remote) == "TokenWindows('s3://bucket/tokens', seq_len=32, stride=32)"
    a = [b.data.tolist() for b in gl.Loader(remote, batch_size=4, shuffle=True, seed=2, workers=2)]
    b = [b.data.tolist() for b in gl.Loader(local, batch_size=4, shuffle=True, seed=2)]
    assert a == b


def test_a_missing_remote_storage_is_not_found(s3):
    with pytest.raises(gl.errors.GuideloomError) as e:
        gl.TokenWindows("s3://bucket/nothing-here", seq_len=8)
    assert isinstance(e.value, FileNotFoundError), repr(e.value)


def test_remote_reads_go_through_the_block_cache(s3, tokens, tmp_path, monkeypatch):
    """GUIDELOOM_CACHE_DIR (as the CLI reads it): the blocks a Python read fetched are kept in the
    cache, and a second reader over the same URL gives the same windows."""
    run_cli("upload", str(tokens), "s3://bucket/cached")
    cache = tmp_path / "cache"
    monkeypatch.setenv("GUIDELOOM_CACHE_DIR", str(cache))
    local = gl.TokenWindows(tokens, seq_len=16)
    first = gl.TokenWindows("s3://bucket/cached", seq_len=16)
    want = local.read_batch(range(len(local))).tolist()
    assert first.read_batch(range(len(first))).tolist() == want
    cached = [p for p in cache.rglob("*") if p.is_file()]
    assert cached, "the cache holds the fetched blocks"
    size = sum(p.stat().st_size for p in cached)
    assert size >= local.elements * 2 * 0.9  # about every token's bytes (u16)
    again = gl.TokenWindows("s3://bucket/cached", seq_len=16)
    mix = gl.Mixture([(again, 1.0)])
    assert [r.tolist() for r in mix.__getitems__(range(len(mix)))] == want

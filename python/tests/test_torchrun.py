"""Multi-process training with torchrun (issue 30 item 5): python/examples/torchrun_ddp.py (DDP over
gloo on the CPU, one guideloom loader per rank, the loader state saved with the model) killed
mid-epoch and resumed on another number of processes, 2 -> 4 -> 2: every window of the epoch is
trained on exactly once across the restarts (the record ids every rank logged, up to the step its
successor resumed at); and a run killed and resumed on the same 2 processes has the losses of the
uninterrupted run, bit for bit. The same with the data on the S3 test server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, run_cli, write_tokens
from test_remote import s3  # noqa: F401 (the fixture)

torch = pytest.importorskip("torch")

EXAMPLE = ROOT / "python" / "examples" / "torchrun_ddp.py"
SEQ, GLOBAL, STEPS = 17, 8, 12


def make_data(path: Path) -> Path:
    """STEPS global batches of GLOBAL windows of SEQ tokens (ids < 1000), in 3 shards."""
    rng = np.random.default_rng(3)
    tokens = rng.integers(0, 1000, SEQ * GLOBAL * STEPS, dtype=np.uint16)
    return write_tokens(path, [tokens[i : i + 400] for i in range(0, len(tokens), 400)])


def torchrun(nproc: int, data: str, ckpt: Path, logs: Path, kill_at: int | None = None) -> None:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", str(EXAMPLE),
           "--data", data, "--ckpt", str(ckpt), "--log-dir", str(logs), "--seq-len", str(SEQ),
           "--global-batch", str(GLOBAL), "--ckpt-every", "3"]
    if kill_at is not None:
        cmd += ["--kill-at", str(kill_at)]
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", MASTER_ADDR="127.0.0.1", OMP_NUM_THREADS="1")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    if kill_at is None:
        assert out.returncode == 0, out.stderr[-3000:]
    else:
        assert out.returncode != 0, "the run was to be killed"


def phase(logs: Path) -> tuple[int, int, dict[int, list[int]], dict[int, str]]:
    """(start step, world size, per step the ids of every rank, per step the mean loss)."""
    ids: dict[int, list[int]] = {}
    losses: dict[int, str] = {}
    start = world = -1
    for f in sorted(logs.glob("rank-*.jsonl")):
        rank = int(f.stem.split("-")[1])
        for line in f.read_text().splitlines():
            r = json.loads(line)
            if "start" in r:
                start, world = r["start"], r["world_size"]
            elif "step" in r:
                ids.setdefault(r["step"], []).extend(r["ids"])
                if rank == 0:
                    losses[r["step"]] = r["loss"]
    return start, world, ids, losses


def exactly_once(tmp_path: Path, data: str) -> None:
    ckpt = tmp_path / "ckpt.pt"
    torchrun(2, data, ckpt, tmp_path / "p1", kill_at=4)   # checkpoint at 3, killed after 4
    torchrun(4, data, ckpt, tmp_path / "p2", kill_at=8)   # resumes at 3; checkpoint at 6, killed after 8
    torchrun(2, data, ckpt, tmp_path / "p3")              # resumes at 6, to the end
    phases = [phase(tmp_path / p) for p in ("p1", "p2", "p3")]
    assert [(p[0], p[1]) for p in phases] == [(0, 2), (3, 4), (6, 2)]
    # Each phase counts up to the step its successor resumed at (the steps after the last
    # checkpoint are trained again after the restart).
    upto = [3, 6, STEPS]
    seen: list[int] = []
    for (start, world, ids, _), end in zip(phases, upto):
        assert sorted(ids)[: end - start] == list(range(start + 1, end + 1))
        for step in range(start + 1, end + 1):
            assert len(ids[step]) == GLOBAL, (step, world)
            seen.extend(ids[step])
    assert sorted(seen) == list(range(GLOBAL * STEPS)), "every window exactly once"


def test_torchrun_2_to_4_to_2_trains_on_every_window_exactly_once(tmp_path: Path) -> None:
    data = make_data(tmp_path / "tokens")
    exactly_once(tmp_path, str(data))


def test_torchrun_resumed_on_the_same_world_size_has_bit_equal_losses(tmp_path: Path) -> None:
    data = str(make_data(tmp_path / "tokens"))
    torchrun(2, data, tmp_path / "a.pt", tmp_path / "whole")
    _, _, ids, whole = phase(tmp_path / "whole")
    assert sorted(whole) == list(range(1, STEPS + 1))
    torchrun(2, data, tmp_path / "b.pt", tmp_path / "first", kill_at=5)  # checkpoint at 3
    torchrun(2, data, tmp_path / "b.pt", tmp_path / "second")
    _, _, ids1, first = phase(tmp_path / "first")
    start, _, ids2, second = phase(tmp_path / "second")
    assert start == 3
    resumed = {s: first[s] for s in range(1, 4)} | second
    assert resumed == whole, "losses of the resumed run equal the uninterrupted run's bit for bit"
    assert {s: sorted(ids1[s]) for s in range(1, 4)} | {s: sorted(v) for s, v in ids2.items()} == {
        s: sorted(v) for s, v in ids.items()
    }


def test_torchrun_over_s3_trains_on_every_window_exactly_once(tmp_path: Path, s3) -> None:  # noqa: F811
    data = make_data(tmp_path / "tokens")
    run_cli("upload", str(data), "s3://bucket/torchrun")
    exactly_once(tmp_path, "s3://bucket/torchrun")

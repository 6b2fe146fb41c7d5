"""The Python examples of README.md and python/README.md run as written."""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest

from conftest import ROOT, write_llmc, write_megatron, write_tokens

BLOCK = re.compile(r"```python\n(.*?)```", re.S)
IMPORT = re.compile(r"^\s*(?:import|from)\s+(\w+)", re.M)


def blocks(path):
    return BLOCK.findall((ROOT / path).read_text())


@pytest.mark.parametrize("path", ["README.md", "python/README.md"])
def test_readme_python_examples(path, tmp_path, monkeypatch):
    found = blocks(path)
    assert found
    # The packages the examples import (torch, grain...): a venv without one skips with its
    # name (CI's GUIDELOOM_NO_SKIP=1 turns that into a failure) instead of failing in exec.
    for module in sorted({m for code in found for m in IMPORT.findall(code)}):
        pytest.importorskip(module)
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    write_tokens(tmp_path / "data" / "tokens", [rng.integers(0, 1000, 5000, dtype=np.uint16) for _ in range(3)])
    # Megatron datasets and llm.c shards for the examples of the other trainers' orders.
    for name in ("gpt2", "web", "code"):
        docs = [rng.integers(0, 50000, int(n), dtype=np.uint16) for n in rng.integers(100, 3000, 150)]
        write_megatron(tmp_path / "data" / f"{name}_text_document", docs)
    for shard in range(1, 4):
        write_llmc(tmp_path / "data" / f"fineweb_train_{shard:06d}.bin", rng.integers(0, 50000, 100_000, dtype=np.uint16))
    # The exoplanets sample for guideloom.oamap's example, where the repository has it.
    (tmp_path / "data" / "exoplanets").mkdir(parents=True)
    shutil.copy(ROOT / "data" / "exoplanets" / "planets.npz", tmp_path / "data" / "exoplanets")
    namespace = {"__name__": "readme"}  # the blocks of a file run in order, as one session
    for code in found:
        exec(compile(code, f"{path} example", "exec"), namespace)

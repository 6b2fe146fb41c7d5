"""The Python examples of README.md and python/README.md run as written."""

from __future__ import annotations

import re

import numpy as np
import pytest

from conftest import ROOT, write_tokens

BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def blocks(path):
    return BLOCK.findall((ROOT / path).read_text())


@pytest.mark.parametrize("path", ["README.md", "python/README.md"])
def test_readme_python_examples(path, tmp_path, monkeypatch):
    found = blocks(path)
    assert found
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    write_tokens(tmp_path / "data" / "tokens", [rng.integers(0, 1000, 5000, dtype=np.uint16) for _ in range(3)])
    namespace = {"__name__": "readme"}  # the blocks of a file run in order, as one session
    for code in found:
        exec(compile(code, f"{path} example", "exec"), namespace)

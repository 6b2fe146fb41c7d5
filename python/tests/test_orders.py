"""``Loader.megatron`` and ``Loader.llmc`` (issue 27 item 5): Megatron-Core's and llm.c's orders
from Python. Expected values come from the projects' own code: megatron-core 0.16.1's cached
``GPTDataset`` indices and the samples it gave (interop/tests/orders_megatron.rs), and the batches
llm.c's own ``DataLoader`` gave (``loader/tests/data/llmc_order/expected.txt``, made by its
``generate.sh`` from llm.c's ``dataloader.h``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import guideloom as gl
from conftest import ROOT, cli_batches

MEGATRON = ROOT / "storage" / "tests" / "data" / "interop" / "megatron"
GPT2 = MEGATRON / "gpt2_text_document"
LLMC = ROOT / "loader" / "tests" / "data" / "llmc_order"

# megatron-core's samples of GPTDataset(gpt2_text_document, seq 4, seed 1234, split "1,0,0",
# num_samples 5): the joint-shuffle case.
MEGATRON_SAMPLES = [
    [301, 302, 303, 304, 50256],
    [50256, 101, 102, 103, 50256],
    [50256, 101, 102, 103, 50256],
    [301, 302, 303, 304, 50256],
    [50256, 201, 202, 50256, 401],
    [50256, 201, 202, 50256, 301],
]


def megatron_reference(num_samples: int, md5: str) -> list[list[int]]:
    """The samples megatron-core's own cached indices give (``_query_document_sample_shuffle_indices``
    over the ``document_index``, ``sample_index`` and ``shuffle_index`` files it wrote)."""
    cache = MEGATRON / "cache"
    doc = np.load(cache / f"{md5}-GPTDataset-train-document_index.npy")
    smp = np.load(cache / f"{md5}-GPTDataset-train-sample_index.npy")
    shuf = np.load(cache / f"{md5}-GPTDataset-train-shuffle_index.npy")
    seqs = json.loads((MEGATRON / "expected.json").read_text())["gpt2_text_document"]["sequences"]
    out = []
    for i in range(len(shuf)):
        j = shuf[i]
        (d0, o0), (d1, o1) = smp[j], smp[j + 1]
        if d0 == d1:
            tokens = seqs[doc[d0]][o0 : o1 + 1]
        else:
            tokens = list(seqs[doc[d0]][o0:])
            for d in range(d0 + 1, d1):
                tokens += seqs[doc[d]]
            tokens += seqs[doc[d1]][: o1 + 1]
        out.append([int(t) for t in tokens])
    assert len(out) >= num_samples
    return out


def test_megatron_samples_are_megatron_cores_in_its_order() -> None:
    loader = gl.Loader.megatron(GPT2, seq_length=4, micro_batch_size=2, split="1,0,0", train_samples=5)
    batches = list(loader)
    assert len(loader) == 3
    assert [b.data.tolist() for b in batches] == [MEGATRON_SAMPLES[0:2], MEGATRON_SAMPLES[2:4], MEGATRON_SAMPLES[4:6]]
    assert batches[0].data.dtype == np.int64 and batches[0].data.shape == (2, 5)
    assert [b.indices.tolist() for b in batches] == [[0, 1], [2, 3], [4, 5]]
    assert all(b.sources is None for b in batches)
    # The same samples from megatron-core's own cached index files.
    assert [row for b in batches for row in b.data.tolist()] == megatron_reference(5, "ab120df2b3b30f2071a2218ba2462cf5")
    # LM views: inputs the first seq_length tokens, targets shifted by one.
    assert batches[0].inputs.tolist() == [r[:4] for r in MEGATRON_SAMPLES[0:2]]
    assert batches[0].targets.tolist() == [r[1:] for r in MEGATRON_SAMPLES[0:2]]


def test_megatron_separate_final_epoch_case_matches_megatron_core_cache() -> None:
    loader = gl.Loader.megatron(GPT2, 4, 1, split="1,0,0", train_samples=4)
    got = [b.data[0].tolist() for b in loader]
    assert got == megatron_reference(4, "cb6b325b654cb93cc690f6f34ed23067")
    assert got[0] == [101, 102, 103, 50256, 201]


def test_megatron_default_seed_is_megatrons_1234() -> None:
    default = [b.data.tolist() for b in gl.Loader.megatron(GPT2, 4, 2, split="1,0,0", train_samples=5)]
    explicit = [b.data.tolist() for b in gl.Loader.megatron(GPT2, 4, 2, split="1,0,0", train_samples=5, seed=1234)]
    other = [b.data.tolist() for b in gl.Loader.megatron(GPT2, 4, 2, split="1,0,0", train_samples=5, seed=1)]
    assert default == explicit != other


@pytest.mark.parametrize("world_size", [1, 2])
@pytest.mark.parametrize("consumed", [0, 2, 3, 4])
def test_megatron_consumed_samples_continue_megatrons_sampler(world_size: int, consumed: int) -> None:
    """MegatronPretrainingSampler: rank r of W takes samples [g*B*W + r*B, ... + B) of step g, from
    consumed_samples on, the incomplete last global batch dropped."""
    B = 1
    for rank in range(world_size):
        loader = gl.Loader.megatron(
            GPT2, 4, B, split="1,0,0", train_samples=5, consumed_samples=consumed, rank=rank, world_size=world_size
        )
        got = [(b.indices.tolist(), b.data.tolist()) for b in loader]
        G = B * world_size
        want = []
        start = consumed
        while start + G <= len(MEGATRON_SAMPLES):
            idx = list(range(start + rank * B, start + (rank + 1) * B))
            want.append((idx, [MEGATRON_SAMPLES[i] for i in idx]))
            start += G
        assert got == want, (rank, world_size, consumed)


def test_megatron_state_resumes_onto_another_worker_count_and_in_the_cli() -> None:
    args = dict(seq_length=4, micro_batch_size=1, split="1,0,0", train_samples=5)
    full = [b.data.tolist() for b in gl.Loader.megatron(GPT2, **args, workers=2)]  # type: ignore[arg-type]
    first = gl.Loader.megatron(GPT2, **args, workers=0)  # type: ignore[arg-type]
    it = iter(first)
    taken = [next(it).data.tolist() for _ in range(2)]
    state = first.state_dict()
    resumed = gl.Loader.megatron(GPT2, **args, workers=3)  # type: ignore[arg-type]
    resumed.load_state_dict(state)
    assert taken + [b.data.tolist() for b in resumed] == full
    # The CLI's `batches --order megatron` gives the same samples, and resumes the Python state.
    cli_args = ["--order", "megatron", "--data-path", str(GPT2), "--seq-len", "4", "--batch-size", "1",
                "--megatron-split", "1,0,0", "--train-samples", "5", "--seed", "1234"]
    assert [line["tokens"][0] for line in cli_batches(*cli_args)] == [r[0] for r in full]


def test_megatron_state_round_trips_through_the_cli(tmp_path: Path) -> None:
    args = dict(seq_length=4, micro_batch_size=1, split="1,0,0", train_samples=5)
    loader = gl.Loader.megatron(GPT2, **args)  # type: ignore[arg-type]
    it = iter(loader)
    next(it)
    next(it)
    state_file = tmp_path / "state.json"
    state_file.write_text(json.dumps(loader.state_dict()))
    cli_args = ["--order", "megatron", "--data-path", str(GPT2), "--seq-len", "4", "--batch-size", "1",
                "--megatron-split", "1,0,0", "--train-samples", "5", "--seed", "1234"]
    rest = [line["tokens"][0] for line in cli_batches(*cli_args, "--resume", str(state_file))]
    assert rest == MEGATRON_SAMPLES[2:]
    # The reverse: the CLI's state after 3 samples resumes in Python.
    saved = tmp_path / "cli.json"
    cli_batches(*cli_args, "--max-batches", "3", "--save-state", str(saved))
    again = gl.Loader.megatron(GPT2, **args)  # type: ignore[arg-type]
    again.set_state(saved.read_bytes())
    assert [b.data[0].tolist() for b in again] == MEGATRON_SAMPLES[3:]


def test_megatron_blend_names_each_samples_dataset() -> None:
    other = MEGATRON / "other_text_document"
    loader = gl.Loader.megatron([(0.5, GPT2), (0.5, other)], 4, 2, split="1,0,0", train_samples=6)
    batches = list(loader)
    sources = [s for b in batches for s in b.sources.tolist()]  # type: ignore[union-attr]
    assert sorted(set(sources)) == [0, 1]
    # Megatron's greedy schedule for equal weights alternates 0, 1, 0, 1, ...
    assert sources == [0, 1, 0, 1, 0, 1]
    cli = cli_batches("--order", "megatron", "--data-path", f"0.5 {GPT2} 0.5 {other}", "--seq-len", "4",
                      "--batch-size", "2", "--megatron-split", "1,0,0", "--train-samples", "6", "--seed", "1234")
    assert [line["sources"] for line in cli] == [b.sources.tolist() for b in batches]  # type: ignore[union-attr]
    assert [line["tokens"] for line in cli] == [b.data.tolist() for b in batches]


def test_megatron_refusals_are_typed() -> None:
    with pytest.raises(gl.errors.ConfigError):
        gl.Loader.megatron(GPT2, 4, 2, which="dev")
    with pytest.raises(gl.errors.ConfigError):
        gl.Loader.megatron(GPT2, 0, 2)
    with pytest.raises(gl.errors.ConfigError):  # a blend needs train_samples
        gl.Loader.megatron([(0.5, GPT2), (0.5, MEGATRON / "other_text_document")], 4, 2, split="1,0,0")
    with pytest.raises(gl.errors.ConfigError):  # weights mixed with bare prefixes
        gl.Loader.megatron([(0.5, GPT2), str(MEGATRON / "other_text_document")], 4, 2, train_samples=4)  # type: ignore[list-item]
    with pytest.raises(gl.errors.GuideloomError):  # an empty split ("0,1,0" leaves train empty)
        gl.Loader.megatron(GPT2, 4, 2, split="0,1,0")
    with pytest.raises(FileNotFoundError):
        gl.Loader.megatron(MEGATRON / "no_such_document", 4, 2)
    with pytest.raises(gl.errors.ConfigError):
        gl.Loader.megatron(GPT2, 4, 2, seed=2**32)


def llmc_cases() -> list[tuple[tuple[int, int, int, int, bool], list[tuple[int, int, list[int]]]]]:
    cases: list[tuple[tuple[int, int, int, int, bool], list[tuple[int, int, list[int]]]]] = []
    for line in (LLMC / "expected.txt").read_text().splitlines():
        words = line.split()
        if words[0] == "case":
            b, t, r, p, s = (int(w) for w in words[1:])
            cases.append(((b, t, r, p, bool(s)), []))
        else:
            nums = [int(w) for w in words]
            cases[-1][1].append((nums[0], nums[1], nums[2:]))
    return cases


def test_llmc_batches_are_llmc_dataloaders() -> None:
    cases = llmc_cases()
    assert len(cases) == 6
    shards = str(LLMC / "order_*.bin")
    lengths = [41, 29, 53, 36]
    for (b, t, rank, p, shuffle), want in cases:
        per_epoch = sum((n - 1) // (b * t * p) for n in lengths)
        epochs = -(-len(want) // per_epoch)
        loader = gl.Loader.llmc(shards, b, t, rank=rank, processes=p, epochs=epochs, shuffle=shuffle, workers=2)
        got = [x for _, x in zip(range(len(want)), loader)]
        assert [x.data.tolist() for x in got] == [w[2] for w in want], (b, t, rank, p, shuffle)
        first = got[0]
        assert first.inputs.shape == (b, t) and first.targets.shape == (b, t)
        assert first.inputs.tolist() == np.array(want[0][2][:-1]).reshape(b, t).tolist()
        assert first.targets.tolist() == np.array(want[0][2][1:]).reshape(b, t).tolist()
        assert [x.epoch for x in got] == [i // per_epoch for i in range(len(want))]
        # llm.c's position after each batch (its checkpoint's current_shard_idx and
        # current_sample_idx) continues at the next batch.
        for i in (0, len(want) // 2, len(want) - 2):
            shard, sample, _ = want[i]
            position = (i // per_epoch if shuffle else 0, shard, sample)
            cont = gl.Loader.llmc(shards, b, t, rank=rank, processes=p, epochs=epochs, shuffle=shuffle, position=position)
            nxt = next(iter(cont)).data.tolist()
            assert nxt == want[i + 1][2], (b, t, rank, p, shuffle, i)


def test_llmc_state_resumes_onto_another_worker_count_and_matches_the_cli(tmp_path: Path) -> None:
    shards = str(LLMC / "order_*.bin")
    full = [x.data.tolist() for x in gl.Loader.llmc(shards, 2, 3, epochs=2, workers=2)]
    first = gl.Loader.llmc(shards, 2, 3, epochs=2)
    it = iter(first)
    taken = [next(it).data.tolist() for _ in range(5)]
    resumed = gl.Loader.llmc(shards, 2, 3, epochs=2, workers=1)
    resumed.load_state_dict(first.state_dict())
    assert taken + [x.data.tolist() for x in resumed] == full
    cli = cli_batches("--order", "llmc", shards, "--batch-size", "2", "--seq-len", "3", "--epochs", "2")
    assert [line["tokens"] for line in cli] == full
    state = tmp_path / "s.json"
    state.write_text(json.dumps(first.state_dict()))
    rest = cli_batches("--order", "llmc", shards, "--batch-size", "2", "--seq-len", "3", "--epochs", "2",
                       "--resume", str(state))
    assert [line["tokens"] for line in rest] == full[5:]


def test_llmc_refusals_are_typed() -> None:
    shards = str(LLMC / "order_*.bin")
    with pytest.raises(gl.errors.ConfigError):
        gl.Loader.llmc(shards, 0, 3)
    with pytest.raises(gl.errors.ConfigError):
        gl.Loader.llmc(shards, 1, 2, processes=0)
    with pytest.raises(gl.errors.ConfigError):  # a sequential run's position has no epoch
        gl.Loader.llmc(shards, 1, 2, position=(1, 0, 0))
    with pytest.raises(gl.errors.ConfigError):  # a sample position llm.c never reaches
        gl.Loader.llmc(shards, 1, 2, position=(0, 0, 10**6))
    with pytest.raises(gl.errors.ConfigError):
        gl.Loader.llmc(shards, 1, 2, position=(0, 0))  # type: ignore[arg-type]
    with pytest.raises(FileNotFoundError):
        gl.Loader.llmc(LLMC / "no_such_*.bin", 1, 2)

"""Data-parallel training with torchrun and guideloom, resumable on another world size.

One guideloom loader per rank (rank and world size from ``torch.distributed``), a global batch of
``--global-batch`` windows split over the ranks, a small next-token model wrapped in
``DistributedDataParallel`` (gloo, CPU). Every ``--ckpt-every`` steps rank 0 saves the model, the
optimizer and the loader state in one ``torch.save`` file (written to a temporary name and renamed,
so a kill never leaves half a checkpoint); every rank's loader state is the same (it holds the
global step, no rank or worker count). A restart, with the same or another ``--nproc_per_node``,
loads it and continues at the next global step: each window of the epoch is trained on exactly
once across restarts, and on an unchanged world size the losses equal the uninterrupted run's bit
for bit.

    torchrun --nproc_per_node=2 python/examples/torchrun_ddp.py --data DATA --ckpt ckpt.pt --log-dir logs
    # killed mid-epoch, then resumed on 4 processes:
    torchrun --nproc_per_node=4 python/examples/torchrun_ddp.py --data DATA --ckpt ckpt.pt --log-dir logs

``--data`` is a guideloom token storage, a foreign layout or an ``s3://`` URL (anything
``guideloom.TokenWindows`` opens). Each rank appends one line per step to ``LOG_DIR/rank-R.jsonl``:
the step, the global mean loss (as a hex float), and the record ids it trained on. ``--kill-at
STEP`` makes every rank SIGKILL itself after that step (a test's mid-epoch failure).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import guideloom as gl


class TinyLM(nn.Module):
    """Embedding -> linear next-token logits."""

    def __init__(self, vocab: int, dim: int = 16) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.out = nn.Linear(dim, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.embed(x))  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--log-dir", required=True)
    ap.add_argument("--seq-len", type=int, default=17)
    ap.add_argument("--global-batch", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--ckpt-every", type=int, default=3)
    ap.add_argument("--kill-at", type=int, default=None)
    a = ap.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(a.seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    model = TinyLM(a.vocab)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    windows = gl.TokenWindows(a.data, seq_len=a.seq_len)
    # global_batch: the step is the same for any world size, so a state resumes elastically.
    loader = gl.Loader(windows, global_batch=a.global_batch, shuffle=True, seed=a.seed, epochs=1,
                       rank=rank, world_size=world, workers=1, drop_remainder=True)
    step = 0
    ckpt = Path(a.ckpt)
    if ckpt.exists():
        saved = torch.load(ckpt, weights_only=False)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optim"])
        loader.load_state_dict(saved["loader"])
        step = saved["step"]
    ddp = DistributedDataParallel(model)
    log_dir = Path(a.log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    log = open(log_dir / f"rank-{rank}.jsonl", "a")
    log.write(json.dumps({"start": step, "world_size": world}) + "\n")
    log.flush()
    loss_fn = nn.CrossEntropyLoss()
    for batch in loader:
        x = torch.from_numpy(batch.inputs.astype("int64"))
        y = torch.from_numpy(batch.targets.astype("int64"))
        opt.zero_grad()
        loss = loss_fn(ddp(x).reshape(-1, a.vocab), y.reshape(-1))
        loss.backward()
        opt.step()
        step += 1
        mean = loss.detach().to(torch.float64) / world
        dist.all_reduce(mean)
        log.write(json.dumps({"step": step, "loss": float(mean).hex(), "ids": batch.indices.tolist()}) + "\n")
        log.flush()
        if step % a.ckpt_every == 0:
            state = loader.state_dict()
            if rank == 0:
                tmp = ckpt.with_suffix(".tmp")
                torch.save({"step": step, "model": model.state_dict(), "optim": opt.state_dict(), "loader": state}, tmp)
                os.replace(tmp, ckpt)
            dist.barrier()
        if a.kill_at is not None and step == a.kill_at:
            log.close()
            os.kill(os.getpid(), signal.SIGKILL)
    log.write(json.dumps({"end": step}) + "\n")
    log.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

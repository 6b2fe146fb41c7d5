"""guideloom as a Ray Data sink: a ``ray.data.Dataset`` of token documents written as one guideloom
storage, one part a write task and one atomic commit on the driver.

    from guideloom.ray import GuideloomDatasink
    ds.write_datasink(GuideloomDatasink("/data/tokens", column="input_ids", dtype="u16", mode="append"))

Ray's two-phase ``Datasink`` contract: :meth:`GuideloomDatasink.on_write_start` runs on the driver
before the write tasks; :meth:`GuideloomDatasink.write` runs in each write task and writes that
task's blocks as the part of partition ``ctx.task_idx`` (:class:`guideloom.parts.PartWriter`,
the token column of each block turned into ``(values, offsets)`` by
:func:`guideloom.ingest.arrow_documents`, no per-row Python); its receipt (JSON) is the task's
return value. :meth:`GuideloomDatasink.on_write_complete` gets every task's return on the driver
and calls :func:`guideloom.parts.commit_parts` (partition order);
:meth:`GuideloomDatasink.on_write_failed` removes the job's parts.

Ray gives a write task no attempt number: a retried task (``ray_remote_args={"max_retries": N,
"retry_exceptions": True}``) writes under the next attempt number no part directory of that
partition has yet, so the failed attempt's part stays (uncommitted) for
``guideloom.parts.gc`` to list. Ray numbers the write tasks in the order their input blocks
arrive; with ``DataContext.get_current().execution_options.preserve_order = True`` (or a read fused
with the write, one task a block) that is the dataset's block order, so the committed storage
follows it. One sink writes one dataset: a second ``write_datasink`` with the same sink is refused.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from ray.data import Datasink

from . import parts
from .errors import ConfigError
from .ingest import _dtype_name, arrow_documents, check_mode, new_job_id, numpy_dtype, write_part

__all__ = ["GuideloomDatasink"]


def _arrow_table(block: Any) -> Any:
    """A block (``pyarrow.Table`` or ``pandas.DataFrame``) as a ``pyarrow.Table``."""
    from ray.data.block import BlockAccessor

    return BlockAccessor.for_block(block).to_arrow()


class GuideloomDatasink(Datasink[str]):
    """Writes a dataset's ``column`` (``list<integer>`` token ids; default ``input_ids``) into the
    storage at ``path`` (a local directory or an object-store URL) as ``dtype`` (``"u16"`` or
    ``"u32"``), committing with ``mode`` (``"error"``: the storage must not exist;
    ``"append"``; ``"overwrite"``).

    Raises:
        ConfigError: an unknown ``dtype`` or ``mode``.
    """

    def __init__(self, path: str | os.PathLike[str], *, column: str = "input_ids", dtype: str = "u16",
                 mode: str = "append") -> None:
        self.path = os.fspath(path)
        self.column = column
        self.dtype = _dtype_name(dtype)
        self.mode = check_mode(mode)
        self.job = new_job_id()
        self._started = False

    def get_name(self) -> str:
        """The sink's name in Ray's progress output."""
        return "Guideloom"

    @property
    def supports_distributed_writes(self) -> bool:
        """Write tasks may run on any node (every node must reach ``path``: a shared file system or
        an object store)."""
        return True

    def on_write_start(self, schema: Any = None) -> None:
        """Checks the sink has not written yet (``schema``, Ray's schema of the write's first input
        bundle, is not checked: with the write fused into the map tasks before it, it is the
        schema of the map's input, not of the blocks :meth:`write` receives).

        Raises:
            ConfigError: the sink was used for a write already.
        """
        if self._started:
            raise ConfigError("a GuideloomDatasink writes one dataset; make a new one for each write", field="job")
        self._started = True

    def _attempt(self, partition: int) -> int:
        """The first attempt number with no part directory of ``partition`` (0 on object stores,
        where a retried task's earlier part is overwritten by the next)."""
        if "://" in self.path:
            return 0
        base = os.path.join(self.path, "_parts", self.job)
        try:
            names = os.listdir(base)
        except FileNotFoundError:
            return 0
        taken = []
        for name in names:
            p, _, a = name.partition("-")
            if p.isdigit() and a.isdigit() and int(p) == partition:
                taken.append(int(a))
        return max(taken) + 1 if taken else 0

    def write(self, blocks: Iterable[Any], ctx: Any) -> str:
        """Writes this task's blocks as the part of partition ``ctx.task_idx``; returns its receipt
        (JSON).

        Raises:
            ConfigError: a block without the column.
            guideloom.errors.FormatError: the column is not ``list<integer>``, holds nulls or a
                token outside the dtype.
            guideloom.errors.GuideloomError: the part writer's errors.
        """
        partition = int(ctx.task_idx)
        dt = numpy_dtype(self.dtype)

        def batches() -> Iterable[Any]:
            for block in blocks:
                table = _arrow_table(block)
                if self.column not in table.column_names:
                    raise ConfigError(f"no column {self.column!r} in the dataset (columns: "
                                      f"{', '.join(table.column_names)})", field="column", expected=self.column,
                                      found=",".join(table.column_names))
                for chunk in table.column(self.column).chunks:
                    yield arrow_documents(chunk, dt, name=self.column)

        receipt = write_part(self.path, self.job, partition, self._attempt(partition), batches(), self.dtype)
        return receipt.to_json()

    def on_write_complete(self, write_result: Any) -> None:
        """Commits every task's part in one manifest write (partition order). ``write_result`` is
        Ray's ``WriteResult`` (its ``write_returns``) or, on older Ray, the list of returns.

        Raises:
            guideloom.errors.GuideloomError: ``commit_parts``' errors.
        """
        returns = getattr(write_result, "write_returns", write_result)
        receipts = [parts.Receipt.from_json(r) for r in returns if r is not None]
        parts.commit_parts(self.path, receipts, mode=self.mode)

    def on_write_failed(self, error: Exception) -> None:
        """Removes every part of this job (the storage's last commit stays in force)."""
        parts.abort(self.path, self.job)

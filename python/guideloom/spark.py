"""guideloom as a Spark (>= 4.0) Python Data Source: a DataFrame of token documents written as one
guideloom storage, one part a Spark task and one atomic commit on the driver.

    from guideloom.spark import GuideloomDataSource
    spark.dataSource.register(GuideloomDataSource)
    (df.write.format("guideloom")
       .option("column", "input_ids")    # the list<integer> column of token ids (default input_ids)
       .option("dtype", "u16")           # the stored token type: u16 (default) or u32
       .mode("append")                   # or "overwrite"; option("if_exists", "error") for "error"
       .save("/data/tokens"))

Each task's :class:`GuideloomWriter.write` receives the task's rows as Arrow record batches,
turns the token column of each batch into ``(values, offsets)`` with no per-row Python
(:func:`guideloom.ingest.arrow_documents`) and appends them to a part
(:class:`guideloom.parts.PartWriter`, the GIL released in Rust) under
``<path>/_parts/<job>/<partition>-<attempt>/``, where ``partition`` is Spark's partition id and
``attempt`` the task's attempt number. The part's receipt is the task's commit message. When
every task has succeeded, Spark calls :meth:`GuideloomWriter.commit` on the driver, which calls
:func:`guideloom.parts.commit_parts` with the receipts: the parts' shards are appended in
partition order, so the committed storage depends on the DataFrame's partitioning and its order
within partitions, never on which executor ran a task, on retries or on speculative duplicates
(``commit_parts`` keeps the lowest attempt of a partition). When a task fails for good, Spark calls
:meth:`GuideloomWriter.abort`, which removes the job's parts; the storage's last commit stays in
force. Parts of failed attempts of a job that did commit stay on disk until
``guideloom.parts.gc(root, apply=True)`` (``guideloom gc ROOT --apply``) deletes them.

Spark's save modes: ``append`` and ``overwrite`` map to ``commit_parts``' modes of the same name.
Spark refuses its default ``errorifexists`` mode for Python data sources before the writer is
made, so the ``"error"`` mode of ``commit_parts`` (the storage must not exist yet) is asked for
with ``.option("if_exists", "error")`` under ``mode("append")``.

A job id (``uuid4`` hex) is drawn on the driver for each write, so two writes never share parts.
Spark users who want bit-identical storages from one input fix the partitioning and sort within
partitions (``repartitionByRange(...).sortWithinPartitions(...)``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

from . import parts
from .errors import ConfigError
from .ingest import _dtype_name, arrow_documents, check_mode, new_job_id, numpy_dtype, write_part

__all__ = ["GuideloomCommitMessage", "GuideloomDataSource", "GuideloomWriter", "register"]


@dataclass
class GuideloomCommitMessage(WriterCommitMessage):
    """One task's commit message: its part's receipt as JSON (``Receipt.to_json``)."""

    receipt: str


class GuideloomDataSource(DataSource):
    """The ``"guideloom"`` data source (write only). Options: ``path`` (``save(path)``: a local
    directory or an object-store URL), ``column`` (default ``input_ids``), ``dtype`` (``u16``
    default, or ``u32``), ``if_exists`` (``error`` to refuse an existing storage under
    ``mode("append")``)."""

    @classmethod
    def name(cls) -> str:
        """The format name: ``"guideloom"``."""
        return "guideloom"

    def writer(self, schema: Any, overwrite: bool) -> GuideloomWriter:
        """The job's writer (made on the driver; Spark pickles it to the tasks).

        Raises:
            ConfigError: no ``path``, an unknown ``dtype`` or ``if_exists``, or no ``column`` of
                that name in ``schema``.
        """
        return GuideloomWriter(dict(self.options), schema, overwrite)


class GuideloomWriter(DataSourceArrowWriter):
    """The writer of one ``df.write.format("guideloom")`` job: ``write`` on the executors,
    ``commit``/``abort`` on the driver."""

    def __init__(self, options: dict[str, str], schema: Any, overwrite: bool) -> None:
        root = options.get("path")
        if not root:
            raise ConfigError("the guideloom data source needs a path: .save(path)", field="path")
        self.root: str = root
        self.column: str = options.get("column", "input_ids")
        self.dtype: str = _dtype_name(options.get("dtype", "u16"))
        if_exists = options.get("if_exists", "append")
        if overwrite:
            self.mode = "overwrite"
        elif if_exists in ("error", "errorifexists"):
            self.mode = "error"
        else:
            self.mode = check_mode(if_exists)
        names = list(getattr(schema, "names", None) or [])
        if names and self.column not in names:
            raise ConfigError(f"no column {self.column!r} in the DataFrame (columns: {', '.join(names)})",
                              field="column", expected=self.column, found=",".join(names))
        self.job: str = new_job_id()

    def write(self, iterator: Iterator[Any]) -> GuideloomCommitMessage:
        """Writes this task's batches (an iterator of ``pyarrow.RecordBatch``) as the part of its
        partition and attempt and returns its receipt.

        Raises:
            guideloom.errors.FormatError: the column is not ``list<integer>``, holds nulls or a
                token outside the dtype.
            guideloom.errors.GuideloomError: the part writer's errors.
        """
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        attempt = ctx.attemptNumber() if ctx is not None else 0
        dt = numpy_dtype(self.dtype)
        batches = (arrow_documents(b.column(self.column), dt, name=self.column) for b in iterator)
        receipt = write_part(self.root, self.job, partition, attempt, batches, self.dtype)
        return GuideloomCommitMessage(receipt.to_json())

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Commits every task's part in one manifest write (partition order).

        Raises:
            guideloom.errors.GuideloomError: ``commit_parts``' errors (parts that disagree, a
                missing or short part file, an existing storage in ``error`` mode, a lost race
                with another committer).
        """
        receipts = [parts.Receipt.from_json(m.receipt) for m in messages if isinstance(m, GuideloomCommitMessage)]
        parts.commit_parts(self.root, receipts, mode=self.mode)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Removes every part of this job (the storage's last commit stays in force).

        Raises:
            guideloom.errors.GuideloomError: the parts could not be removed.
        """
        parts.abort(self.root, self.job)


def register(spark: Any) -> None:
    """Registers :class:`GuideloomDataSource` with ``spark`` (a ``SparkSession``):
    ``spark.dataSource.register(GuideloomDataSource)``."""
    spark.dataSource.register(GuideloomDataSource)

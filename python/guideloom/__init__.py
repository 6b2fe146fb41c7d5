"""guideloom: deterministic, prefetched, checkpointable batches from sharded storage, with a Rust
core.

- Storages: :class:`StreamStorage`, :class:`DocumentStorage`, :class:`StreamWithMetaStorage`,
  configured with a format (:mod:`guideloom.storage_format`, :mod:`guideloom.types`).
- Data sources (Grain's random-access protocol): :class:`TokenWindows`, :class:`RangeDataSource`,
  :class:`TokenDocuments`; mixing and packing: :class:`Mixture`, :class:`Packed`.
- :class:`Loader`: batches as numpy arrays owned by Rust, with a state shared with the CLI.
- :mod:`guideloom.oamap`: the object-array mapping (nested records as named numpy arrays, read
  lazily through proxies; Awkward Array and Numba).
- :mod:`guideloom.parts`: many writers, one storage (parts written in parallel, one atomic
  commit).
- Exceptions: :mod:`guideloom.errors`, rooted at :class:`GuideloomError`.
"""

import os as _os

from . import _guideloom, errors, oamap, parts, storage_format, types
from ._guideloom import STATE_VERSION, __version__
from .errors import GuideloomError
from .loader import Batch, Loader
from .mixing import Mixture, Packed, TokenDocuments
from .sources import RangeDataSource, TokenWindows
from .storage import DocumentStorage, StreamStorage, StreamWithMetaStorage
from .storage_format import DocumentPickleFormat, StreamNumpyFormat

# A forked child must not use the io_uring ring it inherited: its readers read with pread.
_os.register_at_fork(after_in_child=_guideloom._after_fork_in_child)

__all__ = [
    "STATE_VERSION",
    "Batch",
    "DocumentPickleFormat",
    "DocumentStorage",
    "GuideloomError",
    "Loader",
    "Mixture",
    "Packed",
    "RangeDataSource",
    "StreamNumpyFormat",
    "StreamStorage",
    "StreamWithMetaStorage",
    "TokenDocuments",
    "TokenWindows",
    "__version__",
    "errors",
    "oamap",
    "parts",
    "storage_format",
    "types",
]

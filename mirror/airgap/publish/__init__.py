"""The air-gapped side's publication of a version: the object the import uploads for it.

`mirror.transferset.delta.publication` decides how an item is published and what digest it
must have; this package does the air-gapped I/O of each way (`_ways`): the base fetched
from the bucket, the work directory (`_workdir`), the producing thread (`_pipe`).
docs/delta.md tells the whole story. `check_deltas` refuses, before any upload, a set whose
deltas cannot be published here; `open_published` gives the stream the upload reads.
"""

from mirror.airgap.publish._base import (
    Bases,
    Store,
    base_manifest,
    carry_whole,
    manifest_fields,
    read_back,
)
from mirror.airgap.publish._stream import Published
from mirror.airgap.publish._ways import check_deltas, expected, import_bytes, open_published
from mirror.airgap.publish._whole import TreeChecked
from mirror.airgap.publish._workdir import check_writable

__all__ = [
    "Bases",
    "Published",
    "Store",
    "TreeChecked",
    "base_manifest",
    "carry_whole",
    "check_deltas",
    "check_writable",
    "expected",
    "import_bytes",
    "manifest_fields",
    "open_published",
    "read_back",
]

"""The one seam between `mirror serve` and the object store: what it reads, and nothing else.

`ServeBucket` is the S3 object store (mirror.airgap.s3.objectstore.ObjectStore, opened with the
cluster's read-only identity) as the service sees it, and the in-memory bucket of the tests
(tests/fixtures/memory.py), held to the same behaviour by tests/airgap/test_contracts.py:
documents through mirror.airgap.layout, an object's facts and its bytes as a stream, and the
keys under the prefix (to find the domains). It never writes: the service's identity may not.
"""

from __future__ import annotations

from typing import Protocol

from mirror.airgap.chart.gc import Listing
from mirror.airgap.provenance import StatementStore


class ServeBucket(StatementStore, Listing, Protocol):
    """Layout documents, `head`, `open_stream` and `list_keys` of one bucket under one prefix."""

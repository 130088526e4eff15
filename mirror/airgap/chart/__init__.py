"""The chart on the air-gapped side: versions in the bucket, promotion, values, check, refresh, gc.

What it holds: the bucket is the air-gapped side's source of truth (its layout is
mirror.airgap.layout). `bucket` reads the complete versions (`BundleVersion`, holding
the version's `VersionRef`), `promotion` moves `current.json`, `values` renders and reads
Helm values, `check` fetches a values file's link as the chart would, `refresh` renders
again what expires, `gc` removes old versions through a journal.

What it may import: the foundations and mirror.airgap's `layout` and `conditional`, and
it meets the bucket only through its Protocols (`BucketStore`, `GcStore`, `layout.Bucket`),
never through the S3 object store itself; the CLI hands it an ObjectStore, tests an
in-memory bucket (tests/fixtures/memory.py).
"""

from mirror.airgap.chart.bucket import (
    BucketStore,
    BundleVersion,
    complete_version,
    current_version,
    describe_versions,
    listed_versions,
)
from mirror.airgap.chart.check import DEFAULT_WARN, CheckReport, check_values_file
from mirror.airgap.chart.promotion import (
    HISTORY_LIMIT,
    HistoryEntry,
    history_view,
    promote,
    read_history,
    rollback,
    rollback_target,
    with_promotion,
)
from mirror.airgap.chart.refresh import (
    RefreshFailed,
    RefreshResult,
    refresh_reason,
    refresh_values,
    run_hook,
    values_paths,
)
from mirror.airgap.chart.values import (
    ChartValues,
    LinkTarget,
    ValuesFile,
    isoformat,
    link_target,
    plain_url,
    read_values_file,
    render_values,
    write_values,
)
from mirror.links import link_expiry

__all__ = [
    "DEFAULT_WARN",
    "HISTORY_LIMIT",
    "BucketStore",
    "BundleVersion",
    "ChartValues",
    "CheckReport",
    "HistoryEntry",
    "LinkTarget",
    "RefreshFailed",
    "RefreshResult",
    "ValuesFile",
    "check_values_file",
    "complete_version",
    "current_version",
    "describe_versions",
    "history_view",
    "isoformat",
    "link_expiry",
    "link_target",
    "listed_versions",
    "plain_url",
    "promote",
    "read_history",
    "read_values_file",
    "refresh_reason",
    "refresh_values",
    "render_values",
    "rollback",
    "rollback_target",
    "run_hook",
    "values_paths",
    "with_promotion",
    "write_values",
]

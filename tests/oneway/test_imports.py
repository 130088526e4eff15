"""`mirror.oneway.imports.ImportQueue` on its own, with a clock the test controls: the import
it is given stands in for the bucket (the real one, against the real S3 server, is
tests/faults/test_oneway_service.py). What the README promises of `--import` as a service:
retried 5 s later, doubling to 5 min; a set left pending is tried at the next start; a
refused set is moved aside with its reason and leaves nothing pending."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from mirror.errors import AuthError, ConfigError, IntegrityError, MirrorError, TemporaryFailure
from mirror.logs import JsonFormatter
from mirror.oneway.imports import RETRY_FIRST, RETRY_MAX, ImportQueue
from mirror.oneway.metrics import ReceiverMetrics


class Store:
    """An import that fails as told (`away`: the store unreachable) and records each try."""

    def __init__(self) -> None:
        self.away = True
        self.tries: list[str] = []
        self.imported: list[str] = []

    def __call__(self, set_dir: Path) -> None:
        self.tries.append(set_dir.name)
        if self.away:
            raise TemporaryFailure("the object store did not answer")
        self.imported.append(set_dir.name)


def landed(spool: Path, name: str) -> Path:
    (spool / name).mkdir(parents=True)
    (spool / name / "manifest.json").write_text("{}")
    return spool / name


def test_a_deferred_set_is_tried_again_later_and_after_a_restart(tmp_path: Path) -> None:
    spool, store, now = tmp_path / "spool", Store(), [0.0]
    queue = ImportQueue(spool, store, ReceiverMetrics(), clock=lambda: now[0])
    queue.landed(landed(spool, "set-1"))
    waits = []
    for _ in range(10):
        before = len(store.tries)
        queue.retry()  # not yet due: nothing tried
        assert len(store.tries) == before
        waits.append(queue.due - now[0])
        now[0] = queue.due
        queue.retry()
        assert len(store.tries) == before + 1
    assert waits[:3] == [RETRY_FIRST, 2 * RETRY_FIRST, 4 * RETRY_FIRST]
    assert max(waits) == RETRY_MAX
    assert queue.pending() == [spool / "set-1"]
    # a service started again tries what was pending at once, and it is imported
    store.away = False
    again = ImportQueue(spool, store, ReceiverMetrics(), clock=lambda: now[0])
    again.retry()
    assert store.imported == ["set-1"] and again.pending() == []


def test_a_refused_set_is_moved_aside_with_its_reason(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spool = tmp_path / "spool"

    def refuse(set_dir: Path) -> None:
        raise IntegrityError(f"set {set_dir.name} was already imported (replay); refused")

    metrics = ReceiverMetrics()
    queue = ImportQueue(spool, refuse, metrics)
    with caplog.at_level(logging.WARNING, "mirror.oneway.imports"):
        for _ in range(2):  # the same name twice: the second is kept beside the first
            queue.landed(landed(spool, "set-1"))
    # the README's query for MirrorOnewaySetIncomplete finds each refusal (trial R3, G3)
    found = [
        line
        for line in (json.loads(JsonFormatter().format(r)) for r in caplog.records)
        if line.get("outcome") in ("incomplete", "refused")
    ]
    assert [(line["set"], line["outcome"]) for line in found] == [("set-1", "refused")] * 2
    assert sorted(p.name for p in (spool / "refused").iterdir()) == [
        "set-1", "set-1.2", "set-1.2.reason", "set-1.reason"
    ]  # fmt: skip
    reason = (spool / "refused" / "set-1.reason").read_text()
    assert " exit 5: set set-1 was already imported" in reason
    assert queue.pending() == [] and not (spool / "set-1").exists()
    refused = metrics.registry.get_sample_value(
        "mirror_oneway_imports_total", {"outcome": "refused"}
    )
    assert refused == 2


@pytest.mark.parametrize(
    "failure",
    [
        AuthError("S3 refused the credentials for bucket b"),
        ConfigError("target.bucket is not set"),
        MirrorError("something this side did wrong"),
    ],
    ids=["credentials (exit 4)", "settings (exit 2)", "anything else (exit 1)"],
)
def test_a_failure_of_this_side_keeps_the_set_pending_until_it_is_fixed(
    failure: MirrorError, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """W3: only what `transfer import` exits 5 for is put aside; credentials or settings
    that are wrong are this side's to fix: the set waits, tried on the schedule (one line a
    try, never more often), and is imported once they are fixed."""
    spool, now, fixed = tmp_path / "spool", [0.0], [False]
    imported: list[str] = []

    def store(set_dir: Path) -> None:
        if not fixed[0]:
            raise failure
        imported.append(set_dir.name)

    metrics = ReceiverMetrics()
    queue = ImportQueue(spool, store, metrics, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, "mirror.oneway.imports"):
        queue.landed(landed(spool, "set-1"))
        for _ in range(50):  # a service's loop, once a second, for 50 s
            now[0] += 1.0
            queue.retry()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 4, lines  # at 0, 5, 15 and 35 s
    assert f"(exit {failure.exit_code})" in lines[0] and str(failure) in lines[0]
    assert not (spool / "refused").exists() and queue.pending() == [spool / "set-1"]
    fixed[0] = True
    now[0] = queue.due
    queue.retry()
    assert imported == ["set-1"] and queue.pending() == []
    sample = metrics.registry.get_sample_value
    assert sample("mirror_oneway_imports_total", {"outcome": "refused"}) == 0

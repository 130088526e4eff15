"""The completeness scan's page parser in a child process (issue 39): the same report as the
scan in one process, answers in order, memory bounded, and a child that dies ends the scan
with one line and exit 75, never a hang, the downloaded file left whole."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from mirror.archive import ArchiveFeed, inspect_archive, scanworker
from mirror.archive.completeness import CompletenessReport, SiteScanner, page_links
from mirror.archive.scanworker import PageParser
from mirror.errors import EXIT_TEMPORARY, TemporaryFailure
from mirror.sim.site import SiteSpec, build_bundle

PAGE = b'<base href="/docs/"><a href="a.html">a</a><img srcset="x.png 1x, y.png 2x">'


def scanned(path: Path, make: type[SiteScanner] | None = None, **kwargs: int) -> SiteScanner:
    report = inspect_archive(path, observe=lambda: (make or SiteScanner)(**kwargs))
    assert isinstance(report.observed, SiteScanner)
    return report.observed


def realistic(tmp_path: Path) -> Path:
    spec = SiteSpec(domain="docs.example.com", site_size=1_500_000, damage="broken_links")
    return build_bundle(spec, tmp_path / "site.tar.gz").path


def test_pages_parsed_in_a_child_make_the_report_the_scan_in_one_process_makes(
    tmp_path: Path,
) -> None:
    bundle = realistic(tmp_path)
    here = scanned(bundle)
    there = scanned(bundle, worker_after=3)
    assert there.sent_to_worker > 20  # most of the site went to the child
    ours: CompletenessReport = here.report()
    theirs = there.report()
    assert theirs == ours and theirs.digest == ours.digest
    assert ours.broken_link_count == 1 and ours.missing_asset_count == 1
    assert there.worker_pid is not None and _gone(there.worker_pid)


def test_a_small_site_never_starts_a_child(tmp_path: Path) -> None:
    spec = SiteSpec(domain="docs.example.com", pages=20)
    scanner = scanned(build_bundle(spec, tmp_path / "b.tar.gz").path, worker_after=256)
    assert scanner.report().pages == 20
    assert scanner.sent_to_worker == 0 and scanner.worker_pid is None


def test_answers_come_in_the_order_sent_and_wait_past_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(scanworker, "IN_FLIGHT_BYTES", 3 * len(PAGE))
    pages = [PAGE.replace(b"a.html", f"p{n}.html".encode()) for n in range(12)]
    parser = PageParser()
    try:
        answers = []
        for page in pages:
            answers += parser.submit(page, "html")
            assert parser.in_flight <= 3 * len(PAGE)
        answers += [parser.next() for _ in range(parser.pending())]
    finally:
        parser.close()
    assert answers == [page_links(page) for page in pages]
    assert _gone(parser.process.pid)


def test_a_killed_child_is_one_line_and_exit_75_and_never_a_hang() -> None:
    parser = PageParser()
    try:
        parser.submit(PAGE, "html")
        os.kill(parser.process.pid, signal.SIGKILL)
        parser.process.wait()
        with pytest.raises(TemporaryFailure) as failed:
            parser.next()  # the page's answer, if it came before the kill; then the end
            parser.submit(PAGE, "html")
        with pytest.raises(TemporaryFailure):
            parser.next()  # asked again: the same end, not a wait for an answer never sent
    finally:
        parser.close()
    assert failed.value.exit_code == EXIT_TEMPORARY == 75
    message = failed.value.message
    assert "\n" not in message and "was killed by signal 9" in message
    assert "run the export again" in message


class _KilledChild(SiteScanner):
    """A scanner whose child is killed as soon as it has one page."""

    def take(self, source: str, text: bytes, kind: str) -> None:
        super().take(source, text, kind)
        if self.worker_pid is not None and self.sent_to_worker == 1:
            os.kill(self.worker_pid, signal.SIGKILL)


def test_a_child_killed_during_a_streamed_inspection_fails_it_and_keeps_the_file(
    tmp_path: Path,
) -> None:
    bundle = realistic(tmp_path)
    data = bundle.read_bytes()
    feed = ArchiveFeed(bundle, len(data), observe=lambda: _KilledChild(worker_after=2))
    try:
        for at in range(0, len(data), 65536):
            feed.feed(data[at : at + 65536])
        with pytest.raises(TemporaryFailure, match="was killed by signal 9"):
            result = feed.result(len(data))
            assert isinstance(result.observed, SiteScanner)
            result.observed.report()
    finally:
        feed.close()
    assert bundle.read_bytes() == data  # nothing lost: the next run inspects it again


def _gone(pid: int) -> bool:
    """Whether `pid` is no process of ours any more (ended and reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False

"""The live display of one export run for a person at a terminal, on stderr.

`ExportProgress` follows one export run, fed by RunEvent: first the vendor job (state,
percent, pages rendered), then the download (bytes, speed, time left). The CLI creates it
only for an interactive terminal; the byte counters of transfers are `mirror.cli.progress`.
"""

from __future__ import annotations

from rich.console import Console
from rich.progress import DownloadColumn, ProgressColumn, Task, TaskID, TimeRemainingColumn
from rich.text import Text

from mirror.cli.progress import speed_text, terminal_progress
from mirror.export.outcome import RunEvent
from mirror.store.models import RunState

_STATE_TEXT = {
    RunState.PENDING: "starting the vendor export",
    RunState.STARTED: "vendor export running",
    RunState.COMPLETED: "vendor export done, asking for the bundle",
    RunState.DOWNLOADING: "downloading the bundle",
    RunState.DOWNLOADED: "checking the archive",
    RunState.STORED: "stored",
    RunState.UNCHANGED: "unchanged",
    RunState.FAILED: "failed",
}


class _DetailColumn(ProgressColumn):
    """Pages for the job line; bytes, speed and time left for the download line."""

    def __init__(self) -> None:
        super().__init__()
        self.download = DownloadColumn(binary_units=True)
        self.remaining = TimeRemainingColumn()

    def render(self, task: Task) -> Text:
        if task.fields.get("kind") == "download":
            parts = [self.download.render(task), speed_text(task)]
            if task.total:
                parts.append(self.remaining.render(task))
            return Text(" ").join(parts)
        percent = f"{task.percentage:>3.0f}%" if task.total else ""
        pages = task.fields.get("pages")
        return Text(f"{percent}  {pages} pages" if pages is not None else percent)


class ExportProgress:
    """Context manager; pass `update` as run_export's on_event."""

    def __init__(self, domain: str, console: Console | None = None) -> None:
        self.domain = domain
        self.progress = terminal_progress(_DetailColumn(), console=console, transient=False)
        self.job_task: TaskID | None = None
        self.download_task: TaskID | None = None
        self.bytes_seen = False

    def __enter__(self) -> ExportProgress:
        self.progress.start()
        self.job_task = self.progress.add_task(
            f"{self.domain}: {_STATE_TEXT[RunState.PENDING]}", total=100, kind="job"
        )
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def update(self, event: RunEvent) -> None:
        """Show one event (state changes and progress readings alike)."""
        assert self.job_task is not None
        text = f"{self.domain}: {_STATE_TEXT.get(event.state, event.state)}"
        if event.job_id and event.state in (RunState.STARTED, RunState.PENDING):
            text += f" (job {event.job_id})"
        if event.state == RunState.DOWNLOADING:
            self.progress.update(self.job_task, completed=100, description=text)
            self.show_download(event)
            return
        if event.state in (RunState.STARTED, RunState.PENDING):
            self.progress.update(
                self.job_task,
                description=text,
                completed=event.progress if event.progress is not None else 0,
                pages=event.page_count,
            )
            return
        self.progress.update(self.job_task, description=text, completed=100)
        if self.download_task is not None and event.state in RunState.TERMINAL:
            task = self.progress.tasks[self.download_task]
            if task.total is not None:
                self.progress.update(self.download_task, completed=task.total)

    def show_download(self, event: RunEvent) -> None:
        if self.download_task is None:
            self.download_task = self.progress.add_task(
                f"{self.domain}: bundle", total=event.bytes_total, kind="download"
            )
        if event.bytes_done is None:
            return
        if not self.bytes_seen:
            # A resumed download starts part-way: no speed sample may span the jump.
            self.bytes_seen = True
            self.progress.reset(
                self.download_task, total=event.bytes_total, completed=event.bytes_done
            )
            return
        self.progress.update(
            self.download_task, total=event.bytes_total, completed=event.bytes_done
        )

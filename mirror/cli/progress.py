"""Byte counters for a person at a terminal, on stderr (stdout stays for scripts).

`ByteProgress` counts the bytes of a transfer (pack, verify, import, push) against
their total, in binary units (`41.9/120.0 MiB`), one line per phase. Callers create it
only for an interactive terminal. A foundation: it imports nothing of mirror but `units`,
so the air-gapped side may use it; the export run's display is `mirror.cli.exportprogress`.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from mirror.units import format_size


def speed_text(task: Task) -> Text:
    """A task's transfer speed in binary units (rich's own column speaks MB/s)."""
    speed = task.finished_speed or task.speed
    return Text(f"{format_size(int(speed))}/s" if speed else "?/s", style="progress.data.speed")


class _SpeedColumn(ProgressColumn):
    """Transfer speed in binary units."""

    def render(self, task: Task) -> Text:
        return speed_text(task)


def terminal_progress(
    *columns: ProgressColumn, console: Console | None = None, transient: bool = True
) -> Progress:
    """A live display on stderr (stdout stays for scripts): each line's description and bar,
    then `columns`. The one setup of both displays (bytes of a transfer, an export run)."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        *columns,
        console=console or Console(stderr=True),
        transient=transient,
    )


class ByteTask:
    """One phase's counter: call it with each chunk's size; `set_total` once the size is known."""

    def __init__(self, progress: Progress, task: TaskID) -> None:
        self.progress = progress
        self.task = task

    def __call__(self, size: int) -> None:
        self.progress.advance(self.task, size)

    def set_total(self, total: int) -> None:
        self.progress.update(self.task, total=total)


class ByteProgress:
    """Context manager: `phase(description, total)` adds one line of bytes done of total."""

    def __init__(self, console: Console | None = None, *, transient: bool = True) -> None:
        self.progress = terminal_progress(
            DownloadColumn(binary_units=True),
            _SpeedColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=transient,
        )

    def __enter__(self) -> ByteProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.progress.stop()

    def phase(self, description: str, total: int | None = None) -> ByteTask:
        return ByteTask(self.progress, self.progress.add_task(description, total=total))

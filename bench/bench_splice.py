"""The spliced archive (issue 21): what making a delta version's archive costs, in process,
on the simulator's realistic site (the tree archive it was first measured against is gone:
docs/delta.md).

`python -m bench splice` (MIRROR_BENCH_MIB unpacked, default 256; MIRROR_BENCH_ROUNDS).
Two exports with 1% of the pages changed are built by the simulator; then, in alternating
rounds, the new version's archive is made:

- spliced: `splice_tree` over the base bundle, the changed pages given from memory: what
  the import would pay; and the pass over the new bundle (inflate and walk, no hashing)
  that a pack would add to pick the changed pages.

Printed: wall and CPU seconds (children included) per round, medians, and the archives'
sizes against the vendor's bundle. No S3, no store: the archive alone.
"""

from __future__ import annotations

import hashlib
import resource
import statistics
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from bench.common import ROUNDS, SIZE_MIB, MiB
from mirror.archive import inspect_archive
from mirror.integrity import CHUNK_SIZE
from mirror.sim.site import SiteSpec, build_bundle
from mirror.transferset.delta._compression import current
from mirror.transferset.delta._inflate import GzipBlocks
from mirror.transferset.delta._splice import NewFile, splice_tree
from mirror.transferset.delta._tarunits import TarUnits

MTIME = 1_700_000_000
DOMAIN = "docs.bench.test"


def _chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK_SIZE):
            yield chunk


def _cpu() -> float:
    own, children = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class _Plan:
    def __init__(self, base: dict[str, str], new: dict[str, str], pages: dict[str, bytes]):
        self._base, self._new, self._pages = base, new, pages

    def member(self, path: str, size: int) -> NewFile | bool:
        sha = self._new.get(path)
        if sha is None:
            return False
        if sha in self._pages:
            return _file(path, self._pages[sha])
        return True

    def kept(self, path: str, sha256: str, size: int) -> None:
        if self._new[path] != sha256:  # what the import proves of each kept file
            raise AssertionError(f"{path}: kept content is not the new version's")

    def added(self) -> Iterable[NewFile]:
        for path in sorted(set(self._new) - set(self._base)):
            yield _file(path, self._pages[self._new[path]])


def _file(path: str, data: bytes) -> NewFile:
    return NewFile(path, len(data), lambda: (data,))


def _listing(path: Path) -> dict[str, str]:
    report = inspect_archive(path)
    assert report.digests is not None
    with report.digests as files:
        return {name: sha for name, _, sha in files}


def _spliced(base: Path, plan: _Plan) -> tuple[str, int]:
    hashed = hashlib.sha256()
    size = 0

    def write(data: bytes) -> None:
        nonlocal size
        hashed.update(data)
        size += len(data)

    splice_tree(_chunks(base), plan, write, mtime=MTIME, level=current().level, label="base")
    return hashed.hexdigest(), size


def _check(base: Path, new: Path, plan: _Plan, out: Path) -> None:
    """Once, untimed: the spliced archive holds the new version's tree."""
    with out.open("wb") as handle:
        splice_tree(_chunks(base), plan, handle.write, mtime=MTIME, level=6, label="base")
    got, want = inspect_archive(out).tree_sha256, inspect_archive(new).tree_sha256
    assert got == want, f"the spliced archive holds tree {got}, not {want}"
    out.unlink()
    print("  the spliced archive holds the new version's tree", flush=True)


def _walk(new: Path) -> tuple[str, int]:
    units = TarUnits()
    count = 0
    for block in GzipBlocks(_chunks(new), label="new"):
        count += len(units.feed(block.data))
    return "", count


def _timed(step: Callable[[], tuple[str, int]]) -> tuple[float, float, tuple[str, int]]:
    started, cpu = time.monotonic(), _cpu()
    result = step()
    return time.monotonic() - started, _cpu() - cpu, result


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="mirror-bench-splice-") as work:
        base, new = (
            build_bundle(
                SiteSpec(
                    domain=DOMAIN,
                    export_number=number,
                    site_size=SIZE_MIB * MiB,
                    change_share=0.01,
                    mtime=MTIME,
                ),
                Path(work) / name,
            )
            for number, name in ((0, "a"), (1, "b"))
        )
        base_files, new_files = _listing(base.path), _listing(new.path)
        changed = {sha for path, sha in new_files.items() if base_files.get(path) != sha}
        pages: dict[str, bytes] = {}
        with tarfile.open(new.path, "r|gz") as tar:
            for info in tar:
                if info.isfile() and new_files.get(info.name) in changed:
                    reader = tar.extractfile(info)
                    assert reader is not None
                    pages[new_files[info.name]] = reader.read()
        plan = _Plan(base_files, new_files, pages)
        _check(base.path, new.path, plan, Path(work) / "spliced.tar.gz")
        vendor = new.path.stat().st_size
        print(
            f"  {len(new_files)} files, {len(changed)} changed; vendor's bundle "
            f"{vendor / MiB:.1f} MiB",
            flush=True,
        )
        steps: dict[str, Callable[[], tuple[str, int]]] = {
            "spliced (import side)": lambda: _spliced(base.path, plan),
            "walk of the new bundle (pack side adds)": lambda: _walk(new.path),
        }
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in steps}
        sizes: dict[str, int] = {}
        for round_number in range(ROUNDS):
            order = list(steps) if round_number % 2 == 0 else list(reversed(steps))
            for name in order:
                wall, cpu, (_, size) = _timed(steps[name])
                times[name].append((wall, cpu))
                sizes[name] = size
                print(
                    f"  round {round_number + 1}: {name}: {wall:.2f} s, {cpu:.2f} CPU s", flush=True
                )
        print("\n| step | wall s (median) | CPU s (median) | archive MiB | x vendor's |")
        print("|---|---:|---:|---:|---:|")
        for name, runs in times.items():
            wall = statistics.median(w for w, _ in runs)
            cpu = statistics.median(c for _, c in runs)
            archive = (
                f"{sizes[name] / MiB:.1f} | {sizes[name] / vendor:.3f}x"
                if "walk" not in name
                else "- | -"
            )
            print(f"| {name} | {wall:.2f} | {cpu:.2f} | {archive} |")

"""The compression a spliced delta names: a pinned libdeflate, one owner of its spelling.

A spliced archive's changed regions are compressed by libdeflate (PyPI `deflate`, carried to
both sides by the offline installer from the same lock file; `_splice.compress_piece`), at
`LEVEL`. The pack writes what this installation has into the manifest (`current`,
`Compression`: library, its version, level, piece size); the splice needs only the level,
so any installation splices any set. Level 6: on the simulator's pages 1.06x the size of
the vendor's own `gzip -6` stream, at 2.5x its speed (level 5: 1.11x; level 9: 1.00x at a
third of the speed).

A gzip member's header with fixed fields (no name, mtime 0, XFL 0, OS 255): `MEMBER_HEADER`.
"""

from __future__ import annotations

from mirror.errors import ConfigError
from mirror.transferset.format import Compression

LIBRARY = "deflate"
CHUNK_SIZE = 1024 * 1024
LEVEL = 6
MEMBER_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"


def installed_version() -> str | None:
    """The version of the `deflate` package in this installation, or None without it."""
    try:
        import deflate
    except ImportError:
        return None
    return str(deflate.__version__)


def current() -> Compression:
    """What this installation writes into new delta sets."""
    version = installed_version()
    if version is None:
        raise ConfigError(
            f"the {LIBRARY} package is not installed",
            hint="reinstall mirror from its lock file (requirements.lock)",
        )
    return Compression(library="deflate", version=version, level=LEVEL, chunk_size=CHUNK_SIZE)

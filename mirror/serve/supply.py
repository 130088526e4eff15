"""Bundles into the cache, verified, one fill per bundle however many clients ask at once.

`Supply.ensure(listed)` returns once the version's bundle is in the cache and verified in
this run; it is the only way a bundle becomes servable. Promises:

- Single flight: while a bundle is being filled (or, after a restart, hashed again), every
  other request for it waits for that one fill and shares its outcome; none starts its own.
- Verified before use: the version's `manifest.json` must name the same bundle (sha256,
  size, object) as the index; when `target.transfer_keys` are set its signed provenance is
  verified against that bundle (mirror.airgap.provenance; required with
  `serve.require_provenance`); the object is streamed into a temporary file, hashed as it
  is written, and admitted only when its size and sha256 are the manifest's (a file the
  cache kept from a lost record, `recovered`, is hashed again instead of downloaded, and
  vouched for by that same verdict: mirror.serve.cache). Anything else
  is an IntegrityError naming the version (the caller answers 502): the temporary file is
  removed, nothing is cached, nothing is sent.
- A refused bundle is answered from that refusal for `hold` seconds (the poll interval, or
  until a SIGHUP: `recheck`); after that it is fetched again only once one of the objects
  its verdict read changed: the bundle, the manifest or the provenance (their ETags, or
  that one came or went: three HEADs). Neither a pod restarting in a loop nor the poller
  downloads a bad object again and again, and a provenance put back is used.
- A bucket that cannot be read is a TemporaryFailure (503); every call to it is bounded by
  the S3 client's deadline (mirror.airgap.s3.client), and a bundle's bytes too: a fill
  whose next piece has not come within `stall` seconds (target.deadline) is given up
  (mirror.airgap.s3.paced, which an S3 bucket's streams already go through), so a store
  that trickles a byte under every read timeout holds no pod for ever.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mirror.airgap import layout
from mirror.airgap.provenance import check_in_bucket, read_statement
from mirror.airgap.s3.paced import close_stream, paced
from mirror.archive import inspect_archive
from mirror.errors import IntegrityError, MirrorError, NotFound, TemporaryFailure
from mirror.integrity import HashingWriter
from mirror.serve.bucket import ServeBucket
from mirror.serve.cache import Cache, Entry
from mirror.serve.health import StoreHealth
from mirror.serve.pointers import Listed
from mirror.transferset.keys import PublicKey

log = logging.getLogger(__name__)

Refused = Callable[[Listed, IntegrityError], None]


@dataclass
class _Flight:
    done: threading.Event = field(default_factory=threading.Event)
    error: MirrorError | None = None


class _Held(Exception):
    """An earlier refusal, still true: raised again without being counted again."""

    def __init__(self, error: IntegrityError) -> None:
        super().__init__(error.message)
        self.error = error


class _Unwritable(TemporaryFailure):
    """The cache's file system refused a fill (full, read-only): no news of the store."""


@dataclass
class _Refusal:
    until: float
    error: IntegrityError
    seen: tuple[str | None, ...]
    """The ETags of the bundle, the manifest and the provenance refused (None: absent)."""


@dataclass(frozen=True)
class Trust:
    """What a version must prove: its provenance signed by one of `keys` (when any), and,
    with `required`, that it has one at all."""

    keys: Mapping[str, PublicKey]
    required: bool = False


class Supply:
    """Fills and re-verifications of the cache, one at a time per bundle (module docstring)."""

    def __init__(
        self,
        cache: Cache,
        bucket: ServeBucket,
        trust: Trust,
        *,
        on_refused: Refused,
        on_fill: Callable[[Entry], None],
        hold: float = 30.0,
        health: StoreHealth | None = None,
        stall: float = 60.0,
    ) -> None:
        self.cache = cache
        self.bucket = bucket
        self.trust = trust
        self.on_refused = on_refused
        self.on_fill = on_fill
        self._flights: dict[str, _Flight] = {}
        self._followers = 0
        self._refusals: dict[str, _Refusal] = {}
        self.hold = hold
        self.stall = stall
        """Seconds a fill may wait for the bundle's next piece (module docstring)."""
        self.health = health or StoreHealth()
        """Told how each fill's calls to the store ended (the status page shows the last)."""
        self._lock = threading.Lock()

    def ensure(self, listed: Listed) -> Entry:
        """The verified cache entry of `listed`'s bundle, filled or re-verified if need be."""
        sha256 = listed.ref.sha256
        entry = self.cache.get(sha256)
        if entry is not None and entry.verified:
            return entry
        with self._lock:
            refused = self._refusals.get(sha256)
            if refused is not None and refused.until > time.monotonic():
                raise refused.error
            flight = self._flights.get(sha256)
            leader = flight is None
            if flight is None:
                flight = self._flights[sha256] = _Flight()
            else:
                self._followers += 1
        if leader:
            try:
                self._settle(listed)
            except MirrorError as exc:
                flight.error = exc
            finally:
                with self._lock:
                    del self._flights[sha256]
                flight.done.set()
        else:
            flight.done.wait()
            with self._lock:
                self._followers -= 1
        if flight.error is not None:
            raise flight.error
        found = self.cache.get(sha256)
        if found is None or not found.verified:
            raise TemporaryFailure(f"{_name(listed)} left the cache at once; ask again")
        return found

    def recheck(self) -> None:
        """Ask the bucket again at the next request for each refused bundle (SIGHUP): a
        refusal still holds only while the objects it read are unchanged."""
        with self._lock:
            for refused in self._refusals.values():
                refused.until = 0.0

    def waiting(self) -> int:
        """How many requests wait for a fill another one leads."""
        with self._lock:
            return self._followers

    def _settle(self, listed: Listed) -> None:
        sha256 = listed.ref.sha256
        entry = self.cache.get(sha256)
        kept = entry is not None and entry.recovered  # hashed alone it proves nothing: _kept
        if entry is not None and not kept and (entry.verified or self.cache.verify(sha256)):
            return
        seen: tuple[str | None, ...] = ()
        try:
            seen = self._unchanged_refusal(listed)
            self._fill(listed)
        except _Held as held:
            self.health.answered()
            raise held.error from None
        except IntegrityError as exc:
            self.health.answered()  # the store answered; its bytes were wrong
            log.error(
                "refused %s: %s",
                _name(listed),
                exc,
                extra={"domain": listed.ref.domain, "version": str(listed.ref.label)},
            )
            self.on_refused(listed, exc)
            with self._lock:
                self._refusals[sha256] = _Refusal(time.monotonic() + self.hold, exc, seen)
            raise
        except MirrorError as exc:
            if not isinstance(exc, _Unwritable):  # the cache's disk, not the store
                self.health.failed(str(exc))
            raise TemporaryFailure(
                f"{_name(listed)} is not cached and cannot be fetched now: {exc}"
            ) from None
        self.health.answered()
        with self._lock:
            self._refusals.pop(sha256, None)

    def _unchanged_refusal(self, listed: Listed) -> tuple[str | None, ...]:
        """The ETags now of the objects a verdict reads; the earlier refusal again (not
        counted, held anew) when the bundle is there and none of them changed."""
        ref = listed.ref
        label = str(ref.label)
        keys = (
            listed.object,
            layout.version_manifest_key(self.bucket, ref.domain, label),
            layout.provenance_key(self.bucket, ref.domain, label),
        )
        seen = tuple(_etag(self.bucket.head(key)) for key in keys)
        with self._lock:
            refused = self._refusals.get(ref.sha256)
            if refused is not None and seen[0] is not None and refused.seen == seen:
                refused.until = time.monotonic() + self.hold
                raise _Held(refused.error)
        return seen

    def _fill(self, listed: Listed) -> None:
        ref = listed.ref
        manifest = layout.read_version_manifest(self.bucket, ref.domain, str(ref.label))
        if manifest is None:
            raise IntegrityError(f"{_name(listed)} has no manifest.json in the bucket")
        named = (manifest.sha256.lower(), manifest.size, manifest.object)
        if named != (ref.sha256, ref.size, listed.object):
            raise IntegrityError(
                f"{_name(listed)}: its manifest names another bundle than the index"
            )
        facts = self._provenance(listed, manifest)
        entry = Entry(ref.sha256, ref.size, ref.format, {(ref.domain, str(ref.label))}, facts)
        kept = self._kept(listed, entry)
        if not kept:
            self._fetch(listed, entry)
        log.info(
            "cached %s (%d bytes, sha256 verified%s)",
            _name(listed),
            ref.size,
            ", kept from a lost cache record" if kept else "",
            extra={"domain": ref.domain, "version": str(ref.label), "sha256": ref.sha256},
        )
        self.on_fill(entry)

    def _kept(self, listed: Listed, entry: Entry) -> bool:
        """The cache's `recovered` file, vouched for by this version's verdict: hashed again
        and, when the provenance is verified, holding the signed site. False when there is
        none, or it is not the bundle (then it is dropped)."""
        found = self.cache.get(entry.sha256)
        if found is None or not found.recovered or not self.cache.verify(entry.sha256):
            return False
        _require_signed_site(listed, self.cache.path(entry.sha256), entry.provenance)
        return self.cache.vouch(entry)

    def _fetch(self, listed: Listed, entry: Entry) -> None:
        """The bundle downloaded, checked and admitted (module docstring)."""
        temp = self.cache.temp_path(entry.sha256)
        try:
            self._download(listed, temp)
            _require_signed_site(listed, temp, entry.provenance)
            self.cache.admit(temp, entry)
        finally:
            with contextlib.suppress(FileNotFoundError):
                temp.unlink()

    def _download(self, listed: Listed, temp: Path) -> None:
        """The object into `temp`, hashed as it is written; IntegrityError unless it is the
        manifest's bytes (a larger object is cut off as soon as it passes the size)."""
        ref = listed.ref
        try:
            with open(temp, "wb") as out:
                hashing = HashingWriter(out)
                stream = paced(self.bucket.open_stream(listed.object), self.stall, listed.object)
                try:
                    for chunk in stream:
                        hashing.write(chunk)
                        if hashing.size > ref.size:
                            break
                finally:
                    close_stream(stream)
        except OSError as exc:
            raise _Unwritable(f"cannot write the cache ({temp.parent}): {exc.strerror}") from None
        got = hashing.result
        if (got.sha256, hashing.size) != (ref.sha256, ref.size):
            raise IntegrityError(
                f"{_name(listed)}: the object in the bucket is not the bundle its manifest "
                f"names (sha256 {got.sha256[:16]}…, {hashing.size} bytes; expected "
                f"{ref.sha256[:16]}…, {ref.size} bytes)"
            )

    def _provenance(self, listed: Listed, manifest: layout.VersionManifest) -> dict[str, Any]:
        """What the status page and the age metric show of the version's provenance:
        verified when keys are trusted, else read for display only."""
        ref = listed.ref
        facts: dict[str, Any] = {"exported_at": manifest.exported_at, "verified": False}
        try:
            if self.trust.keys:
                proven = check_in_bucket(self.bucket, ref.domain, str(ref.label), self.trust.keys)
                predicate, facts["key_id"], facts["verified"] = (
                    proven.predicate,
                    proven.key_id,
                    True,
                )
                facts["signed_sha256"] = proven.sha256
                facts["signed_tree"] = proven.predicate.get("tree_sha256")
            else:
                predicate = read_statement(self.bucket, ref.domain, str(ref.label))
        except NotFound:
            _require_absent_allowed(listed, manifest, self.trust)
            return {**facts, "present": False}
        except IntegrityError:
            if self.trust.keys:
                raise
            return {**facts, "present": False}
        return {**facts, "present": True, **_described(predicate)}


def _require_absent_allowed(listed: Listed, manifest: layout.VersionManifest, trust: Trust) -> None:
    """A version without a provenance is refused with `serve.require_provenance`, and always
    when its manifest names the statement it was imported with (`provenance_subject`): a
    statement gone from the bucket is a downgrade, never "none"."""
    if trust.required:
        raise IntegrityError(
            f"{_name(listed)} has no provenance and serve.require_provenance is set"
        )
    subject = (manifest.model_extra or {}).get("provenance_subject")
    if subject:
        raise IntegrityError(
            f"{_name(listed)} has no provenance, though its manifest says it was imported "
            f"with one (provenance_subject {str(subject)[:16]}…): refused as a downgrade"
        )


def _require_signed_site(listed: Listed, cached: Path, facts: Mapping[str, Any]) -> None:
    """The cached file must hold the tree the statement signs (`mirror.airgap.provenance.
    check_object`, read here from the cache, before a byte is served): a version imported
    as a delta is not the signed bundle's bytes but the same site in other bytes
    (docs/delta.md), and the signed bundle's digest proves its bytes, not the tree its
    statement names for them."""
    signed = facts.get("signed_sha256")
    if not facts.get("verified"):
        return
    try:
        tree = inspect_archive(cached).tree_sha256
    except IntegrityError as exc:
        tree = f"none ({exc})"
    wanted = str(facts.get("signed_tree"))
    if tree != wanted:
        raise IntegrityError(
            f"{_name(listed)}: its provenance is about bundle {str(signed)[:16]}…, and the "
            f"object is not that site (tree {tree[:16]}…, signed {wanted[:16]}…)"
        )


def _etag(facts: Mapping[str, Any] | None) -> str | None:
    return None if facts is None else str(facts["etag"])


def _described(predicate: Mapping[str, Any]) -> dict[str, Any]:
    vendor = predicate.get("vendor") or {}
    completeness = predicate.get("completeness") or {}
    acceptance = predicate.get("acceptance") or {}
    return {
        "completed_at": vendor.get("completed_at"),
        "job_id": vendor.get("job_id"),
        "summary": completeness.get("summary"),
        "accepted": acceptance.get("reason"),
    }


def _name(listed: Listed) -> str:
    return f"version {listed.ref.label} of {listed.ref.domain}"

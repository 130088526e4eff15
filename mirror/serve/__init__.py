"""`mirror serve`: the last mile. The bucket's versions over HTTP for the vendor's pods, at
URLs that never expire, only ever bytes verified against the version's manifest.

    object store ──(read-only identity, bounded calls)──► supply ──► cache ──sendfile──► pods
      index.json, current.json ─► pointers (every poll_interval; saved for restarts)
      manifest.json, provenance ─► verified before a byte is cached

The pieces (docs/architecture.md "Serving"): `routes` (the URL space, parsed, pure),
`ranges` (RFC 9110 conditions and ranges, pure), `pointers` (what each domain holds and
which version is current), `cache` (verified bundles on disk), `supply` (single-flight,
verified fills), `service` (state, readiness, the poller), `server` (the HTTP edge),
`status` (the page on `/`), `metrics`, `run` (start and stop). It reads the bucket only
through `bucket.ServeBucket`.
"""

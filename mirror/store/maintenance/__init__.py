"""Store maintenance: recovering the store after a crash and repairing damaged blobs.

Holds the steps that touch only the blob store and the index: `recovery` (schema
upgrade, stale temp files, orphan blobs) and `repair` (a damaged blob restored from a
good copy or re-pointed to a blob of the same site). `mirror.export` runs the recovery
steps in order at start-up; `store verify --repair` calls `repair.repair_store`.
May import what `mirror.store` may: foundations and the rest of the store.
"""

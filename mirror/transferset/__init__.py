"""The transfer-set format both sides speak, and nothing of either side.

Holds: `format` (canonical JSON, the manifest and its items, part names, SHA256SUMS), the
trust core `trust` (manifest bytes and keys in, a trusted manifest or an error out),
`keys` (Ed25519 signing and trusted keys), `plan` (the pure plan of a set: order,
sequence, chain, parts), `reader` (verifying a set on disk and reading blobs back from
their parts), `receipt` (the signed receipt the import writes), and `delta` (the file
list, the delta blob, the splice and its recipe both sides make alike).

May import: foundations only (`mirror.errors`, `mirror.integrity`, `mirror.versions`,
`mirror.archive`, ...). Never SQLAlchemy, the store, the vendor, or `outbound`/`airgap`:
the air-gapped side loads this package without any connected-side code
(tests/test_architecture.py). The file formats keep their own field names
(`version`, `archive_format`); code converts to `VersionRef` at their edge.
"""

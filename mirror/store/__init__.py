"""The connected side's store: downloaded bundles and the SQL index that names them.

Holds the content-addressed blob store (`blobs`), the SQL index (`models`, `db`: engine
and migrations runner), the binding of one store to one index (`binding`), how a bundle
and its versions enter the index (`bundles`), what the store holds (`inventory`),
retention (`retention`), and its maintenance (`maintenance`: recovery after a crash and
repair of damaged blobs). `App` (`app`) ties settings, index and blobs together.

May import: foundations only (docs/architecture.md); never the vendor or the export.
"""

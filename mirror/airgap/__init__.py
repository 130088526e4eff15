"""The air-gapped side: a verified transfer set published into an S3 bucket, and the chart.

What it holds:
- `importer`: `transfer import`, verify a set and publish its versions once, in order
  (bundles, manifests, indexes, promotions, receipt, import state), a module a step;
  `publish` makes what the import uploads for a version carried as a delta.
- The bucket: `layout` owns every key name and JSON document in it; `conditional` is the
  one read-modify-write on those documents.
- The S3 object store: `s3bucket` (reads, links, listing, removal), `objectstore` (writes:
  create-once objects, conditional pointers, the S3 `MultipartTarget`), `multipart`
  (staged uploads, completed only once every byte matched, through `MultipartTarget`),
  `s3checksums` (the cheap checksums the server verifies), `s3errors` (a refusal as one
  MirrorError line), `s3client` (the boto3 client and its deadline), `credentials`,
  `probe` (`target check`: what the server really does).
- `workdir`: the rebuild's scratch space; `chart`: versions, promotion, values, gc.

Every module above the S3 store meets storage through a narrow Protocol (`conditional.
JsonStore`, `layout.Bucket`, `multipart.MultipartTarget`, `publish.Store`, `chart.bucket.
BucketStore`, `chart.gc.GcStore`); tests/fixtures/memory.py implements them all in memory,
held to the real server by tests/airgap/test_contracts.py.

What it may import: the foundations (mirror.errors, mirror.integrity, mirror.versions,
mirror.config, ...) and mirror.transferset (the format it reads), never the connected
side (store, export, vendor, outbound): the air-gapped host has no database and no
vendor (tests/test_architecture.py checks both).
"""

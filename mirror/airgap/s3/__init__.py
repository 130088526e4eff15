"""The S3 plumbing of the air-gapped side: one client, its errors, its checksums.

`client` makes the boto3 client (deadlines, addressing); `errors` turns its failures into
the one error tree; `objectstore` and `bucket` are the bucket as the rest of `airgap`
meets it; `multipart` stages uploads completed together; `conditional` is the one
read-modify-write of a JSON document; `checksums` the per-part checksums; `probe` the
import's check that the server is safe to write to; `credentials` opens the store from
the settings. Nothing here knows what a version is: that is `airgap.layout`'s.
"""

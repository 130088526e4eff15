"""The connected side of the air gap: from the store to a signed transfer set and back.

Holds: `pack` (the index's undelivered versions written as a signed set, or a dry run),
`delta` (choosing a base the air-gapped side holds and building a version's delta),
`records` (the index's record of the sets packed here: found by sequence or manifest,
recorded, forgotten), `ack` (a receipt signed by a site's key marks versions delivered to
that site), `lost` (`transfer lost` and `transfer resend`), `push` (pack,
import and ack in one step where the target is reachable), `selfbundle` and `lock` (the
tool itself as one signed offline installer, its wheels held against the lock file).

May import: foundations, `mirror.store`, `mirror.transferset`, and `mirror.airgap` (only
`push`, which imports where the target is reachable). Never `export`, `vendorapi` or `cli`
(tests/test_architecture.py).
"""

"""The vendor's admin API, as the connected side calls it.

Holds the admin API client (`client`: static-export and agent jobs, tolerant parsing),
the request side under it (`transport`: the key, capped answers, the retry policy;
`answers`: what a status means), the one Retry-After parser and backoff (`retry`),
presigned downloads (`download`, streamed, hashed, resumable; `partial`, the partial
file; `validators`, what a resume must match; `speedlimit`), and following agent jobs
(`agentjobs`).

May import: foundations only (docs/architecture.md): the vendor client never imports
the store, and needs no database library.
"""

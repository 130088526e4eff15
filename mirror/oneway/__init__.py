"""One-way links (issue 23): a transfer set over UDP through a data diode, never acknowledged.

`wire` owns the datagram format, `table` the file table and block geometry, `fec` the
erasure code, `sender` and `receiver` the two ends (pure cores with the socket and the
disk at their edges), `assembly` a session on disk and the blocks being decoded, `rate`
the token bucket, `metrics` the receiver's counters, `imports` what `transfer receive
--import` as a service does with each landed set (refused aside, retried when the store is
back). Datagrams are not authenticated: every field is checked against a stated bound
before use (wire, table), and the receiver's memory is bounded whatever arrives.
"""

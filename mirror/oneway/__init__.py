"""One-way links (issue 23): a transfer set over UDP through a data diode, never acknowledged.

`wire` owns the datagram format, `table` the file table and block geometry, `fec` the
erasure code, `sender` and `receiver` the two ends (pure cores with the socket and the
disk at their edges), `rate` the token bucket, `report` what an incomplete set lacks.
"""

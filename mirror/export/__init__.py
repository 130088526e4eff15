"""Export runs: the vendor's bundles brought into the store, one persisted run at a time.

Holds one export run as a state machine persisted in the index (`runner`, the steps;
`keeper`, the STORE step; `runstate`, the one writer of the run row; `outcome`, what
callers see; `intake`, a finished download taken into the store), claims and heartbeat
leases (`claim`, `heldrun`, `budget`, `lease`), schedule deferrals (`deferrals`), the
daemon (`daemon`, `dispatch`, `inflight`, `worker`, `domains`, `liveruns`, `wakeup`,
`notify`), scheduling (`scheduler`), start-up recovery run in order
(`recovery`; the steps are the store's), status (`status`), metrics (`metrics`) and the
live display of a run (`progress`).

May import: foundations, `mirror.vendorapi`, `mirror.store` (docs/architecture.md).
"""

"""The process machinery the use cases run on: how a ledger is held, written and woken.

- `ledger`          open a ledger (`open_ledger`) and hold it (`Ledger`), with its group commit
- `batching`        the group commit and the daemon threads it runs on
- `outbox`, `outbox_records`, `outbox_messages`
                    hand accepted jobs to the queue and record the broker's confirmations
- `dispatch_window` how many dispatches may be in flight, and when one is late
- `backlog`         the queue's depth, as the submit's refusals read it
- `queue_epoch`     the marker that tells a worker which queue generation it reads
- `sequencer`       the loop that gives committed events their ledger positions
- `tool_loop`, `watchdog`
                    a tool's run: `async def` tools on one loop thread; one watchdog keeps
                    every running tool's deadline and renews its lease
- `thread_hop`      move a call onto the ledger's thread and back
- `settle`          one wait loop for everyone who waits on a job (`?wait`, MCP's calls)
- `loop_reads`      the reads an event loop makes without a thread hop

Nothing here decides what a job may do (that is `ledger.services`) and nothing here imports a
use case: the use cases call down into this room, never the reverse.
"""

"""The use cases: the one front door that the adapters (`api`, `workers`, `cli`) call.

- `submit`    the decision: accept or refuse a job, then dispatch it
- `work`      a worker's writes: claim (brake re-checked), renew the lease, record the outcome
- `execute`   run one job: claim, run the tool under its deadline, record, retry
- `reconcile` turn silence into recorded outcomes, and the loop that runs it
- `brakes`    pull, release and list the emergency brake
- `tokens`    create, revoke, list and authenticate API tokens
- `jobs`      read jobs and their events as a given caller may see them
- `catalog`   the tools a token may call (with its quotas' remainder), and every tool
- `audit`     query, summarize, export, digest and verify the ledger
- `admin`     the schema, the read models and the database roles the processes use
- `webhooks`  register, list and remove webhooks, and read their deliveries
- `webhook_relay` deliver every terminal outcome to its account's webhooks, signed

Each decides; it is handed an open ledger (`ledger.runtime.ledger`), the process machinery
below it (`ledger.runtime`) carries the writes and the waits, and the store
(`ledger.persistence`) only keeps and finds.
"""

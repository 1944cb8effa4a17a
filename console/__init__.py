"""The read-only console at `/console`: operators and auditors look at jobs, silence, brakes and
the ledger's integrity in a browser. Server-rendered (Jinja2), mounted by the API
(`console.web.mount`), so `outcomes serve` stays the one entry point; it calls the use cases in
`ledger.services` like every adapter, and shows only what the staff views of `ledger.public`
show (argument values and token secrets never reach a page)."""

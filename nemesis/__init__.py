"""Nemesis: a Jepsen-style campaign against the whole product.

A workload of mixed tools submitted over HTTP and MCP, a nemesis that kills, freezes and
restarts the product's processes and its private PostgreSQL and RabbitMQ on a seeded schedule,
a ground-truth log the ledger never reads, and a checker that compares every recorded outcome
with it. `python -m nemesis --help` runs one campaign; docs/reliability.md has the latest table.

A harness beside the product (like `bench/`): nothing in the product imports it.
"""

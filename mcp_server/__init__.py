"""The MCP adapter: every tool a token may call, as an MCP tool, on the official `mcp` SDK.

- `names`    ledger tool names ↔ MCP tool names (`.` ↔ `__`)
- `watch`    waiting for a job to change (the API's waiter over HTTP, a poll over stdio)
- `answers`  an envelope as a tool result: structured content and a paragraph for the model
- `server`   the MCP server: tools/list, tools/call, `outcome_get`, `outcome_list`
- `http`     streamable HTTP at `/mcp` (mounted by the API), bearer tokens as for `/v1`
- `stdio`    `outcomes mcp`: one token (OUTCOMES_TOKEN) over stdin/stdout

A call is a job submitted through `ledger.services.submit`, exactly as `POST /v1/jobs`.
"""

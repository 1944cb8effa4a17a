// The official MCP TypeScript SDK as a client of the ledger (tests/mcp/test_typescript_sdk.py).
//
// Usage: node check.mjs '<config JSON>', the config being
//   {"transport": "stdio", "command": "...", "args": [...], "env": {...}, "cwd": "..."} or
//   {"transport": "http", "url": "http://127.0.0.1:PORT/mcp", "token": "ol_..."},
// plus "calls": [{"name": "...", "tool": "...", "arguments": {...}}, ...].
// It lists the tools first (the SDK then checks every structured answer against the tool's
// declared output schema, errors included), makes each call in order, and prints one JSON
// document: the tools, and per call whether the SDK accepted the answer and what it said.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const config = JSON.parse(process.argv[2]);

function transportFor(config) {
  if (config.transport === "stdio") {
    return new StdioClientTransport({
      command: config.command,
      args: config.args,
      env: config.env,
      cwd: config.cwd,
      stderr: "inherit",
    });
  }
  return new StreamableHTTPClientTransport(new URL(config.url), {
    requestInit: { headers: { Authorization: `Bearer ${config.token}` } },
  });
}

const client = new Client({ name: "outcome-ledger-ts-check", version: "1.0.0" });
await client.connect(transportFor(config));
const report = { tools: {}, calls: {} };
try {
  const listed = await client.listTools();
  for (const tool of listed.tools) {
    report.tools[tool.name] = { inputSchema: tool.inputSchema, outputSchema: tool.outputSchema };
  }
  for (const call of config.calls) {
    try {
      const result = await client.callTool(
        { name: call.tool, arguments: call.arguments },
        undefined,
        { timeout: 90_000 },
      );
      report.calls[call.name] = {
        accepted: true,
        isError: result.isError ?? false,
        structuredContent: result.structuredContent ?? null,
        text: (result.content ?? []).map((block) => block.text ?? "").join("\n"),
      };
    } catch (error) {
      // fetch's own message ("fetch failed") hides the socket's reason: keep its cause too.
      const cause = error?.cause ? ` (${error.cause.code ?? ""} ${error.cause.message ?? error.cause})` : "";
      report.calls[call.name] = { accepted: false, error: String(error?.message ?? error) + cause };
    }
  }
} finally {
  await client.close();
}
process.stdout.write(JSON.stringify(report) + "\n");

// MCP Tasks through the official requester library (@modelcontextprotocol/ext-tasks, on the
// official v2 client, @modelcontextprotocol/client), against the ledger's /mcp
// (tests/mcp/test_tasks_sdk.py).
//
// Usage: node tasks.mjs '<config JSON>', the config being
//   {"url": "http://127.0.0.1:PORT/mcp", "token": "ol_...", "step": "...", ...}, one step:
//   - "start":  call `tool` with `arguments`; print the execution's kind, its task id and the
//               task reference the library serializes to resume it elsewhere;
//   - "resume": resume `reference` (a "start"'s) on this server and settle it: print the
//               outcome's status and the tool call's result;
//   - "cancel": call `tool`, cancel the task it answers, and print the task as the server
//               then tells it;
//   - "watch":  call `tool`; print the task as the server first tells it (status and
//               message; "parked <task id>" on stderr at once, for the test to act on), then
//               settle it in the same session and print the outcome.
// It prints one JSON document on its last line.
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import {
  createTaskSessionFromClient,
  resultFromTaskOutcome,
} from "@modelcontextprotocol/ext-tasks/client";

const config = JSON.parse(process.argv[2]);
const VERSION = "2026-07-28"; // Tasks is an extension of the stateless protocol revision
const clientInfo = { name: "outcome-ledger-tasks-check", version: "1.0.0" };
const ENDPOINT = "outcome-ledger-tests"; // the same identity across servers: one deployment

const client = new Client(clientInfo, { versionNegotiation: { mode: { pin: VERSION } } });
await client.connect(
  new StreamableHTTPClientTransport(new URL(config.url), {
    requestInit: { headers: { Authorization: `Bearer ${config.token}` } },
  }),
);

// The library leaves the 2026-07-28 wire to the host (its adapter says the SDK's codecs do not
// carry task traffic yet): frame the request, POST it with the routing headers the transport
// asks for (Mcp-Method, and Mcp-Name: the tool's name or the task's id), read the answer.
const NAME_OF = { "tools/call": "name", "tasks/get": "taskId", "tasks/update": "taskId", "tasks/cancel": "taskId" };
let sent = 0;
async function rawDispatch(request, options) {
  const framed = { jsonrpc: "2.0", id: `tasks-${++sent}`, ...request };
  const headers = {
    Authorization: `Bearer ${config.token}`,
    "Content-Type": "application/json",
    Accept: "application/json, text/event-stream",
    "MCP-Protocol-Version": VERSION,
    "Mcp-Method": request.method,
  };
  const named = request.params?.[NAME_OF[request.method]];
  if (named !== undefined) headers["Mcp-Name"] = String(named);
  const answer = await fetch(config.url, {
    method: "POST",
    headers,
    body: JSON.stringify(framed),
    signal: options?.signal,
  });
  const text = await answer.text();
  if ((answer.headers.get("content-type") ?? "").includes("text/event-stream")) {
    const messages = text
      .split("\n")
      .filter((line) => line.startsWith("data:"))
      .map((line) => JSON.parse(line.slice(5)));
    return messages.find((message) => message.id === framed.id);
  }
  return JSON.parse(text);
}

const session = createTaskSessionFromClient(client, {
  endpointId: ENDPOINT,
  rawDispatch,
  v2RequestFraming: { protocolVersion: VERSION, clientInfo, clientCapabilities: {} },
});

async function settled(execution) {
  const { outcome } = await execution.settle();
  const done = { status: outcome.status };
  if (outcome.status === "completed") done.result = resultFromTaskOutcome(outcome);
  return done;
}

const report = { capabilities: session.capabilities };
try {
  if (config.step === "start") {
    const execution = await session.callTool(config.tool, config.arguments);
    report.kind = execution.kind;
    if (execution.kind === "task") {
      report.taskId = execution.handle.taskId;
      report.reference = execution.serializeReference();
      await execution.detach(); // followed elsewhere: the reference is all it takes
    } else {
      report.outcome = await settled(execution);
    }
  } else if (config.step === "resume") {
    const execution = await session.resumeTask(config.reference);
    report.kind = execution.kind;
    report.outcome = await settled(execution);
  } else if (config.step === "cancel") {
    const execution = await session.callTool(config.tool, config.arguments);
    report.kind = execution.kind;
    if (execution.kind === "task") {
      report.taskId = execution.handle.taskId;
      await execution.cancel();
      report.after = (await session.task(execution.handle.taskId).snapshot()).status;
    }
  } else if (config.step === "watch") {
    const execution = await session.callTool(config.tool, config.arguments);
    report.kind = execution.kind;
    if (execution.kind === "task") {
      report.taskId = execution.handle.taskId;
      const seen = await session.task(report.taskId).snapshot();
      report.first = { status: seen.status, statusMessage: seen.statusMessage ?? null };
      process.stderr.write(`parked ${report.taskId}\n`);
      report.outcome = await settled(execution);
    }
  } else {
    throw new Error(`unknown step ${config.step}`);
  }
} finally {
  await session.close();
  await client.close();
}
process.stdout.write(JSON.stringify(report) + "\n");

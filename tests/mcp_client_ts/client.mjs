// An MCP client on the TypeScript SDK (@modelcontextprotocol/sdk), run by
// tests/mcp_gateway/test_typescript_client.py: lists the gateway's tools, calls one (a held
// call: it waits for the test's approval, hearing progress), and prints what it got as JSON.
//   node client.mjs <url> <token> <tool> <arguments as JSON>
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, token, tool, args] = process.argv.slice(2);
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
const client = new Client({ name: "ts-sdk-client", version: "1.0.0" });
await client.connect(transport);
const listed = await client.listTools();
const progress = [];
const result = await client.callTool(
  { name: tool, arguments: JSON.parse(args) },
  undefined,
  {
    timeout: 120000,
    resetTimeoutOnProgress: true,
    onprogress: (p) => progress.push(p.message ?? ""),
  },
);
await client.close();
console.log(JSON.stringify({ tools: listed.tools, result, progress }));

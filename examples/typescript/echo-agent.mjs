// An agent roost runs: it reports that it is working, answers each reply by reporting `got: <text>`, and
// on "bye" reports done and exits.
//
// Build the client first (`cd sdk/typescript && npm ci && npm run build`), then give roost a profile:
//
//   [roost.profiles.echo]
//   command = ["node", "/abs/path/to/examples/typescript/echo-agent.mjs"]
//   task = "type"        # the first task arrives as reply 1
//   protocol = true

import { RoostAgent } from "../../sdk/typescript/dist/roost-agent.js";

let bye;
const finished = new Promise((resolve) => (bye = resolve));

const agent = RoostAgent.fromEnv({
  name: "echo-agent",
  version: "1.0.0",
  onReply: async (reply) => {
    const text = reply.text.trim();
    if (text === "bye") {
      await agent.report({ state: "done", status: "idle", summary: `got: ${reply.text}` });
      bye();
      return;
    }
    await agent.report({ state: "working", status: "idle", summary: `got: ${reply.text}` });
  },
});

if (!agent) {
  console.error("echo-agent: not started by roost (no ROOST_JOB_ID / ROOST_JOB_TOKEN / ROOST_SOCKET)");
  process.exit(2);
}

await agent.report({ state: "working", status: "busy", summary: "echo agent ready" });
await finished;
// The "bye" handler has returned by the time the close is under way: its ack goes out before the end.
await agent.close();
process.exit(0);

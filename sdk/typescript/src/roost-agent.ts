// The agent client under its first file name: `pi-roost/agent` is `agent.ts`. Kept so that code that
// imported `dist/roost-agent.js` (the examples) goes on working.

export * from "./agent.js";

#!/usr/bin/env python3
"""An ACP agent written with the official ACP Python SDK (`agent-client-protocol`, import name `acp`): the
other side of the `kind = "acp"` agent's tests. What it does depends on the prompt:

- `stream N`: N text chunks, 50 ms apart, after a thought and a plan;
- `write NAME`: a tool call that writes NAME in its working directory, asking permission first (reject
  once, allow once, allow always): allowed, it writes and says `wrote NAME (OPTION)`; rejected, `not
  written`; cancelled, the prompt ends `cancelled`;
- `sleep`: works until the client cancels the prompt, then ends it `cancelled`;
- `crash`: says so on stderr and exits at once (status 3);
- `where`: says its working directory and the session's cwd;
- `count`: says how many prompts this session has had (a conversation is one session);
- anything else: `echo: ` and the prompt.

Started with `--load`, it offers `session/load`: its sessions (their prompt counts) are kept in
`sessions.json` in its working directory, so a new process loads a session an earlier one opened (replaying
a line of history as it does); a session it never opened is refused.
"""

import asyncio
import json
import os
import sys
import uuid

from acp import (
    PROTOCOL_VERSION,
    Agent,
    InitializeResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PromptResponse,
    RequestError,
    plan_entry,
    run_agent,
    start_tool_call,
    update_agent_message_text,
    update_agent_thought_text,
    update_plan,
    update_tool_call,
)
from acp.schema import AgentCapabilities, Implementation, PermissionOption, ToolCallUpdate

STREAM_GAP = 0.05
LOAD = "--load" in sys.argv
KEPT = "sessions.json"


class TestAgent(Agent):
    def on_connect(self, conn):
        self._conn = conn
        self._sessions = {}

    async def initialize(self, protocol_version, client_capabilities=None, client_info=None, **kw):
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(load_session=LOAD),
            agent_info=Implementation(name="agentwire-test-agent", version="1.0"),
        )

    async def new_session(self, cwd, mcp_servers=None, **kw):
        sid = uuid.uuid4().hex
        self._sessions[sid] = {"cwd": cwd, "prompts": 0, "cancel": asyncio.Event()}
        self.keep()
        return NewSessionResponse(session_id=sid)

    def kept(self):
        try:
            with open(KEPT) as f:
                return json.load(f)
        except FileNotFoundError:
            return {}

    def keep(self):
        if LOAD:
            saved = self.kept()
            saved.update({sid: s["prompts"] for sid, s in self._sessions.items()})
            with open(KEPT, "w") as f:
                json.dump(saved, f)

    async def load_session(self, cwd, session_id, mcp_servers=None, **kw):
        saved = self.kept()
        if not LOAD or session_id not in saved:
            raise RequestError.invalid_params({"sessionId": session_id})
        self._sessions[session_id] = {"cwd": cwd, "prompts": saved[session_id], "cancel": asyncio.Event()}
        # The history is replayed as the session's updates before the answer: not a turn's text.
        await self.say(session_id, "(replayed history)")
        return LoadSessionResponse()

    async def say(self, sid, text):
        await self._conn.session_update(session_id=sid, update=update_agent_message_text(text))

    async def prompt(self, session_id, prompt, **kw):
        s = self._sessions[session_id]
        s["prompts"] += 1
        self.keep()
        s["cancel"] = asyncio.Event()
        text = " ".join(getattr(b, "text", "") for b in prompt).strip()
        word, _, rest = text.partition(" ")
        if word == "stream":
            up = self._conn.session_update
            await up(session_id=session_id, update=update_agent_thought_text("counting"))
            await up(session_id=session_id,
                     update=update_plan([plan_entry("count", priority="high", status="in_progress")]))
            for i in range(int(rest or "3")):
                await self.say(session_id, f"part{i} ")
                await asyncio.sleep(STREAM_GAP)
            return PromptResponse(stop_reason="end_turn")
        if word == "write":
            return await self.write(session_id, rest)
        if word == "sleep":
            await s["cancel"].wait()
            return PromptResponse(stop_reason="cancelled")
        if word == "crash":
            print("crashing on purpose", file=sys.stderr, flush=True)
            os._exit(3)
        if word == "where":
            await self.say(session_id, f"{os.getcwd()} {s['cwd']}")
            return PromptResponse(stop_reason="end_turn")
        if word == "count":
            await self.say(session_id, str(s["prompts"]))
            return PromptResponse(stop_reason="end_turn")
        await self.say(session_id, "echo: ")
        await self.say(session_id, text)
        return PromptResponse(stop_reason="end_turn")

    async def write(self, sid, name):
        up = self._conn.session_update
        await up(session_id=sid, update=start_tool_call(
            "w1", f"Write {name}", kind="edit", status="pending", raw_input={"path": name}))
        asked = self._conn.request_permission(
            session_id=sid,
            tool_call=ToolCallUpdate(tool_call_id="w1", title=f"Write {name}", raw_input={"path": name}),
            options=[
                PermissionOption(option_id="no", name="Reject", kind="reject_once"),
                PermissionOption(option_id="once", name="Allow once", kind="allow_once"),
                PermissionOption(option_id="always", name="Allow always", kind="allow_always"),
            ],
        )
        cancel = asyncio.ensure_future(self._sessions[sid]["cancel"].wait())
        answer = asyncio.ensure_future(asked)
        done, _ = await asyncio.wait({cancel, answer}, return_when=asyncio.FIRST_COMPLETED)
        if answer not in done:
            # Cancelled while asking: the client answers the request `cancelled` too.
            resp = await answer
        else:
            cancel.cancel()
            resp = answer.result()
        outcome = resp.outcome
        if outcome.outcome == "cancelled":
            await up(session_id=sid, update=update_tool_call("w1", status="failed", raw_output={"error": "cancelled"}))
            return PromptResponse(stop_reason="cancelled")
        if outcome.option_id in ("once", "always"):
            with open(os.path.join(self._sessions[sid]["cwd"], name), "w") as f:
                f.write("written by the test agent\n")
            await up(session_id=sid, update=update_tool_call("w1", status="completed", raw_output={"written": name}))
            await self.say(sid, f"wrote {name} ({outcome.option_id})")
        else:
            await up(session_id=sid, update=update_tool_call("w1", status="failed", raw_output={"error": "rejected"}))
            await self.say(sid, "not written")
        return PromptResponse(stop_reason="end_turn")

    async def cancel(self, session_id, **kw):
        s = self._sessions.get(session_id)
        if s:
            s["cancel"].set()


async def main():
    await run_agent(TestAgent())


if __name__ == "__main__":
    asyncio.run(main())

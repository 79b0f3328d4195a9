"""The MCP front against the real daemon, with the official MCP Python SDK (`mcp`) as the client over
streamable HTTP.

Starts its own `agentwire serve` (`$AGENTWIRE_BIN`, default target/debug/agentwire) on loopback ports with
two agents on the `mcp` front (the demo agent, and a command agent that prints two lines a moment apart),
and two callers with tokens of their own: alice may call only the demo agent, bob every agent. Run by
scripts/test.sh: `target/tools/venv/bin/python -m unittest discover -s interop/mcp-py -v`.
"""

import asyncio
import contextlib
import json
import math
import os
import queue
import signal
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.request
from datetime import timedelta
from pathlib import Path

import anyio
import httpx
from mcp import ClientSession, types
from mcp.client.streamable_http import streamablehttp_client

REPO = Path(__file__).resolve().parents[2]
# The daemon opens its files and starts its relay and HTTP server before its ready line.
DAEMON_READY_TIMEOUT = 30
# How long a stopping daemon may take.
STOP_GRACE = 15
# How long a turn may take to show up ended in the turn API after its call was cancelled.
CANCEL_SEEN_WITHIN = 10
ALICE = "alice-" + "a" * 40
BOB = "bob-" + "b" * 40


def _tail(path, lines=40):
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _agentwire_bin():
    path = os.environ.get("AGENTWIRE_BIN") or str(REPO / "target" / "debug" / "agentwire")
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"{path} is not an executable: run `cargo build -p agentwire` or set AGENTWIRE_BIN")
    return path


def setUpModule():
    global TMP, DAEMON, READY, LOG
    TMP = tempfile.mkdtemp(prefix="agentwire-mcp-")
    config = Path(TMP) / "agentwire.toml"
    config.write_text("""
[agents.lines]
kind = "cmd"
command = ["sh", "-c", "read p; echo one; sleep 0.3; echo two"]
expose = ["mcp"]

[[http.callers]]
name = "alice"
token_env = "ALICE_TOKEN"
agents = ["demo"]

[[http.callers]]
name = "bob"
token_env = "BOB_TOKEN"
""")
    data = Path(TMP) / "data"
    LOG = Path(TMP) / "agentwire.log"
    cmd = [_agentwire_bin(), "serve", "--config", str(config), "--data-dir", str(data),
           "--relay-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
           "--roost-socket", str(data / "roost.sock")]
    env = dict(os.environ, ALICE_TOKEN=ALICE, BOB_TOKEN=BOB)
    with open(LOG, "wb") as f:
        DAEMON = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=f, stdin=subprocess.DEVNULL, env=env)
    lines = queue.Queue()
    threading.Thread(target=lambda: lines.put(DAEMON.stdout.readline()), daemon=True).start()
    try:
        line = lines.get(timeout=DAEMON_READY_TIMEOUT)
    except queue.Empty:
        line = b""
    if not line:
        tearDownModule()
        raise RuntimeError(f"agentwire printed no ready line within {DAEMON_READY_TIMEOUT} s:\n{_tail(LOG)}")
    READY = json.loads(line)


def tearDownModule():
    if DAEMON.poll() is None:
        DAEMON.send_signal(signal.SIGTERM)
        try:
            DAEMON.wait(timeout=STOP_GRACE)
        except subprocess.TimeoutExpired:
            DAEMON.kill()
            DAEMON.wait(timeout=STOP_GRACE)
    DAEMON.stdout.close()


def _leaves(group):
    """The exceptions in a (nested) exception group."""
    if isinstance(group, BaseExceptionGroup):
        return [leaf for e in group.exceptions for leaf in _leaves(e)]
    return [group]


def turn_api(path):
    req = urllib.request.Request(READY["http"] + path,
                                 headers={"Authorization": f"Bearer {READY['http_token']}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def mcp_turns():
    return turn_api("/api/v1/turns?protocol=mcp&limit=500")["turns"]


@contextlib.asynccontextmanager
async def client(token, elicitation_callback=None, read_timeout=30, tap=None):
    """An MCP client session as a program opens one: the SDK's streamable HTTP transport and ClientSession,
    with the caller's token as a bearer token, initialized. `tap`, when given, sees every message the
    server sends as it arrives, before the session reads it (the session handles a server's request, an
    elicitation, before it reads on)."""
    headers = {"Authorization": f"Bearer {token}"}
    async with streamablehttp_client(READY["http"] + "/mcp", headers=headers) as (read, write, _):
        kwargs = {"read_timeout_seconds": timedelta(seconds=read_timeout)}
        if elicitation_callback is not None:
            kwargs["elicitation_callback"] = elicitation_callback
        async with anyio.create_task_group() as tg:
            if tap is not None:
                send, tapped = anyio.create_memory_object_stream(math.inf)

                async def forward(source):
                    async with send:
                        async for m in source:
                            tap(m)
                            await send.send(m)

                tg.start_soon(forward, read)
                read = tapped
            async with ClientSession(read, write, **kwargs) as session:
                await session.initialize()
                yield session
            tg.cancel_scope.cancel()


class McpFront(unittest.IsolatedAsyncioTestCase):
    async def test_tools_are_the_agents_each_caller_may_call(self):
        async with client(READY["http_token"]) as s:
            tools = (await s.list_tools()).tools
            self.assertEqual(sorted(t.name for t in tools), ["ask_demo", "ask_lines"])
            demo = next(t for t in tools if t.name == "ask_demo")
            self.assertIn("demo agent", demo.description)
            self.assertEqual(demo.inputSchema["required"], ["prompt"])
            self.assertEqual(demo.inputSchema["properties"]["prompt"]["type"], "string")
        async with client(ALICE) as s:
            self.assertEqual([t.name for t in (await s.list_tools()).tools], ["ask_demo"])
            # A tool the caller may not call is an unknown tool.
            with self.assertRaises(Exception) as e:
                await s.call_tool("ask_lines", {"prompt": "hi"})
            self.assertIn("unknown tool", str(e.exception))
        async with client(BOB) as s:
            self.assertEqual(sorted(t.name for t in (await s.list_tools()).tools), ["ask_demo", "ask_lines"])

    async def test_a_call_is_a_turn_answered_in_the_result(self):
        async with client(ALICE) as s:
            r = await s.call_tool("ask_demo", {"prompt": "calc (1 + 2) * 28"})
        self.assertFalse(r.isError, r)
        self.assertEqual(len(r.content), 1)
        self.assertEqual(r.content[0].type, "text")
        self.assertIn("84", r.content[0].text)
        mine = [t for t in mcp_turns() if t["prompt"].startswith("calc (1 + 2) * 28")]
        self.assertTrue(mine, "the turn is in the turn API under protocol mcp")
        self.assertEqual(mine[0]["requester"], "caller:alice")

    async def test_a_failed_turn_and_bad_arguments_are_error_results(self):
        async with client(BOB) as s:
            r = await s.call_tool("ask_demo", {"prompt": "fail on purpose"})
            self.assertTrue(r.isError)
            self.assertIn("on purpose", r.content[0].text)
            self.assertIn("agent_failed", r.content[0].text)
            r = await s.call_tool("ask_demo", {"question": "hi"})
            self.assertTrue(r.isError)
            self.assertIn("prompt", r.content[0].text)

    async def test_progress_is_notified_while_the_turn_streams(self):
        seen = []

        async def progress(value, total, message):
            seen.append((value, message))

        async with client(BOB) as s:
            r = await s.call_tool("ask_lines", {"prompt": "go"}, progress_callback=progress)
        self.assertFalse(r.isError, r)
        self.assertEqual(r.content[0].text.split(), ["one", "two"])
        counters = [v for v, _ in seen]
        self.assertEqual(counters, sorted(set(counters)), "the counter only goes up")
        said = "".join(m or "" for _, m in seen)
        self.assertIn("one", said)
        self.assertIn("two", said)
        # The lines came as the command wrote them, as more than one notification.
        self.assertGreaterEqual(len([m for _, m in seen if m and m.strip() in ("one", "two")]), 2, seen)

    async def test_a_question_is_elicited_and_the_answer_ends_the_turn(self):
        asked = []

        async def answer(context, params):
            asked.append(params)
            schema = params.requestedSchema
            if "choice" in schema["properties"]:
                self.assertEqual(schema["properties"]["choice"]["enum"], ["red", "blue"])
                return types.ElicitResult(action="accept", content={"choice": "blue"})
            return types.ElicitResult(action="accept", content={"confirmed": True})

        async with client(BOB, elicitation_callback=answer) as s:
            r = await s.call_tool("ask_demo", {"prompt": "ask Which colour? | red | blue"})
            self.assertFalse(r.isError, r)
            self.assertEqual(r.content[0].text, "blue")
            self.assertEqual(asked[0].message, "Which colour?")
            r = await s.call_tool("ask_demo", {"prompt": "confirm Deploy now?"})
            self.assertFalse(r.isError, r)
            self.assertEqual(r.content[0].text, "yes")
            self.assertEqual(asked[1].requestedSchema["properties"]["confirmed"]["type"], "boolean")

    async def test_a_question_answered_elsewhere_is_withdrawn_from_the_client(self):
        prompt = "confirm Answered by the operator?"
        asked = asyncio.Event()
        withdrawals = []
        withdrawn = asyncio.Event()

        def tap(m):
            root = getattr(getattr(m, "message", None), "root", None)
            if getattr(root, "method", None) == "notifications/cancelled":
                withdrawals.append(root.params)
                withdrawn.set()

        async def a_person_who_answers_late(context, params):
            asked.set()
            # The form stays up until the server withdraws it (or 10 s); the late answer is ignored.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(withdrawn.wait(), 10)
            self.elicitation_id = context.request_id
            return types.ElicitResult(action="accept", content={"confirmed": False})

        async with client(BOB, elicitation_callback=a_person_who_answers_late, tap=tap) as s:
            call = asyncio.create_task(s.call_tool("ask_demo", {"prompt": prompt}))
            await asyncio.wait_for(asked.wait(), 10)
            turn = [t for t in mcp_turns() if t["prompt"] == prompt][0]
            req = urllib.request.Request(
                READY["http"] + f"/api/v1/turns/{turn['id']}/answer",
                data=json.dumps({"choices": ["yes"]}).encode(), method="POST",
                headers={"Authorization": f"Bearer {READY['http_token']}",
                         "Content-Type": "application/json"})
            await asyncio.to_thread(urllib.request.urlopen, req, timeout=10)
            r = await asyncio.wait_for(call, 20)
        self.assertFalse(r.isError, r)
        self.assertEqual(r.content[0].text, "yes", "the operator's answer, not the late one")
        self.assertEqual(len(withdrawals), 1, withdrawals)
        self.assertEqual(withdrawals[0]["requestId"], self.elicitation_id, withdrawals)
        self.assertIn("settled elsewhere", withdrawals[0]["reason"])

    async def test_a_declined_or_dismissed_question(self):
        async def decline(context, params):
            return types.ElicitResult(action="decline")

        async def dismiss(context, params):
            return types.ElicitResult(action="cancel")

        async with client(BOB, elicitation_callback=decline) as s:
            r = await s.call_tool("ask_demo", {"prompt": "approve rm -rf /tmp/x"})
            self.assertFalse(r.isError, r)
            self.assertEqual(r.content[0].text, "declined")
        async with client(BOB, elicitation_callback=dismiss) as s:
            r = await s.call_tool("ask_demo", {"prompt": "confirm Really?"})
            self.assertTrue(r.isError, r)
            self.assertIn("cancelled", r.content[0].text)

    async def test_a_question_to_a_client_without_elicitation_fails_saying_so(self):
        async with client(BOB) as s:
            r = await s.call_tool("ask_demo", {"prompt": "confirm Deploy now?"})
        self.assertTrue(r.isError, r)
        self.assertIn("cannot answer questions", r.content[0].text)
        self.assertIn("elicitation", r.content[0].text)

    async def _ended(self, prompt):
        deadline = time.monotonic() + CANCEL_SEEN_WITHIN
        while time.monotonic() < deadline:
            mine = [t for t in mcp_turns() if t["prompt"] == prompt]
            if mine and mine[0]["state"] == "ended":
                return mine[0]
            await asyncio.sleep(0.1)
        return None

    async def test_cancelled_notification_cancels_the_turn(self):
        prompt = "sleep 20000"
        started = asyncio.Event()

        async def progress(value, total, message):
            started.set()

        async with client(BOB) as s:
            request_id = s._request_id  # the id the SDK gives the next request
            call = asyncio.create_task(s.call_tool("ask_demo", {"prompt": prompt}, progress_callback=progress))
            await asyncio.wait_for(started.wait(), 10)
            await s.send_notification(types.ClientNotification(types.CancelledNotification(
                params=types.CancelledNotificationParams(requestId=request_id, reason="the test cancels it"))))
            ended = await self._ended(prompt)
            # No result comes for a cancelled request (the specification): the client gives up on it.
            call.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await call
        self.assertIsNotNone(ended, f"the turn still runs {CANCEL_SEEN_WITHIN} s after its call was cancelled")
        self.assertEqual(ended["ended_as"], "cancelled", ended)

    async def test_a_session_ended_mid_call_cancels_its_turn(self):
        prompt = "sleep 25000"
        started = asyncio.Event()

        async def progress(value, total, message):
            started.set()

        async with client(BOB) as s:
            call = asyncio.create_task(s.call_tool("ask_demo", {"prompt": prompt}, progress_callback=progress))
            await asyncio.wait_for(started.wait(), 10)
            call.cancel()
        ended = await self._ended(prompt)
        self.assertIsNotNone(ended, f"the turn still runs {CANCEL_SEEN_WITHIN} s after its client left")
        self.assertEqual(ended["ended_as"], "cancelled", ended)

    async def test_a_token_is_required(self):
        r = httpx.post(READY["http"] + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                       headers={"Accept": "application/json, text/event-stream"})
        self.assertEqual(r.status_code, 401)
        self.assertEqual(r.headers["www-authenticate"], "Bearer")
        self.assertIn("bearer token", r.json()["error"]["message"])
        # The SDK raises the 401 as an HTTP error out of its transport: the session never initializes.
        with self.assertRaises(BaseExceptionGroup) as e:
            async with client("wrong-" + "x" * 40, read_timeout=3):
                pass
        http_errors = e.exception.subgroup(lambda x: isinstance(x, httpx.HTTPStatusError))
        self.assertIsNotNone(http_errors, e.exception)
        self.assertEqual(_leaves(http_errors)[0].response.status_code, 401)
        body = r.text
        self.assertNotIn(READY["http_token"], body)


if __name__ == "__main__":
    unittest.main()

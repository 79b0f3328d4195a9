"""The A2A front against the real daemon, with the official A2A Python SDK (`a2a-sdk` 1.3.0) as the client.

Starts its own `agentwire serve` (`$AGENTWIRE_BIN`, default target/debug/agentwire) on loopback ports with
two agents on the `a2a` front (the demo agent, and a model agent whose model is a fake OpenAI-compatible
server run here, which records the messages it is sent), and two callers with tokens of their own: alice
may call every agent, bob only the demo agent. Every test goes through the SDK's own client (the card
resolved from the daemon, the binding it picks from the card, its headers and its error mapping), on both
bindings where the behaviour is per binding. Run by scripts/test.sh:
`target/tools/venv/bin/python -m unittest discover -s interop/a2a-py -v`.
"""

import asyncio
import http.server
import json
import os
import queue
import signal
import subprocess
import tempfile
import threading
import unittest
import urllib.request
import uuid
from pathlib import Path

import httpx
from a2a.client import A2ACardResolver, A2AClientError, ClientConfig, create_client
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import (
    InvalidParamsError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
    VersionNotSupportedError,
)

REPO = Path(__file__).resolve().parents[2]
# The daemon opens its files and starts its relay and HTTP server before its ready line.
DAEMON_READY_TIMEOUT = 30
# How long a stopping daemon may take (it drains running turns; none run at the end of a test).
STOP_GRACE = 15
# How long a test waits for a task the demo agent runs in well under a second.
TASK_WAIT = 20
ALICE = "alice-" + "a" * 40
BOB = "bob-" + "b" * 40
BINDINGS = ["JSONRPC", "HTTP+JSON"]


class FakeModel(http.server.ThreadingHTTPServer):
    """A model server speaking the chat completions API: it answers "model heard N messages" and keeps
    every request's messages."""

    def __init__(self):
        super().__init__(("127.0.0.1", 0), FakeModelHandler)
        self.requests = []


class FakeModelHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        self._json({"object": "list", "data": [{"id": "fake", "object": "model"}]})

    def _json(self, value):
        body = json.dumps(value).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers["content-length"])))
        self.server.requests.append(request["messages"])
        text = f"model heard {len(request['messages'])} messages"
        usage = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
        if not request.get("stream"):
            self._json({
                "id": "x", "object": "chat.completion", "model": "fake",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": usage,
            })
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        chunks = [
            {"choices": [{"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": None}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            {"choices": [], "usage": usage},
        ]
        for c in chunks:
            c.update({"id": "x", "object": "chat.completion.chunk", "model": "fake"})
            self.wfile.write(f"data: {json.dumps(c)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


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
    global TMP, DAEMON, READY, LOG, MODEL
    TMP = tempfile.mkdtemp(prefix="agentwire-a2a-")
    MODEL = FakeModel()
    threading.Thread(target=MODEL.serve_forever, daemon=True).start()
    config = Path(TMP) / "agentwire.toml"
    config.write_text(f"""
[agents.model]
kind = "openai"
base_url = "http://127.0.0.1:{MODEL.server_address[1]}/v1"
models = ["fake"]
expose = ["a2a"]

[[http.callers]]
name = "alice"
token_env = "ALICE_TOKEN"

[[http.callers]]
name = "bob"
token_env = "BOB_TOKEN"
agents = ["demo"]
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
    MODEL.shutdown()


def operator():
    return READY["http_token"]


def message(text, context_id=None, task_id=None):
    m = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=text)])
    if context_id:
        m.context_id = context_id
    if task_id:
        m.task_id = task_id
    return SendMessageRequest(message=m)


def artifact_text(task):
    return "".join(p.text for a in task.artifacts for p in a.parts)


def turn_api(path):
    req = urllib.request.Request(READY["http"] + path,
                                 headers={"Authorization": f"Bearer {READY['http_token']}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


class A2aFront(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.https = []

    async def asyncTearDown(self):
        for h in self.https:
            await h.aclose()

    async def client(self, token, binding="JSONRPC", agent=None, streaming=False, polling=False):
        """The SDK's client, made as its documentation says: the card resolved from the base URL (the
        daemon's, or an agent's under /a2a/), the binding chosen from the card's interfaces; `token`
        None sends no Authorization header."""
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        http = httpx.AsyncClient(headers=headers, timeout=TASK_WAIT)
        self.https.append(http)
        config = ClientConfig(httpx_client=http, supported_protocol_bindings=[binding],
                              streaming=streaming, polling=polling)
        base = READY["http"] + (f"/a2a/{agent}" if agent else "")
        return await create_client(base, client_config=config)

    async def send(self, client, request):
        """The task `send_message` ends with (its last event's)."""
        last = None
        async for event in client.send_message(request):
            last = event
        self.assertTrue(last.HasField("task"), last)
        return last.task

    async def test_cards_are_public_and_name_both_bindings(self):
        async with httpx.AsyncClient(timeout=10) as anonymous:
            root = await A2ACardResolver(anonymous, READY["http"]).get_agent_card()
            model = await A2ACardResolver(anonymous, READY["http"] + "/a2a/model").get_agent_card()
        self.assertEqual(root.name, "demo")
        bindings = [(i.protocol_binding, i.protocol_version) for i in root.supported_interfaces]
        self.assertEqual(bindings, [("JSONRPC", "1.0"), ("HTTP+JSON", "1.0")])
        self.assertEqual({i.url for i in root.supported_interfaces}, {READY["http"] + "/a2a/demo"})
        self.assertTrue(root.capabilities.streaming)
        self.assertFalse(root.capabilities.push_notifications)
        self.assertEqual([s.id for s in root.skills], ["calculator", "shell"])
        self.assertEqual(root.security_schemes["bearer"].http_auth_security_scheme.scheme, "Bearer")
        self.assertIn("bearer", root.security_requirements[0].schemes)
        self.assertEqual(model.name, "model")
        self.assertEqual(model.supported_interfaces[0].url, READY["http"] + "/a2a/model")
        raw = urllib.request.urlopen(READY["http"] + "/.well-known/agent-card.json", timeout=10).read().decode()
        for secret in [READY["http_token"], ALICE, BOB]:
            self.assertNotIn(secret, raw)
        for word in ["token", "secret", "password", "apikey"]:
            self.assertNotIn(word, raw.lower())

    async def test_a_missing_or_wrong_token_is_refused_on_both_bindings(self):
        for binding in BINDINGS:
            for token in ["wrong-" + "w" * 40, None]:
                c = await self.client(token, binding)
                with self.assertRaises(A2AClientError) as e:
                    await c.get_task(GetTaskRequest(id="whatever"))
                self.assertIn("401", str(e.exception), binding)

    async def test_a_blocking_message_completes_on_both_bindings(self):
        for binding in BINDINGS:
            c = await self.client(ALICE, binding)
            task = await self.send(c, message("calc (1 + 2) * 28"))
            self.assertEqual(task.status.state, TaskState.TASK_STATE_COMPLETED, binding)
            self.assertEqual(artifact_text(task), "84")
            got = await c.get_task(GetTaskRequest(id=task.id, history_length=10))
            self.assertEqual(got.status.state, TaskState.TASK_STATE_COMPLETED)
            self.assertEqual(got.history[0].role, Role.ROLE_USER)
            self.assertEqual(got.history[0].parts[0].text, "calc (1 + 2) * 28")
            self.assertEqual(got.context_id, task.context_id)
            self.assertTrue(got.status.HasField("timestamp"))
        turns = turn_api("/api/v1/turns?protocol=a2a&limit=500")["turns"]
        mine = [t for t in turns if t["id"] == f"a2a:{task.id}"]
        self.assertEqual(len(mine), 1, turns)
        self.assertEqual(mine[0]["requester"], "caller:alice")

    async def test_a_failure_is_failed_with_its_message(self):
        c = await self.client(operator(), "HTTP+JSON")
        task = await self.send(c, message("fail on purpose"))
        self.assertEqual(task.status.state, TaskState.TASK_STATE_FAILED)
        self.assertIn("on purpose", task.status.message.parts[0].text)

    async def test_a_message_sent_at_once_is_polled_to_its_end(self):
        for binding in BINDINGS:
            c = await self.client(BOB, binding, polling=True)
            task = await self.send(c, message("sleep 300"))
            self.assertIn(task.status.state, [TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING])
            for _ in range(TASK_WAIT * 10):
                task = await c.get_task(GetTaskRequest(id=task.id))
                if task.status.state == TaskState.TASK_STATE_COMPLETED:
                    break
                await asyncio.sleep(0.1)
            self.assertEqual(task.status.state, TaskState.TASK_STATE_COMPLETED, binding)
            self.assertEqual(artifact_text(task), "slept 300 ms")

    async def test_a_streamed_message_is_the_task_then_its_updates(self):
        for binding in BINDINGS:
            c = await self.client(ALICE, binding, streaming=True)
            events = [e async for e in c.send_message(message("hello there"))]
            self.assertTrue(events[0].HasField("task"), binding)
            chunks = [e.artifact_update for e in events if e.HasField("artifact_update")]
            self.assertGreaterEqual(len(chunks), 2, events)
            self.assertEqual("".join(p.text for a in chunks for p in a.artifact.parts), "You said: hello there")
            self.assertTrue(chunks[-1].last_chunk)
            self.assertTrue(events[-1].HasField("status_update"))
            self.assertEqual(events[-1].status_update.status.state, TaskState.TASK_STATE_COMPLETED)
            self.assertTrue(all(a.task_id == events[0].task.id for a in chunks))

    async def test_a_question_is_input_required_and_the_answer_finishes_the_task(self):
        for binding in BINDINGS:
            c = await self.client(ALICE, binding)
            task = await self.send(c, message("ask Which colour? | Red | Green"))
            self.assertEqual(task.status.state, TaskState.TASK_STATE_INPUT_REQUIRED, binding)
            asked = task.status.message.parts[0].text
            self.assertIn("Which colour?", asked)
            self.assertIn("Green", asked)
            options = task.status.message.parts[1].data.struct_value["options"]
            self.assertEqual([o["label"] for o in options], ["Red", "Green"])
            with self.assertRaises(InvalidParamsError) as e:
                await self.send(c, message("Blue", task.context_id, task.id))
            self.assertIn("Green", str(e.exception))
            done = await self.send(c, message("green", task.context_id, task.id))
            self.assertEqual(done.status.state, TaskState.TASK_STATE_COMPLETED)
            self.assertEqual(artifact_text(done), "Green")
            # The history: the message, the question, the client's answer, the agent's last word.
            got = await c.get_task(GetTaskRequest(id=task.id, history_length=10))
            roles = [m.role for m in got.history]
            self.assertEqual(roles[:3], [Role.ROLE_USER, Role.ROLE_AGENT, Role.ROLE_USER], binding)
            self.assertIn("Green", got.history[2].parts[0].text, binding)
            with self.assertRaises(UnsupportedOperationError):
                await self.send(c, message("red", task.context_id, task.id))

    async def test_a_streamed_question_stops_the_stream_and_the_answer_streams_to_the_end(self):
        c = await self.client(ALICE, "HTTP+JSON", streaming=True)
        events = [e async for e in c.send_message(message("confirm Proceed?"))]
        last = events[-1].status_update
        self.assertEqual(last.status.state, TaskState.TASK_STATE_INPUT_REQUIRED)
        answer = [e async for e in c.send_message(message("yes", last.context_id, last.task_id))]
        self.assertEqual(answer[-1].status_update.status.state, TaskState.TASK_STATE_COMPLETED)
        final = await c.get_task(GetTaskRequest(id=last.task_id))
        self.assertEqual(artifact_text(final), "yes")

    async def test_cancel_ends_a_task_and_a_finished_one_is_not_cancelable(self):
        for binding in BINDINGS:
            c = await self.client(BOB, binding, polling=True)
            task = await self.send(c, message("sleep 60000"))
            with self.assertRaises(TaskNotFoundError):
                alice = await self.client(ALICE, binding)
                await alice.cancel_task(CancelTaskRequest(id=task.id))
            cancelled = await c.cancel_task(CancelTaskRequest(id=task.id))
            self.assertEqual(cancelled.status.state, TaskState.TASK_STATE_CANCELED, binding)
            with self.assertRaises(TaskNotCancelableError):
                await c.cancel_task(CancelTaskRequest(id=task.id))

    async def test_two_subscribers_see_the_same_updates_to_the_end(self):
        for binding in BINDINGS:
            c = await self.client(ALICE, binding, polling=True)
            task = await self.send(c, message("sleep 800"))
            # Two subscribers, alice's own and the operator's (who sees every task).
            mine = await self.client(ALICE, binding, streaming=True)
            watcher = await self.client(operator(), binding, streaming=True)

            async def follow(client):
                return [e async for e in client.subscribe(SubscribeToTaskRequest(id=task.id))]

            one, two = await asyncio.gather(follow(mine), follow(watcher))
            for events in (one, two):
                self.assertEqual(events[0].task.id, task.id, binding)
                self.assertEqual(events[-1].status_update.status.state, TaskState.TASK_STATE_COMPLETED)
                final = [e.artifact_update for e in events if e.HasField("artifact_update")][-1]
                self.assertEqual(final.artifact.parts[0].text, "slept 800 ms")
            with self.assertRaises(UnsupportedOperationError):
                await follow(mine)
            bob = await self.client(BOB, binding, streaming=True)
            with self.assertRaises(TaskNotFoundError):
                await follow(bob)
            with self.assertRaises(TaskNotFoundError):
                await bob.get_task(GetTaskRequest(id=task.id))

    async def test_each_caller_lists_its_own_tasks_and_the_operator_everyones(self):
        context = "ctx-" + uuid.uuid4().hex
        alice = await self.client(ALICE, "HTTP+JSON")
        bob = await self.client(BOB, "JSONRPC")
        a1 = await self.send(alice, message("quick one", context))
        a2 = await self.send(alice, message("quick two", context))
        b1 = await self.send(bob, message("quick three", context))
        mine = await alice.list_tasks(ListTasksRequest(context_id=context))
        self.assertEqual([t.id for t in mine.tasks], [a2.id, a1.id])
        self.assertEqual(mine.next_page_token, "")
        self.assertEqual(mine.total_size, 2)
        theirs = await bob.list_tasks(ListTasksRequest(context_id=context))
        self.assertEqual([t.id for t in theirs.tasks], [b1.id])
        everyone = await (await self.client(operator(), "JSONRPC")).list_tasks(
            ListTasksRequest(context_id=context, page_size=2))
        self.assertEqual([t.id for t in everyone.tasks], [b1.id, a2.id])
        self.assertNotEqual(everyone.next_page_token, "")
        rest = await (await self.client(operator(), "HTTP+JSON")).list_tasks(
            ListTasksRequest(context_id=context, page_size=2, page_token=everyone.next_page_token,
                             include_artifacts=True))
        self.assertEqual([t.id for t in rest.tasks], [a1.id])
        self.assertEqual(artifact_text(rest.tasks[0]), "one")
        done = await alice.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_COMPLETED))
        self.assertIn(a1.id, [t.id for t in done.tasks])
        working = await alice.list_tasks(ListTasksRequest(context_id=context, status=TaskState.TASK_STATE_WORKING))
        self.assertEqual(list(working.tasks), [])
        with self.assertRaises(TaskNotFoundError):
            await bob.get_task(GetTaskRequest(id=a1.id))
        with self.assertRaises(InvalidParamsError):
            await alice.list_tasks(ListTasksRequest(page_size=101))

    async def test_a_context_gives_the_model_its_earlier_turns_and_a_new_one_none(self):
        c = await self.client(ALICE, agent="model")
        first = await self.send(c, message("first words"))
        self.assertEqual(first.status.state, TaskState.TASK_STATE_COMPLETED, first)
        heard = len(MODEL.requests)
        second = await self.send(c, message("second words", first.context_id))
        self.assertEqual(second.context_id, first.context_id)
        said = json.dumps(MODEL.requests[heard])
        self.assertIn("first words", said)
        self.assertIn(artifact_text(first), said)
        self.assertIn("second words", said)
        heard = len(MODEL.requests)
        fresh = await self.send(c, message("third words"))
        self.assertNotEqual(fresh.context_id, first.context_id)
        said = json.dumps(MODEL.requests[heard])
        self.assertNotIn("first words", said)
        self.assertIn("third words", said)

    async def test_the_specs_errors(self):
        for binding in BINDINGS:
            c = await self.client(operator(), binding)
            with self.assertRaises(TaskNotFoundError):
                await c.get_task(GetTaskRequest(id="no-such-task"))
            with self.assertRaises(PushNotificationNotSupportedError):
                await c.create_task_push_notification_config(
                    TaskPushNotificationConfig(task_id="x", url="https://example.com/hook"))
        # The SDK sends A2A-Version 1.0 itself; another version is refused on both bindings.
        headers = {"Authorization": f"Bearer {operator()}", "A2A-Version": "0.3"}
        for binding in BINDINGS:
            http = httpx.AsyncClient(headers=headers, timeout=TASK_WAIT)
            self.https.append(http)
            config = ClientConfig(httpx_client=http, supported_protocol_bindings=[binding])
            old = await create_client(READY["http"], client_config=config)
            with self.assertRaises(VersionNotSupportedError):
                await old.get_task(GetTaskRequest(id="x"))
        async with httpx.AsyncClient(timeout=10) as raw:
            url = READY["http"] + "/a2a/demo"
            auth = {"Authorization": f"Bearer {operator()}", "Content-Type": "application/json"}
            cases = [("{not json", -32700), ("[]", -32600),
                     ('{"jsonrpc":"2.0","id":1,"method":"NoSuchMethod"}', -32601),
                     ('{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{}}}', -32602)]
            for body, code in cases:
                r = await raw.post(url, content=body, headers=auth)
                self.assertEqual(r.json()["error"]["code"], code, body)
            # No A2A-Version at all: served as 1.0.
            r = await raw.post(url, headers=auth, content='{"jsonrpc":"2.0","id":1,"method":"ListTasks"}')
            self.assertIn("tasks", r.json()["result"])


if __name__ == "__main__":
    unittest.main()

"""The OpenAI-compatible front against the real daemon, with the official `openai` Python SDK as the client.

Starts its own `agentwire serve` (`$AGENTWIRE_BIN`, default target/debug/agentwire) on loopback ports with
three agents on the `openai` front (the demo agent, a command agent that streams its lines or sleeps, and a
model agent whose model is a fake OpenAI server run here, which records the messages it is sent), and two
callers with tokens of their own: alice may call only the demo agent, bob every agent. Run by
scripts/test.sh: `target/tools/venv/bin/python -m unittest discover -s interop/openai-py -v`.
"""

import http.server
import json
import os
import queue
import signal
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.request
from pathlib import Path

import httpx
import openai

REPO = Path(__file__).resolve().parents[2]
# The daemon opens its files and starts its relay and HTTP server before its ready line.
DAEMON_READY_TIMEOUT = 30
# How long a stopping daemon may take (it drains running turns; none run at the end of a test).
STOP_GRACE = 15
ALICE = "alice-" + "a" * 40
BOB = "bob-" + "b" * 40


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
        body = json.dumps({"object": "list", "data": [{"id": "fake", "object": "model"}]}).encode()
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
            body = json.dumps({
                "id": "x", "object": "chat.completion", "model": "fake",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": usage,
            }).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
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
    TMP = tempfile.mkdtemp(prefix="agentwire-openai-")
    MODEL = FakeModel()
    threading.Thread(target=MODEL.serve_forever, daemon=True).start()
    config = Path(TMP) / "agentwire.toml"
    config.write_text(f"""
[agents.lines]
kind = "cmd"
command = ["sh", "-c", "read p; case \\"$p\\" in sleep*) echo started; sleep 30;; *) echo one; sleep 0.2; echo two;; esac"]
expose = ["openai"]

[agents.model]
kind = "openai"
base_url = "http://127.0.0.1:{MODEL.server_address[1]}/v1"
models = ["fake"]
expose = ["openai"]

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
    MODEL.shutdown()


def client(token):
    return openai.OpenAI(base_url=READY["http"] + "/v1", api_key=token, max_retries=0, timeout=30)


def turn_api(path, token=None):
    req = urllib.request.Request(READY["http"] + path,
                                 headers={"Authorization": f"Bearer {token or READY['http_token']}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


class OpenAiFront(unittest.TestCase):
    def setUp(self):
        self.operator = client(READY["http_token"])

    def test_models_are_the_agents_each_caller_may_call(self):
        every = sorted(m.id for m in self.operator.models.list())
        self.assertEqual(every, ["demo", "lines", "model"])
        self.assertEqual([m.id for m in client(ALICE).models.list()], ["demo"])
        self.assertEqual(sorted(m.id for m in client(BOB).models.list()), every)
        self.assertEqual(self.operator.models.retrieve("lines").id, "lines")
        with self.assertRaises(openai.NotFoundError):
            client(ALICE).models.retrieve("lines")

    def test_a_completion_answers_with_usage(self):
        r = self.operator.chat.completions.create(
            model="demo", messages=[{"role": "user", "content": "calc (1 + 2) * 28"}],
            temperature=0.2, max_tokens=100, user="someone")
        self.assertEqual(r.object, "chat.completion")
        self.assertIn("84", r.choices[0].message.content)
        self.assertEqual(r.choices[0].message.role, "assistant")
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens)
        # The turn is in the turn API, as the openai front's.
        turns = turn_api("/api/v1/turns?protocol=openai&limit=500")["turns"]
        self.assertTrue(any(t["id"] == r.id or "calc" in t["prompt"] for t in turns), turns)

    def test_a_streamed_completion_comes_in_chunks_of_one_id(self):
        stream = client(BOB).chat.completions.create(
            model="lines", messages=[{"role": "user", "content": "lines please"}], stream=True,
            stream_options={"include_usage": True})
        chunks = list(stream)
        self.assertEqual({c.id for c in chunks}.__len__(), 1, chunks)
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        self.assertEqual(text.split(), ["one", "two"])
        finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        self.assertEqual(finishes, ["stop"])
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual(chunks[-1].usage.total_tokens,
                         chunks[-1].usage.prompt_tokens + chunks[-1].usage.completion_tokens)
        # More than one delta: the lines came as the command wrote them.
        deltas = [c for c in chunks if c.choices and c.choices[0].delta.content]
        self.assertGreaterEqual(len(deltas), 2, chunks)

    def test_the_messages_are_the_history_the_model_agent_gets_in_order(self):
        before = len(MODEL.requests)
        r = client(BOB).chat.completions.create(model="model", messages=[
            {"role": "user", "content": "first question"},
            {"role": "assistant", "content": "first answer"},
            {"role": "user", "content": [{"type": "text", "text": "second question"}]},
        ])
        self.assertIn("model heard", r.choices[0].message.content)
        sent = MODEL.requests[before]
        said = [(m["role"], m["content"]) for m in sent if m["role"] in ("user", "assistant")]
        self.assertEqual(said, [("user", "first question"), ("assistant", "first answer"),
                                ("user", "second question")])

    def test_closing_the_stream_cancels_the_turn(self):
        stream = client(BOB).chat.completions.create(
            model="lines", messages=[{"role": "user", "content": "sleep now"}], stream=True)
        first = next(iter(stream))
        turn_id = first.id
        for c in stream:
            if c.choices and (c.choices[0].delta.content or "").strip() == "started":
                break
        stream.close()
        deadline = time.monotonic() + 10
        ended = None
        while time.monotonic() < deadline:
            turns = turn_api("/api/v1/turns?protocol=openai&limit=500")["turns"]
            mine = [t for t in turns if t["prompt"].startswith("sleep now")]
            if mine and mine[0]["state"] == "ended":
                ended = mine[0]
                break
            time.sleep(0.1)
        self.assertIsNotNone(ended, f"the turn {turn_id} still runs 10 s after its stream was closed")
        self.assertEqual(ended["ended_as"], "cancelled", ended)

    def test_errors_come_in_openai_shape(self):
        with self.assertRaises(openai.AuthenticationError):
            client("wrong-" + "x" * 40).models.list()
        r = httpx.get(READY["http"] + "/v1/models")
        self.assertEqual(r.status_code, 401)
        self.assertIn("message", r.json()["error"])
        with self.assertRaises(openai.NotFoundError) as e:
            self.operator.chat.completions.create(model="nobody", messages=[{"role": "user", "content": "hi"}])
        self.assertEqual(e.exception.status_code, 404)
        with self.assertRaises(openai.BadRequestError):
            self.operator.chat.completions.create(model="demo", messages=[])
        with self.assertRaises(openai.BadRequestError):
            self.operator.chat.completions.create(
                model="demo", messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x"}])
        r = httpx.post(READY["http"] + "/v1/chat/completions", content=b"{not json",
                       headers={"authorization": f"Bearer {BOB}", "content-type": "application/json"})
        self.assertEqual(r.status_code, 400)
        self.assertIn("message", r.json()["error"])

    def test_a_caller_reaches_only_its_agents_and_no_operator_route(self):
        with self.assertRaises(openai.NotFoundError):
            client(ALICE).chat.completions.create(model="lines", messages=[{"role": "user", "content": "hi"}])
        r = client(ALICE).chat.completions.create(model="demo", messages=[{"role": "user", "content": "hello alice"}])
        self.assertTrue(r.choices[0].message.content)
        # Every turn records its caller: the operator's turn list shows it and filters by it.
        mine = turn_api("/api/v1/turns?protocol=openai&requester=caller:alice&limit=500")["turns"]
        self.assertTrue(any(t["prompt"].startswith("hello alice") for t in mine), mine)
        self.assertEqual({t["requester"] for t in mine}, {"caller:alice"})
        for token in (ALICE, BOB):
            r = httpx.get(READY["http"] + "/api/v1/turns", headers={"authorization": f"Bearer {token}"})
            self.assertEqual(r.status_code, 403, r.text)


if __name__ == "__main__":
    unittest.main()

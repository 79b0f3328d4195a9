"""fisk-ai prompts channel, from Python: nats-py against the real `agentwire serve --nats` daemon.

A caller written with other people's libraries (nats-py for NATS, jsonschema + referencing for the fisk-ai v1
JSON Schemas), so the worker's wire format is checked by code we did not write. Every test starts its own
nats-server (`$NATS_SERVER_BIN -a 127.0.0.1 -p -1`) and its own daemon (`$AGENTWIRE_BIN`, default
<repo>/target/debug/agentwire) on a temporary data dir, and stops both afterwards (SIGTERM, then SIGKILL).
The queued-jobs tests start the server with JetStream and the daemon with `[nats] jobs = true`, and publish
their jobs with nats-py's own JetStream client.

Every message received, and every request sent, is validated against the schema named by its `protocol`
(`io.choria.fisk-ai.v1.<name>` -> `<name>.json`; an unknown event kind -> `event.json`). The schemas are read
from `$AGENTWIRE_CONFORMANCE_DIR/fisk-ai-v1` or `<repo>/../shared/conformance/fisk-ai-v1`; without them the
protocol checks still run and the test says plainly that nothing was validated.

Run from the repository root:  python -m unittest discover -s interop/nats-py -v
`INTEROP_VERBOSE=1` prints every message sent and received.
"""

import asyncio
import itertools
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from datetime import datetime, timedelta, timezone
from pathlib import Path

import nats
import nats.errors
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
VERBOSE = os.environ.get("INTEROP_VERBOSE") == "1"

# --- Bounded waits. The demo agent answers in milliseconds; these bounds are for a loaded 2-core CI machine
# running a debug build, and only ever spent when something is wrong.
# nats-server binds its port in well under a second.
NATS_START_TIMEOUT = 10.0
# The daemon opens its SQLite files, starts the embedded relay and connects to NATS before its ready line.
DAEMON_READY_TIMEOUT = 30.0
# Connecting the test's own client to a local server.
CONNECT_TIMEOUT = 5.0
# A whole reply set (the same bound as SET_TIMEOUT in the worker's Rust tests).
SET_TIMEOUT = 15.0
# A single reply: discovery, or the ack to an elicit answer.
REPLY_TIMEOUT = 5.0
# After the message carrying the final header (or a service error), how long the inbox is watched for a
# stray message that should not exist. Long enough for anything already in flight on a local server.
TRAILING_QUIET = 0.3
# SIGTERM, then this long for the process to exit before SIGKILL. The daemon drains in-flight fisk-ai
# runs on shutdown; the tests leave none running, so it exits at once.
STOP_GRACE = 10.0

PREFIX = "io.choria.fisk-ai.v1."
FINAL_HEADER = "Fisk-AI-Stream-Final"
SERVICE_ERROR = "Nats-Service-Error"
SERVICE_ERROR_CODE = "Nats-Service-Error-Code"
KSUID = re.compile(r"^[0-9A-Za-z]{27}$")
IDENTITY = "pyworker"
SENDER = "pytester"


# --- Schemas -------------------------------------------------------------------------------------------


def _schema_dir():
    env = os.environ.get("AGENTWIRE_CONFORMANCE_DIR")
    candidates = [Path(env) / "fisk-ai-v1"] if env else []
    candidates.append(REPO.parent / "shared" / "conformance" / "fisk-ai-v1")
    for c in candidates:
        if c.is_dir() and any(c.glob("*.json")):
            return c
    return None


class Schemas:
    """Every fisk-ai v1 schema, registered under its `$id` (draft 2020-12), with a validator per file."""

    def __init__(self, directory):
        self.directory = directory
        self.by_name = {}
        resources = []
        for path in sorted(directory.glob("*.json")):
            schema = json.loads(path.read_text())
            Draft202012Validator.check_schema(schema)
            resources.append((schema["$id"], Resource.from_contents(schema, default_specification=DRAFT202012)))
            self.by_name[path.name[: -len(".json")]] = schema
        registry = Registry().with_resources(resources)
        self.validators = {n: Draft202012Validator(s, registry=registry) for n, s in self.by_name.items()}

    def name_for(self, protocol):
        if not isinstance(protocol, str) or not protocol.startswith(PREFIX):
            raise AssertionError(f"not a fisk-ai v1 protocol: {protocol!r}")
        name = protocol[len(PREFIX) :]
        if name in self.validators:
            return name
        if name.startswith("event."):
            return "event"  # a kind newer than these schemas: the framing is still checked
        raise AssertionError(f"no schema for protocol {protocol!r}")

    def errors(self, message):
        name = self.name_for(message.get("protocol"))
        return name, list(self.validators[name].iter_errors(message))


SCHEMA_DIR = _schema_dir()
SCHEMAS = Schemas(SCHEMA_DIR) if SCHEMA_DIR else None
NOT_VALIDATED = "conformance data not found: fisk-ai messages NOT validated against the schemas"
counts = {"validated": 0}


def setUpModule():
    if SCHEMAS is None:
        print(f"\n{NOT_VALIDATED}", file=sys.stderr)
    else:
        print(f"\nvalidating fisk-ai messages against {len(SCHEMAS.by_name)} schemas in {SCHEMA_DIR}", file=sys.stderr)


def tearDownModule():
    if SCHEMAS is None:
        print(f"\n{NOT_VALIDATED}", file=sys.stderr)
    else:
        print(f"\n{counts['validated']} fisk-ai messages (sent and received) validated against their schemas", file=sys.stderr)


def validate(message, what):
    """Fails unless `message` is valid for the schema its `protocol` names. `what` says where it came from."""
    if VERBOSE:
        print(f"  {what}: {json.dumps(message)}", file=sys.stderr)
    if SCHEMAS is None:
        return
    name, errs = SCHEMAS.errors(message)
    if errs:
        e = best_match(errs)
        # (A field refused by a `false` property schema is reported at its parent's path: a jsonschema quirk.)
        at = "/" + "/".join(str(p) for p in e.absolute_path)
        raise AssertionError(
            f"{what} fails {name}.json at {at}: {e.message}\n"
            f"  schema path: {'/'.join(str(p) for p in e.absolute_schema_path)}\n"
            f"  message: {json.dumps(message)}"
        )
    counts["validated"] += 1


# --- Messages ------------------------------------------------------------------------------------------

_ids = itertools.count(1)


def tag(prefix):
    """A fresh `request` value: one turn, one value."""
    return f"{prefix}{os.getpid()}x{next(_ids)}"


def message(name, request, **fields):
    body = {
        "protocol": PREFIX + name,
        "id": f"py{next(_ids)}",
        "request": request,
        "conversation": "pyconv",
        "sequence": 0,
        "time": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "sender": {"name": SENDER},
    }
    body.update(fields)
    return body


class Received:
    """One message of a reply set, or a service error / no-responders status in its place."""

    def __init__(self, msg):
        headers = msg.headers or {}
        self.headers = {k.lower(): v for k, v in headers.items()}
        self.final = FINAL_HEADER.lower() in self.headers
        self.service_error = None
        self.json = None
        if SERVICE_ERROR.lower() in self.headers:
            self.service_error = (self.headers.get(SERVICE_ERROR_CODE.lower(), ""), self.headers[SERVICE_ERROR.lower()])
        elif self.headers.get("status") == "503" and not msg.data:
            self.service_error = ("503", "no responders")
        else:
            self.json = json.loads(msg.data)

    @property
    def protocol(self):
        return (self.json or {}).get("protocol", "")

    @property
    def ends_set(self):
        return self.final or self.service_error is not None

    def __repr__(self):
        if self.service_error:
            return f"<service error {self.service_error}>"
        return f"<{'FINAL ' if self.final else ''}{json.dumps(self.json)}>"


class ReplySet:
    """A request published with a reply inbox; the whole set is read from that inbox."""

    def __init__(self, test, sub, request):
        self.test, self.sub, self.request = test, sub, request
        self.msgs = []
        self.done = False
        self.deadline = time.monotonic() + SET_TIMEOUT

    async def _next(self):
        left = self.deadline - time.monotonic()
        try:
            if left <= 0:
                raise nats.errors.TimeoutError
            raw = await self.sub.next_msg(timeout=left)
        except nats.errors.TimeoutError:
            self.test.fail(f"reply set {self.request} not finished within {SET_TIMEOUT} s: {self.msgs}")
        m = Received(raw)
        if m.json is not None:
            validate(m.json, f"message {len(self.msgs) + 1} of reply set {self.request}")
        self.msgs.append(m)
        self.done = m.ends_set
        return m

    async def until(self, pred):
        for m in self.msgs:
            if pred(m):
                return m
        while not self.done:
            m = await self._next()
            if pred(m):
                return m
        self.test.fail(f"no such message in reply set {self.request}: {self.msgs}")

    async def finish(self):
        while not self.done:
            await self._next()
        # Nothing may follow the end of a set.
        try:
            extra = await self.sub.next_msg(timeout=TRAILING_QUIET)
            self.test.fail(f"a message after the end of reply set {self.request}: {Received(extra)}; set: {self.msgs}")
        except nats.errors.TimeoutError:
            pass
        await self.sub.unsubscribe()
        return self.msgs


# --- Processes -----------------------------------------------------------------------------------------


def _tail(path, lines=40):
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _stop(proc):
    if proc is None:
        return
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_GRACE)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=STOP_GRACE)
    if proc.stdout is not None:
        proc.stdout.close()


def _nats_server_bin():
    env = os.environ.get("NATS_SERVER_BIN")
    if env:
        return env
    venv = REPO / "target" / "tools" / "venv" / "bin" / "nats-server"
    if venv.exists():
        return str(venv)
    found = shutil.which("nats-server")
    if not found:
        raise RuntimeError("nats-server not found: set NATS_SERVER_BIN (scripts/test.sh installs nats-server-bin)")
    return found


def _agentwire_bin():
    path = os.environ.get("AGENTWIRE_BIN") or str(REPO / "target" / "debug" / "agentwire")
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"{path} is not an executable: run `cargo build -p agentwire` or set AGENTWIRE_BIN")
    return path


def start_nats(tmp, jetstream=False):
    log = Path(tmp) / "nats-server.log"
    cmd = [_nats_server_bin(), "-a", "127.0.0.1", "-p", "-1"]
    if jetstream:
        cmd += ["-js", "-sd", str(Path(tmp) / "js")]
    with open(log, "wb") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=f)
    deadline = time.monotonic() + NATS_START_TIMEOUT
    pattern = re.compile(r"Listening for client connections on (\S+):(\d+)")
    while time.monotonic() < deadline:
        m = pattern.search(log.read_text(errors="replace"))
        if m:
            return proc, f"nats://127.0.0.1:{m.group(2)}"
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    _stop(proc)
    raise RuntimeError(f"nats-server did not start within {NATS_START_TIMEOUT} s:\n{_tail(log)}")


def start_daemon(tmp, nats_url, elicit, jobs=False):
    data = Path(tmp) / "data"
    log = Path(tmp) / "agentwire.log"
    cmd = [_agentwire_bin(), "serve", "--data-dir", str(data), "--relay-listen", "127.0.0.1:0",
           "--http-listen", "127.0.0.1:0", "--roost-socket", str(data / "roost.sock"),
           "--nats", nats_url, "--identity", IDENTITY]
    if elicit:
        cmd.append("--nats-elicit")
    if jobs:
        config = Path(tmp) / "agentwire.toml"
        config.write_text("[nats]\njobs = true\n")
        cmd += ["--config", str(config)]
    with open(log, "wb") as f:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=f, stdin=subprocess.DEVNULL)
    lines = queue.Queue()
    threading.Thread(target=lambda: lines.put(proc.stdout.readline()), daemon=True).start()
    try:
        line = lines.get(timeout=DAEMON_READY_TIMEOUT)
    except queue.Empty:
        line = b""
    if not line:
        _stop(proc)
        raise RuntimeError(f"agentwire printed no ready line within {DAEMON_READY_TIMEOUT} s:\n{_tail(log)}")
    return proc, json.loads(line), log


# --- Checks --------------------------------------------------------------------------------------------


class FiskTest(unittest.IsolatedAsyncioTestCase):
    ELICIT = False
    JOBS = False

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="agentwire-nats-py-")
        self.nats_proc = self.daemon = None
        try:
            self.nats_proc, url = start_nats(self.tmp, jetstream=self.JOBS)
            self.daemon, self.ready, self.daemon_log = start_daemon(self.tmp, url, self.ELICIT, self.JOBS)
        except BaseException:
            self.tearDown()
            raise
        self.assertEqual(self.ready.get("ready"), True, self.ready)
        self.assertEqual(self.ready["nats"]["identity"], IDENTITY, self.ready)
        self.url = self.ready["nats"]["url"]

    async def asyncSetUp(self):
        self.nc = await nats.connect(self.url, connect_timeout=CONNECT_TIMEOUT, max_reconnect_attempts=0)

    async def asyncTearDown(self):
        await self.nc.close()

    def tearDown(self):
        _stop(self.daemon)
        _stop(self.nats_proc)
        if VERBOSE and self.daemon is not None:
            print(f"--- agentwire log\n{_tail(self.daemon_log)}", file=sys.stderr)
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- sending

    async def open(self, subject, body):
        validate(body, "request sent")
        inbox = self.nc.new_inbox()
        sub = await self.nc.subscribe(inbox)
        await self.nc.publish(subject, json.dumps(body).encode(), reply=inbox)
        await self.nc.flush(timeout=REPLY_TIMEOUT)
        return ReplySet(self, sub, body.get("request"))

    async def task(self, body):
        return await (await self.open(f"choria.fisk-ai.task.{IDENTITY}", body)).finish()

    async def prompt(self, request, prompt, **fields):
        return await self.task(message("request.prompt", request, prompt=prompt, **fields))

    async def single(self, subject, body):
        """A request with one reply (discovery, an elicit answer)."""
        validate(body, "request sent")
        try:
            raw = await self.nc.request(subject, json.dumps(body).encode(), timeout=REPLY_TIMEOUT)
        except nats.errors.NoRespondersError:
            self.fail(f"no responders on {subject}")
        m = Received(raw)
        if m.json is not None:
            validate(m.json, f"reply on {subject}")
        return m

    # -- reply-set invariants

    def check_set(self, msgs, request, ends=("result", "error")):
        """Ack first, sequence 1.. without gaps, the final header on the last message only, the header echoed,
        the last message one of `ends`; returns it."""
        self.assertTrue(msgs, "an empty reply set")
        self.assertEqual(msgs[0].protocol, PREFIX + "ack", f"the ack comes first: {msgs}")
        for i, m in enumerate(msgs):
            self.assertIsNone(m.service_error, f"{msgs}")
            j = m.json
            self.assertEqual(j["sequence"], i + 1, f"sequence from 1 without gaps: {msgs}")
            self.assertEqual(m.final, i + 1 == len(msgs), f"the final header on the last message only: {msgs}")
            self.assertEqual(j["request"], request, m)
            self.assertEqual(j["conversation"], "pyconv", f"the conversation tag is echoed: {m}")
            self.assertEqual(j["sender"]["name"], IDENTITY, m)
            self.assertEqual(j.get("recipient", {}).get("name"), SENDER, m)
            self.check_header(j)
        last = msgs[-1]
        self.assertIn(last.protocol, [PREFIX + e for e in ends], f"a set ends in one of {ends}: {msgs}")
        return last

    def check_header(self, j):
        self.assertRegex(j["id"], KSUID, f"message ids are KSUIDs: {j}")
        t = datetime.fromisoformat(j["time"].replace("Z", "+00:00"))
        self.assertEqual(t.utcoffset(), timedelta(0), f"time is UTC: {j}")

    def texts(self, msgs, kind):
        return [m.json for m in msgs if m.protocol == PREFIX + f"event.{kind}"]


@unittest.skipIf(SCHEMAS is None, NOT_VALIDATED)
class SchemaValidator(unittest.TestCase):
    """The validator itself, so that a registry that resolves nothing cannot pass everything silently."""

    def ack(self, **fields):
        body = message("ack", "r1", accepted=True)
        body.update(fields)
        return body

    def test_refs_into_common_json_are_followed(self):
        self.assertEqual(SCHEMAS.errors(self.ack())[1], [])
        # `sender` is checked by common.json#/$defs/identity, `sequence` by common.json#/$defs/header.
        self.assertTrue(SCHEMAS.errors(self.ack(sender={"name": "not a name"}))[1])
        self.assertTrue(SCHEMAS.errors(self.ack(sequence=-1))[1])
        self.assertTrue(SCHEMAS.errors(self.ack(accepted="yes"))[1])
        with self.assertRaises(AssertionError):
            validate(self.ack(conversation_token="not/a/token"), "a bad ack")

    def test_unknown_event_kinds_fall_back_to_event_json(self):
        newer = message("event.someday", "r1", block={"x": 1})
        self.assertEqual(SCHEMAS.errors(newer), ("event", []))
        self.assertTrue(SCHEMAS.errors({k: v for k, v in newer.items() if k != "block"})[1])
        with self.assertRaises(AssertionError):
            SCHEMAS.name_for(PREFIX + "nosuch.kind")


class PromptsChannel(FiskTest):
    """`agentwire serve --nats ... --identity pyworker`, questions off."""

    async def test_a_prompt_a_follow_up_turn_and_a_read(self):
        # (a) a prompt: the calculator's call and result, one final text block, the result.
        r1 = tag("calc")
        set1 = await self.prompt(r1, "calc 2+3")
        last = self.check_set(set1, r1)
        ack = set1[0].json
        self.assertIs(ack["accepted"], True, ack)
        token = ack.get("conversation_token")
        self.assertIsInstance(token, str, f"an accepting ack carries conversation_token: {ack}")
        self.assertEqual(last.protocol, PREFIX + "result", set1)
        self.assertEqual(last.json["text"], "5", set1)
        self.assertEqual(last.json["stop_reason"], "end_turn", last)
        calls = self.texts(set1, "tool_call")
        results = self.texts(set1, "tool_result")
        self.assertEqual([c["block"]["name"] for c in calls], ["calculator"], set1)
        self.assertEqual([r["block"]["call_id"] for r in results], [calls[0]["block"]["id"]], set1)
        self.assertIs(results[0]["block"].get("is_error", False), False, results)
        finals = [t["block"]["text"] for t in self.texts(set1, "text") if t["block"].get("final")]
        self.assertEqual(finals, ["5"], f"one final text block: {set1}")
        usage1 = last.json["usage"]["input_tokens"]

        # (b) a follow-up turn with the token.
        r2 = tag("again")
        set2 = await self.prompt(r2, "hello there", conversation_token=token)
        last2 = self.check_set(set2, r2)
        self.assertEqual(set2[0].json.get("conversation_token"), token, "every accepting ack carries the token")
        self.assertEqual(last2.json["text"], "You said: hello there", set2)
        self.assertGreater(last2.json["usage"]["input_tokens"], usage1, "usage counts the whole conversation")

        # (c) the conversation read back between replay markers.
        r3 = tag("read")
        set3 = await self.task(message("request.read", r3, conversation_token=token, replay=200))
        result = self.check_set(set3, r3)
        # A read ends as a turn does: a result with no text after replay_end.
        self.assertEqual(result.protocol, PREFIX + "result", set3)
        self.assertEqual(result.json["stop_reason"], "end_turn", set3)
        self.assertEqual(result.json.get("text", ""), "", set3)
        end = set3[-2]
        self.assertEqual(set3[1].protocol, PREFIX + "event.status", set3)
        self.assertEqual(set3[1].json["block"].get("phase"), "replay_start", set3)
        self.assertEqual(end.protocol, PREFIX + "event.status", set3)
        self.assertEqual(end.json["block"].get("phase"), "replay_end", set3)
        self.assertEqual(result.json["usage"], end.json["block"]["usage"], set3)
        blocks = set3[2:-2]
        self.assertEqual(end.json["block"].get("count"), len(blocks), set3)
        self.assertIs(end.json["block"].get("truncated", False), False, set3)
        self.assertGreater(end.json["block"]["usage"]["input_tokens"], 0, end)
        prompts = [m.json["block"]["text"] for m in blocks if m.protocol == PREFIX + "event.prompt"]
        self.assertEqual(prompts, ["calc 2+3", "hello there"], set3)
        replayed = [m.json["block"]["text"] for m in blocks if m.protocol == PREFIX + "event.text"]
        self.assertIn("5", replayed, set3)
        self.assertIn("You said: hello there", replayed, set3)

    async def test_discovery(self):
        body = message("discovery.request", tag("disc"))
        reply = await self.single(f"choria.fisk-ai.discovery.{IDENTITY}", body)
        self.assertIsNone(reply.service_error, reply)
        card = reply.json
        self.assertEqual(card["protocol"], PREFIX + "discovery.reply", card)
        self.assertEqual(card["request"], body["request"], card)
        self.assertEqual(card["name"], IDENTITY, card)
        self.assertIsInstance(card["version"], str, card)
        # The worker serves no tools to peers: the card lists none (the agent's own are not a peer's to call).
        self.assertEqual(card["tools"], [], card)
        self.assertIs(card["telemetry"], False, card)
        self.check_header(card)

    async def test_an_invalid_request_is_a_400_service_error_before_any_ack(self):
        # A resume takes no prompt. Our own schemas must refuse it too, or this test is not testing that.
        bad = message("request.resume", tag("bad"), conversation_token="x", prompt="no")
        if SCHEMAS is not None:
            # (jsonschema reports a `false` property schema at the parent's path, so compare without it.)
            self.assertEqual(SCHEMAS.name_for(bad["protocol"]), "request.resume")
            self.assertTrue(SCHEMAS.errors(bad)[1], "the schemas refuse a resume with a prompt")
            fine = {k: v for k, v in bad.items() if k != "prompt"}
            self.assertEqual(SCHEMAS.errors(fine)[1], [], "and only because of the prompt")
        subject = f"choria.fisk-ai.task.{IDENTITY}"
        inbox = self.nc.new_inbox()
        sub = await self.nc.subscribe(inbox)
        await self.nc.publish(subject, json.dumps(bad).encode(), reply=inbox)
        msgs = await ReplySet(self, sub, bad["request"]).finish()
        self.assertEqual(len(msgs), 1, msgs)
        self.assertIsNotNone(msgs[0].service_error, f"a service error, not an ack: {msgs}")
        code, text = msgs[0].service_error
        self.assertEqual(code, "400", text)
        self.assertIn("/prompt", text)

        # A request tag over 64 characters (the worker builds subjects from it) is refused the same way.
        long = message("request.prompt", "a" * 65, prompt="hi")
        if SCHEMAS is not None:
            self.assertTrue(SCHEMAS.errors(long)[1], "the schemas refuse it too")
        inbox = self.nc.new_inbox()
        sub = await self.nc.subscribe(inbox)
        await self.nc.publish(subject, json.dumps(long).encode(), reply=inbox)
        msgs = await ReplySet(self, sub, long["request"]).finish()
        self.assertEqual([m.service_error[0] if m.service_error else m for m in msgs], ["400"], msgs)

    async def test_an_approval_without_elicit_is_declined_without_a_question(self):
        r = tag("appr")
        msgs = await self.prompt(r, "approve ls -l")
        self.assertEqual(self.check_set(msgs, r).json["text"], "declined", msgs)
        self.assertFalse([m for m in msgs if ".elicit." in m.protocol], msgs)


class PromptsChannelWithQuestions(FiskTest):
    """The same daemon with --nats-elicit: the run's questions come back on the reply set."""

    ELICIT = True

    async def ask(self, prompt, kind, answer):
        """Opens a prompt, waits for its `kind` question, answers it with `answer` fields, returns the set."""
        r = tag(kind)
        run = await self.open(f"choria.fisk-ai.task.{IDENTITY}", message("request.prompt", r, prompt=prompt))
        q = await run.until(lambda m: ".elicit.request." in m.protocol)
        self.assertEqual(q.protocol, PREFIX + f"elicit.request.{kind}", run.msgs)
        self.assertFalse(q.final, q)
        self.assertIsInstance(q.json.get("wait_ms"), int, q)
        reply = message(f"elicit.reply.{kind}", r, question_id=q.json["question_id"], **answer)
        ack = await self.single(f"choria.fisk-ai.elicit.{IDENTITY}.{r}", reply)
        self.assertIsNone(ack.service_error, ack)
        self.assertEqual(ack.protocol, PREFIX + "ack", ack)
        self.assertIs(ack.json["accepted"], True, ack)
        msgs = await run.finish()
        return q.json, self.check_set(msgs, r), msgs

    async def test_a_select_question_answered_on_the_elicit_subject(self):
        q, last, msgs = await self.ask("ask colour? | red | green", "select", {"index": 1})
        self.assertEqual(q["options"], ["red", "green"], q)
        self.assertEqual(last.protocol, PREFIX + "result", msgs)
        self.assertEqual(last.json["text"], "green", msgs)

    async def test_confirm_and_input_questions(self):
        _, last, msgs = await self.ask("confirm proceed?", "confirm", {"confirmed": False})
        self.assertEqual(last.json["text"], "no", msgs)
        _, last, msgs = await self.ask("input your name?", "input", {"value": "Ada"})
        self.assertEqual(last.json["text"], "Ada", msgs)

    async def test_an_approval_answered_once(self):
        q, last, msgs = await self.ask("approve rm -rf /tmp/x", "approve", {"choice": "once"})
        self.assertEqual(q["display"], "rm -rf /tmp/x", q)
        self.assertEqual(last.json["text"], "ran rm -rf /tmp/x", msgs)


class QueuedJobs(FiskTest):
    """The queued-jobs channel (`[nats] jobs = true`): jobs published with nats-py's own JetStream client."""

    JOBS = True

    async def enqueue(self, body):
        """Publishes `body` to the jobs stream naming a fresh inbox in `Fisk-AI-Reply-To`; the reply set."""
        if isinstance(body, dict):
            validate(body, "job sent")
            body = json.dumps(body).encode()
        inbox = self.nc.new_inbox()
        sub = await self.nc.subscribe(inbox)
        js = self.nc.jetstream()
        ack = await js.publish(f"choria.fisk-ai.jobs.{IDENTITY}", body, headers={"Fisk-AI-Reply-To": inbox})
        self.assertEqual(ack.stream, f"FISK_AI_JOBS_{IDENTITY}", ack)
        return sub

    async def test_a_job_is_answered_on_its_reply_subject_and_leaves_the_queue(self):
        r = tag("job")
        sub = await self.enqueue(message("request.prompt", r, prompt="calc 2+3"))
        msgs = await ReplySet(self, sub, r).finish()
        last = self.check_set(msgs, r)
        self.assertIs(msgs[0].json["accepted"], True, msgs)
        self.assertEqual(last.protocol, PREFIX + "result", msgs)
        self.assertEqual(last.json["text"], "5", msgs)
        info = await self.nc.jetstream().stream_info(f"FISK_AI_JOBS_{IDENTITY}")
        deadline = time.monotonic() + REPLY_TIMEOUT
        while info.state.messages and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            info = await self.nc.jetstream().stream_info(f"FISK_AI_JOBS_{IDENTITY}")
        self.assertEqual(info.state.messages, 0, "the answered job was acknowledged")

    async def test_a_read_on_the_jobs_subject_is_refused(self):
        r = tag("read")
        token = "0123456789abcdef0123456789abcdef0123"
        sub = await self.enqueue(message("request.read", r, conversation_token=token, replay=5))
        msgs = await ReplySet(self, sub, r).finish()
        self.assertEqual(len(msgs), 1, msgs)
        code, text = msgs[0].service_error
        self.assertEqual(code, "400", text)
        self.assertIn("request.prompt only", text)


if __name__ == "__main__":
    unittest.main()

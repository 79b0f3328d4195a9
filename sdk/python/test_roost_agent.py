"""The Python roost agent client (roost_agent.py), standard library only.

Against the real daemon (`$AGENTWIRE_BIN serve`, default <repo>/target/debug/agentwire): the spec's
conformance scenario with a scripted agent that uses the client: the first task as reply 1, reports setting
the row, acks clearing the pending replies, a daemon restart under the agent (it reconnects, says hello,
reports, and takes the next reply once), and its exit; then an agent that dies between agent.json and its ack
and is started again (it skips, and only acks, what it had finished); the fleet ops and the board; and a
scripted concierge, turned on by the test as the hub, using its own ops (M44-M46) and woken by a digest.

Against a fake daemon (a socket in this process): what the real one cannot be made to do on cue: a daemon
from before `hello`, replies sent twice, a lost connection or no answer under `request()`, `close()` from a
handler.

Run from the repository root:  python -m unittest discover -s sdk/python -v
"""

import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import roost_agent  # noqa: E402
from roost_agent import RoostAgent, RoostError  # noqa: E402

# --- Bounded waits: what normally takes milliseconds, with room for a loaded CI machine and a debug build. --
# The daemon opens its stores and starts the embedded relay before its ready line.
DAEMON_READY_TIMEOUT = 30.0
# SIGTERM, then this long for a process to exit before SIGKILL.
STOP_GRACE = 10.0
# Anything awaited across processes: a job starting, a reply handled, a reconnect (its backoff is at most
# roost_agent.BACKOFF_MAX), an exit.
WAIT_TIMEOUT = 20.0
# How often a condition is checked meanwhile.
POLL_INTERVAL = 0.05
# One request to the daemon on the test's own connection.
CALL_TIMEOUT = 10.0
# After a condition held, how long the test watches that nothing more arrives (a reply handled twice).
QUIET = 0.5
# A request() the fake daemon never answers: how long the client waits before its TimeoutError.
SHORT_TIMEOUT = 0.3
# close() in the fake daemon's tests, where nothing is left to wait for.
CLOSE_TIMEOUT = 2.0

PROFILE = "py"
ECHO_PROFILE = "echo"
# The concierge's scripted agent (CONCIERGE_SCRIPT).
CONCIERGE_PROFILE = "pyconcierge"
# A job whose process only writes its environment and waits: the test speaks for it with the client.
HOLD_PROFILE = "hold"
ECHO_AGENT = os.path.join(REPO, "examples", "python", "echo_agent.py")

# The scripted agent: uses the client, records what it receives in its job dir, writes its pid. Its reply
# texts script it: "bye" ends it (state done), "ask-rows" tries a controller op on its own connection,
# "crash" makes it die after agent.json is written and before the ack goes out.
AGENT_SCRIPT = r'''
import json, os, sys, threading
sys.path.insert(0, sys.argv[1])
from roost_agent import RoostAgent, RoostError

job_dir = os.environ["ROOST_JOB_DIR"]

def record(what, **fields):
    fields["what"] = what
    fields["pid"] = os.getpid()
    with open(os.path.join(job_dir, "received.jsonl"), "a") as f:
        f.write(json.dumps(fields) + "\n")

with open(os.path.join(job_dir, "agent.pid.tmp"), "w") as f:
    f.write(str(os.getpid()))
os.replace(os.path.join(job_dir, "agent.pid.tmp"), os.path.join(job_dir, "agent.pid"))

bye = threading.Event()
crash_on_ack = set()

def on_reply(r):
    record("reply", seq=r.seq, text=r.text, mode=r.mode, connections=agent.connections, hello=agent.hello)
    if r.text == "bye":
        agent.report("done", summary="got: bye", status="idle")
        bye.set()
        return
    if r.text == "ask-rows":
        try:
            agent.request("rows", {}, timeout=10)
            record("request", code=None)
        except RoostError as e:
            record("request", code=e.code)
    if r.text == "crash":
        crash_on_ack.add(r.seq)
    agent.report("working", summary="got: " + r.text, status="busy")

agent = RoostAgent.from_env("scripted", version="1", on_reply=on_reply)
record("start", finished=agent.last_finished, job=agent.job_id)

plain_ack = agent._ack
def ack(conn, seq, exact):
    if seq in crash_on_ack:
        os._exit(3)  # after agent.json, before the ack: the worst moment to die
    plain_ack(conn, seq, exact)
agent._ack = ack

agent.report("working", summary="starting", status="busy")
bye.wait()
agent.close()
record("exit")
'''


# The concierge, scripted: it takes items (digests), and runs its ops when told. Its first task is JSON naming
# the session that waits; "act" (a concierge-ask) answers that session for the user and dispatches and stops
# a helper. What each op answered, or the code it was refused with, goes to received.jsonl.
CONCIERGE_SCRIPT = r"""
import json, os, sys, threading
sys.path.insert(0, sys.argv[1])
from roost_agent import RoostAgent, RoostError

job_dir = os.environ["ROOST_JOB_DIR"]

def record(what, **fields):
    fields["what"] = what
    with open(os.path.join(job_dir, "received.jsonl"), "a") as f:
        f.write(json.dumps(fields) + "\n")

with open(os.path.join(job_dir, "agent.pid"), "w") as f:
    f.write(str(os.getpid()))

def attempt(op, *args, **kwargs):
    try:
        return {"ok": getattr(agent, op)(*args, **kwargs)}
    except RoostError as e:
        return {"code": e.code}

plan = {}
bye = threading.Event()

def on_reply(r):
    if r.kind == "digest":
        record("digest", seq=r.seq, text=r.text, sender=r.raw.get("from"))
        return
    record("reply", seq=r.seq, text=r.text)
    if r.seq == 1:
        plan.update(json.loads(r.text))
        waiting = plan["waiting"]
        got = {"say": attempt("say", "info", "the build is green"),
               "add": attempt("add_order", "check the build", when="every 30m"),
               "spare": attempt("add_order", "a spare one")}
        got["rm"] = attempt("rm_order", got["spare"]["ok"]["order"]["id"])
        got["orders"] = attempt("orders")
        got["applied"] = attempt("order_applied", got["add"]["ok"]["order"]["id"], text="checked: green")
        got["policy"] = attempt("policy")
        got["suggest"] = attempt("suggest", waiting, "yes", why="the tests pass")
        got["reply"] = attempt("concierge_reply", waiting, "yes")
        got["stop"] = attempt("act_stop", waiting)
        got["events"] = attempt("events", limit=100)
        got["mine"] = attempt("events", after=0, session=agent.job_id)
        record("ops", **got)
    elif r.text == "act":
        got = {"policy": attempt("policy"),
               "reply": attempt("concierge_reply", plan["waiting"], "yes", why="routine"),
               "dispatch": attempt("act_dispatch", "hold", task="hold", name="helper")}
        if "ok" in got["dispatch"]:
            got["respawn"] = attempt("act_respawn", got["dispatch"]["ok"]["id"])
            got["stop"] = attempt("act_stop", got["dispatch"]["ok"]["id"])
        record("acts", **got)
    elif r.text == "bye":
        bye.set()
    agent.report("working", summary="handled #%d" % r.seq, status="idle", extra={"agentItems": True})

agent = RoostAgent.from_env("scripted-concierge", version="1", on_reply=on_reply,
                            capabilities=["report", "replies", "agent-items"])
agent.report("working", summary="starting", status="idle", extra={"agentItems": True})
bye.wait(60)
agent.close()
"""


def _agentwire_bin():
    path = os.environ.get("AGENTWIRE_BIN") or os.path.join(REPO, "target", "debug", "agentwire")
    if not os.access(path, os.X_OK):
        raise RuntimeError("%s is not an executable: run `cargo build -p agentwire` or set AGENTWIRE_BIN" % path)
    return path


def _tail(path, lines=30):
    try:
        with open(path, "r", errors="replace") as f:
            return "\n".join(f.read().splitlines()[-lines:])
    except OSError:
        return "(none)"


def _gone(pid):
    """Whether process `pid` has exited (a zombie nobody reaped has)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return not os.path.exists("/proc/%d" % pid)


def _stop(proc):
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_GRACE)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=STOP_GRACE)


def wait_for(check, what, timeout=WAIT_TIMEOUT, diag=None):
    """Polls `check()` until it returns something truthy (returned); fails with `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(POLL_INTERVAL)
    raise AssertionError("timed out after %s s waiting for %s%s" % (timeout, what, diag() if diag else ""))


class ControllerError(Exception):
    def __init__(self, message, code):
        Exception.__init__(self, "%s (%s)" % (message, code))
        self.code = code


class Controller(object):
    """The test's own connection: a controller (never says hello or report)."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(CALL_TIMEOUT)
        self.sock.connect(path)
        self.lines = self.sock.makefile("rb")
        self.next = 0

    def call(self, op, **args):
        self.next += 1
        line = json.dumps({"id": self.next, "op": op, "args": args}) + "\n"
        self.sock.sendall(line.encode())
        while True:
            raw = self.lines.readline()
            if not raw:
                raise ControllerError("the daemon closed the connection", "disconnected")
            msg = json.loads(raw)
            if "event" in msg:
                continue
            if msg.get("id") != self.next:
                raise AssertionError("answers out of order: %r" % msg)
            if not msg.get("ok"):
                raise ControllerError(msg.get("error"), msg.get("code"))
            return msg["result"]

    def row(self, job_id):
        for r in self.call("rows")["rows"]:
            if r["id"] == job_id:
                return r
        return None

    def close(self):
        try:
            self.lines.close()
            self.sock.close()
        except OSError:
            pass


class RealDaemonTest(unittest.TestCase):
    """The client against `agentwire serve` and its roost supervisor."""

    def setUp(self):
        self.bin = _agentwire_bin()
        # Short: a unix socket's path is limited to about 100 bytes.
        self.tmp = tempfile.mkdtemp(prefix="rs", dir="/tmp")
        self.data = os.path.join(self.tmp, "data")
        self.socket = os.path.join(self.tmp, "run", "roost.sock")
        self.log = os.path.join(self.tmp, "agentwire.log")
        script = os.path.join(self.tmp, "agent.py")
        with open(script, "w") as f:
            f.write(AGENT_SCRIPT)
        concierge = os.path.join(self.tmp, "concierge.py")
        with open(concierge, "w") as f:
            f.write(CONCIERGE_SCRIPT)
        self.config = os.path.join(self.tmp, "agentwire.toml")
        with open(self.config, "w") as f:
            for name, command in ((PROFILE, [sys.executable, script, HERE]),
                                  (ECHO_PROFILE, [sys.executable, ECHO_AGENT]),
                                  (CONCIERGE_PROFILE, [sys.executable, concierge, HERE]),
                                  (HOLD_PROFILE, ["sh", "-c", "env > env.txt; echo $$ > agent.pid; exec sleep 120"])):
                f.write("[roost.profiles.%s]\ncommand = %s\ntask = \"type\"\nprotocol = true\n\n"
                        % (name, json.dumps(command)))
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("ROOST_", "PI_", "AGENTWIRE_"))}
        self.daemon = None
        self.ctl = None
        self.start_daemon()

    def tearDown(self):
        if self.ctl is not None:
            # The daemon stops what still runs (a SIGTERM to each job's process group).
            try:
                for row in self.ctl.call("rows")["rows"]:
                    self.ctl.call("stop", id=row["id"])
            except (OSError, ValueError, ControllerError):
                pass
            self.ctl.close()
        _stop(self.daemon)
        # Jobs run in process groups of their own and outlive the daemon: end what is left of them.
        for pidfile in glob.glob(os.path.join(self.data, "roost", "jobs", "*", "agent.pid")):
            try:
                with open(pidfile) as f:
                    pid = int(f.read().strip())
            except (OSError, ValueError):
                continue
            if not _gone(pid):
                try:
                    os.killpg(pid, signal.SIGKILL)
                except OSError:
                    pass
        shutil.rmtree(self.tmp, ignore_errors=True)

    # --- The daemon ---------------------------------------------------------------------------------------

    def start_daemon(self):
        cmd = [self.bin, "--data-dir", self.data, "--config", self.config, "serve",
               "--relay-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
               "--roost-socket", self.socket]
        with open(self.log, "ab") as log:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
                                    env=self.env)
        got = []
        reader = threading.Thread(target=lambda: got.append(proc.stdout.readline()))
        reader.daemon = True
        reader.start()
        reader.join(DAEMON_READY_TIMEOUT)
        if not got or not got[0]:
            _stop(proc)
            raise RuntimeError("agentwire printed no ready line within %s s:\n%s"
                               % (DAEMON_READY_TIMEOUT, _tail(self.log)))
        proc.stdout.close()
        ready = json.loads(got[0])
        self.assertEqual(ready.get("roost_socket"), self.socket, ready)
        self.daemon = proc
        if self.ctl is not None:
            self.ctl.close()
        self.ctl = Controller(self.socket)

    def restart_daemon(self):
        """SIGTERM, then a new daemon on the same data dir and socket."""
        self.ctl.close()
        self.ctl = None
        self.daemon.send_signal(signal.SIGTERM)
        self.assertEqual(self.daemon.wait(timeout=STOP_GRACE), 0, "the daemon stops cleanly on SIGTERM")
        self.start_daemon()

    # --- The job ------------------------------------------------------------------------------------------

    def dispatch(self, task, profile=PROFILE):
        job = self.ctl.call("dispatch", profile=profile, task=task, requestId="py-1")
        self.job_id = job["id"]
        self.job_dir = os.path.join(self.data, "roost", "jobs", self.job_id)
        return job

    def diag(self):
        return "\n--- agentwire log:\n%s\n--- job output:\n%s\n--- received:\n%s" % (
            _tail(self.log), _tail(os.path.join(self.job_dir, "output.log")),
            _tail(os.path.join(self.job_dir, "received.jsonl")))

    def records(self, what=None):
        out = []
        try:
            with open(os.path.join(self.job_dir, "received.jsonl")) as f:
                for line in f:
                    if line.strip():
                        r = json.loads(line)
                        if what is None or r["what"] == what:
                            out.append(r)
        except OSError:
            pass
        return out

    def replies(self):
        return [(r["seq"], r["text"]) for r in self.records("reply")]

    def agent_pid(self):
        def read():
            try:
                with open(os.path.join(self.job_dir, "agent.pid")) as f:
                    return int(f.read().strip())
            except (OSError, ValueError):
                return None
        return wait_for(read, "the agent's pid file", diag=self.diag)

    def agent_json(self):
        with open(os.path.join(self.job_dir, "agent.json")) as f:
            return json.load(f)

    def wait_row(self, check, what):
        seen = []

        def probe():
            row = self.ctl.row(self.job_id)
            seen[:] = [row]
            return row if row is not None and check(row) else None
        return wait_for(probe, what, diag=lambda: "\n--- last row: %r%s" % (seen and seen[0], self.diag()))

    def wait_replies(self, expected, what):
        wait_for(lambda: len(self.replies()) >= len(expected), what, diag=self.diag)
        time.sleep(QUIET)  # nothing more comes: each reply is handled once
        self.assertEqual(self.replies(), expected, self.diag())

    def settled(self, summary):
        return lambda r: (r["summary"] == summary and r["pending"] == 0 and r["connected"]
                          and r["state"] == "working")

    # --- The scenario -------------------------------------------------------------------------------------

    def test_the_agent_protocol_conformance_scenario(self):
        job = self.dispatch("first task")
        self.assertEqual(self.ctl.call("dispatch", profile=PROFILE, task="other", requestId="py-1")["id"],
                         job["id"], "a resent dispatch is taken once")
        pid = self.agent_pid()

        # The first task arrives as reply 1; the report after it sets the row; the ack clears it.
        self.wait_replies([(1, "first task")], "the first task as reply 1")
        first = self.records("reply")[0]
        self.assertEqual(first["connections"], 1)
        self.assertEqual(first["hello"]["protocol"], 1, first)
        row = self.wait_row(self.settled("got: first task"), "the row set by the report, reply 1 acked")
        self.assertEqual(row["status"], "busy")
        self.assertEqual(row["profile"], PROFILE)
        self.assertEqual(row["capabilities"], ["report", "replies"], "what the agent said in hello")
        self.assertEqual(self.agent_json(), {"job": self.job_id, "seq": 1})

        # A reply on the live connection, with a mode.
        saved = self.ctl.call("reply", id=self.job_id, text="second", mode="steer")
        # Unknown fields are ignored (the daemon also says how many reports the job has made).
        self.assertEqual({k: saved[k] for k in ("saved", "seq")}, {"saved": True, "seq": 2})
        self.wait_replies([(1, "first task"), (2, "second")], "reply 2")
        self.assertEqual(self.records("reply")[1]["mode"], "steer")
        self.wait_row(self.settled("got: second"), "reply 2 reported and acked")
        self.assertEqual(self.agent_json()["seq"], 2)

        # The daemon restarts under the agent: its process keeps running (a process group of its own).
        self.restart_daemon()
        self.assertFalse(_gone(pid), "the agent outlives the daemon")
        # It reconnects, says hello and resends its latest report: the row is connected again, with the
        # report it had before the restart, and nothing is pending.
        self.wait_row(self.settled("got: second"), "the agent reconnected and reported again")
        saved = self.ctl.call("reply", id=self.job_id, text="after restart")
        self.assertEqual({k: saved[k] for k in ("saved", "seq")}, {"saved": True, "seq": 3},
                         "seqs continue across restarts")
        # It takes the next reply once, and not the acked ones again.
        self.wait_replies([(1, "first task"), (2, "second"), (3, "after restart")], "reply 3 after the restart")
        third = self.records("reply")[2]
        self.assertEqual(third["pid"], pid, "the same agent process")
        self.assertGreaterEqual(third["connections"], 2, "a new connection, which said hello")
        self.assertEqual(third["hello"]["protocol"], 1, third)
        self.assertIn("name", third["hello"]["daemon"], third)
        self.wait_row(self.settled("got: after restart"), "reply 3 reported and acked")
        self.assertEqual(self.agent_json()["seq"], 3)

        # Its exit: "bye" -> state done, the process exits, the row shows it.
        self.assertEqual(self.ctl.call("reply", id=self.job_id, text="bye")["seq"], 4)
        wait_for(lambda: _gone(pid), "the agent's exit", diag=self.diag)
        row = self.wait_row(lambda r: r["state"] == "done" and not r["connected"], "the row of the ended job")
        self.assertEqual(row["summary"], "got: bye")
        self.assertEqual(row["status"], "idle")
        self.assertEqual(row["pending"], 0, "bye was acked before the agent closed")
        self.assertEqual(self.agent_json()["seq"], 4)
        self.assertEqual(self.replies(), [(1, "first task"), (2, "second"), (3, "after restart"), (4, "bye")])
        self.assertEqual(len(self.records("exit")), 1)
        self.assertEqual(len(self.records("start")), 1, "one agent process for the whole scenario")

    def held(self, name, items):
        """A job of the hold profile named ``name``, spoken for by a client in this process (its peer items
        as items when ``items``): the client, and what it receives."""
        job = self.ctl.call("dispatch", profile=HOLD_PROFILE, task="hold", name=name)
        env_file = os.path.join(self.data, "roost", "jobs", job["id"], "env.txt")

        def token():
            try:
                with open(env_file) as f:
                    for line in f:
                        if line.startswith("ROOST_JOB_TOKEN="):
                            return line.strip().split("=", 1)[1]
            except OSError:
                return None
        got = []
        agent = RoostAgent(job["id"], wait_for(token, "the job's token"), self.socket, name=name,
                           on_reply=got.append, capabilities=["report", "replies", "agent-items", "peers"])
        agent.report("working", summary="holding", extra={"agentItems": True} if items else None)
        self.assertTrue(agent.flush(CALL_TIMEOUT))
        self.addCleanup(agent.close)
        return job["id"], agent, got

    def test_the_fleet_ops_and_the_board_through_the_client(self):
        lead_id, lead, lead_got = self.held("lead", items=True)
        peer_id, peer, peer_got = self.held("peer", items=False)
        names = sorted(p["name"] for p in lead.peers())
        self.assertEqual(names, ["lead", "peer"])
        self.assertEqual([p["id"] for p in lead.peers() if p["self"]], [lead_id])

        # A message: an ordinary reply to a client that did not ask for items, its envelope as the text.
        self.assertEqual(lead.send("peer", "take the docs"), {"outcome": "delivered", "id": peer_id})
        wait_for(lambda: any("take the docs" in r.text for r in peer_got), "the message", diag=self.diag)
        message = [r for r in peer_got if "take the docs" in r.text][0]
        self.assertIsNone(message.kind)
        self.assertIn("not from the user", message.text)
        self.assertEqual(lead.send("peer", "take the docs")["outcome"], "duplicate")

        # A child, watched, hands its result back: a report item and a notice, each acked by itself.
        child = lead.spawn(HOLD_PROFILE, "part one", name="kid")
        self.assertEqual(child["name"], "kid")
        self.assertFalse(lead.watch("kid", "idle")["fired"])
        with self.assertRaises(RoostError) as refused:
            lead.watch("kid", "soon")
        self.assertEqual(refused.exception.code, "bad_request")
        kid_env = os.path.join(self.data, "roost", "jobs", child["id"], "env.txt")

        def kid_token():
            try:
                with open(kid_env) as f:
                    return [l.strip().split("=", 1)[1] for l in f if l.startswith("ROOST_JOB_TOKEN=")][0]
            except (OSError, IndexError):
                return None
        kid = RoostAgent(child["id"], wait_for(kid_token, "the child's token"), self.socket, name="kid",
                         on_reply=lambda r: None)
        self.addCleanup(kid.close)
        kid.report("working")
        self.assertTrue(kid.flush(CALL_TIMEOUT))
        self.assertEqual(kid.handback("parsed 3 files"), {})
        wait_for(lambda: {r.kind for r in lead_got} >= {"report", "notice"}, "the report and the notice",
                 diag=self.diag)
        report = [r for r in lead_got if r.kind == "report"][0]
        self.assertIn("parsed 3 files", report.text)
        self.assertEqual(report.raw["relation"], "child")
        wait_for(lambda: self.ctl.row(lead_id)["pending"] == 0, "the items acked one by one", diag=self.diag)
        row = self.ctl.row(child["id"])
        self.assertEqual((row["state"], row["summary"]), ("done", "parsed 3 files"))

        # The board: add with after, blocked, claim, conflict, done.
        first = lead.add_task("design", detail="the spec")["task"]
        second = lead.add_task("build", after=[first["id"]])["task"]
        with self.assertRaises(RoostError) as blocked:
            peer.claim_task(second["id"])
        self.assertEqual(blocked.exception.code, "blocked")
        peer.claim_task(first["id"])
        with self.assertRaises(RoostError) as conflict:
            lead.claim_task(first["id"])
        self.assertEqual(conflict.exception.code, "conflict")
        done = peer.task_done(first["id"], result="written")["task"]
        self.assertEqual((done["state"], done["result"]), ("done", "written"))
        lead.claim_task(str(second["id"]))
        lead.release_task(second["id"])
        states = [(t["title"], t["state"]) for t in lead.tasks()["tasks"]]
        self.assertEqual(states, [("design", "done"), ("build", "open")])

    def test_the_concierge_ops_through_the_client(self):
        waiting_id, waiting, waiting_got = self.held("waiting", items=False)
        waiting.report("blocked", summary="asks", status="waiting", waiting_for="question",
                       question="ship it?", choices=["yes", "no"])
        self.assertTrue(waiting.flush(CALL_TIMEOUT))
        # The concierge's ops are refused to any other session.
        with self.assertRaises(RoostError) as refused:
            waiting.say("info", "I am not the concierge")
        self.assertEqual(refused.exception.code, "unsupported")

        # The hub turns the concierge on: a job of the scripted profile; its first task names who waits.
        status = self.ctl.call("concierge", action="on",
                               launch={"profile": CONCIERGE_PROFILE, "task": json.dumps({"waiting": waiting_id})})
        self.assertTrue(status["on"], status)
        self.job_id = status["id"]
        self.job_dir = os.path.join(self.data, "roost", "jobs", self.job_id)
        ops = wait_for(lambda: self.records("ops"), "the concierge to run its ops", diag=self.diag)[0]
        failed = {k: v for k, v in ops.items() if k not in ("what", "reply", "stop") and "ok" not in v}
        self.assertEqual(failed, {}, "every op but the refused ones answered")
        self.assertEqual((ops["reply"], ops["stop"]), ({"code": "policy"}, {"code": "policy"}),
                         "answer: never and act: false by default")
        self.assertEqual(ops["policy"]["ok"], {"answer": "never", "act": False})

        # What the user notices: the feed says what it said, by the concierge.
        said = [e for e in self.ctl.call("events")["events"]
                if e["what"] == "concierge" and e["text"] == "the build is green"]
        self.assertEqual(len(said), 1, said)
        self.assertEqual((said[0]["who"], said[0].get("whoId"), said[0]["why"]),
                         ("concierge", self.job_id, "info"))
        self.assertIn(said[0]["seq"], [e["seq"] for e in ops["events"]["ok"]["events"]], "it reads the feed too")
        self.assertEqual(ops["say"]["ok"], {"seq": said[0]["seq"]})
        self.assertTrue(ops["mine"]["ok"]["events"])
        self.assertEqual({e["id"] for e in ops["mine"]["ok"]["events"]}, {self.job_id})
        # Its orders, as the hub lists them: the spare one dropped, the kept one applied once.
        orders = self.ctl.call("concierge-order", action="list")["orders"]
        self.assertEqual([(o["text"], o["by"], o["count"]) for o in orders], [("check the build", "concierge", 1)])
        self.assertIsNotNone(orders[0]["when"])
        self.assertEqual([o["text"] for o in ops["orders"]["ok"]["orders"]], ["check the build"])
        # The waiting row carries the suggestion.
        row = self.ctl.row(waiting_id)
        self.assertEqual((row["suggested"]["text"], row["suggested"]["why"]), ("yes", "the tests pass"), row)
        self.assertEqual(ops["suggest"]["ok"]["id"], waiting_id)
        # A digest woke it: a peer item of kind digest from the roost, in its tag, acked by itself.
        digest = wait_for(lambda: self.records("digest"), "a digest", diag=self.diag)[0]
        self.assertEqual(digest["sender"], {"id": "", "name": "roost"})
        self.assertIn("<roost-digest", digest["text"])
        self.wait_row(lambda r: r["pending"] == 0 and r["connected"], "the concierge's items acked")

        # With the policy letting it answer and act: it answers the waiting session, dispatches a helper,
        # respawns it and stops it.
        self.ctl.call("concierge", action="answer", answer="always")
        self.ctl.call("concierge", action="act", act=True)
        self.ctl.call("concierge-ask", text="act")
        acts = wait_for(lambda: self.records("acts"), "the concierge to act", diag=self.diag)[0]
        self.assertEqual(acts["policy"], {"ok": {"answer": "always", "act": True}})
        self.assertTrue(acts["reply"]["ok"]["saved"], acts)
        self.assertEqual(acts["dispatch"]["ok"]["name"], "helper", acts)
        helper = acts["dispatch"]["ok"]["id"]
        self.assertEqual((acts["respawn"], acts["stop"]), ({"ok": {"id": helper}}, {"ok": {"id": helper}}))
        wait_for(lambda: any(r.text == "yes" and r.kind is None for r in waiting_got), "the answer, as a reply",
                 diag=self.diag)
        by = {e["what"]: e for e in self.ctl.call("events", id=waiting_id)["events"]}
        self.assertEqual(by["reply"]["who"], "concierge", by)
        acted = {e["what"]: e.get("who") for e in self.ctl.call("events", id=helper)["events"]}
        self.assertEqual({w: acted.get(w) for w in ("start", "respawn", "stop")},
                         {"start": "concierge", "respawn": "concierge", "stop": "concierge"}, acted)
        self.ctl.call("concierge-ask", text="bye")

    def test_a_restarted_agent_skips_what_it_had_finished_and_only_acks_it(self):
        self.dispatch("first task")
        pid = self.agent_pid()
        self.wait_row(self.settled("got: first task"), "reply 1 handled")

        # A controller op on the agent's own connection is refused; request() raises it with its code.
        self.assertEqual(self.ctl.call("reply", id=self.job_id, text="ask-rows")["seq"], 2)
        self.wait_row(self.settled("got: ask-rows"), "reply 2 handled")
        self.assertEqual([r["code"] for r in self.records("request")], ["unsupported"], self.diag())

        # "crash": handled, agent.json written, and the process dies before its ack.
        self.assertEqual(self.ctl.call("reply", id=self.job_id, text="crash")["seq"], 3)
        wait_for(lambda: _gone(pid), "the agent to die before its ack", diag=self.diag)
        self.assertEqual(self.agent_json()["seq"], 3, "written before the ack")
        row = self.wait_row(lambda r: not r["connected"], "the agent's connection to end")
        self.assertEqual(row["pending"], 1, "reply 3 was never acked")

        # Started again: reply 3 comes again; the agent skips it (only acks it).
        self.ctl.call("respawn", id=self.job_id)
        starts = wait_for(lambda: len(self.records("start")) == 2 and self.records("start"),
                          "the agent started again", diag=self.diag)
        self.assertEqual(starts[1]["finished"], 3, "the new process read agent.json")
        self.wait_row(self.settled("starting"), "the new process reported, and acked reply 3 without handling it")
        time.sleep(QUIET)
        self.assertEqual(self.replies(), [(1, "first task"), (2, "ask-rows"), (3, "crash")],
                         "reply 3 was handled once, by the first process")

        # It goes on with the next reply.
        self.assertEqual(self.ctl.call("reply", id=self.job_id, text="bye")["seq"], 4)
        self.wait_row(lambda r: r["state"] == "done" and r["pending"] == 0 and not r["connected"],
                      "the job done")
        self.assertEqual(self.replies()[-1], (4, "bye"))
        self.assertEqual(self.agent_json()["seq"], 4)

    def test_the_example_echo_agent(self):
        self.dispatch("hello", profile=ECHO_PROFILE)
        self.wait_row(self.settled("got: hello"), "the task echoed")
        self.assertEqual(self.ctl.call("reply", id=self.job_id, text="more")["seq"], 2)
        self.wait_row(self.settled("got: more"), "a reply echoed")
        self.assertEqual(self.ctl.call("reply", id=self.job_id, text="bye")["seq"], 3)
        row = self.wait_row(lambda r: r["state"] == "done" and not r["connected"], "the echo agent's exit")
        self.assertEqual((row["summary"], row["pending"]), ("got: bye", 0))
        self.assertEqual(self.agent_json(), {"job": self.job_id, "seq": 3})
        exits = wait_for(lambda: [e for e in self.ctl.call("events", id=self.job_id)["events"]
                                  if e["what"] == "exit"], "the exit in the feed", diag=self.diag)
        self.assertEqual(exits[0]["text"], "exit status: 0", exits)


# --- A fake daemon ------------------------------------------------------------------------------------------


class FakeDaemon(object):
    """A unix socket that records every request and answers them as `answer(conn_no, msg)` says: a result
    dict, ("error", code), None (no answer) or "drop" (close the connection)."""

    def __init__(self, path, answer=None):
        self.path = path
        self.answer = answer or (lambda n, m: {})
        self.lock = threading.Condition()
        self.requests = []  # (conn_no, msg)
        self.conns = []
        self.send_lock = threading.Lock()
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(path)
        self.server.listen(8)
        t = threading.Thread(target=self._accept)
        t.daemon = True
        t.start()

    def _accept(self):
        while True:
            try:
                sock, _ = self.server.accept()
            except OSError:
                return
            with self.lock:
                self.conns.append(sock)
                n = len(self.conns)
            t = threading.Thread(target=self._serve, args=(sock, n))
            t.daemon = True
            t.start()

    def _serve(self, sock, n):
        try:
            for raw in sock.makefile("rb"):
                msg = json.loads(raw)
                with self.lock:
                    self.requests.append((n, msg))
                    self.lock.notify_all()
                out = self.answer(n, msg)
                if out == "drop":
                    sock.shutdown(socket.SHUT_RDWR)
                    return
                if out is None:
                    continue
                if isinstance(out, tuple):
                    line = {"id": msg["id"], "ok": False, "error": "refused", "code": out[1]}
                else:
                    line = {"id": msg["id"], "ok": True, "result": out}
                self.send(n, line)
        except (OSError, ValueError):
            pass

    def send(self, n, obj):
        with self.send_lock:
            self.conns[n - 1].sendall((json.dumps(obj) + "\n").encode())

    def deliver(self, n, seq, text, **more):
        event = {"event": "deliver", "id": "job1", "seq": seq, "text": text}
        event.update(more)
        self.send(n, event)

    def ops(self, op, conn=None):
        with self.lock:
            return [m for (n, m) in self.requests if m["op"] == op and (conn is None or n == conn)]

    def wait(self, check, what):
        deadline = time.monotonic() + WAIT_TIMEOUT
        with self.lock:
            while True:
                got = check()
                if got:
                    return got
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("timed out waiting for %s; requests: %r" % (what, self.requests))
                self.lock.wait(min(left, POLL_INTERVAL))

    def close(self):
        self.server.close()
        for c in self.conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
                c.close()
            except OSError:
                pass


class FakeDaemonTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="rs", dir="/tmp")
        self.job_dir = os.path.join(self.tmp, "job")
        os.mkdir(self.job_dir)
        self.path = os.path.join(self.tmp, "s.sock")
        self.fake = None
        self.agent = None
        self.handled = []
        self.handled_cond = threading.Condition()

    def tearDown(self):
        if self.agent is not None:
            self.agent.close(timeout=CLOSE_TIMEOUT)
        if self.fake is not None:
            self.fake.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def env(self, **more):
        env = {"ROOST_JOB_ID": "job1", "ROOST_JOB_TOKEN": "tok", "ROOST_SOCKET": self.path,
               "ROOST_JOB_DIR": self.job_dir}
        env.update(more)
        return env

    def on_reply(self, r):
        with self.handled_cond:
            self.handled.append((r.seq, r.text))
            self.handled_cond.notify_all()

    def make(self, answer=None, on_reply=None):
        self.fake = FakeDaemon(self.path, answer)
        self.agent = RoostAgent.from_env("t", version="9", on_reply=on_reply or self.on_reply, env=self.env())
        return self.agent

    def wait_handled(self, n):
        deadline = time.monotonic() + WAIT_TIMEOUT
        with self.handled_cond:
            while len(self.handled) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("handled only %r" % self.handled)
                self.handled_cond.wait(left)

    def test_from_env_finds_the_job_new_names_first(self):
        self.assertIsNone(RoostAgent.from_env("t", env={}))
        self.assertIsNone(RoostAgent.from_env("t", env={"ROOST_JOB_ID": "j", "ROOST_JOB_TOKEN": "t"}))
        old = RoostAgent.from_env("t", env={"PI_JOB_ID": "j", "PI_JOB_TOKEN": "t", "PI_DAEMON_SOCK": "/s",
                                            "PI_JOB_DIR": "/d"})
        self.assertEqual((old.job_id, old.token, old.socket_path, old.job_dir), ("j", "t", "/s", "/d"))
        both = RoostAgent.from_env("t", env={"PI_JOB_ID": "old", "ROOST_JOB_ID": "new", "PI_JOB_TOKEN": "t",
                                             "PI_DAEMON_SOCK": "/s"})
        self.assertEqual(both.job_id, "new")
        self.assertEqual(both.capabilities, ["report"], "no on_reply: it does not take replies")

    def test_reports_fill_the_defaults_and_are_checked(self):
        agent = self.make()
        agent.report("blocked", summary="x" * 600, waiting_for="question", question="which?",
                     choices=["a", "b"])
        self.assertTrue(agent.flush(WAIT_TIMEOUT))
        hello = self.fake.ops("hello")[0]["args"]
        self.assertEqual(hello, {"protocol": 1, "agent": {"name": "t", "version": "9"},
                                 "capabilities": ["report", "replies"]})
        report = self.fake.ops("report")[0]["args"]
        self.assertEqual((report["id"], report["token"]), ("job1", "tok"))
        r = report["report"]
        self.assertEqual(len(r["summary"]), roost_agent.MAX_SUMMARY, "cut to the spec's bound")
        self.assertEqual({k: r[k] for k in ("state", "status", "waitingFor", "tool", "error", "name", "model")},
                         {"state": "blocked", "status": None, "waitingFor": "question", "tool": None,
                          "error": None, "name": None, "model": None})
        self.assertEqual(r["choices"], ["a", "b"])
        with self.assertRaises(ValueError):
            agent.report("napping")
        with self.assertRaises(ValueError):
            agent.report("working", status="asleep")

    def test_an_old_daemon_without_hello_and_replies_sent_again(self):
        def answer(n, m):
            return ("error", "bad_request") if m["op"] == "hello" else {}
        agent = self.make(answer)
        agent.report("working", summary="s")
        fake = self.fake
        fake.wait(lambda: fake.ops("report", 1), "the report after a refused hello")
        self.assertIsNone(agent.hello)
        fake.deliver(1, 1, "one")
        fake.deliver(1, 1, "one")  # sent twice: handled once
        fake.deliver(1, 2, "two", mode="steer")
        self.wait_handled(2)
        fake.wait(lambda: [a for a in fake.ops("ack", 1) if a["args"]["seq"] == 2], "the ack of 2")
        # The connection drops; the new one says hello, resends the latest report, and gets 1..3 again.
        agent.report("working", summary="latest")
        fake.wait(lambda: len(fake.ops("report", 1)) == 2, "the second report")
        fake.conns[0].shutdown(socket.SHUT_RDWR)
        fake.wait(lambda: fake.ops("report", 2), "a report on the new connection")
        self.assertEqual(len(fake.ops("hello", 2)), 1)
        self.assertEqual(fake.ops("report", 2)[0]["args"]["report"]["summary"], "latest")
        for seq, text in ((1, "one"), (2, "two"), (3, "three")):
            fake.deliver(2, seq, text)
        self.wait_handled(3)
        acks = fake.wait(lambda: [a["args"]["seq"] for a in fake.ops("ack", 2) if a["args"]["seq"] == 3]
                         and [a["args"]["seq"] for a in fake.ops("ack", 2)], "the acks on the new connection")
        time.sleep(QUIET)
        self.assertEqual(self.handled, [(1, "one"), (2, "two"), (3, "three")])
        self.assertIn(2, acks, "a reply handled already is acked again")
        self.assertEqual(agent.last_finished, 3)
        with open(os.path.join(self.job_dir, "agent.json")) as f:
            self.assertEqual(json.load(f), {"job": "job1", "seq": 3})

    def test_agent_json_makes_a_new_process_skip_what_it_had_finished(self):
        with open(os.path.join(self.job_dir, "agent.json"), "w") as f:
            json.dump({"job": "job1", "seq": 2}, f)
        agent = self.make()
        self.assertEqual(agent.last_finished, 2)
        agent.report("working")
        fake = self.fake
        fake.wait(lambda: fake.ops("report"), "the report")
        for seq in (1, 2, 3):
            fake.deliver(1, seq, "r%d" % seq)
        self.wait_handled(1)
        fake.wait(lambda: [a for a in fake.ops("ack") if a["args"]["seq"] == 3], "the ack of 3")
        time.sleep(QUIET)
        self.assertEqual(self.handled, [(3, "r3")])
        self.assertIn(2, [a["args"]["seq"] for a in fake.ops("ack")], "skipped, and acked")

    def test_request_answers_refusals_timeouts_and_lost_connections(self):
        def answer(n, m):
            op = m["op"]
            if op == "slow":
                return None
            if op == "nope":
                return ("error", "unsupported")
            if op == "cut" and n == 1:
                return "drop"
            return {"echo": m["args"]} if op == "echo" else {}
        agent = self.make(answer)
        with self.assertRaises(RoostError) as e:
            agent.request("echo", {})
        self.assertEqual(e.exception.code, "not_connected", "report() first")
        agent.report("working")
        self.assertEqual(agent.request("echo", {"x": 1}, timeout=WAIT_TIMEOUT), {"echo": {"x": 1}})
        with self.assertRaises(RoostError) as e:
            agent.request("nope", {}, timeout=WAIT_TIMEOUT)
        self.assertEqual(e.exception.code, "unsupported")
        with self.assertRaises(TimeoutError):
            agent.request("slow", {}, timeout=SHORT_TIMEOUT)
        with self.assertRaises(RoostError) as e:
            agent.request("cut", {}, timeout=WAIT_TIMEOUT)
        self.assertEqual(e.exception.code, "disconnected")
        # It reconnects by itself and serves again.
        self.assertEqual(agent.request("echo", {"y": 2}, timeout=WAIT_TIMEOUT), {"echo": {"y": 2}})
        self.assertGreaterEqual(agent.connections, 2)

    def test_close_acks_a_finished_reply_but_not_one_whose_handler_still_runs(self):
        release = threading.Event()
        agent_box = []

        def on_reply(r):
            self.on_reply(r)
            if r.text == "close-inside":
                agent_box[0].report("done", summary="closing")
                agent_box[0].close(timeout=CLOSE_TIMEOUT)
            else:
                release.wait(WAIT_TIMEOUT)
        agent = self.make(on_reply=on_reply)
        agent_box.append(agent)
        agent.report("working")
        fake = self.fake
        fake.wait(lambda: fake.ops("report"), "the report")
        fake.deliver(1, 1, "close-inside")
        fake.wait(lambda: [r for r in fake.ops("report") if r["args"]["report"]["state"] == "done"],
                  "the latest report, sent by close()")
        self.wait_handled(1)
        time.sleep(QUIET)
        self.assertEqual(fake.ops("ack"), [], "its handler was running when close() was called")
        self.assertRaises(RoostError, agent.request, "x", {})
        agent.report("working")  # after close(): dropped
        self.assertEqual(len(fake.ops("report")), 2)

        # A handler that finishes while close() waits for it is acked.
        fake.close()
        os.unlink(self.path)
        self.handled = []
        self.agent = second = RoostAgent.from_env("t", on_reply=on_reply, env=self.env())
        self.fake = fake = FakeDaemon(self.path)
        second.report("working")
        fake.wait(lambda: fake.ops("report"), "the report")
        fake.deliver(1, 2, "slow handler")
        self.wait_handled(1)
        threading.Timer(0.2, release.set).start()
        second.close(timeout=WAIT_TIMEOUT)
        self.assertEqual([a["args"]["seq"] for a in fake.ops("ack")], [2])


if __name__ == "__main__":
    unittest.main()

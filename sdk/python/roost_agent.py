"""roost_agent: the roost agent protocol (version 1) for an agent written in Python.

One file, standard library only, Python 3.8 or newer. Copy it next to your agent, or put its directory on
``sys.path``. roost (agentwire's roost supervisor, or pi-roost) runs the agent from a profile with
``protocol = true``; the job's identity is in the agent's environment (``ROOST_JOB_ID``, ``ROOST_JOB_TOKEN``,
``ROOST_SOCKET``, ``ROOST_JOB_DIR``, or the older ``PI_*`` names).

Usage::

    import threading
    from roost_agent import RoostAgent

    finished = threading.Event()

    def on_reply(reply):            # the user's replies, once each, in order, one at a time
        if reply.text == "bye":
            agent.report("done", summary="finished")
            finished.set()
        else:
            agent.report("working", summary="working on: " + reply.text, status="busy")

    agent = RoostAgent.from_env("my-agent", version="1.0", on_reply=on_reply)
    if agent is None:
        raise SystemExit("not run by roost")
    agent.report("working", summary="starting", status="busy")   # connects; the first task is reply 1
    finished.wait()
    agent.close()                   # sends the latest report, acks a reply that finished

What it does (the spec's "Clients"):

- It connects on the first ``report()``, says ``hello`` on every connection (a daemon that answers
  ``bad_request`` predates ``hello``: it goes on with version 1), and sends the latest report on every
  connection: after a reconnect too. A dropped connection (the daemon restarted) is made again with backoff.
- ``report()`` does not block: it keeps the snapshot and a background thread sends it (coalesced: the newest
  one wins). ``flush(timeout)`` waits until the daemon took the latest one.
- Replies go to ``on_reply(reply)`` (``reply.seq``, ``reply.text``, ``reply.mode``, ``reply.kind``,
  ``reply.raw``) on a handler thread of their own: once each, in order, one at a time. A reply is acked
  after its handler returns (an exception in the handler is logged; the reply counts as handled). The last
  finished seq is written to ``agent.json`` in the job's dir (atomically) before its ack, so an agent started
  again skips (only acks) what it had finished; a seq handled already is dropped (and acked again).
- ``close()`` stops taking replies, waits (at most ``timeout``) for a handler still running (called from the
  handler itself, it does not wait: that reply is not acked and comes again on the next start), sends the
  latest report and closes the connection.
- ``request(op, args, timeout)`` sends another op on the job's connection once its report was taken; a
  refusal is a ``RoostError`` with ``code`` (``disconnected`` when the connection was lost meanwhile),
  ``TimeoutError`` after ``timeout``. ``tasks()``, ``claim_task()``, ``task_done()``, ``release_task()`` and
  ``add_task()`` are the task board's ops (the ``tasks`` capability) on top of it; ``peers()``, ``send()``,
  ``spawn()``, ``handback()`` and ``watch()`` the fleet's.
- The concierge's own ops (M44-M46), for the agent the hub runs as its concierge (refused on any other
  session's connection): ``say(kind, text)`` (``concierge-say``: ``info``, ``need`` or ``answer``, a
  ``concierge`` event in the feed), ``suggest(session, text, why=None)`` (the waiting row carries it as
  ``suggested``), ``concierge_reply(session, text, why=None)`` (answers for the user: ``RoostError`` code
  ``policy`` unless the policy allows it), ``policy()`` (``{answer, act}``), ``act_stop(session)``,
  ``act_respawn(session)``, ``act_dispatch(profile, task=None, name=None)`` (``concierge-act``: ``policy``
  without ``act``), ``orders()``, ``add_order(text, when=None)``, ``rm_order(order_id)``,
  ``order_applied(order_id, text=None)`` (``concierge-order``: each answers ``{orders, order?}``), and
  ``events(after=None, limit=None, session=None)`` (the feed: ``{events, cursor}``).
- Peer items come to ``on_reply`` too, with ``reply.kind`` set (``message``, ``report``, ``notice``, and for
  the concierge ``digest``: its wake-up, the text in ``<roost-digest>``; ``reply.raw`` has ``from`` and
  ``relation``), once the agent reported ``agentItems: true`` (``report(..., extra={"agentItems": True})``).
  Each is acked by itself (``exact``) after its handler returns.

Every public method is thread-safe. Problems the agent cannot act on (a refused report, a broken connection)
are logged to the ``roost_agent`` logger.
"""

import collections
import json
import logging
import os
import random
import socket
import threading
import time

__all__ = ["RoostAgent", "RoostError", "Reply", "PROTOCOL_VERSION"]
__version__ = "0.1.0"

#: The highest protocol version this client speaks.
PROTOCOL_VERSION = 1

#: Report fields and their bounds (characters), as the spec gives them.
STATES = ("working", "blocked", "done", "failed")
STATUSES = ("busy", "waiting", "idle")
WAITING_FOR = ("question", "dialog", "first-prompt")
MAX_SUMMARY = 500
MAX_QUESTION = 2000
MAX_CHOICES = 20
MAX_CHOICE = 200
MAX_TOOL = 100
MAX_ERROR = 1000
MAX_NAME = 200
MAX_MODEL = 200

#: The file in the job's dir where the last finished reply is kept.
STATE_FILE = "agent.json"

# Reconnecting: the first wait, doubled up to the cap (with jitter); back to the first after a connection
# whose report was taken.
BACKOFF_INITIAL = 0.05
BACKOFF_MAX = 2.0
# Connecting to the socket, and the daemon's answer to `hello`.
CONNECT_TIMEOUT = 5.0
HELLO_TIMEOUT = 10.0
# After `busy` to a report, wait this long before sending it again.
BUSY_RETRY = 0.5
# Defaults for `request()` and `close()`.
REQUEST_TIMEOUT = 30.0
CLOSE_TIMEOUT = 5.0

log = logging.getLogger("roost_agent")

_ENV = (
    ("id", "ROOST_JOB_ID", "PI_JOB_ID"),
    ("token", "ROOST_JOB_TOKEN", "PI_JOB_TOKEN"),
    ("socket", "ROOST_SOCKET", "PI_DAEMON_SOCK"),
    ("dir", "ROOST_JOB_DIR", "PI_JOB_DIR"),
)


class RoostError(Exception):
    """The daemon refused a request (``code`` is the protocol's: ``bad_request``, ``unauthorized``,
    ``not_found``, ``full``, ``busy``, ``unsupported``, ``policy``, ...), or the client could not send it
    (``disconnected``: the connection was lost before the answer; ``not_connected``: no ``report()`` yet;
    ``closed``: after ``close()``)."""

    def __init__(self, message, code=None):
        Exception.__init__(self, message)
        self.code = code


class Reply(object):
    """One reply from the user, or, with ``kind`` set, a peer item: ``message``, ``report``, ``notice`` or
    ``digest`` (the concierge's wake-up; ``raw["from"]`` is ``{id: "", name: "roost"}``)."""

    __slots__ = ("seq", "text", "mode", "kind", "raw")

    def __init__(self, seq, text, mode=None, kind=None, raw=None):
        self.seq = seq
        self.text = text
        self.mode = mode
        self.kind = kind
        self.raw = raw if raw is not None else {}

    def __repr__(self):
        return "Reply(seq=%r, text=%r, mode=%r, kind=%r)" % (self.seq, self.text, self.mode, self.kind)


class _Call(object):
    """A request waiting for its answer."""

    __slots__ = ("rid", "event", "ok", "result", "error", "callback")

    def __init__(self, rid, callback=None):
        self.rid = rid
        self.event = threading.Event()
        self.ok = None
        self.result = None
        self.error = None
        self.callback = callback


class _Conn(object):
    """One connection to the daemon."""

    def __init__(self, sock, number):
        self.sock = sock
        self.number = number
        self.alive = True
        self.calls = {}
        self.wlock = threading.Lock()
        self.reported = False  # a report was written on it: acks may follow
        self.ready = False  # a report was taken on it: it is the job's
        self.sent_version = 0  # the newest report version written on it
        self.report_in_flight = False
        self.hold_until = 0.0  # after `busy`
        self.acked = 0  # the highest seq acked on it


def _text(value, limit, field):
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError("report %s must be a string or None, not %s" % (field, type(value).__name__))
    return value if len(value) <= limit else value[: limit - 1] + "\u2026"


def _choice(value, allowed, field):
    if value is None:
        return None
    if value not in allowed:
        raise ValueError("report %s %r is not one of %s" % (field, value, ", ".join(allowed)))
    return value


def _env_job(env):
    found = {}
    for key, new, old in _ENV:
        value = env.get(new) or env.get(old)
        found[key] = value or None
    return found


class RoostAgent(object):
    """A job's agent: reports to roost and takes the user's replies. Make one with :meth:`from_env`."""

    def __init__(self, job_id, token, socket_path, job_dir=None, name="agent", version="", on_reply=None,
                 capabilities=None):
        if not job_id or not token or not socket_path:
            raise ValueError("a job id, its token and the daemon's socket are required")
        self.job_id = job_id
        self.token = token
        self.socket_path = socket_path
        self.job_dir = job_dir
        self.name = name
        self.version = version or ""
        if capabilities is None:
            capabilities = ["report", "replies"] if on_reply is not None else ["report"]
        self.capabilities = list(capabilities)
        self._on_reply = on_reply

        #: The daemon's answer to the latest ``hello`` (None before one, or from a daemon without ``hello``).
        self.hello = None
        #: How many connections said ``hello`` (the first, then one per reconnect).
        self.connections = 0

        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._conn = None
        self._next_id = 0
        self._started = False
        self._closing = False  # close() called: no new replies are handled
        self._closed = False  # the connection is down for good
        self._fatal = None  # a RoostError that ended the client (unauthorized, not_found)
        self._report = None
        self._version = 0  # bumped on every report()
        self._taken_version = 0  # the newest version the daemon took
        self._queue = collections.deque()
        self._handling = None  # the Reply whose handler runs
        self._handler_thread = None
        self._manager_thread = None
        self._finished = self._load_finished()  # the last finished user reply
        self._queued = self._finished  # the highest user reply queued or finished
        self._peer_seen = set()

    # --- Making one ---------------------------------------------------------------------------------------

    @classmethod
    def from_env(cls, name, version="", on_reply=None, capabilities=None, env=None):
        """The job's agent, from the environment roost sets (new names first, then the ``PI_*`` ones), or
        None when this process was not started by roost for a job."""
        job = _env_job(os.environ if env is None else env)
        if not (job["id"] and job["token"] and job["socket"]):
            return None
        return cls(job["id"], job["token"], job["socket"], job_dir=job["dir"], name=name, version=version,
                   on_reply=on_reply, capabilities=capabilities)

    # --- Reports ------------------------------------------------------------------------------------------

    def report(self, state, summary=None, status=None, waiting_for=None, question=None, choices=None,
               tool=None, error=None, name=None, model=None, thinking=None, extra=None):
        """Sets the job's row: a full snapshot (what is left out is null). Does not block; the first call
        connects (after close(), or once the daemon refused the job, a report is dropped). ``state`` is ``working``, ``blocked``, ``done`` or ``failed``; ``status`` ``busy``,
        ``waiting`` or ``idle``; ``waiting_for`` ``question``, ``dialog`` or ``first-prompt``. Texts longer
        than the spec's bounds are cut. ``extra`` adds capability fields (``context``, ``usage``, ...)."""
        if choices is None:
            choices = []
        if isinstance(choices, str) or not isinstance(choices, (list, tuple)):
            raise TypeError("report choices must be a list of strings")
        snapshot = {
            "state": _choice(state, STATES, "state"),
            "status": _choice(status, STATUSES, "status"),
            "waitingFor": _choice(waiting_for, WAITING_FOR, "waitingFor"),
            "summary": _text(summary, MAX_SUMMARY, "summary"),
            "question": _text(question, MAX_QUESTION, "question"),
            "choices": [_text(c, MAX_CHOICE, "choice") for c in list(choices)[:MAX_CHOICES]],
            "tool": _text(tool, MAX_TOOL, "tool"),
            "error": _text(error, MAX_ERROR, "error"),
            "name": _text(name, MAX_NAME, "name"),
            "model": _text(model, MAX_MODEL, "model"),
        }
        if snapshot["state"] is None:
            raise ValueError("report state is required")
        if thinking is not None:
            snapshot["thinking"] = _text(thinking, MAX_MODEL, "thinking")
        if extra:
            for key, value in extra.items():
                snapshot.setdefault(key, value)
        with self._cond:
            if self._closed or self._fatal is not None:
                log.debug("a report after close() or a refusal of the job is not sent")
                return
            self._report = snapshot
            self._version += 1
            self._start()
            self._cond.notify_all()

    def flush(self, timeout=None):
        """Waits until the daemon took the latest report. True when it did, False after ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            version = self._version
            while self._taken_version < version:
                if self._fatal is not None or self._closed:
                    return False
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
            return True

    # --- Other ops ----------------------------------------------------------------------------------------

    def request(self, op, args=None, timeout=REQUEST_TIMEOUT):
        """Sends ``op`` on the job's connection (once its report was taken) and returns the result. Raises
        ``RoostError`` (``.code``) on a refusal, ``disconnected`` when the connection was lost meanwhile,
        and ``TimeoutError`` after ``timeout`` seconds (waiting for the connection included)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                if self._closed:
                    raise RoostError("the agent is closed", code="closed")
                if self._fatal is not None:
                    raise RoostError(str(self._fatal), code=self._fatal.code)
                if not self._started:
                    raise RoostError("report() first: the connection starts with a report",
                                     code="not_connected")
                conn = self._conn
                if conn is not None and conn.alive and conn.ready:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("no connection to the daemon within %s s" % timeout)
                self._cond.wait(left)
        call = self._send(conn, op, args or {})
        if call is None:
            raise RoostError("the connection to the daemon was lost", code="disconnected")
        if not call.event.wait(max(0.0, deadline - time.monotonic())):
            with self._cond:
                conn.calls.pop(call.rid, None)  # a late answer is dropped
                self._cond.notify_all()
            raise TimeoutError("no answer to %s within %s s" % (op, timeout))
        if not call.ok:
            raise call.error
        return call.result

    def peers(self, timeout=REQUEST_TIMEOUT):
        """The sessions (``peers {}``): a list of ``{id, name, profile, role, state, status, summary, parent,
        self}``."""
        return self.request("peers", {}, timeout)["peers"]

    def send(self, to, text, timeout=REQUEST_TIMEOUT):
        """A message to session ``to`` (an id or a unique name): ``{outcome, id}``, the outcome
        ``delivered``, ``queued``, ``started`` or ``duplicate``."""
        return self.request("send", {"to": to, "text": text}, timeout)

    def spawn(self, profile, task, name=None, timeout=REQUEST_TIMEOUT):
        """A child job of ``profile`` with ``task`` whose parent is this job: ``{id, name}``."""
        args = {"profile": profile, "task": task}
        if name is not None:
            args["name"] = name
        return self.request("spawn", args, timeout)

    def handback(self, text, timeout=REQUEST_TIMEOUT):
        """This job's result to its parent (a ``report`` item); the row ends ``done`` with it."""
        return self.request("handback", {"text": text}, timeout)

    def watch(self, session, when="idle", timeout=REQUEST_TIMEOUT):
        """Be told once (a ``notice`` item) when ``session`` is next ``idle`` or has ``ended``:
        ``{id, name, when, fired}``."""
        return self.request("watch", {"id": session, "when": when}, timeout)

    def tasks(self, timeout=REQUEST_TIMEOUT):
        """The task board (``task {action: "list"}``)."""
        return self.request("task", {"action": "list"}, timeout)

    def claim_task(self, task_id, timeout=REQUEST_TIMEOUT):
        return self.request("task", {"action": "claim", "id": task_id}, timeout)

    def task_done(self, task_id, result=None, timeout=REQUEST_TIMEOUT):
        args = {"action": "done", "id": task_id}
        if result is not None:
            args["result"] = result
        return self.request("task", args, timeout)

    def release_task(self, task_id, timeout=REQUEST_TIMEOUT):
        return self.request("task", {"action": "release", "id": task_id}, timeout)

    def add_task(self, title, detail=None, after=None, timeout=REQUEST_TIMEOUT):
        args = {"action": "add", "title": title}
        if detail is not None:
            args["detail"] = detail
        if after is not None:
            args["after"] = list(after)
        return self.request("task", args, timeout)

    # --- The concierge's own ops (M44-M46): on its job's connection; another session's is refused ---------

    def say(self, kind, text, timeout=REQUEST_TIMEOUT):
        """What the concierge tells the user (``concierge-say``): ``kind`` is ``info``, ``need`` or
        ``answer``; a ``concierge`` event in the feed. ``{seq}``, the event's."""
        return self.request("concierge-say", {"kind": kind, "text": text}, timeout)

    def suggest(self, session, text, why=None, timeout=REQUEST_TIMEOUT):
        """An answer suggested for ``session`` (an id or a unique name), which must be waiting
        (``concierge-suggest``); its row carries it as ``suggested``. ``{id, suggested: {text, why, at}}``."""
        args = {"id": session, "text": text}
        if why is not None:
            args["why"] = why
        return self.request("concierge-suggest", args, timeout)

    def concierge_reply(self, session, text, why=None, timeout=REQUEST_TIMEOUT):
        """Answers ``session``'s question in the user's place (``concierge-reply``): ``{saved, seq, ...}``
        as a reply. Refused ``policy`` unless the policy allows it, ``bad_request`` unless the session waits
        for an answer to a question."""
        args = {"id": session, "text": text}
        if why is not None:
            args["why"] = why
        return self.request("concierge-reply", args, timeout)

    def policy(self, timeout=REQUEST_TIMEOUT):
        """The policy in force (``concierge-policy``): ``{answer: never | routine | always, act: bool}``."""
        return self.request("concierge-policy", {}, timeout)["policy"]

    def act_stop(self, session, timeout=REQUEST_TIMEOUT):
        """Stops ``session`` (``concierge-act {what: "stop"}``; refused ``policy`` without ``act``):
        ``{id}``."""
        return self.request("concierge-act", {"what": "stop", "id": session}, timeout)

    def act_respawn(self, session, timeout=REQUEST_TIMEOUT):
        """Starts ``session`` again (``concierge-act {what: "respawn"}``; refused ``policy`` without
        ``act``): ``{id}``."""
        return self.request("concierge-act", {"what": "respawn", "id": session}, timeout)

    def act_dispatch(self, profile, task=None, name=None, timeout=REQUEST_TIMEOUT):
        """A new session of ``profile`` (``concierge-act {what: "dispatch", launch}``; refused ``policy``
        without ``act``): ``{id, name}``."""
        launch = {"profile": profile}
        if task is not None:
            launch["task"] = task
        if name is not None:
            launch["name"] = name
        return self.request("concierge-act", {"what": "dispatch", "launch": launch}, timeout)

    def orders(self, timeout=REQUEST_TIMEOUT):
        """The standing orders (``concierge-order {action: "list"}``): ``{orders}``, each ``{id, text, when,
        by, at, lastAt, nextAt, count}``."""
        return self.request("concierge-order", {"action": "list"}, timeout)

    def add_order(self, text, when=None, timeout=REQUEST_TIMEOUT):
        """A standing order, kept ``by: "concierge"``; ``when`` is a schedule (``every 30m``, ``daily
        18:00``, ``weekdays 09:00``, ``cron "..."``) or None. ``{orders, order}``."""
        args = {"action": "add", "text": text}
        if when is not None:
            args["when"] = when
        return self.request("concierge-order", args, timeout)

    def rm_order(self, order_id, timeout=REQUEST_TIMEOUT):
        """Drops one of its own standing orders (the user's are refused ``unsupported``): ``{orders}``."""
        return self.request("concierge-order", {"action": "rm", "id": order_id}, timeout)

    def order_applied(self, order_id, text=None, timeout=REQUEST_TIMEOUT):
        """Marks a standing order applied (its ``lastAt`` and ``count``), ``text`` saying what was done:
        ``{orders, order}``."""
        args = {"action": "applied", "id": order_id}
        if text is not None:
            args["text"] = text
        return self.request("concierge-order", args, timeout)

    def events(self, after=None, limit=None, session=None, timeout=REQUEST_TIMEOUT):
        """The feed (``events``): after the cursor ``after``, or the newest ``limit``; one session's only
        with ``session`` (a job id). ``{events, cursor}``."""
        args = {}
        if after is not None:
            args["after"] = after
        if limit is not None:
            args["limit"] = limit
        if session is not None:
            args["id"] = session
        return self.request("events", args, timeout)

    # --- Closing ------------------------------------------------------------------------------------------

    def close(self, timeout=CLOSE_TIMEOUT):
        """Stops taking replies, lets a handler still running finish (at most ``timeout``; not when called
        from the handler itself) so that its reply is acked, sends the latest report, and closes."""
        deadline = time.monotonic() + timeout
        with self._cond:
            if self._closed:
                return
            self._closing = True
            self._queue.clear()  # not handled, not acked: they come again on the next start
            self._cond.notify_all()
            if threading.current_thread() is not self._handler_thread:
                while self._handling is not None and time.monotonic() < deadline:
                    self._cond.wait(deadline - time.monotonic())
        if self._started:
            self.flush(max(0.0, deadline - time.monotonic()))
            # The answers to what was sent (acks included) come before the connection is closed.
            with self._cond:
                while (self._conn is not None and self._conn.calls and time.monotonic() < deadline):
                    self._cond.wait(deadline - time.monotonic())
        with self._cond:
            self._closed = True
            conn = self._conn
            self._cond.notify_all()
        if conn is not None:
            self._drop(conn)
        manager = self._manager_thread
        if manager is not None and manager is not threading.current_thread():
            manager.join(max(0.0, deadline - time.monotonic()))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    @property
    def failure(self):
        """The refusal that ended this client (``unauthorized``, ``not_found``: the job is not this
        agent's any more), or None."""
        with self._lock:
            return self._fatal

    @property
    def last_finished(self):
        """The seq of the last user reply whose handler returned."""
        with self._lock:
            return self._finished

    # --- The connection -----------------------------------------------------------------------------------

    def _start(self):
        # Under the lock.
        if self._started:
            return
        self._started = True
        self._manager_thread = threading.Thread(target=self._run, name="roost-agent-connection")
        self._manager_thread.daemon = True
        self._handler_thread = threading.Thread(target=self._handle_replies, name="roost-agent-replies")
        self._handler_thread.daemon = True
        self._manager_thread.start()
        self._handler_thread.start()

    def _stopped(self):
        # Under the lock.
        return self._closed or self._fatal is not None

    def _run(self):
        """Connects, says hello, sends the latest report, and sends each newer one; again with backoff
        whenever the connection drops, until close() or a fatal refusal."""
        delay = BACKOFF_INITIAL
        while True:
            with self._cond:
                if self._stopped():
                    return
            conn = self._connect()
            if conn is not None:
                if self._handshake(conn):
                    self._serve(conn)
                if conn.ready:
                    delay = BACKOFF_INITIAL
                self._drop(conn)
            with self._cond:
                deadline = time.monotonic() + delay * (0.5 + random.random())
                while not self._stopped() and time.monotonic() < deadline:
                    self._cond.wait(deadline - time.monotonic())
            delay = min(delay * 2, BACKOFF_MAX)

    def _connect(self):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(CONNECT_TIMEOUT)
            sock.connect(self.socket_path)
            sock.settimeout(None)
        except (OSError, ValueError) as e:
            sock.close()
            log.debug("cannot connect to %s: %s", self.socket_path, e)
            return None
        with self._cond:
            if self._stopped():
                sock.close()
                return None
            number = self.connections + 1
            conn = _Conn(sock, number)
            self._conn = conn
        reader = threading.Thread(target=self._read, args=(conn,), name="roost-agent-reader")
        reader.daemon = True
        reader.start()
        return conn

    def _handshake(self, conn):
        args = {
            "protocol": PROTOCOL_VERSION,
            "agent": {"name": self.name, "version": self.version},
            "capabilities": self.capabilities,
        }
        call = self._send(conn, "hello", args)
        if call is None or not call.event.wait(HELLO_TIMEOUT):
            log.warning("no answer to hello: connecting again")
            return False
        with self._cond:
            if not conn.alive:
                return False
            self.connections = conn.number
            if call.ok:
                self.hello = call.result
            elif call.error.code == "bad_request":
                self.hello = None  # a daemon from before hello: version 1
            else:
                log.warning("hello refused (%s): going on", call.error)
                self.hello = None
        return True

    def _serve(self, conn):
        """Sends the latest report whenever it is newer than what this connection has, until it drops."""
        while True:
            with self._cond:
                while True:
                    if not conn.alive or self._stopped():
                        return
                    now = time.monotonic()
                    due = self._version > conn.sent_version and not conn.report_in_flight
                    if due and now >= conn.hold_until:
                        break
                    self._cond.wait(conn.hold_until - now if due else None)
                version = self._version
                args = {"id": self.job_id, "token": self.token, "report": self._report}
                conn.report_in_flight = True
                conn.sent_version = version

            def answered(call, version=version):
                self._report_answered(conn, version, call)

            with conn.wlock:
                call = self._send(conn, "report", args, callback=answered, locked=True)
                if call is not None:
                    conn.reported = True

    def _report_answered(self, conn, version, call):
        with self._cond:
            conn.report_in_flight = False
            if call.ok:
                conn.ready = True
                if version > self._taken_version:
                    self._taken_version = version
            else:
                code = call.error.code
                if code in ("unauthorized", "not_found"):
                    log.error("the daemon refused this job's report (%s): no longer speaking for it",
                              call.error)
                    self._fatal = call.error
                elif code == "busy":
                    conn.sent_version = 0
                    conn.hold_until = time.monotonic() + BUSY_RETRY
                elif code != "disconnected":
                    log.error("the daemon refused a report (%s)", call.error)
                    if version > self._taken_version:
                        self._taken_version = version  # it will not be taken: flush() does not wait on it
            self._cond.notify_all()
        if self._fatal is not None:
            self._drop(conn)

    def _send(self, conn, op, args, callback=None, locked=False):
        """Writes a request on ``conn``; returns its _Call, or None when the connection is down."""
        with self._cond:
            if not conn.alive:
                return None
            self._next_id += 1
            request_id = self._next_id
            call = _Call(request_id, callback)
            conn.calls[request_id] = call
        line = json.dumps({"id": request_id, "op": op, "args": args}, ensure_ascii=False,
                          separators=(",", ":")) + "\n"
        try:
            if locked:
                conn.sock.sendall(line.encode("utf-8"))
            else:
                with conn.wlock:
                    conn.sock.sendall(line.encode("utf-8"))
        except OSError as e:
            log.debug("write failed: %s", e)
            self._drop(conn)
            return None
        return call

    def _read(self, conn):
        try:
            stream = conn.sock.makefile("rb")
            for raw in stream:
                try:
                    message = json.loads(raw.decode("utf-8"))
                except ValueError:
                    log.warning("a line from the daemon that is not JSON: %r", raw[:200])
                    continue
                if not isinstance(message, dict):
                    continue
                if "event" in message:
                    if message.get("event") == "deliver":
                        self._on_deliver(conn, message)
                    continue
                self._on_answer(conn, message)
        except (OSError, ValueError) as e:
            log.debug("read failed: %s", e)
        self._drop(conn)

    def _on_answer(self, conn, message):
        with self._cond:
            call = conn.calls.pop(message.get("id"), None)
            self._cond.notify_all()
        if call is None:
            return
        if message.get("ok") is True:
            call.ok = True
            call.result = message.get("result")
        else:
            call.ok = False
            call.error = RoostError(str(message.get("error") or "refused"), code=message.get("code"))
        call.event.set()
        if call.callback is not None:
            call.callback(call)

    def _drop(self, conn):
        with self._cond:
            if not conn.alive:
                return
            conn.alive = False
            calls = list(conn.calls.values())
            conn.calls.clear()
            if self._conn is conn:
                self._conn = None
            self._cond.notify_all()
        try:
            conn.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            conn.sock.close()
        except OSError:
            pass
        for call in calls:
            call.ok = False
            call.error = RoostError("the connection to the daemon was lost", code="disconnected")
            call.event.set()
            if call.callback is not None:
                call.callback(call)

    # --- Replies ------------------------------------------------------------------------------------------

    def _on_deliver(self, conn, event):
        seq = event.get("seq")
        if event.get("id") not in (None, self.job_id) or not isinstance(seq, int) or isinstance(seq, bool):
            return
        text = event.get("text")
        reply = Reply(seq, text if isinstance(text, str) else "", event.get("mode"), event.get("kind"), event)
        ack_again = False
        with self._cond:
            if self._on_reply is None or self._closing or self._closed:
                return  # not taken: not acked
            if reply.kind is not None:
                if seq in self._peer_seen:
                    return
                self._peer_seen.add(seq)
                self._queue.append(reply)
            elif seq <= self._finished:
                ack_again = seq > conn.acked
            elif seq <= self._queued:
                return  # queued or being handled: acked when it is finished
            else:
                self._queued = seq
                self._queue.append(reply)
            self._cond.notify_all()
        if ack_again:
            self._ack(conn, seq, False)

    def _handle_replies(self):
        while True:
            with self._cond:
                while not self._queue and not self._closing and not self._closed:
                    self._cond.wait()
                if self._closing or self._closed:
                    return
                reply = self._queue.popleft()
                self._handling = reply
            returned = False
            try:
                self._on_reply(reply)
                returned = True
            except Exception:
                log.exception("the handler of reply %s failed (it counts as handled)", reply.seq)
                returned = True
            finally:
                if not returned:  # SystemExit or the like: this thread ends, the reply is not finished
                    with self._cond:
                        self._handling = None
                        self._cond.notify_all()
            with self._cond:
                if reply.kind is None and reply.seq > self._finished:
                    self._finished = reply.seq
                    self._save_finished(reply.seq)
                conn = self._conn
                send = conn is not None and conn.alive and not self._closed
            if send:
                self._ack(conn, reply.seq, reply.kind is not None)
            with self._cond:
                # Only now: close() waits for this, so the ack is on the wire before the connection ends.
                self._handling = None
                self._cond.notify_all()

    def _ack(self, conn, seq, exact):
        args = {"id": self.job_id, "token": self.token, "seq": seq}
        if exact:
            args["exact"] = True
        with conn.wlock:
            # A report is written, and `reported` set, under this lock: no ack goes before the report (a
            # reply finished meanwhile is sent again after it, and acked then).
            if not conn.reported:
                return
            if not exact:
                with self._cond:
                    conn.acked = max(conn.acked, seq)
            call = self._send(conn, "ack", args, callback=self._ack_answered, locked=True)
        if call is None:
            log.debug("ack %s not sent: the connection dropped (the reply comes again)", seq)

    @staticmethod
    def _ack_answered(call):
        if not call.ok and call.error.code != "disconnected":
            log.warning("an ack was refused: %s", call.error)

    # --- agent.json ---------------------------------------------------------------------------------------

    def _state_path(self):
        return os.path.join(self.job_dir, STATE_FILE) if self.job_dir else None

    def _load_finished(self):
        path = self._state_path()
        if path is None:
            return 0
        try:
            with open(path, "r", encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            return 0
        if not isinstance(data, dict) or data.get("job") not in (None, self.job_id):
            return 0
        seq = data.get("seq")
        return seq if isinstance(seq, int) and not isinstance(seq, bool) and seq > 0 else 0

    def _save_finished(self, seq):
        """Writes the last finished seq (write a temporary file, then rename), before its ack."""
        path = self._state_path()
        if path is None:
            return
        tmp = "%s.%d.tmp" % (path, os.getpid())
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump({"job": self.job_id, "seq": seq}, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as e:
            log.warning("could not write %s: %s", path, e)
            try:
                os.unlink(tmp)
            except OSError:
                pass

// The roost agent protocol, version 1: the agent's side, for Node (no dependencies but Node itself).
//
//   import { RoostAgent } from "./roost-agent.js";
//   const agent = RoostAgent.fromEnv({ name: "my-agent", version: "1.0", onReply: async (r) => work(r.text) });
//   agent?.report({ state: "working", summary: "reading the code" });
//
// What it does (the spec's "Clients" section): it finds the job in the environment (ROOST_* first, then
// the older PI_* names); it connects on the first report and says `hello` on every connection (a daemon
// that answers `bad_request` predates `hello`: it goes on with version 1); it sends the latest report
// again after a reconnect (it reconnects with backoff when the socket drops, e.g. the daemon restarts);
// it hands replies to `onReply` once each, in order, one at a time, and acks each after its handler
// returns, having first written the last finished seq to the job's `agent.json` (tmp + rename), so an agent
// started again skips (only acks) what it had finished; a seq already handled is dropped and acked again.
// `close()` sends the latest report; a reply whose handler is still running then is acked only if it
// finishes before the close does (otherwise it comes again on the next start).

import * as fs from "node:fs";
import * as net from "node:net";
import * as path from "node:path";
import type {
  BoardResult,
  ConciergePolicy,
  FeedEvent,
  OrdersResult,
  Peer,
  ReplySaved,
  SayKind,
  SendOutcome,
  SuggestResult,
  WatchResult,
} from "./protocol.js";

export type * from "./protocol.js";

/** The protocol version this client speaks. */
export const PROTOCOL_VERSION = 1;
/** The file in the job's dir where the client keeps the last finished reply. */
export const AGENT_FILE = "agent.json";
/** What the agent says it does when none are given. */
export const DEFAULT_CAPABILITIES: readonly string[] = ["report", "replies"];

/** A request line is at most 4 MiB (a longer one ends the connection): refused here instead. */
const MAX_LINE_BYTES = 4 * 1024 * 1024;
/** Requests in flight on one connection (the daemon stops reading past 256). */
const MAX_IN_FLIGHT = 256;
/** Reconnect backoff: the first wait, doubled per failed attempt up to the most (with jitter). */
const RECONNECT_BASE_MS = 50;
const RECONNECT_MAX_MS = 2_000;
/** After `busy`, a report is tried again after this long. */
const BUSY_RETRY_MS = 250;
/** How long `close()` waits for a connection, the last report's answer and the acks in flight. */
const CLOSE_TIMEOUT_MS = 5_000;
/** How long `call()` waits by default (for a connection, then for the answer). */
const DEFAULT_CALL_TIMEOUT_MS = 30_000;
/** Peer items acked exactly that are remembered in `agent.json` (to drop them when sent again). */
const MAX_EXACT_KEPT = 100;

/** The report's bounds (the spec's): longer text is cut here rather than refused by the daemon. */
const LIMITS = {
  summary: 500,
  question: 2000,
  choices: 20,
  choice: 200,
  tool: 100,
  error: 1000,
  name: 200,
  model: 200,
  thinking: 200,
} as const;

export type JobState = "working" | "blocked" | "done" | "failed";
export type Status = "busy" | "waiting" | "idle";
export type WaitingFor = "question" | "dialog" | "first-prompt";

/** A report: what is left out is sent as null (or `[]` for `choices`). Other fields are passed on. */
export interface Report {
  state: JobState;
  status?: Status | null;
  waitingFor?: WaitingFor | null;
  summary?: string | null;
  question?: string | null;
  choices?: string[];
  tool?: string | null;
  error?: string | null;
  name?: string | null;
  model?: string | null;
  thinking?: string | null;
  [field: string]: unknown;
}

/** One reply (a `deliver` event). */
export interface Reply {
  /** Numbered per job, from 1, never reused. */
  seq: number;
  text: string;
  /** `steer` (join the work under way) or `followUp` / absent (after it). */
  mode?: string;
  /** Set for a peer item (`message`, `report`, `notice`, `digest`); acked exactly. */
  kind?: string;
  /** The event as it came. */
  event: Record<string, unknown>;
}

/** What `hello` told us on a (re)connection. */
export interface ConnectInfo {
  /** The version both speak (1 for a daemon that predates `hello`). */
  protocol: number;
  /** `{name, version}`, or null from a daemon that predates `hello`. */
  daemon: { name?: string; version?: string } | null;
  /** What the daemon offers. */
  capabilities: string[];
  /** 1 for the first connection, then one more per reconnection. */
  connection: number;
}

/** The job, from the environment. */
export interface JobIdentity {
  id: string;
  token: string;
  socket: string;
  /** The job's dir (where `agent.json` is kept), or null when not given. */
  dir: string | null;
}

export interface AgentOptions {
  name: string;
  version: string;
  /** Called once per reply, in order, one at a time; the reply is acked after it resolves. */
  onReply: (reply: Reply) => void | Promise<void>;
  /** What the agent does (default `["report", "replies"]`). */
  capabilities?: string[];
  /** Called after `hello` on every (re)connection. */
  onConnect?: (info: ConnectInfo) => void;
  /** What went wrong out of the caller's sight (a handler that threw, a lost ack); default: stderr. */
  onError?: (error: unknown) => void;
}

export interface FromEnvOptions extends AgentOptions {
  /** Default `process.env`. */
  env?: Record<string, string | undefined>;
}

/** A refusal from the daemon (`code` is the protocol's: `unauthorized`, `bad_request`, ...) or the
 * client's own: `disconnected` (the connection was lost meanwhile), `timeout`, `closed`, `not_connected`
 * (no report yet). */
export class RoostError extends Error {
  readonly code: string;
  constructor(code: string, message: string) {
    super(message);
    this.name = "RoostError";
    this.code = code;
  }
}

type Json = Record<string, unknown>;

interface Waiter {
  resolve: (v: unknown) => void;
  reject: (e: unknown) => void;
}

interface ReportWaiter extends Waiter {
  /** The report's version: settled when this one or a later one is answered. */
  version: number;
}

/** Times a promise out with a `RoostError("timeout")`. */
function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const t = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new RoostError("timeout", `${what}: no answer in ${ms} ms`)), ms);
  });
  return Promise.race([p, t]).finally(() => clearTimeout(timer));
}

/** Cuts a text to `max` characters (Unicode scalar values, as the daemon counts them). */
function clip(v: unknown, max: number): string | null {
  if (v === undefined || v === null) return null;
  const s = String(v);
  if (s.length <= max) return s;
  const chars = Array.from(s);
  return chars.length <= max ? s : chars.slice(0, max - 1).join("") + "…";
}

const STATES: ReadonlySet<string> = new Set(["working", "blocked", "done", "failed"]);

/** A full snapshot: the core fields filled with their defaults and cut to their bounds. */
function normalise(r: Report): Json {
  if (!r || typeof r !== "object" || !STATES.has(r.state)) {
    throw new RoostError("bad_request", `report.state must be one of working, blocked, done, failed`);
  }
  const choices = Array.isArray(r.choices) ? r.choices : [];
  return {
    ...r,
    state: r.state,
    status: r.status ?? null,
    waitingFor: r.waitingFor ?? null,
    summary: clip(r.summary, LIMITS.summary),
    question: clip(r.question, LIMITS.question),
    choices: choices.slice(0, LIMITS.choices).map((c) => clip(c, LIMITS.choice) ?? ""),
    tool: clip(r.tool, LIMITS.tool),
    error: clip(r.error, LIMITS.error),
    name: clip(r.name, LIMITS.name),
    model: clip(r.model, LIMITS.model),
    ...(r.thinking !== undefined ? { thinking: clip(r.thinking, LIMITS.thinking) } : {}),
  };
}

/** One socket connection: JSON lines, requests answered in order, events handed on. */
class Connection {
  private readonly sock: net.Socket;
  private buf = "";
  private nextId = 0;
  private readonly waiting = new Map<number, Waiter>();
  private readonly held: Array<() => void> = [];
  open = true;

  private constructor(
    sock: net.Socket,
    private readonly onEvent: (conn: Connection, ev: Json) => void,
    private readonly onClose: (conn: Connection) => void,
  ) {
    this.sock = sock;
    sock.setEncoding("utf8");
    sock.on("data", (chunk: string) => this.data(chunk));
    sock.on("error", () => {
      /* followed by "close" */
    });
    sock.on("close", () => this.closed());
  }

  static connect(
    socketPath: string,
    onEvent: (conn: Connection, ev: Json) => void,
    onClose: (conn: Connection) => void,
  ): Promise<Connection> {
    return new Promise((resolve, reject) => {
      const sock = net.createConnection({ path: socketPath });
      const fail = (e: Error) => {
        sock.destroy();
        reject(e);
      };
      sock.once("error", fail);
      sock.once("connect", () => {
        sock.off("error", fail);
        resolve(new Connection(sock, onEvent, onClose));
      });
    });
  }

  request(op: string, args: Json): Promise<unknown> {
    if (!this.open) return Promise.reject(new RoostError("disconnected", "the connection was lost"));
    const id = ++this.nextId;
    const line = JSON.stringify({ id, op, args }) + "\n";
    if (Buffer.byteLength(line) > MAX_LINE_BYTES) {
      return Promise.reject(new RoostError("bad_request", `a request line is at most ${MAX_LINE_BYTES} bytes`));
    }
    return new Promise((resolve, reject) => {
      const send = () => {
        if (!this.open) {
          reject(new RoostError("disconnected", "the connection was lost"));
          return;
        }
        this.waiting.set(id, { resolve, reject });
        this.sock.write(line);
      };
      if (this.waiting.size >= MAX_IN_FLIGHT) this.held.push(send);
      else send();
    });
  }

  close(): void {
    if (!this.open) return;
    this.sock.end();
    // Everything asked has been answered by now: nothing is lost by not waiting for the daemon's side.
    setTimeout(() => this.sock.destroy(), 1_000).unref();
  }

  private data(chunk: string): void {
    this.buf += chunk;
    let nl: number;
    while ((nl = this.buf.indexOf("\n")) >= 0) {
      const line = this.buf.slice(0, nl);
      this.buf = this.buf.slice(nl + 1);
      if (!line.trim()) continue;
      let msg: Json;
      try {
        msg = JSON.parse(line) as Json;
      } catch {
        continue;
      }
      if (!msg || typeof msg !== "object") continue;
      if (typeof msg.event === "string") {
        this.onEvent(this, msg);
        continue;
      }
      const w = typeof msg.id === "number" ? this.waiting.get(msg.id) : undefined;
      if (!w) continue;
      this.waiting.delete(msg.id as number);
      if (msg.ok === true) w.resolve(msg.result ?? {});
      else w.reject(new RoostError(String(msg.code ?? "error"), String(msg.error ?? "refused")));
      const next = this.held.shift();
      if (next) next();
    }
  }

  private closed(): void {
    if (!this.open) return;
    this.open = false;
    const lost = new RoostError("disconnected", "the connection was lost");
    for (const w of this.waiting.values()) w.reject(lost);
    this.waiting.clear();
    for (const send of this.held.splice(0)) send();
    this.onClose(this);
  }
}

/** The agent's side of the protocol for one job. */
export class RoostAgent {
  /** The job this agent speaks for. */
  readonly job: JobIdentity;
  /** What the last `hello` said (null before it, or from a daemon that predates it). */
  daemon: ConnectInfo["daemon"] = null;
  /** The protocol version in use. */
  protocol = PROTOCOL_VERSION;

  private readonly opts: AgentOptions;
  private conn: Connection | null = null;
  private connecting = false;
  private helloDone = false;
  private ready = false;
  private connections = 0;
  private attempt = 0;
  private timer: NodeJS.Timeout | null = null;

  private latest: Json | null = null;
  private lastGood: Json | null = null;
  private version = 0;
  private sentVersion = 0;
  private reportBusy = false;
  private reportWaiters: ReportWaiter[] = [];
  private readyWaiters: Waiter[] = [];

  private finished = 0;
  private exactDone: number[] = [];
  private highest = 0;
  private readonly exactQueued = new Set<number>();
  private readonly queue: Reply[] = [];
  private handling = false;
  private ackScheduled = false;
  private readonly inflight = new Set<Promise<unknown>>();

  private closing = false;
  private closed = false;
  private closePromise: Promise<void> | null = null;
  private dead: RoostError | null = null;

  /** The agent for the job roost started this process for, or null when roost did not start it. */
  static fromEnv(opts: FromEnvOptions): RoostAgent | null {
    const env = opts.env ?? process.env;
    const pick = (name: string, old: string) => env[name] || env[old] || "";
    const id = pick("ROOST_JOB_ID", "PI_JOB_ID");
    const token = pick("ROOST_JOB_TOKEN", "PI_JOB_TOKEN");
    const socket = pick("ROOST_SOCKET", "PI_DAEMON_SOCK");
    const dir = pick("ROOST_JOB_DIR", "PI_JOB_DIR");
    if (!id || !token || !socket) return null;
    return new RoostAgent({ id, token, socket, dir: dir || null }, opts);
  }

  constructor(job: JobIdentity, opts: AgentOptions) {
    this.job = job;
    this.opts = opts;
    this.load();
  }

  /** The last finished reply's seq (from `agent.json` at start). */
  get lastFinished(): number {
    return this.finished;
  }

  /**
   * Sends a report (a full snapshot: what is left out is null). The first one connects. Resolves when the
   * daemon took it (or a later one), rejects with a `RoostError` when refused; not awaiting it is fine.
   */
  report(r: Report): Promise<void> {
    if (this.dead) return this.quiet(Promise.reject(this.dead));
    if (this.closing) return this.quiet(Promise.reject(new RoostError("closed", "the agent is closed")));
    let body: Json;
    try {
      body = normalise(r);
    } catch (e) {
      return this.quiet(Promise.reject(e));
    }
    this.latest = body;
    const version = ++this.version;
    const p = new Promise<void>((resolve, reject) => {
      this.reportWaiters.push({ version, resolve: () => resolve(), reject });
    });
    this.ensureConnection();
    this.pump();
    return this.quiet(p);
  }

  /**
   * Any other op on the job's connection (after the first report). Resolves with the result; rejects with
   * a `RoostError`: the daemon's refusal (`code`), `disconnected` when the connection was lost meanwhile,
   * `timeout`, `not_connected` before the first report.
   */
  async call(op: string, args: Json = {}, opts: { timeoutMs?: number } = {}): Promise<unknown> {
    if (this.dead) throw this.dead;
    if (this.closed) throw new RoostError("closed", "the agent is closed");
    if (this.version === 0) {
      throw new RoostError("not_connected", "report first: a connection starts with a report");
    }
    const ms = opts.timeoutMs ?? DEFAULT_CALL_TIMEOUT_MS;
    const started = Date.now();
    await withTimeout(this.whenReady(), ms, `${op} (waiting for the connection)`);
    const conn = this.conn;
    if (!conn) throw new RoostError("disconnected", "the connection was lost");
    return withTimeout(this.track(conn.request(op, args)), Math.max(1, ms - (Date.now() - started)), op);
  }

  /** The sessions (`peers {}`). */
  async peers(): Promise<Peer[]> {
    return ((await this.call("peers")) as { peers: Peer[] }).peers;
  }
  /** A message to session `to` (an id or a unique name). */
  send(to: string, text: string): Promise<SendOutcome> {
    return this.call("send", { to, text }) as Promise<SendOutcome>;
  }
  /** A child job of `profile` with `task`, whose parent is this job. */
  spawn(profile: string, task: string, name?: string): Promise<{ id: string; name: string }> {
    return this.call("spawn", { profile, task, ...(name !== undefined ? { name } : {}) }) as Promise<{ id: string; name: string }>;
  }
  /** This job's result to its parent (a `report` item); the row ends `done` with it. */
  handback(text: string): Promise<unknown> {
    return this.call("handback", { text });
  }
  /** Be told once (a `notice` item) when `session` is next idle or has ended. */
  watch(session: string, when: "idle" | "ended" = "idle"): Promise<WatchResult> {
    return this.call("watch", { id: session, when }) as Promise<WatchResult>;
  }

  /** The task board (`task {action: "list"}`). */
  tasks(): Promise<BoardResult> {
    return this.call("task", { action: "list" }) as Promise<BoardResult>;
  }
  claimTask(id: number | string): Promise<BoardResult> {
    return this.call("task", { action: "claim", id }) as Promise<BoardResult>;
  }
  taskDone(id: number | string, result?: string): Promise<BoardResult> {
    return this.call("task", { action: "done", id, ...(result !== undefined ? { result } : {}) }) as Promise<BoardResult>;
  }
  releaseTask(id: number | string): Promise<BoardResult> {
    return this.call("task", { action: "release", id }) as Promise<BoardResult>;
  }
  addTask(title: string, more: { detail?: string; after?: Array<number | string> } = {}): Promise<BoardResult> {
    return this.call("task", { action: "add", title, ...more }) as Promise<BoardResult>;
  }

  // The concierge's own ops (M44-M46): on its job's connection; any other session's is refused.

  /** What the concierge tells the user (`concierge-say`): a `concierge` event in the feed; its `seq`. */
  say(kind: SayKind, text: string): Promise<{ seq: number }> {
    return this.call("concierge-say", { kind, text }) as Promise<{ seq: number }>;
  }
  /** An answer suggested for `session` (an id or a unique name), which waits; its row carries it. */
  suggest(session: string, text: string, why?: string): Promise<SuggestResult> {
    return this.call("concierge-suggest", { id: session, text, ...(why !== undefined ? { why } : {}) }) as Promise<SuggestResult>;
  }
  /**
   * Answers `session`'s question for the user (`concierge-reply`): the reply's `{saved, seq}`. Refused
   * `policy` unless the policy allows it, `bad_request` unless the session waits for an answer.
   */
  conciergeReply(session: string, text: string, why?: string): Promise<ReplySaved> {
    return this.call("concierge-reply", { id: session, text, ...(why !== undefined ? { why } : {}) }) as Promise<ReplySaved>;
  }
  /** The policy in force (`concierge-policy`). */
  async policy(): Promise<ConciergePolicy> {
    return ((await this.call("concierge-policy")) as { policy: ConciergePolicy }).policy;
  }
  /** Stops `session` (`concierge-act`; refused `policy` without `act`). */
  actStop(session: string): Promise<{ id: string }> {
    return this.call("concierge-act", { what: "stop", id: session }) as Promise<{ id: string }>;
  }
  /** Starts `session` again (`concierge-act`; refused `policy` without `act`). */
  actRespawn(session: string): Promise<{ id: string }> {
    return this.call("concierge-act", { what: "respawn", id: session }) as Promise<{ id: string }>;
  }
  /** A new session (`concierge-act`; refused `policy` without `act`). */
  actDispatch(launch: { profile: string; task?: string; name?: string }): Promise<{ id: string; name: string }> {
    return this.call("concierge-act", { what: "dispatch", launch }) as Promise<{ id: string; name: string }>;
  }
  /** The standing orders (`concierge-order {action: "list"}`). */
  orders(): Promise<OrdersResult> {
    return this.call("concierge-order", { action: "list" }) as Promise<OrdersResult>;
  }
  /** A standing order, kept `by: "concierge"`; `when` a schedule (`every 30m`, `daily 18:00`, ...). */
  addOrder(text: string, when?: string): Promise<OrdersResult> {
    return this.call("concierge-order", { action: "add", text, ...(when !== undefined ? { when } : {}) }) as Promise<OrdersResult>;
  }
  /** Drops one of its own standing orders (the user's: `unsupported`). */
  rmOrder(id: number | string): Promise<OrdersResult> {
    return this.call("concierge-order", { action: "rm", id }) as Promise<OrdersResult>;
  }
  /** Marks a standing order applied (`lastAt`, `count`); `text` says what was done. */
  orderApplied(id: number | string, text?: string): Promise<OrdersResult> {
    return this.call("concierge-order", { action: "applied", id, ...(text !== undefined ? { text } : {}) }) as Promise<OrdersResult>;
  }
  /** The feed: after a cursor, or the newest `limit`; one session's with `id`. */
  events(args: { after?: number; limit?: number; id?: string } = {}): Promise<{ events: FeedEvent[]; cursor: number }> {
    return this.call("events", args) as Promise<{ events: FeedEvent[]; cursor: number }>;
  }

  /**
   * Sends the latest report and closes. Replies not yet started are left for the next start; one whose
   * handler is running is acked only if it finishes before this does.
   */
  close(): Promise<void> {
    if (this.closePromise) return this.closePromise;
    this.closing = true;
    this.queue.length = 0;
    this.closePromise = (async () => {
      if (this.latest && !this.dead) {
        try {
          await withTimeout(this.whenReady(), CLOSE_TIMEOUT_MS, "close (waiting for the connection)");
          const conn = this.conn;
          if (conn) {
            await withTimeout(
              this.track(conn.request("report", { id: this.job.id, token: this.job.token, report: this.latest })),
              CLOSE_TIMEOUT_MS,
              "close (the last report)",
            );
          }
        } catch (e) {
          this.error(e);
        }
      }
      // Acks written meanwhile (a handler that finished first) are answered before the connection ends.
      await withTimeout(Promise.allSettled([...this.inflight]), CLOSE_TIMEOUT_MS, "close (acks)").catch((e) =>
        this.error(e),
      );
      this.closed = true;
      this.stopTimer();
      const gone = new RoostError("closed", "the agent is closed");
      for (const w of this.reportWaiters.splice(0)) w.reject(gone);
      for (const w of this.readyWaiters.splice(0)) w.reject(gone);
      this.conn?.close();
      this.conn = null;
    })();
    return this.closePromise;
  }

  // --- the connection ---------------------------------------------------------------------------------

  private ensureConnection(): void {
    if (this.conn || this.connecting || this.timer || this.closed || this.dead) return;
    this.connect();
  }

  private connect(): void {
    this.connecting = true;
    Connection.connect(
      this.job.socket,
      (c, ev) => this.onEvent(c, ev),
      (c) => this.onClose(c),
    ).then(
      (conn) => {
        this.connecting = false;
        if (this.closed || this.dead) {
          conn.close();
          return;
        }
        this.conn = conn;
        this.helloDone = false;
        this.ready = false;
        this.sentVersion = 0;
        this.reportBusy = false;
        void this.hello(conn);
      },
      () => {
        this.connecting = false;
        this.scheduleReconnect();
      },
    );
  }

  private async hello(conn: Connection): Promise<void> {
    const args = {
      protocol: PROTOCOL_VERSION,
      agent: { name: this.opts.name, version: this.opts.version },
      capabilities: [...(this.opts.capabilities ?? DEFAULT_CAPABILITIES)],
    };
    let info: ConnectInfo;
    try {
      const r = (await conn.request("hello", args)) as Json;
      const protocol = typeof r.protocol === "number" ? Math.min(r.protocol, PROTOCOL_VERSION) : PROTOCOL_VERSION;
      const daemon = r.daemon && typeof r.daemon === "object" ? (r.daemon as ConnectInfo["daemon"]) : null;
      const caps = Array.isArray(r.capabilities) ? r.capabilities.filter((c): c is string => typeof c === "string") : [];
      info = { protocol, daemon, capabilities: caps, connection: 0 };
    } catch (e) {
      if (conn !== this.conn) return;
      const code = e instanceof RoostError ? e.code : "";
      if (code === "disconnected") return;
      if (code === "unauthorized") {
        this.die(e as RoostError);
        return;
      }
      // A daemon from before `hello` answers bad_request (an unknown op): version 1 behaviour.
      if (code !== "bad_request") this.error(e);
      info = { protocol: 1, daemon: null, capabilities: [], connection: 0 };
    }
    if (conn !== this.conn) return;
    this.protocol = info.protocol;
    this.daemon = info.daemon;
    this.helloDone = true;
    info.connection = ++this.connections;
    try {
      this.opts.onConnect?.(info);
    } catch (e) {
      this.error(e);
    }
    this.pump();
  }

  private onClose(conn: Connection): void {
    if (conn !== this.conn) return;
    this.conn = null;
    this.helloDone = false;
    this.ready = false;
    this.reportBusy = false;
    this.sentVersion = 0;
    if (!this.closed && !this.dead) this.scheduleReconnect();
  }

  private scheduleReconnect(): void {
    if (this.timer || this.closed || this.dead) return;
    const base = Math.min(RECONNECT_MAX_MS, RECONNECT_BASE_MS * 2 ** this.attempt);
    this.attempt = Math.min(this.attempt + 1, 30);
    const delay = Math.round(base * (0.5 + Math.random() / 2));
    this.timer = setTimeout(() => {
      this.timer = null;
      if (!this.conn && !this.connecting && !this.closed && !this.dead) this.connect();
    }, delay);
  }

  private stopTimer(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }

  /** Sends the latest report when it was not sent on this connection yet (one at a time: coalesced). */
  private pump(): void {
    const conn = this.conn;
    if (!conn || !this.helloDone || this.reportBusy || !this.latest || this.closed) return;
    if (this.sentVersion >= this.version) return;
    const version = this.version;
    const body = this.latest;
    this.reportBusy = true;
    this.track(conn.request("report", { id: this.job.id, token: this.job.token, report: body })).then(
      () => {
        if (conn !== this.conn) return;
        this.reportBusy = false;
        this.sentVersion = Math.max(this.sentVersion, version);
        this.lastGood = body;
        this.attempt = 0;
        this.settleReports(version, null);
        if (!this.ready) {
          this.ready = true;
          for (const w of this.readyWaiters.splice(0)) w.resolve(undefined);
        }
        this.pump();
      },
      (e: unknown) => {
        if (conn !== this.conn) return;
        this.reportBusy = false;
        const code = e instanceof RoostError ? e.code : "";
        if (code === "disconnected") return; // sent again on the next connection
        if (code === "unauthorized") {
          this.die(e as RoostError);
          return;
        }
        if (code === "busy") {
          setTimeout(() => this.pump(), BUSY_RETRY_MS).unref();
          return;
        }
        // Refused (bad_request): this snapshot is not sent again; the last good one stands for the row.
        // Said to onError too, as a report is often not awaited.
        this.sentVersion = Math.max(this.sentVersion, version);
        if (this.latest === body) this.latest = this.lastGood;
        this.error(e);
        this.settleReports(version, e);
        this.pump();
      },
    );
  }

  private settleReports(version: number, error: unknown): void {
    const keep: ReportWaiter[] = [];
    for (const w of this.reportWaiters) {
      if (w.version > version) keep.push(w);
      else if (error) w.reject(error);
      else w.resolve(undefined);
    }
    this.reportWaiters = keep;
  }

  private whenReady(): Promise<void> {
    if (this.dead) return Promise.reject(this.dead);
    if (this.conn && this.ready) return Promise.resolve();
    this.ensureConnection();
    return new Promise((resolve, reject) => this.readyWaiters.push({ resolve: () => resolve(), reject }));
  }

  /** `unauthorized`: stop speaking for this job. */
  private die(e: RoostError): void {
    if (this.dead) return;
    this.dead = e;
    this.stopTimer();
    for (const w of this.reportWaiters.splice(0)) w.reject(e);
    for (const w of this.readyWaiters.splice(0)) w.reject(e);
    this.queue.length = 0;
    this.conn?.close();
    this.conn = null;
    this.error(e);
  }

  // --- replies ----------------------------------------------------------------------------------------

  private onEvent(conn: Connection, ev: Json): void {
    if (conn !== this.conn || ev.event !== "deliver" || ev.id !== this.job.id) return;
    const seq = ev.seq;
    if (typeof seq !== "number" || !Number.isSafeInteger(seq) || seq < 1) return;
    const reply: Reply = {
      seq,
      text: typeof ev.text === "string" ? ev.text : "",
      event: ev,
      ...(typeof ev.mode === "string" ? { mode: ev.mode } : {}),
      ...(typeof ev.kind === "string" ? { kind: ev.kind } : {}),
    };
    if (reply.kind !== undefined) {
      // A peer item: acked on its own, exactly.
      if (this.exactDone.includes(seq)) {
        this.sendAck(seq, true);
        return;
      }
      if (this.closing || this.exactQueued.has(seq)) return;
      this.exactQueued.add(seq);
    } else {
      if (seq <= this.finished) {
        // Handled already (before a reconnect, or before this process started): acked again.
        this.ackFinished();
        return;
      }
      // Queued or being handled already: acked when it is done. While closing: left for the next start.
      if (this.closing || seq <= this.highest) return;
      this.highest = seq;
    }
    this.queue.push(reply);
    void this.drain();
  }

  private async drain(): Promise<void> {
    if (this.handling) return;
    this.handling = true;
    try {
      for (let r = this.queue.shift(); r; r = this.queue.shift()) {
        if (this.closing || this.dead) break;
        try {
          await this.opts.onReply(r);
        } catch (e) {
          // It counts as finished: a reply that always fails must not hold up the ones after it.
          this.error(e);
        }
        if (this.closed || this.dead) break;
        this.finish(r);
      }
    } finally {
      this.handling = false;
    }
  }

  private finish(r: Reply): void {
    if (r.kind !== undefined) {
      this.exactQueued.delete(r.seq);
      this.exactDone.push(r.seq);
      if (this.exactDone.length > MAX_EXACT_KEPT) this.exactDone.splice(0, this.exactDone.length - MAX_EXACT_KEPT);
      this.save();
      this.sendAck(r.seq, true);
    } else {
      this.finished = Math.max(this.finished, r.seq);
      this.save();
      this.sendAck(this.finished, false);
    }
  }

  private ackFinished(): void {
    if (this.ackScheduled) return;
    this.ackScheduled = true;
    queueMicrotask(() => {
      this.ackScheduled = false;
      this.sendAck(this.finished, false);
    });
  }

  private sendAck(seq: number, exact: boolean): void {
    const conn = this.conn;
    // Without a connection the reply is sent again on the next one, and acked then.
    if (!conn || !this.helloDone || this.dead) return;
    const args: Json = { id: this.job.id, token: this.job.token, seq };
    if (exact) args.exact = true;
    this.track(conn.request("ack", args)).catch((e: unknown) => {
      const code = e instanceof RoostError ? e.code : "";
      if (code === "unauthorized") this.die(e as RoostError);
      else if (code !== "disconnected") this.error(e);
    });
  }

  // --- agent.json -------------------------------------------------------------------------------------

  private file(): string | null {
    return this.job.dir ? path.join(this.job.dir, AGENT_FILE) : null;
  }

  private readFile(): Json {
    const f = this.file();
    if (!f) return {};
    try {
      const v = JSON.parse(fs.readFileSync(f, "utf8")) as unknown;
      return v && typeof v === "object" && !Array.isArray(v) ? (v as Json) : {};
    } catch {
      return {};
    }
  }

  private load(): void {
    const saved = this.readFile();
    // Another job's file (a dir reused) says nothing about this one.
    if (saved.job !== undefined && saved.job !== null && saved.job !== this.job.id) return;
    const last = saved.seq;
    if (typeof last === "number" && Number.isSafeInteger(last) && last > 0) this.finished = last;
    if (Array.isArray(saved.exact)) {
      this.exactDone = saved.exact.filter((s): s is number => typeof s === "number").slice(-MAX_EXACT_KEPT);
    }
    this.highest = this.finished;
  }

  /** Written before the ack, atomically (a tmp file renamed over it); other keys in it are kept. */
  private save(): void {
    const f = this.file();
    if (!f) return;
    const tmp = `${f}.${process.pid}.tmp`;
    try {
      const data = { ...this.readFile(), job: this.job.id, seq: this.finished, exact: this.exactDone };
      const fd = fs.openSync(tmp, "w", 0o600);
      try {
        fs.writeSync(fd, JSON.stringify(data) + "\n");
        fs.fsyncSync(fd);
      } finally {
        fs.closeSync(fd);
      }
      fs.renameSync(tmp, f);
    } catch (e) {
      // Acked all the same: the daemon does not send an acked reply again, so nothing is handled twice.
      try {
        fs.rmSync(tmp, { force: true });
      } catch {
        /* nothing to clean */
      }
      this.error(e);
    }
  }

  // --- helpers ----------------------------------------------------------------------------------------

  private track<T>(p: Promise<T>): Promise<T> {
    this.inflight.add(p);
    const done = () => this.inflight.delete(p);
    p.then(done, done);
    return p;
  }

  /** A promise the caller may leave unawaited without an unhandled rejection. */
  private quiet<T>(p: Promise<T>): Promise<T> {
    p.catch(() => {});
    return p;
  }

  private error(e: unknown): void {
    const report = this.opts.onError ?? ((x: unknown) => console.error("roost-agent:", x));
    try {
      report(e);
    } catch {
      /* the reporter itself failed */
    }
  }
}

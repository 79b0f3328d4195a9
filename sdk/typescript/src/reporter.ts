// The roost agent protocol, version 1: the job's connection, for Node (no dependencies but Node itself).
// `Reporter` is what the spec calls the client's underside ("what pi's worker uses"): it speaks for one
// job, reports coalesced (one report in flight, the latest next), reconnects and retries with backoff,
// and sends any other op with `call`. `RoostAgent` (agent.ts) is a Reporter that also takes replies.
//
//   import { Reporter } from "pi-roost/agent";
//   const r = Reporter.fromEnv({ name: "my-worker", version: "1.0" });
//   r?.report({ state: "working", summary: "reading the code" });   // as often as it likes: coalesced
//   await r?.call("task", { action: "list" });
//
// What it does (the spec's "Clients" section): it finds the job in the environment (ROOST_* first, then
// the older PI_* names); it connects on the first report and says `hello` on every connection (a daemon
// that answers `bad_request` predates `hello`: it goes on with version 1); it sends the latest report
// again after a reconnect (it reconnects with backoff when the socket drops, e.g. the daemon restarts);
// a report answered `busy` is sent again after a backoff (the latest one, by then); `unauthorized` ends it.

import * as net from "node:net";
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
export const RECONNECT_BASE_MS = 50;
export const RECONNECT_MAX_MS = 2_000;
/** After `busy` ("try again shortly": the daemon could not save), the report is sent again after this
 * long, doubled for each `busy` in a row up to the most (with jitter): a store that stays locked is not
 * hammered, and one that frees up is tried again soon. */
export const BUSY_RETRY_BASE_MS = 250;
export const BUSY_RETRY_MAX_MS = 4_000;
/** How long `close()` waits for a connection, the last report's answer and the acks in flight. */
const CLOSE_TIMEOUT_MS = 5_000;
/** How long `call()` waits by default (for a connection, then for the answer). */
const DEFAULT_CALL_TIMEOUT_MS = 30_000;

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
  prLinks: 20,
  remoteAt: 500,
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
  /** The pull requests its work opened: at most 20 `http(s)` URLs (the `prLinks` capability field). */
  prLinks?: string[] | null;
  /** Where the session can be reached from elsewhere, one line (the `remoteAt` capability field). */
  remoteAt?: string | null;
  [field: string]: unknown;
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

export interface ReporterOptions {
  /** The agent's name and version, said in `hello` on every connection. */
  name: string;
  version: string;
  /** What the agent does (default `["report", "replies"]`). */
  capabilities?: string[];
  /** Called after `hello` on every (re)connection. */
  onConnect?: (info: ConnectInfo) => void;
  /** Events the daemon sends on the job's connection (`deliver`, ...), as they came. */
  onEvent?: (event: Record<string, unknown>) => void;
  /** What went wrong out of the caller's sight (a refused report that was not awaited); default: stderr. */
  onError?: (error: unknown) => void;
}

export interface ReporterFromEnvOptions extends ReporterOptions {
  /** Default `process.env`. */
  env?: Record<string, string | undefined>;
}

/** The job roost started this process for, from the environment (the new names first), or null. */
export function jobFromEnv(env: Record<string, string | undefined> = process.env): JobIdentity | null {
  const pick = (name: string, old: string) => env[name] || env[old] || "";
  const id = pick("ROOST_JOB_ID", "PI_JOB_ID");
  const token = pick("ROOST_JOB_TOKEN", "PI_JOB_TOKEN");
  const socket = pick("ROOST_SOCKET", "PI_DAEMON_SOCK");
  const dir = pick("ROOST_JOB_DIR", "PI_JOB_DIR");
  if (!id || !token || !socket) return null;
  return { id, token, socket, dir: dir || null };
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

export type Json = Record<string, unknown>;

interface Waiter {
  resolve: (v: unknown) => void;
  reject: (e: unknown) => void;
}

interface ReportWaiter extends Waiter {
  /** The report's version: settled when this one or a later one is answered. */
  version: number;
}

/** Times a promise out with a `RoostError("timeout")`. */
export function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
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
    // The first links are kept, none is cut (a cut URL leads elsewhere).
    ...(Array.isArray(r.prLinks) ? { prLinks: r.prLinks.slice(0, LIMITS.prLinks) } : {}),
    ...(r.remoteAt !== undefined ? { remoteAt: clip(r.remoteAt, LIMITS.remoteAt) } : {}),
  };
}

/** One socket connection: JSON lines, requests answered in order, events handed on. */
export class Connection {
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

/**
 * One job's connection to roost: reports (coalesced: one in flight, the latest next; sent again after a
 * reconnect and after `busy`, with backoff), `hello` on every connection, and `call` for any other op.
 * What pi's worker uses; `RoostAgent` is one that also takes replies.
 */
export class Reporter {
  /** The job this speaks for. */
  readonly job: JobIdentity;
  /** What the last `hello` said (null before it, or from a daemon that predates it). */
  daemon: ConnectInfo["daemon"] = null;
  /** The protocol version in use. */
  protocol = PROTOCOL_VERSION;

  private readonly ropts: ReporterOptions;
  private conn: Connection | null = null;
  private connecting = false;
  private helloDone = false;
  private ready = false;
  private connections = 0;
  private attempt = 0;
  private busyAttempt = 0;
  private timer: NodeJS.Timeout | null = null;
  private busyTimer: NodeJS.Timeout | null = null;

  private latest: Json | null = null;
  private lastGood: Json | null = null;
  private version = 0;
  private sentVersion = 0;
  private reportBusy = false;
  private reportWaiters: ReportWaiter[] = [];
  private readyWaiters: Waiter[] = [];
  private readonly inflight = new Set<Promise<unknown>>();

  /** Set by `close()`: nothing new is taken. */
  protected closing = false;
  /** Set once `close()` has finished. */
  protected closed = false;
  private closePromise: Promise<void> | null = null;
  /** Set on `unauthorized`: it speaks for this job no more. */
  protected dead: RoostError | null = null;

  /** The reporter for the job roost started this process for, or null when roost did not start it. */
  static fromEnv(opts: ReporterFromEnvOptions): Reporter | null {
    const job = jobFromEnv(opts.env ?? process.env);
    return job ? new Reporter(job, opts) : null;
  }

  constructor(job: JobIdentity, opts: ReporterOptions) {
    this.job = job;
    this.ropts = opts;
  }

  /** Whether it has a connection that said hello and had a report taken. */
  get connected(): boolean {
    return this.conn !== null && this.ready;
  }

  /**
   * Sends a report (a full snapshot: what is left out is null). The first one connects. Resolves when the
   * daemon took it (or a later one), rejects with a `RoostError` when refused; not awaiting it is fine.
   * Reports sent while one is in flight are coalesced: only the latest goes next.
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
   * a `RoostError`: the daemon's refusal (`code`, `busy` included: nothing was taken, try again shortly),
   * `disconnected` when the connection was lost meanwhile, `timeout`, `not_connected` before the first
   * report.
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

  /** Sends the latest report, waits for what is in flight (acks too), and closes. */
  close(): Promise<void> {
    if (this.closePromise) return this.closePromise;
    this.closing = true;
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
      this.stopTimers();
      const gone = new RoostError("closed", "the agent is closed");
      for (const w of this.reportWaiters.splice(0)) w.reject(gone);
      for (const w of this.readyWaiters.splice(0)) w.reject(gone);
      this.conn?.close();
      this.conn = null;
    })();
    return this.closePromise;
  }

  // --- for a subclass (RoostAgent) -------------------------------------------------------------------

  /** An event the daemon sent on the job's current connection. */
  protected onDaemonEvent(ev: Json): void {
    try {
      this.ropts.onEvent?.(ev);
    } catch (e) {
      this.error(e);
    }
  }

  /** Called once when the daemon said `unauthorized`: it speaks for this job no more. */
  protected onDead(_e: RoostError): void {}

  /**
   * `op` on the current connection once it said hello, tracked (so `close()` waits for it); null when
   * there is none (what it was for is sent again on the next connection).
   */
  protected sendNow(op: string, args: Json): Promise<unknown> | null {
    const conn = this.conn;
    if (!conn || !this.helloDone || this.dead) return null;
    return this.track(conn.request(op, args));
  }

  /** `unauthorized`: stop speaking for this job. */
  protected die(e: RoostError): void {
    if (this.dead) return;
    this.dead = e;
    this.stopTimers();
    for (const w of this.reportWaiters.splice(0)) w.reject(e);
    for (const w of this.readyWaiters.splice(0)) w.reject(e);
    this.onDead(e);
    this.conn?.close();
    this.conn = null;
    this.error(e);
  }

  /** Says what went wrong out of the caller's sight. */
  protected error(e: unknown): void {
    const report = this.ropts.onError ?? ((x: unknown) => console.error("pi-roost:", x));
    try {
      report(e);
    } catch {
      /* the reporter itself failed */
    }
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
      (c, ev) => {
        if (c === this.conn) this.onDaemonEvent(ev);
      },
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
      agent: { name: this.ropts.name, version: this.ropts.version },
      capabilities: [...(this.ropts.capabilities ?? DEFAULT_CAPABILITIES)],
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
      this.ropts.onConnect?.(info);
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
    const delay = backoff(RECONNECT_BASE_MS, RECONNECT_MAX_MS, this.attempt);
    this.attempt = Math.min(this.attempt + 1, 30);
    this.timer = setTimeout(() => {
      this.timer = null;
      if (!this.conn && !this.connecting && !this.closed && !this.dead) this.connect();
    }, delay);
  }

  private stopTimers(): void {
    if (this.timer) clearTimeout(this.timer);
    if (this.busyTimer) clearTimeout(this.busyTimer);
    this.timer = null;
    this.busyTimer = null;
  }

  /** Sends the latest report when it was not sent on this connection yet (one at a time: coalesced). */
  private pump(): void {
    const conn = this.conn;
    if (!conn || !this.helloDone || this.reportBusy || this.busyTimer || !this.latest || this.closed) return;
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
        this.busyAttempt = 0;
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
          // Nothing was taken: the latest report (this one or a newer) goes again after a backoff.
          const delay = backoff(BUSY_RETRY_BASE_MS, BUSY_RETRY_MAX_MS, this.busyAttempt);
          this.busyAttempt = Math.min(this.busyAttempt + 1, 30);
          this.busyTimer = setTimeout(() => {
            this.busyTimer = null;
            this.pump();
          }, delay);
          this.busyTimer.unref();
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

  private track<T>(p: Promise<T>): Promise<T> {
    this.inflight.add(p);
    const done = () => this.inflight.delete(p);
    p.then(done, done);
    return p;
  }

  /** A promise the caller may leave unawaited without an unhandled rejection. */
  protected quiet<T>(p: Promise<T>): Promise<T> {
    p.catch(() => {});
    return p;
  }
}

/** A wait before attempt `attempt` (from 0): `base` doubled per attempt up to `max`, between half and
 * all of it (jitter, so that agents dropped together do not come back together). */
export function backoff(base: number, max: number, attempt: number): number {
  const full = Math.min(max, base * 2 ** Math.min(attempt, 30));
  return Math.round(full * (0.5 + Math.random() / 2));
}

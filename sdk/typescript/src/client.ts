// A controller's connection to the roost daemon (a hub, a script, the CLI): requests answered in order,
// events (`row`, `board`, ...) handed to a listener. It never says `hello` or `report`, so the controller's
// ops are open to it (the daemon refuses them to a job's processes and to other users).
//
//   import { DaemonClient } from "pi-roost/client";
//   const c = await DaemonClient.connect(process.env.ROOST_SOCKET!);
//   const { rows } = await c.call("rows");

import * as net from "node:net";
import { RoostError } from "./reporter.js";
import type { BoardResult, FeedEvent, Row } from "./protocol.js";

export type { BoardResult, BoardTask, BoardCounts, FeedEvent, Peer, Row } from "./protocol.js";

/** How long one request waits for its answer by default. */
const DEFAULT_TIMEOUT_MS = 30_000;
/** The longest line read from the daemon (its own request bound). */
const MAX_LINE_BYTES = 4 * 1024 * 1024;

type Json = Record<string, unknown>;

export class DaemonClient {
  private next = 0;
  private buffer = "";
  private readonly waiting = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  private closed: Error | null = null;

  private constructor(
    private readonly sock: net.Socket,
    /** Called with each event the daemon pushes (`{"event": "row", ...}`, `{"event": "board", ...}`). */
    public onEvent: (event: Json) => void = () => {},
  ) {
    sock.setEncoding("utf8");
    sock.on("data", (chunk: string) => this.read(chunk));
    const gone = (why: string) => {
      this.closed ??= new RoostError("disconnected", why);
      for (const w of this.waiting.values()) w.reject(this.closed);
      this.waiting.clear();
    };
    sock.on("close", () => gone("the daemon closed the connection"));
    sock.on("error", (e) => gone(e.message));
  }

  /** Connects to the daemon's socket. */
  static connect(socket: string): Promise<DaemonClient> {
    return new Promise((resolve, reject) => {
      const sock = net.createConnection(socket);
      sock.once("connect", () => resolve(new DaemonClient(sock)));
      sock.once("error", (e) => reject(new RoostError("disconnected", e.message)));
    });
  }

  private read(chunk: string): void {
    this.buffer += chunk;
    if (this.buffer.length > MAX_LINE_BYTES && !this.buffer.includes("\n")) {
      this.sock.destroy(new Error("a line from the daemon over 4 MiB"));
      return;
    }
    let nl: number;
    while ((nl = this.buffer.indexOf("\n")) >= 0) {
      const line = this.buffer.slice(0, nl);
      this.buffer = this.buffer.slice(nl + 1);
      let msg: Json;
      try {
        msg = JSON.parse(line);
      } catch {
        continue;
      }
      if (typeof msg.event === "string") {
        this.onEvent(msg);
        continue;
      }
      const w = typeof msg.id === "number" ? this.waiting.get(msg.id) : undefined;
      if (!w) continue;
      this.waiting.delete(msg.id as number);
      if (msg.ok === true) w.resolve(msg.result);
      else w.reject(new RoostError(String(msg.code ?? "unknown"), String(msg.error ?? "refused")));
    }
  }

  /** Sends `op` with `args`; resolves with the result, rejects with a `RoostError` (the daemon's code,
   * `disconnected`, or `timeout`). */
  call(op: string, args: Json = {}, opts: { timeoutMs?: number } = {}): Promise<any> {
    if (this.closed) return Promise.reject(this.closed);
    const id = ++this.next;
    const ms = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiting.delete(id);
        reject(new RoostError("timeout", `no answer to ${op} within ${ms} ms`));
      }, ms);
      this.waiting.set(id, {
        resolve: (v) => {
          clearTimeout(timer);
          resolve(v);
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      });
      this.sock.write(JSON.stringify({ id, op, args }) + "\n");
    });
  }

  /** The jobs' rows. */
  async rows(): Promise<Row[]> {
    return (await this.call("rows")).rows;
  }

  /** The feed: after a cursor, or the newest `limit`. */
  events(args: { after?: number; limit?: number; id?: string } = {}): Promise<{ events: FeedEvent[]; cursor: number }> {
    return this.call("events", args);
  }

  /** A board action as the user (`list`, `add`, `release`, `done`, `drop`, `assign`). */
  task(action: string, args: Json = {}): Promise<BoardResult> {
    return this.call("task", { action, ...args });
  }

  close(): void {
    this.sock.destroy();
  }
}

// The roost agent protocol, version 1: the agent's side, for Node (no dependencies but Node itself).
// `pi-roost/agent`, as the spec names it:
//
//   import { RoostAgent } from "pi-roost/agent";
//   const agent = RoostAgent.fromEnv({ name: "my-agent", version: "1.0", onReply: async (r) => work(r.text) });
//   agent?.report({ state: "working", summary: "reading the code" });
//
// A `RoostAgent` is a `Reporter` (reporter.ts: the connection, `hello`, coalesced reports, backoff, `call`)
// that also takes replies: it hands them to `onReply` once each, in order, one at a time, and acks each
// after its handler returns, having first written the last finished seq to the job's `agent.json` (tmp +
// rename), so an agent started again skips (only acks) what it had finished; a seq already handled is
// dropped and acked again. `close()` sends the latest report; a reply whose handler is still running then
// is acked only if it finishes before the close does (otherwise it comes again on the next start).

import * as fs from "node:fs";
import * as path from "node:path";
import {
  AGENT_FILE,
  type ConnectInfo,
  type JobIdentity,
  type Json,
  Reporter,
  RoostError,
  jobFromEnv,
} from "./reporter.js";

export * from "./reporter.js";
export type * from "./protocol.js";

/** Peer items acked exactly that are remembered in `agent.json` (to drop them when sent again). */
const MAX_EXACT_KEPT = 100;

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

/** The agent's side of the protocol for one job: a `Reporter` that takes replies. */
export class RoostAgent extends Reporter {
  private readonly opts: AgentOptions;
  private finished = 0;
  private exactDone: number[] = [];
  private highest = 0;
  private readonly exactQueued = new Set<number>();
  private readonly queue: Reply[] = [];
  private handling = false;
  private ackScheduled = false;

  /** The agent for the job roost started this process for, or null when roost did not start it. */
  static override fromEnv(opts: FromEnvOptions): RoostAgent | null {
    const job = jobFromEnv(opts.env ?? process.env);
    return job ? new RoostAgent(job, opts) : null;
  }

  constructor(job: JobIdentity, opts: AgentOptions) {
    const { onReply: _, ...reporter } = opts;
    super(job, reporter);
    this.opts = opts;
    this.load();
  }

  /** The last finished reply's seq (from `agent.json` at start). */
  get lastFinished(): number {
    return this.finished;
  }

  /**
   * Sends the latest report and closes. Replies not yet started are left for the next start; one whose
   * handler is running is acked only if it finishes before this does.
   */
  override close(): Promise<void> {
    this.closing = true;
    this.queue.length = 0;
    return super.close();
  }

  protected override onDead(_e: RoostError): void {
    this.queue.length = 0;
  }

  // --- replies ----------------------------------------------------------------------------------------

  protected override onDaemonEvent(ev: Json): void {
    if (ev.event !== "deliver" || ev.id !== this.job.id) return;
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
    const args: Json = { id: this.job.id, token: this.job.token, seq };
    if (exact) args.exact = true;
    // Without a connection the reply is sent again on the next one, and acked then.
    this.sendNow("ack", args)?.catch((e: unknown) => {
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

}

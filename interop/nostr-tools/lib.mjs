// Shared by the interop tests: the daemon started as a child process on a loopback port, and a minimal
// NIP-01 relay connection over `ws` (Node 20 has no global WebSocket). Events are built, signed and checked
// by nostr-tools in the tests themselves.

import { spawn } from 'node:child_process'
import { once } from 'node:events'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import readline from 'node:readline'
import { fileURLToPath } from 'node:url'
import WebSocket from 'ws'

const HERE = path.dirname(fileURLToPath(import.meta.url))
const REPO_ROOT = path.resolve(HERE, '..', '..')
export const BIN = process.env.AGENTWIRE_BIN
  ? path.resolve(process.env.AGENTWIRE_BIN)
  : path.join(REPO_ROOT, 'target', 'debug', 'agentwire')

// Bounds, each with its reason.
export const READY_TIMEOUT_MS = 30_000 // a debug build opening a fresh data dir; generous for a loaded CI box
export const OK_TIMEOUT_MS = 5_000 // the embedded relay answers OK as soon as the event is stored
export const KILL_GRACE_MS = 5_000 // time between SIGTERM and SIGKILL

export function describeEvents(events) {
  return JSON.stringify(events.map((e) => ({ kind: e.kind, id: e.id, tags: e.tags })))
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

export function withTimeout(promise, ms, what) {
  let timer
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms)
  })
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer))
}

// ---------------------------------------------------------------------------------------------------------
// The daemon

export class Daemon {
  /** Starts `agentwire serve` on a fresh data dir and a free loopback port; `extra` are more flags. */
  static async start(extra = []) {
    if (!fs.existsSync(BIN)) {
      throw new Error(`agentwire binary not found at ${BIN}: run \`cargo build -p agentwire\` or set AGENTWIRE_BIN`)
    }
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'agentwire-interop-'))
    // The default profile takes plain and gift-wrapped (NIP-59) prompts alike, so both are tested here.
    const args = ['serve', '--data-dir', dataDir, '--relay-listen', '127.0.0.1:0',
      '--http-listen', '127.0.0.1:0', '--roost-socket', path.join(dataDir, 'roost.sock'), ...extra]
    const child = spawn(BIN, args, { stdio: ['ignore', 'pipe', 'pipe'], env: process.env })
    const d = new Daemon(child, dataDir)
    const lines = readline.createInterface({ input: child.stdout })
    const stdoutLines = []
    const firstLine = new Promise((resolve, reject) => {
      lines.on('line', (line) => {
        stdoutLines.push(line)
        if (stdoutLines.length === 1) resolve(line)
      })
      child.once('exit', (code, sig) => reject(new Error(`daemon exited (code ${code}, signal ${sig}) before ready`)))
      child.once('error', reject)
    })
    d.stdoutLines = stdoutLines
    let line
    try {
      line = await withTimeout(firstLine, READY_TIMEOUT_MS, 'the daemon ready line')
    } catch (e) {
      await d.stop()
      throw new Error(`${e.message}\n${d.diagnostics()}`)
    }
    let ready
    try {
      ready = JSON.parse(line)
    } catch {
      await d.stop()
      throw new Error(`daemon's first stdout line is not JSON: ${JSON.stringify(line)}\n${d.diagnostics()}`)
    }
    d.ready = ready
    return d
  }

  constructor(child, dataDir) {
    this.child = child
    this.dataDir = dataDir
    this.stderr = []
    child.stderr.setEncoding('utf8')
    child.stderr.on('data', (chunk) => {
      this.stderr.push(chunk)
      if (this.stderr.length > 2000) this.stderr.splice(0, 1000)
    })
  }

  diagnostics() {
    const err = this.stderr.join('').split('\n').slice(-40).join('\n')
    return `--- daemon stdout ---\n${(this.stdoutLines || []).join('\n')}\n--- daemon stderr (tail) ---\n${err}`
  }

  async stop() {
    const c = this.child
    if (c.exitCode === null && c.signalCode === null) {
      const exited = once(c, 'exit')
      c.kill('SIGTERM')
      const t = await Promise.race([exited.then(() => 'exited'), sleep(KILL_GRACE_MS).then(() => 'timeout')])
      if (t === 'timeout') {
        c.kill('SIGKILL')
        await exited
      }
    }
    fs.rmSync(this.dataDir, { recursive: true, force: true })
  }
}

// ---------------------------------------------------------------------------------------------------------
// A minimal NIP-01 relay connection over `ws` (Node 20 has no global WebSocket).

export class Subscription {
  constructor(conn, id, filter) {
    this.conn = conn
    this.id = id
    this.filter = filter
    this.events = []
    this.seen = new Set()
    this.eose = false
    this.closedReason = null
    this.waiters = []
  }

  push(event) {
    if (this.seen.has(event.id)) return // dedupe by id, as the spec requires of clients
    this.seen.add(event.id)
    this.events.push(event)
    this.wake()
  }

  wake() {
    for (const w of [...this.waiters]) {
      let result
      try {
        result = w.predicate(this.events, this)
      } catch (e) {
        this.waiters.splice(this.waiters.indexOf(w), 1)
        w.reject(e)
        continue
      }
      if (result) {
        this.waiters.splice(this.waiters.indexOf(w), 1)
        w.resolve(result)
      } else if (this.closedReason !== null) {
        this.waiters.splice(this.waiters.indexOf(w), 1)
        w.reject(new Error(`subscription ${this.id} CLOSED by relay: ${this.closedReason}`))
      }
    }
  }

  /** Resolves with predicate's first truthy result over the events so far. */
  waitFor(predicate, ms, what) {
    const p = new Promise((resolve, reject) => {
      this.waiters.push({ predicate, resolve, reject })
      this.wake()
    })
    return withTimeout(p, ms, what).catch((e) => {
      this.waiters = this.waiters.filter((w) => w.predicate !== predicate)
      throw new Error(`${e.message}; events so far: ${describeEvents(this.events)}`)
    })
  }

  close() {
    this.conn.send(['CLOSE', this.id])
    this.conn.subs.delete(this.id)
  }
}

export class RelayConn {
  static async connect(url) {
    const ws = new WebSocket(url)
    await withTimeout(once(ws, 'open'), OK_TIMEOUT_MS, `a WebSocket connection to ${url}`)
    return new RelayConn(ws)
  }

  constructor(ws) {
    this.ws = ws
    this.subs = new Map()
    this.oks = new Map()
    this.notices = []
    this.nextSub = 0
    ws.on('message', (data) => this.onMessage(data.toString()))
  }

  onMessage(text) {
    let msg
    try {
      msg = JSON.parse(text)
    } catch {
      this.notices.push(`unparseable relay message: ${text}`)
      return
    }
    const [type, a, b, c] = msg
    if (type === 'EVENT') this.subs.get(a)?.push(b)
    else if (type === 'EOSE') {
      const s = this.subs.get(a)
      if (s) {
        s.eose = true
        s.wake()
      }
    } else if (type === 'CLOSED') {
      const s = this.subs.get(a)
      if (s) {
        s.closedReason = String(b)
        s.wake()
      }
    } else if (type === 'OK') {
      this.oks.get(a)?.({ ok: b, message: c })
      this.oks.delete(a)
    } else if (type === 'NOTICE') this.notices.push(a)
  }

  send(msg) {
    this.ws.send(JSON.stringify(msg))
  }

  subscribe(filter) {
    const id = `interop-${this.nextSub++}`
    const sub = new Subscription(this, id, filter)
    this.subs.set(id, sub)
    this.send(['REQ', id, filter])
    return sub
  }

  /** Publishes and resolves with the relay's OK as {ok, message}. */
  publish(event) {
    const p = new Promise((resolve) => this.oks.set(event.id, resolve))
    this.send(['EVENT', event])
    return withTimeout(p, OK_TIMEOUT_MS, `OK for event ${event.id} (kind ${event.kind})`)
  }

  async close() {
    if (this.ws.readyState === WebSocket.OPEN || this.ws.readyState === WebSocket.CONNECTING) {
      const closed = once(this.ws, 'close')
      this.ws.close()
      await Promise.race([closed, sleep(1000)])
    }
  }
}

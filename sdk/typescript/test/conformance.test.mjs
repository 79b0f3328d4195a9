// The roost agent protocol's conformance scenario for the TypeScript client, against the REAL daemon
// (`agentwire serve`): a scripted agent built on dist/roost-agent.js takes the first task as reply 1, its
// reports set the row, its acks clear the pending replies, it survives a daemon restart under it (it
// reconnects, says hello, reports, and takes the next reply exactly once and none of the acked ones),
// `agent.json` holds the last finished seq (an agent started again skips what it finished and takes again
// what it had not), and it exits on "bye" as done. The example echo agent is run the same way. Then the
// fleet ops and the board through the client, and a scripted concierge using its own ops (M44-M46).
//
// Run after `cargo build -p agentwire` and `(cd sdk/typescript && npm ci && npm run build)`:
//   node --test sdk/typescript/test/
// AGENTWIRE_BIN overrides the daemon binary (default: <repo>/target/debug/agentwire).

import { test } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import net from 'node:net'
import path from 'node:path'
import readline from 'node:readline'
import { fileURLToPath, pathToFileURL } from 'node:url'

const HERE = path.dirname(fileURLToPath(import.meta.url))
const SDK_DIR = path.resolve(HERE, '..')
const REPO_ROOT = path.resolve(SDK_DIR, '..', '..')
const CLIENT = path.join(SDK_DIR, 'dist', 'roost-agent.js')
const ECHO_AGENT = path.join(REPO_ROOT, 'examples', 'typescript', 'echo-agent.mjs')
// Written against the spec's client as the spec shows it (`import { RoostAgent } from "pi-roost/agent"`).
const SPEC_AGENT = path.join(SDK_DIR, 'fixtures', 'spec-agent.mjs')
const BIN = process.env.AGENTWIRE_BIN
  ? path.resolve(process.env.AGENTWIRE_BIN)
  : path.join(REPO_ROOT, 'target', 'debug', 'agentwire')

// Bounds, each with its reason.
const READY_TIMEOUT_MS = 30_000 // a debug build opening a fresh data dir; generous for a loaded CI box
const STEP_TIMEOUT_MS = 15_000 // an agent (a fresh node process) starting, handling a reply, reporting
const RECONNECT_TIMEOUT_MS = 15_000 // the client's backoff tops out at 2 s; the daemon restarts in ~1 s
const EXIT_TIMEOUT_MS = 10_000 // a process that was told to exit (or was killed) being gone
const REQUEST_TIMEOUT_MS = 5_000 // one controller request on the socket
const KILL_GRACE_MS = 5_000 // between SIGTERM and SIGKILL for the daemon
const QUIET_MS = 750 // after a reply was handled, how long we watch for a forbidden second handling
const POLL_MS = 50 // how often files and rows are polled

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

function withTimeout(promise, ms, what) {
  let timer
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms)
  })
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer))
}

/** Polls `probe` until it returns something other than undefined/false; fails with `what` after `ms`. */
async function waitFor(what, probe, ms = STEP_TIMEOUT_MS, diagnose = () => '') {
  const deadline = Date.now() + ms
  let last
  for (;;) {
    try {
      const v = await probe()
      if (v !== undefined && v !== false && v !== null) return v
    } catch (e) {
      last = e
    }
    if (Date.now() > deadline) {
      const extra = await Promise.resolve(diagnose()).catch((e) => `(diagnostics failed: ${e})`)
      throw new Error(`timed out after ${ms} ms waiting for ${what}${last ? ` (last error: ${last.message})` : ''}\n${extra}`)
    }
    await sleep(POLL_MS)
  }
}

function readJsonl(file) {
  let text
  try {
    text = fs.readFileSync(file, 'utf8')
  } catch {
    return []
  }
  return text.split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l))
}

function readJson(file) {
  try {
    return JSON.parse(fs.readFileSync(file, 'utf8'))
  } catch {
    return null
  }
}

/** Whether process `pid` is gone (or a zombie: exited, not yet reaped by whoever is its parent now). */
function processGone(pid) {
  try {
    process.kill(pid, 0)
  } catch (e) {
    return e.code === 'ESRCH'
  }
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8')
    return stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z')
  } catch {
    return true
  }
}

function killGroup(pid) {
  try {
    process.kill(-pid, 'SIGKILL')
  } catch {
    /* gone already */
  }
}

// ---------------------------------------------------------------------------------------------------------
// The scripted agent: the client as an agent uses it, recording what it gets in its job dir.

const AGENT_SOURCE = `
import fs from 'node:fs'
import path from 'node:path'
import { RoostAgent } from ${JSON.stringify(pathToFileURL(CLIENT).href)}

const dir = process.env.ROOST_JOB_DIR
const record = (file, what) =>
  fs.appendFileSync(path.join(dir, file), JSON.stringify({ pid: process.pid, at: Date.now(), ...what }) + '\\n')
fs.writeFileSync(path.join(dir, 'agent.pid'), String(process.pid))

let bye
const finished = new Promise((resolve) => (bye = resolve))
const agent = RoostAgent.fromEnv({
  name: 'conformance-agent',
  version: '1.0.0',
  capabilities: ['report', 'replies', 'steer'],
  onConnect: (info) => record('hello.jsonl', info),
  onError: (e) => record('errors.jsonl', { error: String((e && e.stack) || e) }),
  onReply: async (r) => {
    record('replies.jsonl', { seq: r.seq, text: r.text, mode: r.mode ?? null })
    if (r.text === 'hang' && !fs.existsSync(path.join(dir, 'hung'))) {
      // The first time only: the handler never returns, so the reply is never finished nor acked.
      fs.writeFileSync(path.join(dir, 'hung'), String(process.pid))
      await new Promise(() => {})
    }
    if (r.text === 'gate') {
      // Runs until the test creates the file \`release\` in the job dir (across a daemon restart, say).
      while (!fs.existsSync(path.join(dir, 'release'))) await new Promise((resolve) => setTimeout(resolve, 20))
    }
    if (r.text === 'bye') {
      await agent.report({ state: 'done', status: 'idle', summary: 'got: bye' })
      bye()
      return
    }
    await agent.report({ state: 'working', status: 'idle', summary: 'got: ' + r.text })
  },
})
if (!agent) {
  console.error('not started by roost')
  process.exit(3)
}
record('life.jsonl', { what: 'start', lastFinished: agent.lastFinished })
await agent.report({ state: 'working', status: 'busy', summary: 'conformance agent started' })
await finished
await agent.close()
record('life.jsonl', { what: 'exit' })
process.exit(0)
`

// The concierge, scripted: it takes items (digests) and runs its ops when told. Its first task is JSON naming
// the session that waits; "act" (a concierge-ask) answers that session for the user, then dispatches,
// respawns and stops a helper. What each op answered, or the code it was refused with, goes to its job dir.
const CONCIERGE_SOURCE = `
import fs from 'node:fs'
import path from 'node:path'
import { RoostAgent, RoostError } from ${JSON.stringify(pathToFileURL(CLIENT).href)}

const dir = process.env.ROOST_JOB_DIR
const record = (file, what) =>
  fs.appendFileSync(path.join(dir, file), JSON.stringify({ pid: process.pid, ...what }) + '\\n')
fs.writeFileSync(path.join(dir, 'agent.pid'), String(process.pid))
const attempt = async (f) => {
  try {
    return { ok: await f() }
  } catch (e) {
    if (e instanceof RoostError) return { code: e.code }
    throw e
  }
}

let waiting
let bye
const finished = new Promise((resolve) => (bye = resolve))
const agent = RoostAgent.fromEnv({
  name: 'scripted-concierge',
  version: '1.0.0',
  capabilities: ['report', 'replies', 'agent-items'],
  onError: (e) => record('errors.jsonl', { error: String((e && e.stack) || e) }),
  onReply: async (r) => {
    if (r.kind === 'digest') {
      record('digests.jsonl', { seq: r.seq, text: r.text, from: r.event.from })
      return
    }
    record('replies.jsonl', { seq: r.seq, text: r.text })
    if (r.seq === 1) {
      waiting = JSON.parse(r.text).waiting
      const got = {
        say: await attempt(() => agent.say('info', 'the build is green')),
        add: await attempt(() => agent.addOrder('check the build', 'every 30m')),
        spare: await attempt(() => agent.addOrder('a spare one')),
      }
      got.rm = await attempt(() => agent.rmOrder(got.spare.ok.order.id))
      got.orders = await attempt(() => agent.orders())
      got.applied = await attempt(() => agent.orderApplied(String(got.add.ok.order.id), 'checked: green'))
      got.policy = await attempt(() => agent.policy())
      got.suggest = await attempt(() => agent.suggest(waiting, 'yes', 'the tests pass'))
      got.reply = await attempt(() => agent.conciergeReply(waiting, 'yes'))
      got.stop = await attempt(() => agent.actStop(waiting))
      got.events = await attempt(() => agent.events({ limit: 100 }))
      got.mine = await attempt(() => agent.events({ after: 0, id: agent.job.id }))
      record('ops.jsonl', got)
    } else if (r.text === 'act') {
      const got = {
        policy: await attempt(() => agent.policy()),
        reply: await attempt(() => agent.conciergeReply(waiting, 'yes', 'routine')),
        dispatch: await attempt(() => agent.actDispatch({ profile: 'hold', task: 'hold', name: 'helper' })),
      }
      if (got.dispatch.ok) {
        got.respawn = await attempt(() => agent.actRespawn(got.dispatch.ok.id))
        got.stop = await attempt(() => agent.actStop(got.dispatch.ok.id))
      }
      record('acts.jsonl', got)
    } else if (r.text === 'bye') {
      bye()
    }
    await agent.report({ state: 'working', status: 'idle', summary: 'handled #' + r.seq, agentItems: true })
  },
})
if (!agent) {
  console.error('not started by roost')
  process.exit(3)
}
await agent.report({ state: 'working', status: 'idle', summary: 'starting', agentItems: true })
await finished
await agent.close()
process.exit(0)
`

// ---------------------------------------------------------------------------------------------------------
// The daemon and a controller connection

/** A temp dir with a short path: a unix socket's path is limited to ~100 bytes. */
function makeTemp() {
  const base = fs.mkdtempSync('/tmp/rt-')
  const agentPath = path.join(base, 'agent.mjs')
  fs.writeFileSync(agentPath, AGENT_SOURCE)
  const conciergePath = path.join(base, 'concierge.mjs')
  fs.writeFileSync(conciergePath, CONCIERGE_SOURCE)
  const config = path.join(base, 'agentwire.toml')
  const profile = (name, script) =>
    `[roost.profiles.${name}]\ncommand = [${JSON.stringify(process.execPath)}, ${JSON.stringify(script)}]\ntask = "type"\nprotocol = true\n`
  // `hold`: a job whose process writes its environment and waits; the test speaks for it with the client.
  const hold = `[roost.profiles.hold]\ncommand = ["sh", "-c", "env > env.txt; echo $$ > agent.pid; exec sleep 120"]\ntask = "type"\nprotocol = true\n`
  fs.writeFileSync(config, [profile('ts', agentPath), profile('echo', ECHO_AGENT),
    profile('tsconcierge', conciergePath), profile('spec', SPEC_AGENT), hold].join('\n'))
  return {
    base,
    config,
    data: path.join(base, 'data'),
    socket: path.join(base, 'run', 'r.sock'),
    jobDir: (id) => path.join(base, 'data', 'roost', 'jobs', id),
  }
}

class Daemon {
  static async start(tmp) {
    if (!fs.existsSync(BIN)) {
      throw new Error(`agentwire binary not found at ${BIN}: run \`cargo build -p agentwire\` or set AGENTWIRE_BIN`)
    }
    const env = { ...process.env }
    delete env.NODE_TEST_CONTEXT // the jobs inherit the daemon's environment: they are not test files
    const args = ['--data-dir', tmp.data, '--config', tmp.config, 'serve',
      '--relay-listen', '127.0.0.1:0', '--http-listen', '127.0.0.1:0', '--roost-socket', tmp.socket]
    const child = spawn(BIN, args, { stdio: ['ignore', 'pipe', 'pipe'], env })
    const d = new Daemon(child)
    const lines = readline.createInterface({ input: child.stdout })
    const first = new Promise((resolve, reject) => {
      lines.once('line', resolve)
      child.once('exit', (code, sig) => reject(new Error(`daemon exited (code ${code}, signal ${sig}) before ready`)))
      child.once('error', reject)
    })
    try {
      d.ready = JSON.parse(await withTimeout(first, READY_TIMEOUT_MS, 'the daemon ready line'))
    } catch (e) {
      await d.stop()
      throw new Error(`${e.message}\n${d.diagnostics()}`)
    }
    assert.equal(d.ready.roost_socket, tmp.socket, 'the ready line names the roost socket')
    return d
  }

  constructor(child) {
    this.child = child
    this.stderr = []
    this.exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })))
    child.stderr.setEncoding('utf8')
    child.stderr.on('data', (chunk) => {
      this.stderr.push(chunk)
      if (this.stderr.length > 2000) this.stderr.splice(0, 1000)
    })
  }

  diagnostics() {
    return `--- daemon stderr (tail) ---\n${this.stderr.join('').split('\n').slice(-40).join('\n')}`
  }

  /** SIGTERM (SIGKILL after a grace); resolves when it has exited. Its jobs keep running. */
  async stop() {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return this.exited
    this.child.kill('SIGTERM')
    const timer = setTimeout(() => this.child.kill('SIGKILL'), KILL_GRACE_MS)
    try {
      return await this.exited
    } finally {
      clearTimeout(timer)
    }
  }
}

/** A controller's connection: one JSON request per line, answered in order; events are set aside. */
class Controller {
  static connect(socket) {
    return new Promise((resolve, reject) => {
      const s = net.createConnection({ path: socket })
      s.once('error', reject)
      s.once('connect', () => {
        s.off('error', reject)
        resolve(new Controller(s))
      })
    })
  }

  constructor(sock) {
    this.sock = sock
    this.next = 0
    this.waiting = new Map()
    this.events = []
    this.buf = ''
    sock.setEncoding('utf8')
    sock.on('data', (chunk) => {
      this.buf += chunk
      let nl
      while ((nl = this.buf.indexOf('\n')) >= 0) {
        const msg = JSON.parse(this.buf.slice(0, nl))
        this.buf = this.buf.slice(nl + 1)
        if (msg.event) {
          this.events.push(msg)
          continue
        }
        const w = this.waiting.get(msg.id)
        this.waiting.delete(msg.id)
        w?.(msg)
      }
    })
    sock.on('error', () => {})
    sock.on('close', () => {
      for (const w of this.waiting.values()) w({ ok: false, code: 'disconnected', error: 'closed' })
      this.waiting.clear()
    })
  }

  call(op, args = {}) {
    const id = ++this.next
    const answer = new Promise((resolve) => this.waiting.set(id, resolve))
    this.sock.write(JSON.stringify({ id, op, args }) + '\n')
    return withTimeout(answer, REQUEST_TIMEOUT_MS, `the answer to ${op}`)
  }

  async ok(op, args = {}) {
    const v = await this.call(op, args)
    assert.equal(v.ok, true, `${op} ${JSON.stringify(args)}: ${JSON.stringify(v)}`)
    return v.result
  }

  async row(id) {
    const { rows } = await this.ok('rows')
    return rows.find((r) => r.id === id)
  }

  close() {
    this.sock.destroy()
  }
}

/** Everything a test started, to be cleaned up whatever happens. */
class Scene {
  constructor(t) {
    this.t = t
    this.tmp = makeTemp()
    this.daemons = []
    this.controllers = []
    this.jobs = []
  }

  async startDaemon() {
    const d = await Daemon.start(this.tmp)
    this.daemons.push(d)
    this.daemon = d
    const c = await Controller.connect(this.tmp.socket)
    this.controllers.push(c)
    this.ctl = c
    return d
  }

  file(id, name) {
    return path.join(this.tmp.jobDir(id), name)
  }

  replies(id) {
    return readJsonl(this.file(id, 'replies.jsonl'))
  }

  /** Every agent process a job had (from what the agents recorded), for the clean-up. */
  pids(id) {
    const pids = new Set()
    for (const f of ['life.jsonl', 'hello.jsonl', 'replies.jsonl']) {
      for (const e of readJsonl(this.file(id, f))) pids.add(e.pid)
    }
    try {
      const p = Number(fs.readFileSync(this.file(id, 'agent.pid'), 'utf8'))
      if (p > 1) pids.add(p)
    } catch {
      /* never started */
    }
    return [...pids]
  }

  diagnose(id) {
    return async () => {
      const parts = [this.daemon?.diagnostics() ?? '']
      if (id) {
        for (const f of ['replies.jsonl', 'hello.jsonl', 'life.jsonl', 'errors.jsonl', 'agent.json', 'output.log']) {
          let text = ''
          try {
            text = fs.readFileSync(this.file(id, f), 'utf8')
          } catch {
            text = '(none)'
          }
          parts.push(`--- ${f} ---\n${text.split('\n').slice(-30).join('\n')}`)
        }
        try {
          parts.push(`--- row ---\n${JSON.stringify(await this.ctl.row(id))}`)
        } catch (e) {
          parts.push(`--- row --- (${e.message})`)
        }
      }
      return parts.join('\n')
    }
  }

  /** The token of a job of the `hold` profile (its process wrote its environment). */
  token(id) {
    return this.wait(`${id}'s token`, () => {
      try {
        return fs.readFileSync(this.file(id, 'env.txt'), 'utf8').match(/^ROOST_JOB_TOKEN=(.*)$/m)?.[1]
      } catch {
        return undefined
      }
    }, id)
  }

  wait(what, probe, id, ms = STEP_TIMEOUT_MS) {
    return waitFor(what, probe, ms, this.diagnose(id))
  }

  /** Waits for the job's row to satisfy `pred`; returns it. */
  waitRow(id, what, pred, ms = STEP_TIMEOUT_MS) {
    return this.wait(`the row: ${what}`, async () => {
      const r = await this.ctl.row(id)
      return r && pred(r) ? r : undefined
    }, id, ms)
  }

  async dispatch(profile, task) {
    const job = await this.ctl.ok('dispatch', { profile, task, requestId: `d-${profile}-${Date.now()}` })
    this.jobs.push(job.id)
    return job.id
  }

  async cleanup() {
    for (const c of this.controllers) c.close()
    for (const d of this.daemons) await d.stop()
    for (const id of this.jobs) for (const pid of this.pids(id)) killGroup(pid)
    if (process.env.ROOST_TEST_KEEP) {
      this.t.diagnostic(`kept ${this.tmp.base}`)
    } else {
      fs.rmSync(this.tmp.base, { recursive: true, force: true })
    }
  }
}

function preflight() {
  if (!fs.existsSync(CLIENT)) {
    throw new Error(`${CLIENT} is missing: run \`npm ci && npm run build\` in sdk/typescript`)
  }
}

// ---------------------------------------------------------------------------------------------------------

test('the agent protocol: task as reply 1, reports, acks, a daemon restart under the agent, and its exit', async (t) => {
  preflight()
  const s = new Scene(t)
  try {
    await s.startDaemon()
    const id = await s.dispatch('ts', 'write the docs')
    const agentJson = () => readJson(s.file(id, 'agent.json'))

    // The first task arrives as reply 1, once.
    const first = await s.wait('reply 1', () => s.replies(id)[0], id)
    assert.deepEqual([first.seq, first.text, first.mode], [1, 'write the docs', null], 'the task is reply 1')
    const pid = first.pid
    const hellos = readJsonl(s.file(id, 'hello.jsonl'))
    assert.equal(hellos.length, 1, 'one hello on the first connection')
    assert.deepEqual([hellos[0].protocol, hellos[0].daemon?.name, hellos[0].connection], [1, 'agentwire', 1])

    // Its reports set the row; its ack clears the pending reply; agent.json holds the last finished seq.
    let row = await s.waitRow(id, 'got: write the docs, nothing pending',
      (r) => r.summary === 'got: write the docs' && r.pending === 0)
    assert.equal(row.state, 'working')
    assert.equal(row.status, 'idle')
    assert.equal(row.connected, true)
    assert.equal(row.profile, 'ts')
    assert.deepEqual(row.capabilities, ['report', 'replies', 'steer'], 'the capabilities said in hello')
    assert.deepEqual(agentJson(), { job: id, seq: 1, exact: [] }, 'agent.json: the last finished seq')

    // A second reply, steering.
    const saved = await s.ctl.ok('reply', { id, text: 'also the README', mode: 'steer', requestId: 'r-2' })
    // Unknown fields are ignored (the daemon also says how many reports the job has made).
    assert.deepEqual({ saved: saved.saved, seq: saved.seq }, { saved: true, seq: 2 })
    row = await s.waitRow(id, 'reply 2 handled and acked', (r) => r.summary === 'got: also the README' && r.pending === 0)
    assert.deepEqual(s.replies(id).map((r) => [r.seq, r.text, r.mode]),
      [[1, 'write the docs', null], [2, 'also the README', 'steer']])
    assert.equal(agentJson()?.seq, 2)

    // Reply 3's handler is still running when the daemon restarts under the agent (its process group is
    // its own: it keeps running).
    assert.equal((await s.ctl.ok('reply', { id, text: 'gate' })).seq, 3)
    await s.wait('the agent to take reply 3', () => s.replies(id)[2], id)
    t.diagnostic('restarting the daemon')
    s.ctl.close()
    const gone = await s.daemon.stop()
    assert.equal(gone.code, 0, `the daemon stops cleanly on SIGTERM: ${JSON.stringify(gone)}`)
    assert.equal(processGone(pid), false, 'the agent outlives the daemon')
    await s.startDaemon()
    // A reply while (or just after) the agent is away: it waits for the agent.
    assert.equal((await s.ctl.ok('reply', { id, text: 'next' })).seq, 4, 'seq continues across restarts')

    // It reconnects, says hello again, and reports (a row is connected only after a report). Replies 3 and
    // 4 are sent again on the new connection: 3 is being handled (dropped, not handled twice), 4 waits
    // for it (one at a time, in order); neither is acked yet.
    await s.wait('a second hello', () => readJsonl(s.file(id, 'hello.jsonl'))[1], id, RECONNECT_TIMEOUT_MS)
    const hello2 = readJsonl(s.file(id, 'hello.jsonl'))[1]
    assert.deepEqual([hello2.pid, hello2.protocol, hello2.daemon?.name, hello2.connection], [pid, 1, 'agentwire', 2],
      'the same process said hello on its new connection')
    row = await s.waitRow(id, 'reconnected and reported', (r) => r.connected, RECONNECT_TIMEOUT_MS)
    assert.equal(row.summary, 'got: also the README', 'the latest report, sent again')
    await sleep(QUIET_MS)
    assert.equal((await s.ctl.row(id)).pending, 2, 'replies 3 and 4 wait: 3 is not finished')
    assert.deepEqual(s.replies(id).map((r) => r.seq), [1, 2, 3], 'reply 3 once, reply 4 not before 3 is done')

    // Reply 3 finishes: it and then 4 are acked; each was handled exactly once, none of the acked ones again.
    fs.writeFileSync(s.file(id, 'release'), '')
    row = await s.waitRow(id, 'replies 3 and 4 handled and acked',
      (r) => r.summary === 'got: next' && r.pending === 0, STEP_TIMEOUT_MS)
    await sleep(QUIET_MS)
    assert.deepEqual(s.replies(id).map((r) => [r.pid, r.seq, r.text]),
      [[pid, 1, 'write the docs'], [pid, 2, 'also the README'], [pid, 3, 'gate'], [pid, 4, 'next']],
      'each reply exactly once, in order')
    assert.equal(agentJson()?.seq, 4)
    assert.equal(readJsonl(s.file(id, 'hello.jsonl')).length, 2, 'no further connections')

    // "bye": done, and the process exits (after acking it: nothing is left pending).
    assert.equal((await s.ctl.ok('reply', { id, text: 'bye' })).seq, 5)
    await s.wait('the agent to exit', () => processGone(pid), id, EXIT_TIMEOUT_MS)
    row = await s.waitRow(id, 'done, nothing pending', (r) => r.state === 'done' && r.pending === 0)
    assert.equal(row.summary, 'got: bye')
    assert.equal(agentJson()?.seq, 5)
    assert.deepEqual(readJsonl(s.file(id, 'life.jsonl')).map((e) => e.what), ['start', 'exit'])
    assert.deepEqual(readJsonl(s.file(id, 'errors.jsonl')), [], 'the client reported no errors')
  } finally {
    await s.cleanup()
  }
})

test('an agent started again skips (only acks) what it finished and takes again what it had not', async (t) => {
  preflight()
  const s = new Scene(t)
  try {
    await s.startDaemon()
    const id = await s.dispatch('ts', 'one')
    const agentJson = () => readJson(s.file(id, 'agent.json'))
    await s.waitRow(id, 'reply 1 handled', (r) => r.summary === 'got: one' && r.pending === 0)
    const a = s.replies(id)[0].pid

    // Reply 2's handler never returns: it is neither finished nor acked.
    assert.equal((await s.ctl.ok('reply', { id, text: 'hang' })).seq, 2)
    await s.wait('the agent to take "hang"', () => fs.existsSync(s.file(id, 'hung')), id)
    await sleep(QUIET_MS)
    assert.equal((await s.ctl.row(id)).pending, 1, 'an unfinished reply is not acked')
    assert.equal(agentJson()?.seq, 1, 'nor recorded as finished')

    // The agent dies; started again, it takes reply 2 again (it had not finished it).
    killGroup(a)
    await s.wait('agent A to be gone', () => processGone(a), id, EXIT_TIMEOUT_MS)
    await s.waitRow(id, 'exited', (r) => r.state === 'exited' && !r.connected)
    await s.ctl.ok('respawn', { id })
    const b = (await s.wait('agent B to take reply 2', () => s.replies(id).find((r) => r.pid !== a), id)).pid
    await s.waitRow(id, 'reply 2 handled by B and acked', (r) => r.summary === 'got: hang' && r.pending === 0)
    assert.deepEqual(s.replies(id).map((r) => [r.pid, r.seq]), [[a, 1], [a, 2], [b, 2]])
    assert.equal(agentJson()?.seq, 2)

    // The agent dies after finishing reply 3 but before acking it (agent.json says 3, the daemon still
    // holds it): started again, it only acks 3, and takes 4.
    killGroup(b)
    await s.wait('agent B to be gone', () => processGone(b), id, EXIT_TIMEOUT_MS)
    await s.waitRow(id, 'exited', (r) => r.state === 'exited' && !r.connected)
    assert.equal((await s.ctl.ok('reply', { id, text: 'three' })).seq, 3)
    fs.writeFileSync(s.file(id, 'agent.json'), JSON.stringify({ ...agentJson(), seq: 3 }))
    assert.equal((await s.ctl.ok('reply', { id, text: 'four' })).seq, 4)
    assert.equal((await s.ctl.row(id)).pending, 2)
    await s.ctl.ok('respawn', { id })
    await s.waitRow(id, 'reply 3 acked unhandled, reply 4 handled',
      (r) => r.connected && r.summary === 'got: four' && r.pending === 0)
    await sleep(QUIET_MS)
    const c = s.replies(id).at(-1).pid
    assert.notEqual(c, b)
    assert.deepEqual(s.replies(id).map((r) => [r.pid, r.seq]), [[a, 1], [a, 2], [b, 2], [c, 4]],
      'the finished reply 3 is not handled again')
    const starts = readJsonl(s.file(id, 'life.jsonl')).filter((e) => e.what === 'start')
    assert.deepEqual(starts.map((e) => [e.pid, e.lastFinished]), [[a, 0], [b, 1], [c, 3]],
      'each start read the last finished seq from agent.json')
    assert.equal(agentJson()?.seq, 4)

    assert.equal((await s.ctl.ok('reply', { id, text: 'bye' })).seq, 5)
    await s.wait('agent C to exit', () => processGone(c), id, EXIT_TIMEOUT_MS)
    await s.waitRow(id, 'done', (r) => r.state === 'done' && r.pending === 0)
  } finally {
    await s.cleanup()
  }
})

test('the example echo agent answers replies and ends on "bye"', async (t) => {
  preflight()
  const s = new Scene(t)
  try {
    await s.startDaemon()
    const id = await s.dispatch('echo', 'hello there')
    await s.waitRow(id, 'got: hello there', (r) => r.summary === 'got: hello there' && r.state === 'working' && r.pending === 0)
    await s.ctl.ok('reply', { id, text: 'and again' })
    await s.waitRow(id, 'got: and again', (r) => r.summary === 'got: and again' && r.pending === 0)
    await s.ctl.ok('reply', { id, text: 'bye' })
    await s.waitRow(id, 'done', (r) => r.state === 'done' && r.summary === 'got: bye' && r.pending === 0)
    // The daemon started it (it is its child): it sees it exit.
    await s.wait('the exit event', async () => {
      const { events } = await s.ctl.ok('events', { id })
      return events.some((e) => e.what === 'exit')
    }, id, EXIT_TIMEOUT_MS)
    assert.equal(readJson(s.file(id, 'agent.json'))?.seq, 3)
  } finally {
    await s.cleanup()
  }
})

test('the fleet ops and the board through the client, and the controller client', async (t) => {
  preflight()
  const { RoostAgent } = await import(pathToFileURL(CLIENT).href)
  const { DaemonClient } = await import(pathToFileURL(path.join(SDK_DIR, 'dist', 'client.js')).href)
  const s = new Scene(t)
  const agents = []
  try {
    await s.startDaemon()
    const hub = await DaemonClient.connect(s.tmp.socket)
    const pushed = []
    hub.onEvent = (e) => pushed.push(e)
    await hub.call('subscribe')
    /** A hold job named `name`, spoken for here; what it receives. */
    const held = async (name, items) => {
      const { id } = await hub.call('dispatch', { profile: 'hold', task: 'hold', name })
      s.jobs.push(id)
      const token = await s.token(id)
      const got = []
      const agent = new RoostAgent({ id, token, socket: s.tmp.socket, dir: null }, {
        name, version: '1', onReply: (r) => { got.push(r) }, capabilities: ['report', 'replies', 'agent-items', 'peers'],
      })
      agents.push(agent)
      agent.report({ state: 'working', summary: 'holding', ...(items ? { agentItems: true } : {}) })
      await s.waitRow(id, `${name} connected`, (r) => r.connected && r.summary === 'holding')
      return { id, agent, got }
    }
    const lead = await held('lead', true)
    const peer = await held('peer', false)
    assert.deepEqual((await lead.agent.peers()).map((p) => [p.name, p.self]).sort(), [['lead', true], ['peer', false]])
    assert.deepEqual(await lead.agent.send('peer', 'take the docs'), { outcome: 'delivered', id: peer.id })
    await s.wait('the message', () => peer.got.some((r) => r.text.includes('take the docs') && r.kind === undefined), peer.id)
    assert.equal((await lead.agent.send('peer', 'take the docs')).outcome, 'duplicate')

    const kid = await lead.agent.spawn('hold', 'part one', 'kid')
    assert.equal(kid.name, 'kid')
    assert.equal((await lead.agent.watch('kid', 'ended')).fired, false)
    await assert.rejects(lead.agent.watch('kid', 'soon'), (e) => e.code === 'bad_request')
    s.jobs.push(kid.id)
    await hub.call('stop', { id: kid.id })
    await s.wait('the notice', () => lead.got.some((r) => r.kind === 'notice' && r.text.includes('kid has ended (stopped)')), lead.id)
    await s.waitRow(lead.id, 'the notice acked by itself', (r) => r.pending === 0)

    const first = (await lead.agent.addTask('design', { detail: 'the spec' })).task
    const second = (await hub.task('add', { title: 'build', after: [first.id] })).task
    assert.deepEqual(second.by, { who: 'user' })
    await assert.rejects(peer.agent.claimTask(second.id), (e) => e.code === 'blocked')
    await peer.agent.claimTask(first.id)
    await assert.rejects(lead.agent.claimTask(first.id), (e) => e.code === 'conflict')
    const done = (await peer.agent.taskDone(first.id, 'written')).task
    assert.deepEqual([done.state, done.result], ['done', 'written'])
    await lead.agent.claimTask(String(second.id))
    await lead.agent.releaseTask(second.id)
    assert.deepEqual((await lead.agent.tasks()).tasks.map((x) => [x.title, x.state]), [['design', 'done'], ['build', 'open']])
    await assert.rejects(hub.task('claim', { id: second.id }), (e) => e.code === 'unsupported')
    await s.wait('a board push', () => pushed.some((e) => e.event === 'board' && e.done === 1 && e.open === 1))
    const { events } = await hub.events()
    assert.ok(events.some((e) => e.what === 'message' && e.whoId === lead.id), JSON.stringify(events))
    hub.close()
  } finally {
    for (const a of agents) await a.close().catch(() => {})
    await s.cleanup()
  }
})

test('the concierge ops through the client: say, orders, the feed, suggest, the policy, acts, and a digest', async (t) => {
  preflight()
  const { RoostAgent, RoostError } = await import(pathToFileURL(CLIENT).href)
  const s = new Scene(t)
  let waiting
  try {
    await s.startDaemon()
    // A session that waits for an answer, spoken for here.
    const { id: waitingId } = await s.ctl.ok('dispatch', { profile: 'hold', task: 'hold', name: 'waiting' })
    s.jobs.push(waitingId)
    const got = []
    waiting = new RoostAgent({ id: waitingId, token: await s.token(waitingId), socket: s.tmp.socket, dir: null }, {
      name: 'waiting', version: '1', onReply: (r) => { got.push(r) },
    })
    await waiting.report({ state: 'blocked', status: 'waiting', waitingFor: 'question', question: 'ship it?', choices: ['yes', 'no'] })
    // The concierge's ops are refused to any other session.
    await assert.rejects(waiting.say('info', 'I am not the concierge'), (e) => e instanceof RoostError && e.code === 'unsupported')

    // The hub turns the concierge on: a job of the scripted profile; its first task names who waits.
    const status = await s.ctl.ok('concierge', {
      action: 'on', launch: { profile: 'tsconcierge', task: JSON.stringify({ waiting: waitingId }) },
    })
    assert.equal(status.on, true)
    const id = status.id
    s.jobs.push(id)
    const ops = await s.wait('the concierge to run its ops', () => readJsonl(s.file(id, 'ops.jsonl'))[0], id)
    const failed = Object.entries(ops).filter(([k, v]) => !['pid', 'reply', 'stop'].includes(k) && !('ok' in v))
    assert.deepEqual(failed, [], 'every op but the refused ones answered')
    assert.deepEqual([ops.reply, ops.stop], [{ code: 'policy' }, { code: 'policy' }], 'answer: never and act: false by default')
    assert.deepEqual(ops.policy.ok, { answer: 'never', act: false })

    // What the user notices: the feed says what it said, by the concierge.
    const said = (await s.ctl.ok('events')).events.filter((e) => e.what === 'concierge' && e.text === 'the build is green')
    assert.equal(said.length, 1, JSON.stringify(said))
    assert.deepEqual([said[0].who, said[0].whoId, said[0].why], ['concierge', id, 'info'])
    assert.deepEqual(ops.say.ok, { seq: said[0].seq })
    assert.ok(ops.events.ok.events.some((e) => e.seq === said[0].seq), 'it reads the feed too')
    assert.ok(ops.mine.ok.events.length > 0 && ops.mine.ok.events.every((e) => e.id === id), JSON.stringify(ops.mine))
    // Its orders, as the hub lists them: the spare one dropped, the kept one applied once.
    const { orders } = await s.ctl.ok('concierge-order', { action: 'list' })
    assert.deepEqual(orders.map((o) => [o.text, o.by, o.count, o.when]), [['check the build', 'concierge', 1, 'every 30m']])
    assert.deepEqual(ops.orders.ok.orders.map((o) => o.text), ['check the build'])
    // The waiting row carries the suggestion.
    const row = await s.ctl.row(waitingId)
    assert.deepEqual([row.suggested?.text, row.suggested?.why], ['yes', 'the tests pass'], JSON.stringify(row))
    assert.equal(ops.suggest.ok.id, waitingId)
    // A digest woke it: a peer item of kind digest from the roost, in its tag, acked by itself.
    const digest = await s.wait('a digest', () => readJsonl(s.file(id, 'digests.jsonl'))[0], id)
    assert.deepEqual(digest.from, { id: '', name: 'roost' })
    assert.match(digest.text, /<roost-digest/)
    await s.waitRow(id, "the concierge's items acked", (r) => r.pending === 0 && r.connected)

    // With the policy letting it answer and act: it answers the waiting session, dispatches a helper,
    // respawns it and stops it.
    await s.ctl.ok('concierge', { action: 'answer', answer: 'always' })
    await s.ctl.ok('concierge', { action: 'act', act: true })
    await s.ctl.ok('concierge-ask', { text: 'act' })
    const acts = await s.wait('the concierge to act', () => readJsonl(s.file(id, 'acts.jsonl'))[0], id)
    assert.deepEqual(acts.policy, { ok: { answer: 'always', act: true } })
    assert.equal(acts.reply.ok?.saved, true, JSON.stringify(acts))
    assert.equal(acts.dispatch.ok?.name, 'helper', JSON.stringify(acts))
    const helper = acts.dispatch.ok.id
    s.jobs.push(helper)
    assert.deepEqual([acts.respawn, acts.stop], [{ ok: { id: helper } }, { ok: { id: helper } }])
    await s.wait('the answer, as a reply', () => got.some((r) => r.text === 'yes' && r.kind === undefined), waitingId)
    const replied = (await s.ctl.ok('events', { id: waitingId })).events.filter((e) => e.what === 'reply').at(-1)
    assert.equal(replied.who, 'concierge', JSON.stringify(replied))
    const acted = Object.fromEntries((await s.ctl.ok('events', { id: helper })).events.map((e) => [e.what, e.who]))
    assert.deepEqual(['start', 'respawn', 'stop'].map((w) => acted[w]), ['concierge', 'concierge', 'concierge'], JSON.stringify(acted))
    assert.deepEqual(readJsonl(s.file(id, 'errors.jsonl')), [], 'the client reported no errors')
    await s.ctl.ok('concierge-ask', { text: 'bye' })
  } finally {
    await waiting?.close().catch(() => {})
    await s.cleanup()
  }
})

// ---------------------------------------------------------------------------------------------------------
// The spec's entry points (`pi-roost/agent`, `pi-roost/client`, `pi-roost/protocol`) and its `Reporter`,
// against the real daemon.

/** Another process holding the daemon's store's write lock (python3's sqlite3, as `sqlite3` in a long
 * transaction would), until `release()`. */
async function lockStore(tmp) {
  const db = path.join(tmp.data, 'roost', 'roost.sqlite')
  const script = "import sqlite3, sys\nc = sqlite3.connect(sys.argv[1], isolation_level=None)\n" +
    "c.execute('BEGIN IMMEDIATE')\nprint('locked', flush=True)\nsys.stdin.read()\n"
  const child = spawn('python3', ['-c', script, db], { stdio: ['pipe', 'pipe', 'inherit'] })
  const lines = readline.createInterface({ input: child.stdout })
  await withTimeout(new Promise((resolve, reject) => {
    lines.once('line', resolve)
    child.once('exit', (code) => reject(new Error(`the lock holder exited (${code})`)))
  }), STEP_TIMEOUT_MS, 'the store locked')
  const gone = new Promise((resolve) => child.once('exit', resolve))
  return { release: () => { child.stdin.end(); return withTimeout(gone, EXIT_TIMEOUT_MS, 'the lock holder gone') } }
}

test('pi-roost: the spec imports resolve; an agent written as the spec shows runs; its PR links reach the row', async (t) => {
  preflight()
  const agentMod = await import('pi-roost/agent')
  const clientMod = await import('pi-roost/client')
  await import('pi-roost/protocol') // types only: it loads
  assert.equal(typeof agentMod.RoostAgent.fromEnv, 'function')
  assert.equal(typeof agentMod.Reporter, 'function')
  assert.equal(typeof agentMod.Reporter.prototype.call, 'function')
  assert.ok(agentMod.RoostAgent.prototype instanceof agentMod.Reporter, 'a RoostAgent is a Reporter')
  assert.equal(typeof clientMod.DaemonClient.connect, 'function')
  assert.equal(agentMod.RoostAgent.fromEnv({ name: 'x', version: '1', onReply: () => {}, env: {} }), null)
  assert.equal(agentMod.Reporter.fromEnv({ name: 'x', version: '1', env: {} }), null)

  const s = new Scene(t)
  try {
    await s.startDaemon()
    const hub = await clientMod.DaemonClient.connect(s.tmp.socket)
    s.controllers.push(hub)
    const id = await s.dispatch('spec', 'hello')
    await s.waitRow(id, 'got: hello', (r) => r.summary === 'got: hello' && r.pending === 0)
    await s.ctl.ok('reply', { id, text: 'pr' })
    const row = await s.waitRow(id, 'got: pr', (r) => r.summary === 'got: pr' && r.pending === 0)
    assert.deepEqual(row.prLinks, ['https://github.com/o/r/pull/7'], JSON.stringify(row))
    assert.equal(row.remoteAt, 'https://pi.example/s/spec')
    const rows = await hub.rows()
    assert.deepEqual(rows.find((r) => r.id === id)?.prLinks, ['https://github.com/o/r/pull/7'])
    await s.ctl.ok('reply', { id, text: 'bye' })
    await s.waitRow(id, 'done', (r) => r.state === 'done' && r.summary === 'got: bye')
  } finally {
    await s.cleanup()
  }
})

test('Reporter: reports coalesced against the real daemon, call for other ops, busy when the store cannot save', async (t) => {
  preflight()
  const { Reporter, RoostError } = await import('pi-roost/agent')
  const s = new Scene(t)
  let reporter
  try {
    await s.startDaemon()
    const id = await s.dispatch('hold', 'hold')
    const token = await s.token(id)
    const connects = []
    const errors = []
    reporter = new Reporter({ id, token, socket: s.tmp.socket, dir: null }, {
      name: 'worker', version: '1', onConnect: (i) => connects.push(i), onError: (e) => errors.push(e),
    })
    await assert.rejects(reporter.call('peers'), (e) => e instanceof RoostError && e.code === 'not_connected')
    // 200 reports in one go: one in flight, the latest next; every promise settles with the last.
    const sent = []
    for (let n = 0; n < 200; n++) sent.push(reporter.report({ state: 'working', summary: `n=${n}` }))
    await withTimeout(Promise.all(sent), STEP_TIMEOUT_MS, 'the reports taken')
    const row = await s.waitRow(id, 'the last report', (r) => r.summary === 'n=199' && r.connected)
    assert.ok(row.reports <= 3, `coalesced: ${row.reports} reports reached the daemon for 200 sent`)
    assert.equal(connects.length, 1)
    assert.ok(connects[0].capabilities.includes('replies'), JSON.stringify(connects[0]))
    // Other ops with call, and the helpers over it.
    const added = await reporter.call('task', { action: 'add', title: 'write the docs' })
    assert.equal(added.task.title, 'write the docs')
    assert.equal((await reporter.claimTask(added.task.id)).task.owner.id, id)

    // The store cannot save (another process holds its write lock): busy, and nothing taken.
    const lock = await lockStore(s.tmp)
    let released = false
    try {
      await assert.rejects(
        reporter.call('task', { action: 'add', title: 'not now' }, { timeoutMs: 20_000 }),
        (e) => e instanceof RoostError && e.code === 'busy',
      )
    } finally {
      await lock.release()
      released = true
    }
    assert.ok(released)
    const { tasks } = await reporter.tasks()
    assert.deepEqual(tasks.map((x) => x.title), ['write the docs'], 'the refused add took nothing')
    await reporter.call('task', { action: 'add', title: 'not now' })
    assert.deepEqual((await reporter.tasks()).tasks.map((x) => x.title), ['write the docs', 'not now'])
    assert.deepEqual(errors, [])
  } finally {
    await reporter?.close().catch(() => {})
    await s.cleanup()
  }
})

// The TypeScript agent client against a scripted stand-in daemon, for what the real one does not do: a
// daemon from before `hello` (bad_request), refusals, and the client's own rules (the environment, the
// report's defaults and bounds, `call` before a report, `close`). The real daemon: conformance.test.mjs.
//
//   node --test sdk/typescript/test/     (after `npm run build` in sdk/typescript)

import { test } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import net from 'node:net'
import path from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'

const HERE = path.dirname(fileURLToPath(import.meta.url))
const CLIENT = path.resolve(HERE, '..', 'dist', 'roost-agent.js')
const { RoostAgent, RoostError } = await import(pathToFileURL(CLIENT).href)
// The spec's name for the same package (it imports itself by the name in its package.json).
const { Reporter, BUSY_RETRY_BASE_MS } = await import('pi-roost/agent')

const STEP_TIMEOUT_MS = 5_000 // a local socket round trip, many times over
const POLL_MS = 10

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

async function waitFor(what, probe, ms = STEP_TIMEOUT_MS) {
  const deadline = Date.now() + ms
  for (;;) {
    const v = probe()
    if (v) return v
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`)
    await sleep(POLL_MS)
  }
}

/** A stand-in daemon: `answer(req, conn)` returns `{result}`, `{error, code}`, or undefined (no answer). */
class FakeDaemon {
  constructor(answer) {
    this.dir = fs.mkdtempSync('/tmp/rt-')
    this.socket = path.join(this.dir, 's')
    this.answer = answer
    this.requests = []
    this.conns = []
    this.server = net.createServer((sock) => {
      const conn = { sock, n: this.conns.length + 1, buf: '' }
      this.conns.push(conn)
      sock.setEncoding('utf8')
      sock.on('error', () => {})
      sock.on('data', (chunk) => {
        conn.buf += chunk
        let nl
        while ((nl = conn.buf.indexOf('\n')) >= 0) {
          const req = JSON.parse(conn.buf.slice(0, nl))
          conn.buf = conn.buf.slice(nl + 1)
          this.requests.push({ conn: conn.n, ...req })
          const a = this.answer(req, conn)
          if (!a) continue
          const line = a.code
            ? { id: req.id, ok: false, error: a.error ?? a.code, code: a.code }
            : { id: req.id, ok: true, result: a.result ?? {} }
          sock.write(JSON.stringify(line) + '\n')
          for (const ev of a.then ?? []) sock.write(JSON.stringify(ev) + '\n')
        }
      })
    })
  }

  listen() {
    return new Promise((resolve) => this.server.listen(this.socket, resolve))
  }

  ops(conn) {
    return this.requests.filter((r) => conn === undefined || r.conn === conn).map((r) => r.op)
  }

  async stop() {
    for (const c of this.conns) c.sock.destroy()
    await new Promise((resolve) => this.server.close(resolve))
    fs.rmSync(this.dir, { recursive: true, force: true })
  }
}

const job = (fake, dir = null) => ({ id: 'j1', token: 't1', socket: fake.socket, dir })

test('fromEnv: null outside roost; the new names first, then the PI_* ones', () => {
  const opts = { name: 'a', version: '1', onReply: () => {} }
  assert.equal(RoostAgent.fromEnv({ ...opts, env: {} }), null)
  assert.equal(RoostAgent.fromEnv({ ...opts, env: { ROOST_JOB_ID: 'x', ROOST_JOB_TOKEN: 'y' } }), null)
  const old = RoostAgent.fromEnv({
    ...opts,
    env: { PI_JOB_ID: 'p', PI_JOB_TOKEN: 'pt', PI_DAEMON_SOCK: '/s', PI_JOB_DIR: '/d' },
  })
  assert.deepEqual(old.job, { id: 'p', token: 'pt', socket: '/s', dir: '/d' })
  const both = RoostAgent.fromEnv({
    ...opts,
    env: {
      ROOST_JOB_ID: 'r', ROOST_JOB_TOKEN: 'rt', ROOST_SOCKET: '/rs', ROOST_JOB_DIR: '/rd',
      PI_JOB_ID: 'p', PI_JOB_TOKEN: 'pt', PI_DAEMON_SOCK: '/s', PI_JOB_DIR: '/d',
    },
  })
  assert.deepEqual(both.job, { id: 'r', token: 'rt', socket: '/rs', dir: '/rd' })
})

test('a daemon from before hello (bad_request): version 1, and the report is a full snapshot', async () => {
  const fake = new FakeDaemon((req) =>
    req.op === 'hello' ? { code: 'bad_request', error: 'unknown op "hello"' } : { result: {} })
  await fake.listen()
  const connects = []
  const errors = []
  const agent = new RoostAgent(job(fake), {
    name: 'a', version: '1', onReply: () => {}, onConnect: (i) => connects.push(i), onError: (e) => errors.push(e),
  })
  try {
    await assert.rejects(agent.call('peers', {}), (e) => e instanceof RoostError && e.code === 'not_connected')
    assert.equal(fake.requests.length, 0, 'nothing is sent before the first report')
    await agent.report({ state: 'working', summary: 'x'.repeat(600), choices: Array(25).fill('c') })
    assert.deepEqual(fake.ops(), ['hello', 'report'])
    assert.deepEqual(connects, [{ protocol: 1, daemon: null, capabilities: [], connection: 1 }])
    assert.deepEqual(errors, [], 'bad_request to hello is expected from an old daemon')
    const hello = fake.requests[0].args
    assert.deepEqual(hello, { protocol: 1, agent: { name: 'a', version: '1' }, capabilities: ['report', 'replies'] })
    const { id, token, report } = fake.requests[1].args
    assert.deepEqual([id, token], ['j1', 't1'])
    assert.equal(Array.from(report.summary).length, 500, 'cut to the bound')
    assert.equal(report.choices.length, 20)
    assert.deepEqual({ ...report, summary: null, choices: [] }, {
      state: 'working', status: null, waitingFor: null, summary: null, question: null, choices: [],
      tool: null, error: null, name: null, model: null,
    })
    await assert.rejects(agent.report({ state: 'napping' }), (e) => e.code === 'bad_request')
  } finally {
    await agent.close()
    await fake.stop()
  }
})

test('refusals: a call gets the code; unauthorized stops speaking for the job', async () => {
  let authorised = true
  const fake = new FakeDaemon((req) => {
    if (req.op === 'hello') return { result: { protocol: 1, daemon: { name: 'fake', version: '0' }, capabilities: [] } }
    if (req.op === 'task') return { code: 'unsupported', error: 'no board here' }
    if (req.op === 'report' && !authorised) return { code: 'unauthorized', error: 'wrong token' }
    return { result: {} }
  })
  await fake.listen()
  const errors = []
  const agent = new RoostAgent(job(fake), { name: 'a', version: '1', onReply: () => {}, onError: (e) => errors.push(e) })
  try {
    await agent.report({ state: 'working' })
    assert.deepEqual(agent.daemon, { name: 'fake', version: '0' })
    await assert.rejects(agent.tasks(), (e) => e instanceof RoostError && e.code === 'unsupported')
    authorised = false
    await assert.rejects(agent.report({ state: 'working', summary: 'again' }), (e) => e.code === 'unauthorized')
    await assert.rejects(agent.report({ state: 'done' }), (e) => e.code === 'unauthorized')
    await assert.rejects(agent.call('peers'), (e) => e.code === 'unauthorized')
    assert.equal(errors.filter((e) => e.code === 'unauthorized').length, 1)
    const before = fake.requests.length
    await sleep(200)
    assert.equal(fake.requests.length, before, 'no reconnection for a job it may not speak for')
  } finally {
    await agent.close()
    await fake.stop()
  }
})

test('replies: once each, in order, one at a time; acked after the handler; the dropped connection', async () => {
  const dir = fs.mkdtempSync('/tmp/rt-')
  const deliver = (seq, text, extra = {}) => ({ event: 'deliver', id: 'j1', seq, text, ...extra })
  let reports = 0
  const fake = new FakeDaemon((req, conn) => {
    if (req.op !== 'report') return { result: {} }
    reports++
    // The first report on a connection: every pending reply (here: 1 and 2, then again 1 to 3).
    if (conn.n === 1 && reports === 1) return { result: {}, then: [deliver(1, 'one'), deliver(2, 'two', { mode: 'steer' }), deliver(1, 'one')] }
    if (conn.n === 2 && !conn.sent) {
      conn.sent = true
      return { result: {}, then: [deliver(1, 'one'), deliver(2, 'two'), deliver(3, 'three')] }
    }
    return { result: {} }
  })
  await fake.listen()
  const got = []
  let running = 0
  let release
  const gate = new Promise((r) => (release = r))
  const agent = new RoostAgent(job(fake, dir), {
    name: 'a',
    version: '1',
    onReply: async (r) => {
      assert.equal(++running, 1, 'one at a time')
      got.push([r.seq, r.text, r.mode ?? null])
      if (r.seq === 2) await gate
      running--
    },
  })
  try {
    await agent.report({ state: 'working' })
    await waitFor('reply 2 to start', () => got.length === 2)
    const acks = () => fake.requests.filter((r) => r.op === 'ack').map((r) => [r.conn, r.args.seq])
    await waitFor('an ack', () => acks().length > 0)
    await sleep(50)
    assert.deepEqual(acks(), [[1, 1]], 'reply 1 acked after its handler; 2 is running')
    assert.equal(JSON.parse(fs.readFileSync(path.join(dir, 'agent.json'), 'utf8')).seq, 1)
    // The connection drops while reply 2 runs: the client reconnects, says hello, sends its report again.
    fake.conns[0].sock.destroy()
    await waitFor('a second report', () => fake.ops(2).includes('report'))
    assert.deepEqual(fake.ops(2).slice(0, 2), ['hello', 'report'])
    await waitFor('reply 1 acked again', () => acks().some(([c, s]) => c === 2 && s === 1))
    await sleep(100)
    assert.deepEqual(got.map((g) => g[0]), [1, 2], 'reply 2 is not handed over again while it runs, nor 3 before it')
    release()
    await waitFor('reply 3 acked', () => acks().some(([, s]) => s === 3))
    assert.deepEqual(got, [[1, 'one', null], [2, 'two', 'steer'], [3, 'three', null]])
    assert.equal(JSON.parse(fs.readFileSync(path.join(dir, 'agent.json'), 'utf8')).seq, 3)
    await agent.close()
    assert.deepEqual(fake.requests.at(-1).op, 'report', 'close sends the latest report')

    // Started again with agent.json at 3: a resent 3 is only acked, 4 is handled.
    const again = []
    const fake2 = new FakeDaemon((req) =>
      req.op === 'report' ? { result: {}, then: [deliver(3, 'three'), deliver(4, 'four')] } : { result: {} })
    await fake2.listen()
    const agent2 = new RoostAgent(job(fake2, dir), { name: 'a', version: '1', onReply: (r) => { again.push(r.seq) } })
    try {
      assert.equal(agent2.lastFinished, 3)
      await agent2.report({ state: 'working' })
      await waitFor('reply 4 acked', () => fake2.requests.some((r) => r.op === 'ack' && r.args.seq === 4))
      assert.deepEqual(again, [4])
    } finally {
      await agent2.close()
      await fake2.stop()
    }
  } finally {
    await agent.close()
    await fake.stop()
    fs.rmSync(dir, { recursive: true, force: true })
  }
})

test('close: a reply whose handler is still running is not acked, and is not recorded as finished', async () => {
  const dir = fs.mkdtempSync('/tmp/rt-')
  const fake = new FakeDaemon((req) =>
    req.op === 'report' && !req.args.report.summary
      ? { result: {}, then: [{ event: 'deliver', id: 'j1', seq: 1, text: 'slow' }] }
      : { result: {} })
  await fake.listen()
  let started
  const begun = new Promise((r) => (started = r))
  let release
  const gate = new Promise((r) => (release = r))
  const agent = new RoostAgent(job(fake, dir), {
    name: 'a', version: '1', onReply: async () => { started(); await gate },
  })
  try {
    await agent.report({ state: 'working' })
    await begun
    await agent.report({ state: 'done', summary: 'stopping' })
    await agent.close()
    release()
    await sleep(50)
    const last = fake.requests.filter((r) => r.op === 'report').at(-1)
    assert.equal(last.args.report.summary, 'stopping', 'close sent the latest report')
    assert.equal(fake.requests.some((r) => r.op === 'ack'), false, 'not acked: it comes again on the next start')
    assert.equal(fs.existsSync(path.join(dir, 'agent.json')), false)
    await assert.rejects(agent.report({ state: 'done' }), (e) => e.code === 'closed')
  } finally {
    await fake.stop()
    fs.rmSync(dir, { recursive: true, force: true })
  }
})

test('agent.json: the last finished seq of this job; a file naming another job is ignored', () => {
  const dir = fs.mkdtempSync('/tmp/rt-')
  try {
    const make = () => new RoostAgent({ id: 'j1', token: 't1', socket: '/nowhere', dir }, { name: 'a', version: '1', onReply: () => {} })
    assert.equal(make().lastFinished, 0, 'no file')
    fs.writeFileSync(path.join(dir, 'agent.json'), JSON.stringify({ job: 'j2', seq: 9 }))
    assert.equal(make().lastFinished, 0, 'another job')
    fs.writeFileSync(path.join(dir, 'agent.json'), JSON.stringify({ job: 'j1', seq: 7 }))
    assert.equal(make().lastFinished, 7)
    fs.writeFileSync(path.join(dir, 'agent.json'), 'not json')
    assert.equal(make().lastFinished, 0, 'unreadable')
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
})

test('Reporter: a report answered busy goes again after a backoff that grows, as the latest report by then', async () => {
  // The real daemon answers busy only to what it writes before answering (a reply, an ack, the board:
  // conformance.test.mjs); a report's row is written later, so this one is the stand-in's.
  const reports = []
  const fake = new FakeDaemon((req) => {
    if (req.op === 'hello') return { result: { protocol: 1, daemon: { name: 'fake', version: '0' }, capabilities: [] } }
    if (req.op !== 'report') return { result: { echoed: req.op } }
    reports.push({ at: Date.now(), summary: req.args.report.summary })
    return reports.length <= 3 ? { code: 'busy', error: 'could not save' } : { result: {} }
  })
  await fake.listen()
  const errors = []
  const r = new Reporter(job(fake), { name: 'w', version: '1', onError: (e) => errors.push(e) })
  try {
    const first = r.report({ state: 'working', summary: 'a' })
    await waitFor('the first busy', () => reports.length >= 1)
    const second = r.report({ state: 'working', summary: 'b' })
    await Promise.all([first, second])
    assert.deepEqual(reports.map((x) => x.summary), ['a', 'b', 'b', 'b'], 'the latest goes again, coalesced')
    const gaps = reports.slice(1).map((x, i) => x.at - reports[i].at)
    // Attempt k waits between half and all of BUSY_RETRY_BASE_MS * 2^k (jitter).
    gaps.forEach((g, k) => assert.ok(g >= (BUSY_RETRY_BASE_MS * 2 ** k) / 2 - 5, `gap ${k}: ${g} ms (${gaps})`))
    assert.ok(gaps[2] > gaps[0], `it grows: ${gaps}`)
    assert.deepEqual(errors, [], 'busy is not an error to say: it is tried again')
    assert.deepEqual(await r.call('peers'), { echoed: 'peers' })
  } finally {
    await r.close()
    await fake.stop()
  }
})

// Interop: a nostr-tools client (NIP-44 v2, event signing and verification done by nostr-tools, not by us)
// against the agentwire daemon's NIP-XX agent and its embedded relay.
//
// Run from the repo root after `cargo build -p agentwire` and `npm ci --prefix interop/nostr-tools`:
//   node --test interop/nostr-tools/
// AGENTWIRE_BIN overrides the daemon binary (default: <repo>/target/debug/agentwire).

import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { finalizeEvent, generateSecretKey, getPublicKey, verifyEvent, nip04, nip19, nip44, nip59 } from 'nostr-tools'
import { Daemon, OK_TIMEOUT_MS, RelayConn, describeEvents, sleep, withTimeout } from './lib.mjs'

// Bounds, each with its reason.
const TERMINAL_TIMEOUT_MS = 15_000 // the demo agent answers in well under a second
const CANCEL_TIMEOUT_MS = 3_000 // a cancel must be acted on promptly, not when the 5 s sleep ends
const INFO_TIMEOUT_MS = 5_000 // ai.info is published before ready; allow a late live one
const QUIET_MS = 500 // after a terminal, how long we watch for a forbidden second terminal
const VERBOSE = Boolean(process.env.INTEROP_VERBOSE) // print every run's events with decrypted payloads

const KIND = {
  status: 25800,
  delta: 25801,
  prompt: 25802,
  response: 25803,
  toolCall: 25804,
  error: 25805,
  cancel: 25806,
  info: 31340,
  giftWrap: 1059,
}
const RUN_KINDS = [KIND.status, KIND.delta, KIND.response, KIND.toolCall, KIND.error]
const TERMINAL = new Set([KIND.response, KIND.error])
const STATUS_STATES = new Set(['thinking', 'tool_use', 'done'])
const ERROR_CODES = new Set([
  'UNSUPPORTED_ENCRYPTION', 'UNSUPPORTED_MODEL', 'UNSUPPORTED_SCHEMA_VERSION', 'CANCELLED', 'RATE_LIMIT',
  'UNAUTHORIZED', 'BLOCKED_SENDER', 'MODEL_UNAVAILABLE', 'SESSION_LIMIT', 'PARSE_ERROR', 'EMPTY_RESPONSE',
  'TOOL_ERROR', 'INVALID_SCHEMA', 'UNSUPPORTED_FEATURE', 'INVALID_SEQUENCE', 'INTERNAL_ERROR',
])

// ---------------------------------------------------------------------------------------------------------
// A NIP-XX client built only from nostr-tools.

let daemon
let agent // hex pubkey

class Client {
  constructor() {
    this.sk = generateSecretKey()
    this.pk = getPublicKey(this.sk)
    this.key = nip44.v2.utils.getConversationKey(this.sk, agent)
  }

  seal(payload) {
    return nip44.v2.encrypt(typeof payload === 'string' ? payload : JSON.stringify(payload), this.key)
  }

  open(event) {
    const text = nip44.v2.decrypt(event.content, this.key)
    let payload
    try {
      payload = JSON.parse(text)
    } catch {
      throw new Error(`kind ${event.kind} ${event.id} decrypts to non-JSON: ${JSON.stringify(text)}`)
    }
    return payload
  }

  prompt(payload, { session, encryption = 'nip44', content } = {}) {
    const tags = [['p', agent], ['encryption', encryption]]
    if (session) tags.push(['s', session])
    return finalizeEvent(
      { kind: KIND.prompt, created_at: now(), tags, content: content ?? this.seal(payload) },
      this.sk,
    )
  }

  cancel(promptId, session, reason = 'user_cancel') {
    const tags = [['p', agent], ['e', promptId, '', 'root'], ['encryption', 'nip44']]
    if (session) tags.push(['s', session])
    return finalizeEvent({ kind: KIND.cancel, created_at: now(), tags, content: this.seal({ ver: 1, reason }) }, this.sk)
  }

  runFilter(promptId) {
    return { kinds: RUN_KINDS, '#p': [this.pk], '#e': [promptId], authors: [agent] }
  }
}

const now = () => Math.floor(Date.now() / 1000)


function hasTag(event, ...want) {
  return event.tags.some((t) => want.every((v, i) => t[i] === v))
}

/**
 * Checks one agent -> client run event: signature, author, tags; returns its decrypted payload.
 * `strictSession`: the `s` tag must be present (else: if present it must match).
 */
function checkRunEvent(client, event, promptId, session, { strictSession = true } = {}) {
  let where = `kind ${event.kind} event ${JSON.stringify(event)}`
  let payload
  try {
    payload = client.open(event)
  } catch (e) {
    assert.fail(`nip44 v2 decrypt failed (${e.message}): ${where}`)
  }
  where += ` decrypting to ${JSON.stringify(payload)}`
  assert.equal(verifyEvent(event), true, `bad signature or id: ${where}`)
  assert.equal(event.pubkey, agent, `not authored by the agent: ${where}`)
  assert.ok(hasTag(event, 'p', client.pk), `no ["p", client] tag: ${where}`)
  const roots = event.tags.filter((t) => t[0] === 'e' && t[1] === promptId)
  assert.equal(roots.length, 1, `want exactly one e tag for the prompt: ${where}`)
  assert.equal(roots[0][3], 'root', `e tag marker (index 3) is not "root": ${where}`)
  assert.equal(typeof roots[0][2], 'string', `e tag relay hint (index 2) is not a string: ${where}`)
  assert.ok(hasTag(event, 'encryption', 'nip44'), `no ["encryption","nip44"] tag: ${where}`)
  const sTags = event.tags.filter((t) => t[0] === 's')
  if (strictSession || sTags.length > 0) {
    // The run belongs to the prompt's session; an s tag naming another one mislabels it.
    assert.deepEqual(sTags.map((t) => t[1]), [session], `s tag is not ${JSON.stringify(session)}: ${where}`)
  }
  assert.equal(payload.ver, 1, `payload ver is not 1: ${where}`)
  switch (event.kind) {
    case KIND.status:
      assert.ok(STATUS_STATES.has(payload.state), `bad status state: ${JSON.stringify(payload)}`)
      break
    case KIND.delta:
      assert.equal(typeof payload.text, 'string', `delta without text: ${JSON.stringify(payload)}`)
      break
    case KIND.response:
      assert.equal(typeof payload.text, 'string', `response without text: ${JSON.stringify(payload)}`)
      break
    case KIND.error:
      assert.ok(ERROR_CODES.has(payload.code), `unknown error code: ${JSON.stringify(payload)}`)
      assert.ok(typeof payload.message === 'string' && payload.message.length > 0,
        `error without message: ${JSON.stringify(payload)}`)
      break
    case KIND.toolCall:
      assert.ok(typeof payload.name === 'string' || typeof payload.text === 'string',
        `tool call without name or text: ${JSON.stringify(payload)}`)
      break
  }
  return payload
}

/**
 * Subscribes to a prompt's run, publishes the prompt (expecting OK true), and collects events until the
 * first terminal, then QUIET_MS more. Returns [{event, payload}] in arrival order plus the terminals.
 */
async function runPrompt(conn, client, prompt, session, opts = {}) {
  const sub = conn.subscribe(client.runFilter(prompt.id))
  await sub.waitFor((_, s) => s.eose, OK_TIMEOUT_MS, `EOSE on the run subscription`)
  const ok = await conn.publish(prompt)
  assert.equal(ok.ok, true, `prompt refused by the relay: ${JSON.stringify(ok)}`)
  await sub.waitFor((evs) => evs.some((e) => TERMINAL.has(e.kind)), TERMINAL_TIMEOUT_MS, 'a terminal event')
  await sleep(QUIET_MS)
  sub.close()
  const items = sub.events.map((event) => ({ event, payload: checkRunEvent(client, event, prompt.id, session, opts) }))
  if (VERBOSE) console.log(`run ${prompt.id}: ${describeItems(items)}`)
  const terminals = items.filter((i) => TERMINAL.has(i.event.kind))
  assert.equal(terminals.length, 1, `want exactly one terminal, got ${describeItems(terminals)}`)
  return { items, terminal: terminals[0] }
}

function describeItems(items) {
  return JSON.stringify(items.map(({ event, payload }) => ({ kind: event.kind, id: event.id, tags: event.tags, payload })))
}

function checkDeltas(items, minCount) {
  const deltas = items.filter((i) => i.event.kind === KIND.delta).map((i) => i.payload)
  assert.ok(deltas.length >= minCount, `want at least ${minCount} deltas, got ${describeItems(items)}`)
  const sorted = [...deltas].sort((a, b) => a.seq - b.seq)
  sorted.forEach((d, i) => assert.equal(d.seq, i, `delta seqs not contiguous from 0: ${JSON.stringify(deltas)}`))
  return sorted.map((d) => d.text).join('')
}

// ---------------------------------------------------------------------------------------------------------

before(async () => {
  daemon = await Daemon.start()
  const r = daemon.ready
  const diag = () => `ready line ${JSON.stringify(r)}`
  assert.equal(r.ready, true, diag())
  assert.match(r.relay, /^ws:\/\/127\.0\.0\.1:\d+$/, diag())
  assert.match(r.agent_pubkey, /^[0-9a-f]{64}$/, diag())
  const decoded = nip19.decode(r.npub)
  assert.deepEqual(decoded, { type: 'npub', data: r.agent_pubkey }, `npub does not encode agent_pubkey: ${diag()}`)
  agent = r.agent_pubkey
})

after(async () => {
  if (daemon) await daemon.stop()
})

async function withConn(fn) {
  const conn = await RelayConn.connect(daemon.ready.relay)
  try {
    return await fn(conn)
  } catch (e) {
    e.message += `\nrelay notices: ${JSON.stringify(conn.notices)}\n${daemon.diagnostics()}`
    throw e
  } finally {
    await conn.close()
  }
}

test('ready line names exactly one JSON object on stdout', async () => {
  await sleep(200)
  assert.equal(daemon.stdoutLines.length, 1, `stdout had ${JSON.stringify(daemon.stdoutLines)}`)
})

test('ai.info (31340) advertises nip44 and the calculator', () => withConn(async (conn) => {
  const sub = conn.subscribe({ kinds: [KIND.info], authors: [agent] })
  await sub.waitFor((evs) => evs.length > 0, INFO_TIMEOUT_MS, 'an ai.info event')
  sub.close()
  // Newest by (created_at, id), as clients should cache it.
  const info = [...sub.events].sort((a, b) => b.created_at - a.created_at || (b.id < a.id ? -1 : 1))[0]
  assert.equal(verifyEvent(info), true, `bad signature: ${JSON.stringify(info)}`)
  assert.equal(info.kind, KIND.info)
  assert.ok(hasTag(info, 'd', 'agent-info'), `no ["d","agent-info"] tag: ${JSON.stringify(info.tags)}`)
  let content
  assert.doesNotThrow(() => { content = JSON.parse(info.content) }, `ai.info content is not JSON: ${info.content}`)
  assert.equal(content.ver, 1, info.content)
  assert.ok(Array.isArray(content.encryption) && content.encryption.includes('nip44'), info.content)
  assert.ok(Array.isArray(content.tool_names) && content.tool_names.includes('calculator'), info.content)
  assert.equal(content.supports_nip59, true, `the daemon takes gift wraps by default: ${info.content}`)
}))

test('prompt -> streamed deltas -> ai.response', () => withConn(async (conn) => {
  const client = new Client()
  const session = 'session:interop'
  const prompt = client.prompt({ ver: 1, message: 'hello interop' }, { session })
  const { items, terminal } = await runPrompt(conn, client, prompt, session)
  assert.equal(terminal.event.kind, KIND.response, `terminal is not ai.response: ${describeItems([terminal])}`)
  const resp = terminal.payload
  assert.equal(resp.text, 'You said: hello interop', JSON.stringify(resp))
  assert.ok(resp.usage && Number.isInteger(resp.usage.input_tokens) && Number.isInteger(resp.usage.output_tokens),
    `usage lacks integer token counts: ${JSON.stringify(resp)}`)
  const streamed = checkDeltas(items, 2)
  assert.equal(streamed, resp.text, `deltas in seq order do not spell the response: ${describeItems(items)}`)
  // Nothing streams after the terminal (ephemeral events arrive live, in publish order on one relay).
  const tIdx = items.indexOf(terminal)
  assert.equal(tIdx, items.length - 1, `events after the terminal: ${describeItems(items.slice(tIdx))}`)
}))

test('calculator tool call: start then result, then "84"', () => withConn(async (conn) => {
  const client = new Client()
  const session = 'session:interop-calc'
  const prompt = client.prompt({ ver: 1, message: 'calc 12 * 7' }, { session })
  const { items, terminal } = await runPrompt(conn, client, prompt, session)
  const calls = items.filter((i) => i.event.kind === KIND.toolCall)
  assert.deepEqual(calls.map((c) => c.payload.phase), ['start', 'result'], `tool calls: ${describeItems(calls)}`)
  for (const { event, payload } of calls) {
    assert.equal(payload.name, 'calculator', describeItems([{ event, payload }]))
    // Optional index hints; if present they must match the (canonical) payload.
    for (const [tag, value] of [['tool', payload.name], ['phase', payload.phase]]) {
      const hints = event.tags.filter((t) => t[0] === tag)
      if (hints.length > 0) {
        assert.deepEqual(hints.map((t) => t[1]), [value], `${tag} hint differs from payload: ${describeItems([{ event, payload }])}`)
      }
    }
  }
  assert.equal(terminal.event.kind, KIND.response, `terminal is not ai.response: ${describeItems(items)}`)
  assert.equal(terminal.payload.text, '84', describeItems([terminal]))
}))

test('prompt without message -> ai.error INVALID_SCHEMA', () => withConn(async (conn) => {
  const client = new Client()
  const session = 'session:interop-invalid'
  const prompt = client.prompt({ ver: 1 }, { session })
  const { terminal } = await runPrompt(conn, client, prompt, session, { strictSession: false })
  assert.equal(terminal.event.kind, KIND.error, describeItems([terminal]))
  assert.equal(terminal.payload.code, 'INVALID_SCHEMA', describeItems([terminal]))
}))

test('prompt tagged encryption nip04 -> ai.error UNSUPPORTED_ENCRYPTION', () => withConn(async (conn) => {
  const client = new Client()
  const session = 'session:interop-nip04'
  // What a NIP-04-only client would send: the tag and a NIP-04 payload.
  const content = nip04.encrypt(client.sk, agent, JSON.stringify({ ver: 1, message: 'hello' }))
  const prompt = client.prompt(null, { session, encryption: 'nip04', content })
  const { terminal } = await runPrompt(conn, client, prompt, session, { strictSession: false })
  assert.equal(terminal.event.kind, KIND.error, describeItems([terminal]))
  assert.equal(terminal.payload.code, 'UNSUPPORTED_ENCRYPTION', describeItems([terminal]))
}))

test('cancel mid-stream -> exactly one ai.error CANCELLED, no ai.response', () => withConn(async (conn) => {
  const client = new Client()
  const session = 'session:interop-cancel'
  const prompt = client.prompt({ ver: 1, message: 'sleep 5000' }, { session })
  const sub = conn.subscribe(client.runFilter(prompt.id))
  await sub.waitFor((_, s) => s.eose, OK_TIMEOUT_MS, 'EOSE on the run subscription')
  const sentAt = Date.now()
  const ok = await conn.publish(prompt)
  assert.equal(ok.ok, true, `prompt refused: ${JSON.stringify(ok)}`)
  await sub.waitFor((evs) => evs.some((e) => e.kind === KIND.delta), TERMINAL_TIMEOUT_MS, 'the first delta')
  assert.ok(!sub.events.some((e) => TERMINAL.has(e.kind)), `terminal before cancel: ${describeEvents(sub.events)}`)

  const cancel = client.cancel(prompt.id, session)
  const cancelOk = await conn.publish(cancel)
  assert.equal(cancelOk.ok, true, `cancel refused by the relay: ${JSON.stringify(cancelOk)}`)
  await sub.waitFor((evs) => evs.some((e) => TERMINAL.has(e.kind)), CANCEL_TIMEOUT_MS, 'a terminal after ai.cancel')

  // A second cancel is a no-op; then watch past the point where the 5 s sleep would have replied.
  const again = await conn.publish(client.cancel(prompt.id, session))
  assert.equal(again.ok, true, `second cancel refused by the relay: ${JSON.stringify(again)}`)
  await sleep(Math.max(QUIET_MS, 5000 + 1000 - (Date.now() - sentAt)))
  sub.close()

  const items = sub.events.map((event) => ({ event, payload: checkRunEvent(client, event, prompt.id, session) }))
  if (VERBOSE) console.log(`run ${prompt.id}: ${describeItems(items)}`)
  const terminals = items.filter((i) => TERMINAL.has(i.event.kind))
  assert.equal(terminals.length, 1, `want exactly one terminal: ${describeItems(terminals)}`)
  assert.equal(terminals[0].event.kind, KIND.error, `terminal is not ai.error: ${describeItems(terminals)}`)
  assert.equal(terminals[0].payload.code, 'CANCELLED', describeItems(terminals))
  const tIdx = items.indexOf(terminals[0])
  if (tIdx !== items.length - 1) {
    // Not a wire violation for the agent (clients must ignore them), but worth seeing.
    console.log(`note: events after CANCELLED: ${describeItems(items.slice(tIdx + 1))}`)
  }
  // Deltas that streamed before the cancel must still be well-formed.
  const seqs = items.filter((i) => i.event.kind === KIND.delta).map((i) => i.payload.seq).sort((a, b) => a - b)
  seqs.forEach((s, i) => assert.equal(s, i, `delta seqs not contiguous from 0: ${JSON.stringify(seqs)}`))
}))

test('NIP-59: a prompt gift-wrapped by nostr-tools is answered with wraps nostr-tools opens', () => withConn(async (conn) => {
  const client = new Client()
  const inner = {
    kind: KIND.prompt,
    created_at: now(),
    tags: [['p', agent], ['encryption', 'nip44']],
    content: client.seal({ ver: 1, message: 'calc 2 + 2' }),
  }
  const rumor = nip59.createRumor(inner, client.sk)
  const wrap = nip59.createWrap(nip59.createSeal(rumor, client.sk, agent), agent)
  const sub = conn.subscribe({ kinds: [KIND.giftWrap], '#p': [client.pk] })
  await sub.waitFor((_, s) => s.eose, OK_TIMEOUT_MS, 'EOSE on the gift wrap subscription')
  const ok = await conn.publish(wrap)
  assert.equal(ok.ok, true, `wrap refused by the relay: ${JSON.stringify(ok)}`)
  const opened = []
  const terminal = await sub.waitFor((evs) => {
    while (opened.length < evs.length) {
      const w = evs[opened.length]
      assert.equal(verifyEvent(w), true, `bad wrap signature: ${JSON.stringify(w)}`)
      assert.notEqual(w.pubkey, agent, 'a wrap must not be signed by the agent')
      assert.deepEqual(w.tags, [['p', client.pk]], `a wrap shows only its receiver: ${JSON.stringify(w.tags)}`)
      opened.push(nip59.unwrapEvent(w, client.sk))
    }
    return opened.find((r) => TERMINAL.has(r.kind))
  }, TERMINAL_TIMEOUT_MS, 'a wrapped terminal')
  await sleep(QUIET_MS)
  for (const r of opened) {
    assert.equal(r.pubkey, agent, `rumor not authored by the agent: ${JSON.stringify(r)}`)
    const roots = r.tags.filter((t) => t[0] === 'e' && t[1] === rumor.id && t[3] === 'root')
    assert.equal(roots.length, 1, `rumor does not name the prompt rumor as its root: ${JSON.stringify(r.tags)}`)
    assert.ok(hasTag(r, 'encryption', 'nip44'), JSON.stringify(r.tags))
  }
  const calls = opened.filter((r) => r.kind === KIND.toolCall).map((r) => client.open(r))
  assert.deepEqual(calls.map((c) => c.phase), ['start', 'result'], JSON.stringify(calls))
  for (const c of calls) {
    assert.equal(c.name, 'calculator')
    assert.equal(c.arguments, undefined, `privacy-first: no tool arguments: ${JSON.stringify(c)}`)
    assert.equal(c.output, undefined, `privacy-first: no tool output: ${JSON.stringify(c)}`)
  }
  assert.equal(terminal.kind, KIND.response, JSON.stringify(terminal))
  assert.equal(client.open(terminal).text, '4')
  assert.equal(opened.filter((r) => TERMINAL.has(r.kind)).length, 1, 'exactly one terminal')
}))

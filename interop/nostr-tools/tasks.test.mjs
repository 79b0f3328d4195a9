// Interop: a nostr-tools client (events built, signed and verified by nostr-tools) gives the agentwire daemon
// a long task in a room, answers the agent's tiny agent question card, and cancels a task, against the
// daemon's embedded relay with `[[rooms]]` and `[tasks]` from a config file.
//
//   node --test interop/nostr-tools/      (after `cargo build -p agentwire` and `npm ci`)

import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { finalizeEvent, generateSecretKey, getPublicKey, verifyEvent } from 'nostr-tools'
import { Daemon, OK_TIMEOUT_MS, RelayConn, sleep } from './lib.mjs'

// Bounds, each with its reason.
const CARD_TIMEOUT_MS = 15_000 // the demo agent starts and asks in well under a second
const QUIET_MS = 1_500 // after a terminal (or a silent cancel), how long we watch for a forbidden one

const ROOM = 'lab'
const KIND = { chat: 9, reply: 12, comment: 1111, request: 43001, accepted: 43002, progress: 43003, result: 43004, cancel: 43005, error: 43006 }

const alice = generateSecretKey()
const alicePk = getPublicKey(alice)
let daemon
let agent
let configDir

const now = () => Math.floor(Date.now() / 1000)
const tagValues = (e, name) => e.tags.filter((t) => t[0] === name).map((t) => t[1])
const names = (e, id) => e.tags.some((t) => t[1] === id)

function sign(kind, content, tags) {
  return finalizeEvent({ kind, content, tags, created_at: now() }, alice)
}

before(async () => {
  configDir = fs.mkdtempSync(path.join(os.tmpdir(), 'agentwire-interop-tasks-'))
  const config = path.join(configDir, 'agentwire.toml')
  fs.writeFileSync(config, [
    '[[rooms]]', `id = "${ROOM}"`, 'closed = true', `members = ["${alicePk}"]`, '',
    '[tasks]', `watch = ["${ROOM}"]`, `allowed = ["${alicePk}"]`, '',
  ].join('\n'))
  daemon = await Daemon.start(['--config', config])
  agent = daemon.ready.agent_pubkey
  assert.deepEqual(daemon.ready.tasks.watch, [ROOM], JSON.stringify(daemon.ready))
})

after(async () => {
  if (daemon) await daemon.stop()
  if (configDir) fs.rmSync(configDir, { recursive: true, force: true })
})

async function withRoom(fn) {
  const conn = await RelayConn.connect(daemon.ready.relay)
  const sub = conn.subscribe({ kinds: [KIND.chat, KIND.reply, 43002, 43003, 43004, 43005, 43006], '#h': [ROOM] })
  await sub.waitFor((_, s) => s.eose, OK_TIMEOUT_MS, 'EOSE on the room')
  try {
    return await fn(conn, sub)
  } catch (e) {
    e.message += `\n${daemon.diagnostics()}`
    throw e
  } finally {
    await conn.close()
  }
}

async function publish(conn, event) {
  const ok = await conn.publish(event)
  assert.equal(ok.ok, true, `relay refused kind ${event.kind}: ${ok.message}`)
  return event
}

test('a task whose question card nostr-tools answers ends in one result linking the full reply', () => withRoom(async (conn, sub) => {
  const request = await publish(conn, sign(KIND.request, 'ask Deploy where? | staging | production', [['p', agent], ['h', ROOM]]))
  const card = await sub.waitFor((evs) => evs.find((e) => e.kind === KIND.chat && tagValues(e, 'tinyagent')[0] === '1'),
    CARD_TIMEOUT_MS, 'the question card')
  assert.ok(verifyEvent(card), 'nostr-tools verifies the card')
  assert.equal(card.pubkey, agent)
  assert.deepEqual(tagValues(card, 'request'), ['question'])
  assert.deepEqual(tagValues(card, 'interaction'), ['question'])
  assert.deepEqual(tagValues(card, 'selection'), ['single'])
  assert.deepEqual(card.tags.filter((t) => t[0] === 'option').map((t) => t.slice(1)), [['staging', 'staging'], ['production', 'production']])
  assert.deepEqual(tagValues(card, 'p'), [alicePk], 'the requester is asked')
  assert.ok(Number(tagValues(card, 'expiration')[0]) > now(), 'the card has a window')
  const answerTags = [['E', card.id], ['e', card.id], ['K', '9'], ['k', '9'], ['P', agent], ['p', agent], ['h', ROOM]]
  await publish(conn, sign(KIND.comment, 'production', answerTags))
  const second = await conn.publish(sign(KIND.comment, 'staging', answerTags))
  assert.equal(second.ok, false, 'a second answer does not settle the card')
  assert.match(second.message, /^duplicate:/)

  const result = await sub.waitFor((evs) => evs.find((e) => e.kind === KIND.result && names(e, request.id)), CARD_TIMEOUT_MS, 'the 43004')
  assert.ok(verifyEvent(result))
  assert.equal(result.content, 'production')
  assert.deepEqual(tagValues(result, 'p'), [alicePk])
  assert.deepEqual(tagValues(result, 'h'), [ROOM])
  const linked = tagValues(result, 'e')
  assert.equal(linked[0], request.id, 'the first e names the request')
  const reply = sub.events.find((e) => e.kind === KIND.reply && linked.includes(e.id))
  assert.ok(reply, 'the result links a kind 12 reply')
  assert.equal(reply.content, 'production')
  assert.ok(reply.tags.some((t) => t[0] === 'e' && t[1] === request.id && t[3] === 'root'), 'in the request thread')
  const accepted = sub.events.filter((e) => e.kind === KIND.accepted && names(e, request.id))
  assert.equal(accepted.length, 1, 'one 43002')
  assert.ok(sub.events.indexOf(accepted[0]) < sub.events.indexOf(result), '43002 before the result')
  await sleep(QUIET_MS)
  const terminals = sub.events.filter((e) => (e.kind === KIND.result || e.kind === KIND.error) && names(e, request.id))
  assert.equal(terminals.length, 1, 'exactly one terminal')
}))

test('a 43005 from the requester stops the task and nothing further is published', () => withRoom(async (conn, sub) => {
  const request = await publish(conn, sign(KIND.request, 'sleep 20000', [['p', agent], ['h', ROOM]]))
  await sub.waitFor((evs) => evs.find((e) => e.kind === KIND.accepted && names(e, request.id)), CARD_TIMEOUT_MS, 'the 43002')
  await sub.waitFor((evs) => evs.find((e) => e.kind === KIND.progress && names(e, request.id)), CARD_TIMEOUT_MS, 'a 43003')
  await publish(conn, sign(KIND.cancel, '', [['e', request.id], ['p', agent], ['h', ROOM]]))
  await sleep(QUIET_MS)
  const after = sub.events.filter((e) => (e.kind === KIND.result || e.kind === KIND.error) && names(e, request.id))
  assert.deepEqual(after, [], 'no terminal after the requester cancelled')
}))

// The hub page's script: reads the turn API and its event stream, and the roost supervisor's view, and
// sends what a person does (answer, cancel, reply, stop, respawn, pin, rename, add, drop, assign, ask) to
// the same API any client uses. Every refusal is shown. Text from agents and people is only ever set as
// text (never as HTML). Until the first answers come, each part says it is loading and offers no action:
// an empty list or a button before the data would say something untrue.
"use strict";

const ROOST_POLL_MS = 1000; // how often the roost view is read again
const TICK_MS = 1000; // how often elapsed times move on
const RUNS_PAGE = 25; // runs on one page of the list; older ones are a page further ("Older")
// Runs the page keeps: the server's recent ones (RECENT_TURNS_KEPT, 256) and the live ones beside them.
// Older ones fall off, never those on the page shown or the open run.
const MAX_RUNS = 600;
const MAX_FEED = 200; // feed lines the page keeps

const turns = new Map(); // id -> turn
let turnsLoaded = false; // the turn list has been read once
let roost = null; // the last roost view
let roostRead = false; // the roost view has been read (or refused) once
let roostError = null; // why the last roost read failed
// Paging: page 0 is the newest runs, live; page k > 0 is read from the API with cursors[k] (the cursor the
// page before it ended with), its runs kept live by the stream.
let runsPage = 0;
let pageIds = null; // the ids on page k > 0, in the API's order
let cursors = [null]; // cursors[k]: what reads page k (null: no such page)
let moreOnServer = false; // the server holds older runs than the page has read
let feedAfter = null;
const feed = [];
let openRun = null;
const details = new Map(); // id -> {text, thinking, tools: Map, outcome} of the open run

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k === "on") for (const [ev, f] of Object.entries(v)) e.addEventListener(ev, f);
    else if (v !== undefined && v !== null) e.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c);
  return e;
}

function notice(text) {
  $("notice-text").textContent = text;
  $("notice").hidden = false;
}

async function api(method, path, body) {
  const init = { method, credentials: "same-origin", headers: {} };
  if (body !== undefined) {
    init.headers["content-type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const r = await fetch("/api/v1" + path, init);
  let data = null;
  try { data = await r.json(); } catch (_) { /* no body */ }
  if (!r.ok) throw new Error((data && data.error) || `${method} ${path}: ${r.status}`);
  return data;
}

// Runs `f` (a request); a refusal is shown, never swallowed. Resolves to whether it was taken.
function act(what, f) {
  return f().then(() => { readRoost(); return true; }, (e) => { notice(`${what} refused: ${e.message}`); return false; });
}

// --- turns -------------------------------------------------------------------------------------------

function firstLine(s) { return (s || "").split("\n")[0]; }

// A run's state in the words every client uses: queued, running, waiting (for an answer), then done,
// failed or cancelled (the API's `ended_as`, which the outcome decides).
function shownState(t) {
  if (t.state !== "ended") return t.state;
  if (t.endedAs) return t.endedAs;
  const o = t.outcome;
  if (!o || o.outcome === "result") return "done";
  return o.code === "cancelled" ? "cancelled" : "failed";
}

function fromSummary(s) {
  return {
    id: s.id, agent: s.agent, protocol: s.protocol, requester: s.requester, prompt: firstLine(s.prompt), state: s.state,
    endedAs: s.ended_as, outcome: s.outcome, started: s.started_ms, ended: s.ended_ms, usage: s.usage,
    cursor: s.cursor,
    questionId: s.question, question: null, conversation: s.conversation,
  };
}

// The API's order, newest first: by the turn's place in the server's list (its `cursor`, its accepted
// event's id), so a page ends where the server's next page begins.
function newestFirst(a, b) {
  return (b.cursor ?? -1) - (a.cursor ?? -1) || (b.started || 0) - (a.started || 0);
}

// When a run started, short: the time of day today, else the day and the time (the person's own zone).
// Who asked, as a line shows it: a public key (64 hex digits) by its first 8, anything else whole.
function requesterShown(r) {
  if (!r) return "";
  return /^[0-9a-f]{64}$/.test(r) ? `${r.slice(0, 8)}…` : r;
}

// " · by <requester>" when the turn's requester is known.
function by(t) {
  const r = requesterShown(t.requester);
  return r ? ` · by ${r}` : "";
}

function startedAt(ms) {
  if (!ms) return "";
  const d = new Date(ms);
  const time = d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
  if (d.toDateString() === new Date().toDateString()) return time;
  return `${d.toLocaleDateString([], { month: "short", day: "numeric" })} ${time}`;
}

function elapsed(t) {
  const end = t.ended || Date.now();
  const s = Math.max(0, Math.round((end - (t.started || end)) / 1000));
  return s < 60 ? `${s}s` : `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
}

function tokens(t) {
  const u = t.usage || (t.outcome && t.outcome.usage);
  if (!u || (!u.input_tokens && !u.output_tokens)) return "";
  return `${u.input_tokens} in / ${u.output_tokens} out`;
}

function passes(t) {
  const a = $("filter-agent").value, p = $("filter-protocol").value, s = $("filter-state").value;
  return (!a || t.agent === a) && (!p || t.protocol === p) && (!s || shownState(t) === s);
}

function addOption(select, value) {
  if (![...select.options].some((o) => o.value === value)) select.append(el("option", { value }, value));
}

function renderRuns() {
  const list = $("runs-list");
  const sorted = [...turns.values()].sort(newestFirst);
  for (const t of sorted) {
    if (t.agent) addOption($("filter-agent"), t.agent);
    if (t.protocol) addOption($("filter-protocol"), t.protocol);
  }
  const matching = sorted.filter(passes);
  const shown = runsPage === 0 ? matching.slice(0, RUNS_PAGE)
    : pageIds.map((id) => turns.get(id)).filter((t) => t);
  const keep = new Set(shown.map((t) => t.id));
  for (const li of [...list.children]) if (!keep.has(li.dataset.id)) li.remove();
  shown.forEach((t, i) => {
    let li = list.querySelector(`li[data-id="${CSS.escape(t.id)}"]`);
    if (!li) {
      li = el("li", { "data-id": t.id, class: "run" });
      const line = el("div", { class: "run-line", on: { click: () => openTurn(t.id) } },
        el("time", { class: "started muted" }), el("span", { class: "state" }), el("strong", { class: "agent" }),
        el("span", { class: "protocol muted" }), el("span", { class: "prompt" }), el("span", { class: "elapsed muted" }),
        el("span", { class: "tokens muted" }));
      const cancel = el("button", { type: "button", class: "cancel", on: { click: (e) => { e.stopPropagation(); cancelTurn(t.id); } } }, "Cancel");
      li.append(line, cancel);
    }
    const st = shownState(t);
    const badge = li.querySelector(".state");
    badge.textContent = st;
    badge.className = `state ${st}`;
    li.dataset.state = st;
    const started = li.querySelector(".started");
    started.textContent = startedAt(t.started);
    if (t.started) {
      started.dateTime = new Date(t.started).toISOString();
      started.title = new Date(t.started).toLocaleString();
    }
    li.querySelector(".agent").textContent = t.agent;
    li.querySelector(".protocol").textContent = t.protocol;
    li.querySelector(".protocol").title = t.requester ? `by ${t.requester}` : "";
    li.querySelector(".prompt").textContent = t.prompt;
    li.querySelector(".elapsed").textContent = elapsed(t);
    li.querySelector(".tokens").textContent = tokens(t);
    li.querySelector(".cancel").hidden = !["running", "waiting", "queued"].includes(st);
    if (list.children[i] !== li) list.insertBefore(li, list.children[i] || null);
  });
  $("runs-loading").hidden = turnsLoaded;
  $("runs-empty").hidden = !turnsLoaded || shown.length > 0;
  const older = runsPage === 0 ? matching.length > RUNS_PAGE || moreOnServer : cursors[runsPage + 1] !== null;
  $("runs-pages").hidden = !turnsLoaded || (runsPage === 0 && !older);
  $("runs-newer").hidden = runsPage === 0;
  $("runs-older").hidden = !older;
  $("runs-page").textContent = `Page ${runsPage + 1}`;
}

// The runs list's filters as the API's query.
function filterQuery() {
  const q = [];
  for (const [k, id] of [["agent", "filter-agent"], ["protocol", "filter-protocol"], ["state", "filter-state"]]) {
    if ($(id).value) q.push(`${k}=${encodeURIComponent($(id).value)}`);
  }
  return q.join("&");
}

// Shows page `k` of the runs (0: the newest, live); a page further back is read from the API.
async function showPage(k) {
  if (k <= 0) {
    runsPage = 0;
    pageIds = null;
    render();
    return;
  }
  const f = filterQuery();
  if (k === 1) {
    // Where page 0 ends, as the server has it now.
    const first = await api("GET", `/turns?limit=${RUNS_PAGE}${f ? "&" + f : ""}`);
    cursors = [null, first.cursor];
  }
  const cursor = cursors[k];
  if (cursor === null || cursor === undefined) {
    // Nothing older after all (the filters leave none): the button goes.
    if (k === 1) { moreOnServer = false; render(); }
    return;
  }
  const page = await api("GET", `/turns?limit=${RUNS_PAGE}&cursor=${cursor}${f ? "&" + f : ""}`);
  for (const s of page.turns) turns.set(s.id, Object.assign(turns.get(s.id) || {}, fromSummary(s)));
  cursors[k + 1] = page.cursor;
  cursors.length = k + 2;
  runsPage = k;
  pageIds = page.turns.map((s) => s.id);
  render();
  $("runs").scrollIntoView({ block: "start" });
}

function cancelTurn(id) {
  act("Cancel", () => api("POST", `/turns/${encodeURIComponent(id)}/cancel`, {}));
}

function answerTurn(id, choices, text) {
  const body = { choices };
  if (text !== undefined) body.text = text;
  act("The answer", () => api("POST", `/turns/${encodeURIComponent(id)}/answer`, body));
}

function trim() {
  if (turns.size <= MAX_RUNS) return;
  const shown = new Set(pageIds || []);
  const old = [...turns.values()].filter((t) => t.state === "ended" && t.id !== openRun && !shown.has(t.id))
    .sort((a, b) => newestFirst(b, a));
  for (const t of old.slice(0, turns.size - MAX_RUNS)) turns.delete(t.id);
  moreOnServer = true;
}

// One event of the stream (or of a turn's history).
function apply(ev) {
  let t = turns.get(ev.turn);
  if (ev.type === "accepted") {
    if (!t) {
      t = { id: ev.turn, started: ev.at_ms, cursor: ev.id, usage: null, question: null, questionId: null };
      turns.set(ev.turn, t);
    }
    Object.assign(t, { agent: ev.agent, protocol: ev.protocol, requester: ev.requester, prompt: firstLine(ev.prompt),
      conversation: ev.conversation, state: ev.queued ? "queued" : "running" });
    trim();
  }
  if (!t) return;
  const d = details.get(ev.turn);
  switch (ev.type) {
    case "event": {
      const e = ev.event;
      if (t.state === "queued") t.state = "running";
      if (d && d.loading) d.pending.push(ev);
      else if (d && !(ev.id <= d.lastId)) {
        d.lastId = ev.id;
        if (e.type === "text") d.text += e.text;
        else if (e.type === "thinking") d.thinking += e.text;
        // A tool's lines as the server words them for every front and every client, as `ask` prints
        // them: `[tool calculator start 6*7]`, then `[tool calculator result 42]`.
        else if (e.type === "tool_call") d.tools.set(`${e.call_id}:start`, ev.line || `[tool ${e.name} start]`);
        else if (e.type === "tool_result") d.tools.set(`${e.call_id}:end`, ev.line || `[tool ${e.name} result]`);
        else if (e.type === "warning") d.tools.set(`w${ev.seq}`, `warning: ${e.text}`);
      }
      break;
    }
    case "question":
      t.state = "waiting";
      t.questionId = ev.question_id;
      t.question = ev;
      break;
    case "question_closed":
      if (t.questionId === ev.question_id) { t.questionId = null; t.question = null; }
      if (t.state === "waiting") t.state = "running";
      break;
    case "outcome":
      t.state = "ended";
      t.endedAs = ev.ended_as;
      t.outcome = ev.outcome;
      t.usage = ev.outcome.usage;
      t.ended = ev.at_ms;
      t.questionId = null;
      t.question = null;
      if (d) {
        d.outcome = ev.outcome;
        // The answer as the agent gave it whole (what streamed in was its draft), as a person reads it.
        if (ev.outcome.outcome === "result") d.text = ev.outcome.text_shown ?? ev.outcome.text;
      }
      break;
  }
}

let queued = false;
function render() {
  if (queued) return;
  queued = true;
  requestAnimationFrame(() => {
    queued = false;
    renderRuns();
    renderNeeds();
    renderRun();
  });
}

async function loadTurns() {
  // The newest turns, and every turn that waits for a person or still runs, however old.
  const pages = await Promise.all(["/turns?limit=100", "/turns?state=waiting&limit=500",
    "/turns?state=running&limit=500", "/turns?state=queued&limit=500"].map((q) => api("GET", q)));
  moreOnServer = pages[0].cursor !== null;
  for (const s of pages.flatMap((p) => p.turns)) {
    const t = turns.get(s.id);
    const fresh = fromSummary(s);
    if (t && t.question && t.questionId === fresh.questionId) fresh.question = t.question;
    turns.set(s.id, Object.assign(t || {}, fresh));
  }
  // The open questions' options: from each waiting turn's own events.
  for (const t of turns.values()) {
    if (t.questionId && !t.question) {
      const one = await api("GET", `/turns/${encodeURIComponent(t.id)}`);
      const q = one.events.filter((e) => e.type === "question" && e.question_id === t.questionId).pop();
      if (q) t.question = q;
    }
  }
  turnsLoaded = true;
  render();
}

function connect() {
  const source = new EventSource("/api/v1/events");
  source.onopen = () => { $("link").textContent = "live"; loadTurns().catch((e) => notice(e.message)); };
  source.onerror = () => { $("link").textContent = "reconnecting…"; };
  for (const name of ["accepted", "event", "question", "question_closed", "outcome"]) {
    source.addEventListener(name, (m) => { apply(JSON.parse(m.data)); render(); });
  }
  source.addEventListener("missed", () => loadTurns().catch((e) => notice(e.message)));
}

// --- one run ------------------------------------------------------------------------------------------

async function openTurn(id) {
  if (openRun) details.delete(openRun);
  openRun = id;
  // Live events that come while the history loads wait in `pending`; each event is applied once, by its
  // hub id, whether the history or the stream brought it.
  const d = { text: "", thinking: "", tools: new Map(), outcome: null, loading: true, pending: [], lastId: -1 };
  details.set(id, d);
  $("run").hidden = false;
  renderRun();
  // The run opens below the list: brought into view, or a click would seem to do nothing.
  const box = $("run").getBoundingClientRect();
  if (box.top < 0 || box.top > window.innerHeight - 80) $("run").scrollIntoView({ block: "start" });
  render();
  try {
    const one = await api("GET", `/turns/${encodeURIComponent(id)}`);
    d.loading = false;
    for (const e of one.events) if (e.type === "event") apply(e);
    for (const e of d.pending.splice(0)) apply(e);
    const saved = turns.get(id);
    if (saved && one.outcome) saved.outcome = one.outcome;
    if (one.outcome) d.outcome = one.outcome;
    if (one.outcome && one.outcome.outcome === "result") d.text = one.outcome.text_shown ?? one.outcome.text;
  } catch (e) {
    d.loading = false;
    notice(e.message);
  }
  render();
}

function renderRun() {
  const box = $("run");
  if (!openRun) { box.hidden = true; return; }
  const t = turns.get(openRun);
  const d = details.get(openRun);
  if (!t || !d) return;
  $("run-title").textContent = t.prompt || t.id;
  const started = t.started ? `started ${new Date(t.started).toLocaleString()} · ` : "";
  $("run-meta").textContent = `${t.agent} · ${t.protocol}${by(t)} · ${shownState(t)} · ${started}${elapsed(t)} ${tokens(t)}`;
  $("run-text").textContent = d.text;
  $("run-thinking").textContent = d.thinking;
  $("run-thinking-box").hidden = !d.thinking;
  const tools = $("run-tools");
  tools.replaceChildren(...[...d.tools.values()].map((s) => el("li", {}, s)));
  const o = d.outcome || t.outcome;
  $("run-outcome").textContent = !o ? "" : o.outcome === "result"
    ? `done (${o.stop_reason})` : `${shownState(t)}: ${o.code}: ${o.message}`;
}

// --- needs you -----------------------------------------------------------------------------------------

function questionCard(t) {
  const q = t.question;
  const key = `q:${t.id}:${t.questionId}`;
  const li = el("li", { "data-key": key, class: "question" },
    el("div", { class: "muted" }, `${t.agent} · ${t.protocol} · ${t.prompt}`),
    el("p", { class: "ask" }, q.text || ""));
  const buttons = el("div", { class: "actions" });
  if (q.multiple) {
    // Several may be chosen: a box per option, and Send with what is ticked (and the text, if taken).
    for (const o of q.options || []) {
      buttons.append(el("label", { class: "choice-box" },
        el("input", { type: "checkbox", class: "option-box", value: o.id }), " ", o.label));
    }
    li.append(buttons);
    const input = q.takes_text ? el("input", { class: "answer-text", placeholder: "And in your words (optional)", maxlength: "4000" }) : null;
    const send = el("button", { type: "button", class: "primary send", on: { click: () => {
      const picked = [...li.querySelectorAll(".option-box:checked")].map((b) => b.value);
      const text = input && input.value.trim() ? input.value : undefined;
      if (!picked.length && text === undefined) { notice("Choose at least one"); return; }
      answerTurn(t.id, picked, text);
    } } }, "Send");
    li.append(el("div", { class: "inline" }, input, send));
    return li;
  }
  for (const o of q.options || []) {
    buttons.append(el("button", { type: "button", class: "option", "data-option": o.id,
      on: { click: () => answerTurn(t.id, [o.id]) } }, o.label));
  }
  li.append(buttons);
  if (q.takes_text) {
    const input = el("input", { class: "answer-text", placeholder: "Your answer", maxlength: "4000" });
    const send = el("button", { type: "button", class: "primary send",
      on: { click: () => input.value.trim() ? answerTurn(t.id, [], input.value) : notice("Type an answer first") } }, "Send");
    li.append(el("div", { class: "inline" }, input, send));
  }
  return li;
}

function sessionKey(r) {
  return `s:${r.id}:${r.question || ""}:${(r.choices || []).join("|")}`;
}

function sessionCard(r) {
  const li = el("li", { "data-key": sessionKey(r), class: "blocked" },
    el("div", { class: "muted" }, `session ${r.name} · ${r.profile}`),
    el("p", { class: "ask" }, r.question || r.waitingFor || "This session waits for you."));
  const buttons = el("div", { class: "actions" });
  for (const c of r.choices || []) {
    buttons.append(el("button", { type: "button", class: "choice",
      on: { click: () => roostOp("The reply", "reply", { id: r.id, text: c }) } }, c));
  }
  li.append(buttons);
  const suggestion = el("div", { class: "inline suggestion" }, el("span", {}),
    el("button", { type: "button", class: "primary accept",
      on: { click: () => roostOp("Accept", "reply", { id: r.id, text: li.dataset.suggested }) } }, "Accept"));
  li.append(suggestion);
  const input = el("input", { class: "answer-text", placeholder: "Your reply", maxlength: "4000" });
  li.append(el("div", { class: "inline" }, input, el("button", { type: "button", class: "primary send",
    on: { click: () => input.value.trim() ? roostOp("The reply", "reply", { id: r.id, text: input.value }) : notice("Type a reply first") } }, "Send")));
  return li;
}

function renderNeeds() {
  const list = $("needs-list");
  const cards = [];
  const waitingConversations = new Set();
  for (const t of turns.values()) {
    if (t.state === "waiting" && t.question) {
      cards.push([`q:${t.id}:${t.questionId}`, () => questionCard(t)]);
      if (t.conversation) waitingConversations.add(t.conversation);
    }
  }
  for (const r of (roost && roost.rows) || []) {
    // A hosted session's question is its turn's (its conversation is `roost:<id>`), answered above.
    const asked = waitingConversations.has(r.conversation) || waitingConversations.has(`roost:${r.id}`);
    if (r.state === "blocked" && !asked) {
      cards.push([sessionKey(r), () => sessionCard(r), r]);
    }
  }
  // Nothing is said to wait before both the turns and the sessions have been read.
  const known = turnsLoaded && roostRead;
  const keys = new Set(cards.map(([k]) => k));
  for (const li of [...list.children]) if (!keys.has(li.dataset.key)) li.remove();
  for (const [k, make, row] of cards) {
    let li = [...list.children].find((c) => c.dataset.key === k);
    if (!li) { li = make(); list.append(li); }
    if (row) {
      // The concierge's suggestion changes in place: a reply being typed stays.
      const s = row.suggested;
      li.dataset.suggested = s ? s.text : "";
      li.querySelector(".suggestion").hidden = !s;
      li.querySelector(".suggestion span").textContent = s ? `Concierge suggests: ${s.text}` : "";
    }
  }
  $("needs-loading").hidden = known || cards.length > 0;
  $("needs-empty").hidden = !known || cards.length > 0;
}

// A roost part's "loading" line: gone once the view is read, the reason when it could not be.
function roostLoading(id) {
  $(id).hidden = roostRead && !roostError;
  if (roostError) $(id).textContent = `Unavailable: ${roostError}`;
}

// --- roost: sessions, tasks, concierge, feed -----------------------------------------------------------

function roostOp(what, op, args) {
  return act(what, () => api("POST", `/roost/${op}`, args));
}

function keyed(list, key, make) {
  let li = [...list.children].find((c) => c.dataset.key === key);
  if (!li) { li = make(); li.dataset.key = key; list.append(li); }
  return li;
}

function prune(list, keys) {
  for (const li of [...list.children]) if (!keys.has(li.dataset.key)) li.remove();
}

function renderSessions() {
  const list = $("sessions-list");
  const rows = [...((roost && roost.rows) || [])].sort((a, b) =>
    (b.pinned ? 1 : 0) - (a.pinned ? 1 : 0) || (a.order || 0) - (b.order || 0) || a.name.localeCompare(b.name));
  rows.forEach((r, i) => {
    const li = keyed(list, r.id, () => {
      const input = el("input", { class: "session-text", placeholder: "Text to send, or a new name", maxlength: "4000" });
      const get = () => input.value;
      return el("li", { class: "session" },
        el("div", { class: "run-line" }, el("span", { class: "state" }), el("strong", { class: "name" }),
          el("span", { class: "pin muted" }), el("span", { class: "summary" })),
        el("div", { class: "run-line links muted" }),
        el("div", { class: "inline" }, input,
          el("button", { type: "button", class: "reply", on: { click: () => roostOp("The reply", "reply", { id: r.id, text: get() })
            .then((ok) => { if (ok) input.value = ""; }) } }, "Reply"),
          el("button", { type: "button", class: "rename", on: { click: () => roostOp("Rename", "rename", { id: r.id, name: get() }) } }, "Rename")),
        el("div", { class: "actions" },
          el("button", { type: "button", class: "stop", on: { click: () => roostOp("Stop", "stop", { id: r.id }) } }, "Stop"),
          el("button", { type: "button", class: "respawn", on: { click: () => roostOp("Respawn", "respawn", { id: r.id }) } }, "Respawn"),
          el("button", { type: "button", class: "pin-button" })));
    });
    const badge = li.querySelector(".state");
    badge.textContent = r.state;
    badge.className = `state ${r.state}`;
    li.dataset.state = r.state;
    li.querySelector(".name").textContent = r.name;
    li.querySelector(".pin").textContent = r.pinned ? "pinned" : "";
    li.querySelector(".summary").textContent = r.summary || r.status || "";
    sessionLinks(li.querySelector(".links"), r);
    const pin = li.querySelector(".pin-button");
    pin.textContent = r.pinned ? "Unpin" : "Pin";
    pin.onclick = () => roostOp("Pin", "pin", { id: r.id, pinned: !r.pinned });
    if (list.children[i] !== li) list.insertBefore(li, list.children[i] || null);
  });
  prune(list, new Set(rows.map((r) => r.id)));
  roostLoading("sessions-loading");
  $("sessions-empty").hidden = !roost || rows.length > 0;
}

// The pull requests a session's agent reported, as links (http and https only: the daemon refuses other
// schemes, and a link here is never anything else), and where the session is reached, as text.
function sessionLinks(box, r) {
  const links = (r.prLinks || []).filter((u) => /^https?:\/\//i.test(u));
  const key = JSON.stringify([links, r.remoteAt || null]);
  if (box.dataset.key === key) return;
  box.dataset.key = key;
  box.replaceChildren(...links.map((u) => {
    const n = /\/(?:pull|pulls|merge_requests)\/(\d+)/.exec(u);
    return el("a", { class: "pr", href: u, target: "_blank", rel: "noopener noreferrer", title: u }, n ? `PR #${n[1]}` : u);
  }));
  if (r.remoteAt) box.append(el("span", { class: "remote" }, `remote at ${r.remoteAt}`));
  box.hidden = !links.length && !r.remoteAt;
}

function renderTasks() {
  const list = $("tasks-list");
  const tasks = (roost && roost.tasks) || [];
  for (const t of tasks) {
    const li = keyed(list, String(t.id), () => {
      const to = el("input", { class: "assign-to", placeholder: "session", size: "10" });
      return el("li", { class: "task" },
        el("div", { class: "run-line" }, el("span", { class: "muted" }, `#${t.id}`), el("span", { class: "state" }),
          el("span", { class: "title" }), el("span", { class: "owner muted" }), el("span", { class: "after muted" })),
        el("div", { class: "inline" }, to,
          el("button", { type: "button", class: "assign", on: { click: () => roostOp("Assign", "task", { action: "assign", id: t.id, to: to.value }) } }, "Assign"),
          el("button", { type: "button", class: "drop", on: { click: () => roostOp("Drop", "task", { action: "drop", id: t.id }) } }, "Drop")));
    });
    const badge = li.querySelector(".state");
    badge.textContent = t.state;
    badge.className = `state ${t.state}`;
    li.querySelector(".title").textContent = t.title;
    li.querySelector(".owner").textContent = t.owner ? `owner ${t.owner.name}` : "";
    li.querySelector(".after").textContent = t.after && t.after.length ? `after ${t.after.map((a) => "#" + a).join(", ")}` : "";
  }
  prune(list, new Set(tasks.map((t) => String(t.id))));
  roostLoading("tasks-loading");
  $("tasks-empty").hidden = !roost || tasks.length > 0;
  $("task-form").hidden = !roost;
}

function renderConcierge() {
  const c = roost && roost.concierge;
  $("concierge-controls").hidden = !c;
  $("concierge-status").classList.toggle("loading", !c);
  if (!c) {
    if (roostError) $("concierge-status").textContent = `Unavailable: ${roostError}`;
    return;
  }
  const policy = c.policy || {};
  $("concierge-status").textContent = c.on
    ? `on · ${c.state || "starting"} · answers ${policy.answer}${policy.act ? " · may act" : ""} · ${c.answered || 0} answered`
    : "off (agentwire concierge on <profile>)";
  $("concierge-toggle").textContent = c.on ? "Turn off" : "Turn on";
  $("concierge-toggle").dataset.on = c.on ? "true" : "false";
  const select = $("concierge-answer");
  if (document.activeElement !== select && policy.answer) select.value = policy.answer;
  const said = $("concierge-said");
  // What it said: its `concierge-say` items (info, need, answer), newest last.
  const lines = feed.filter((e) => e.what === "concierge" && ["info", "need", "answer"].includes(e.why)).slice(-10);
  said.replaceChildren(...lines.map((e) => el("li", { class: `said ${e.why}` }, el("strong", {}, e.why), " ", e.text)));
  const orders = $("orders-list");
  for (const o of (roost.orders || [])) {
    const li = keyed(orders, String(o.id), () => el("li", { class: "order" }, el("span", { class: "text" }), " ",
      el("span", { class: "when muted" }), " ",
      el("button", { type: "button", class: "rm", on: { click: () => roostOp("Remove order", "concierge-order", { action: "rm", id: o.id }) } }, "Remove")));
    li.querySelector(".text").textContent = `#${o.id} ${o.text}`;
    li.querySelector(".when").textContent = o.when ? JSON.stringify(o.when) : "";
  }
  prune(orders, new Set((roost.orders || []).map((o) => String(o.id))));
}

function renderFeed() {
  const list = $("feed-list");
  list.replaceChildren(...feed.slice(-50).reverse().map((e) =>
    el("li", { "data-seq": String(e.seq) }, el("span", { class: "muted" }, new Date(e.at * 1000).toLocaleTimeString()), " ",
      el("strong", {}, e.what), " ", e.text)));
}

let reading = null;
// Reads the roost view; one read at a time (a read asked for meanwhile waits for it, then reads again).
function readRoost() {
  if (reading) return reading.then(() => readRoost());
  reading = readRoostOnce().finally(() => { reading = null; });
  return reading;
}

async function readRoostOnce() {
  const q = feedAfter === null ? "" : `?after=${feedAfter}`;
  let view;
  try {
    view = await api("GET", `/roost${q}`);
  } catch (e) {
    $("roost-link").textContent = `roost: ${e.message}`;
    roostRead = true;
    roostError = e.message;
    renderSessions();
    renderTasks();
    renderConcierge();
    renderNeeds();
    return;
  }
  $("roost-link").textContent = "";
  roost = view;
  roostRead = true;
  roostError = null;
  for (const e of view.events || []) {
    if (feedAfter !== null && e.seq <= feedAfter) continue;
    feed.push(e);
    feedAfter = Math.max(feedAfter || 0, e.seq);
  }
  feed.splice(0, Math.max(0, feed.length - MAX_FEED));
  renderSessions();
  renderTasks();
  renderConcierge();
  renderFeed();
  renderNeeds();
}

// --- start ----------------------------------------------------------------------------------------------

function onSubmit(id, f) {
  $(id).addEventListener("submit", (e) => { e.preventDefault(); f(); });
}

function start() {
  $("notice-close").addEventListener("click", () => { $("notice").hidden = true; });
  $("run-close").addEventListener("click", () => {
    const row = openRun && $("runs-list").querySelector(`li[data-id="${CSS.escape(openRun)}"]`);
    details.delete(openRun);
    openRun = null;
    $("run").hidden = true;
    render();
    // Back to the run that was open, in its list.
    if (row) row.scrollIntoView({ block: "nearest" });
  });
  for (const f of ["filter-agent", "filter-protocol", "filter-state"]) {
    $(f).addEventListener("change", () => showPage(0));
  }
  $("runs-older").addEventListener("click", () => showPage(runsPage + 1).catch((e) => notice(e.message)));
  $("runs-newer").addEventListener("click", () => showPage(runsPage - 1).catch((e) => notice(e.message)));
  onSubmit("task-form", () => {
    const after = $("task-after").value.split(/[ ,#]+/).filter(Boolean).map(Number);
    roostOp("The task", "task", { action: "add", title: $("task-title").value, after })
      .then((ok) => { if (ok) { $("task-title").value = ""; $("task-after").value = ""; } });
  });
  onSubmit("concierge-form", () => roostOp("Ask", "concierge-ask", { text: $("concierge-text").value })
    .then((ok) => { if (ok) $("concierge-text").value = ""; }));
  onSubmit("order-form", () => {
    const args = { action: "add", text: $("order-text").value };
    if ($("order-when").value) args.when = $("order-when").value;
    roostOp("The order", "concierge-order", args).then((ok) => { if (ok) $("order-text").value = ""; });
  });
  $("concierge-answer").addEventListener("change", (e) =>
    roostOp("The policy", "concierge", { action: "answer", answer: e.target.value }));
  $("concierge-undo").addEventListener("click", () => roostOp("Undo", "concierge", { action: "undo" }));
  $("concierge-toggle").addEventListener("click", (e) =>
    roostOp("The concierge", "concierge", { action: e.target.dataset.on === "true" ? "off" : "on" }));
  connect();
  readRoost();
  setInterval(readRoost, ROOST_POLL_MS);
  setInterval(render, TICK_MS);
}

start();

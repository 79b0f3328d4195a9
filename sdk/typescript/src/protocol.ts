// The roost protocol's shapes that controllers and agents share: rows, feed events, peers, peer items, the
// concierge's ops (M44-M46) and the task board (M43, M47, M49), as `agentwire serve` answers them.

/** A job's row (`rows`, `subscribe`'s `row` events). */
export interface Row {
  id: string;
  name: string;
  profile: string;
  state: string;
  status: string | null;
  waitingFor: string | null;
  summary: string | null;
  question: string | null;
  choices: string[];
  tool: string | null;
  error: string | null;
  model: string | null;
  /** The pull requests its agent reported (`http(s)` URLs; `[]` when none). */
  prLinks: string[];
  /** Where its session can be reached from elsewhere, as its agent reported it. */
  remoteAt: string | null;
  capabilities: string[];
  connected: boolean;
  pending: number;
  reports: number;
  conversation: string | null;
  pinned: boolean;
  order: number | null;
  [field: string]: unknown;
}

/** One entry of the events feed (`events`). */
export interface FeedEvent {
  seq: number;
  at: number;
  id: string;
  what: string;
  text: string;
  /** The session that caused it, by name and id. */
  who?: string;
  whoId?: string;
  /** A `task` event's change (add, claim, release, done, drop, assign); a `concierge` event's (info, need,
   * answer, suggest, on, off, policy, undo, order, order-kept, order-dropped). */
  why?: string;
}

/** A session, as `peers` lists it. */
export interface Peer {
  id: string;
  name: string;
  profile: string | null;
  role: string | null;
  state: string;
  status: string | null;
  summary: string | null;
  parent: string | null;
  self: boolean;
}

/** What `send` did. */
export interface SendOutcome {
  outcome: "delivered" | "queued" | "started" | "duplicate";
  id: string;
}

/** What `watch` answered. */
export interface WatchResult {
  id: string;
  name: string;
  when: "idle" | "ended";
  fired: boolean;
}

/** The kinds of peer item a `deliver` event carries (`digest`: the concierge's wake-up, from
 * `{id: "", name: "roost"}`, its text in `<roost-digest>`). */
export type ItemKind = "message" | "report" | "notice" | "digest";
/** What the sender of a peer item is to its receiver. */
export type Relation = "parent" | "child" | "sibling" | "peer";

/** A task on the board. */
export interface BoardTask {
  id: number;
  title: string;
  detail: string | null;
  state: "open" | "claimed" | "done" | "dropped";
  after: number[];
  by: { who: string; whoId?: string };
  at: number;
  owner: { id: string; name: string } | null;
  claimedAt: number | null;
  doneAt: number | null;
  result: string | null;
  assigned: { id: string; name: string; at: number } | null;
}

/** What every `task` action answers. */
export interface BoardResult {
  tasks: BoardTask[];
  task?: BoardTask | null;
  /** `assign`: how the message reached the session. */
  sent?: "delivered" | "queued" | "started";
}

/** The counts subscribed controllers are pushed (`{"event": "board", ...}`). */
export interface BoardCounts {
  open: number;
  claimed: number;
  blocked: number;
  done: number;
}

/** What the concierge tells the user (`concierge-say`). */
export type SayKind = "info" | "need" | "answer";

/** What the concierge may do without asking (`concierge-policy`). */
export interface ConciergePolicy {
  /** When it may answer a waiting session for the user (`concierge-reply`). */
  answer: "never" | "routine" | "always";
  /** Whether it may stop, respawn and dispatch (`concierge-act`). */
  act: boolean;
}

/** An answer the concierge suggested for a waiting session: the row's `suggested`. */
export interface Suggestion {
  text: string;
  why: string | null;
  at: number;
}

/** What a reply answers (`reply`, `concierge-reply`): saved, as reply `seq` of its session. */
export interface ReplySaved {
  saved: boolean;
  seq: number;
  /** A resent request id: taken once already. */
  duplicate?: boolean;
  [field: string]: unknown;
}

/** What `concierge-suggest` answers. */
export interface SuggestResult {
  id: string;
  suggested: Suggestion;
}

/** A standing order (M46). */
export interface StandingOrder {
  id: number;
  text: string;
  /** A schedule (`every 30m`, `daily 18:00`, `weekdays 09:00`, `cron "…"`), or null. */
  when: string | null;
  by: "user" | "concierge";
  at: number;
  lastAt: number | null;
  nextAt: number | null;
  count: number;
}

/** What every `concierge-order` action answers. */
export interface OrdersResult {
  orders: StandingOrder[];
  /** `add` and `applied`: the order. */
  order?: StandingOrder;
}

// The turnkey web UI: sign-in, the session list, and one open session's chat, all through the
// public /v1 API. Events are shown once each, in seq order; see SessionView.open for how the
// transcript and the live events are joined without a gap or a repeat.
import { Api, ApiError } from "./api.js";
import { follow } from "./events.js";
import {
  el,
  button,
  TextBlock,
  ToolCard,
  usageText,
  secondsLeft,
  formatDuration,
  formatTime,
  preview,
} from "./render.js";

const TOKEN_KEY = "turnkey.token";
/** Pages of 500 events read backwards at most, to find where a running turn began. */
const BACKFILL_PAGES = 8;
const PAGE = 500;

const $ = (id) => document.getElementById(id);
const ui = {
  signin: $("signin"),
  signinForm: $("signin-form"),
  token: $("token"),
  signinError: $("signin-error"),
  app: $("app"),
  sidebar: $("sidebar"),
  sessions: $("sessions"),
  newSession: $("new-session"),
  signOut: $("sign-out"),
  toggleSessions: $("toggle-sessions"),
  title: $("session-title"),
  state: $("state"),
  usage: $("usage"),
  interrupt: $("interrupt"),
  banners: $("banners"),
  transcript: $("transcript"),
  empty: $("empty"),
  composer: $("composer"),
  input: $("input"),
  send: $("send"),
  chatError: $("chat-error"),
};

let api = null;
/** The open session, or null. */
let view = null;

function showError(node, message) {
  node.textContent = message;
  node.hidden = !message;
  delete node.dataset.source;
}

function describe(e) {
  if (e instanceof ApiError) return e.status ? `${e.message} (${e.code})` : e.message;
  return String(e && e.message ? e.message : e);
}

// ---------- sign-in ----------

function signedOut(message = "") {
  localStorage.removeItem(TOKEN_KEY);
  if (view) view.close();
  view = null;
  api = null;
  ui.app.hidden = true;
  ui.signin.hidden = false;
  showError(ui.signinError, message);
  ui.token.value = "";
  ui.token.focus();
}

function unauthorized() {
  signedOut("Your token is no longer accepted (401 unauthorized). Sign in again.");
}

async function signIn(token) {
  const candidate = new Api(token);
  await candidate.listSessions(1);
  localStorage.setItem(TOKEN_KEY, token);
  api = new Api(token, unauthorized);
  ui.signin.hidden = true;
  ui.app.hidden = false;
  showError(ui.signinError, "");
  await refreshSessions();
  await route();
}

ui.signinForm.addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const token = ui.token.value.trim();
  if (!token) return;
  showError(ui.signinError, "");
  try {
    await signIn(token);
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) {
      showError(
        ui.signinError,
        "That token was not accepted (401 unauthorized). Use the operator token that " +
          "turnkey serve printed (kept in data/operator.token) or an API token.",
      );
    } else {
      showError(ui.signinError, `Could not sign in: ${describe(e)}`);
    }
  }
});

ui.signOut.addEventListener("click", () => signedOut());

// ---------- sessions ----------

async function refreshSessions() {
  if (!api) return;
  let list;
  try {
    list = (await api.listSessions()).sessions;
  } catch (e) {
    showError(ui.chatError, `Could not list sessions: ${describe(e)}`);
    ui.chatError.dataset.source = "sessions";
    return;
  }
  // A failure to list, shown earlier, is over.
  if (ui.chatError.dataset.source === "sessions") showError(ui.chatError, "");
  const current = view ? view.id : null;
  ui.sessions.replaceChildren(
    ...list.map((s) => {
      const link = el(
        "a",
        { href: `#/s/${s.id}`, class: "session-link", "aria-current": s.id === current ? "page" : null },
        el("span", { class: "session-title" }, s.title || "Untitled session"),
        el("span", { class: "session-meta" }, `${s.state === "running" ? "running · " : ""}${formatTime(s.created_at)}`),
      );
      link.addEventListener("click", () => ui.app.classList.remove("show-sessions"));
      return el("li", {}, link);
    }),
  );
}

let refreshTimer = null;
/** Refreshes the session list once within the next second, however often it is asked. */
function refreshSessionsSoon() {
  if (refreshTimer) return;
  refreshTimer = setTimeout(() => {
    refreshTimer = null;
    refreshSessions();
  }, 1000);
}

ui.newSession.addEventListener("click", async () => {
  try {
    const s = await api.createSession();
    location.hash = `#/s/${s.id}`;
    await refreshSessions();
    ui.input.focus();
  } catch (e) {
    showError(ui.chatError, `Could not create a session: ${describe(e)}`);
  }
});

ui.toggleSessions.addEventListener("click", () => {
  const open = ui.app.classList.toggle("show-sessions");
  ui.toggleSessions.setAttribute("aria-expanded", String(open));
});

async function route() {
  if (!api) return;
  const m = /^#\/s\/([0-9a-fA-F-]{36})$/.exec(location.hash);
  const id = m ? m[1] : null;
  if (view && view.id === id) return;
  if (view) view.close();
  view = null;
  showError(ui.chatError, "");
  ui.transcript.replaceChildren();
  ui.banners.replaceChildren();
  ui.empty.hidden = Boolean(id);
  ui.composer.hidden = !id;
  ui.interrupt.disabled = true;
  ui.title.textContent = id ? "Loading…" : "No session open";
  ui.state.textContent = "";
  ui.usage.textContent = "";
  if (!id) return;
  view = new SessionView(api, id);
  try {
    await view.open();
  } catch (e) {
    if (view) showError(ui.chatError, `Could not open the session: ${describe(e)}`);
  }
  await refreshSessions();
}

window.addEventListener("hashchange", route);

// ---------- one session ----------

/** The assistant side of one turn: text blocks and tool cards in order, then a footer. */
class Turn {
  constructor(turnId) {
    this.id = turnId;
    this.body = el("div", { class: "turn-body" });
    this.footer = el("p", { class: "turn-foot", hidden: true });
    this.node = el(
      "li",
      { class: "msg assistant", dataset: { turn: turnId || "" } },
      el("span", { class: "who" }, "assistant"),
      this.body,
      this.footer,
    );
    this.live = null;
  }

  /** The block the next streamed words go into. */
  liveText() {
    if (!this.live) {
      this.live = new TextBlock();
      this.live.node.classList.add("streaming");
      this.body.append(this.live.node);
    }
    return this.live;
  }

  /** A finished text (from the transcript): its own block. */
  addText(text) {
    const b = new TextBlock();
    b.set(text);
    this.body.append(b.node);
    this.live = null;
  }

  addCard(card) {
    // The text before a tool call is done: the model moved on to the call.
    if (this.live) this.live.node.classList.remove("streaming");
    this.body.append(card.node);
    // Text after a tool call starts a new block.
    this.live = null;
  }

  /** The authoritative final answer replaces what was streamed. */
  complete(text) {
    if (this.live) {
      this.live.set(text);
      this.live.node.classList.remove("streaming");
      this.live = null;
    } else if (text) {
      this.addText(text);
    }
  }

  /** Drops the text streamed so far: the attempt that streamed it was cut (`turn.resumed`). */
  discardLive() {
    if (this.live) this.live.node.remove();
    this.live = null;
  }

  note(text, kind = "note") {
    this.body.append(el("p", { class: `turn-note ${kind}` }, text));
  }

  finish(data) {
    if (this.live) this.live.node.classList.remove("streaming");
    this.live = null;
    if (data.result && data.result !== "completed") {
      const why = data.failure_reason && data.failure_reason !== data.result ? `: ${data.failure_reason}` : "";
      const result = data.result.charAt(0).toUpperCase() + data.result.slice(1);
      this.note(`${result}${why}`, "warn");
    } else if (data.stop_reason === "truncated") {
      this.note("Cut off by the output limit", "warn");
    } else if (data.stop_reason === "repeated") {
      this.note("Stopped: the model repeated its earlier answer", "warn");
    }
    const u = data.usage || {};
    const spent = (u.input_tokens || 0) + (u.output_tokens || 0) > 0 || data.cost > 0;
    const usage = spent ? usageText(data.usage, data.cost) : "";
    if (usage) {
      this.footer.textContent = usage;
      this.footer.hidden = false;
    }
  }
}

const BOUNDARY = {
  interrupted: "Interrupted",
  failed: "Failed",
  unknown: "Outcome unknown (the gateway stopped during this turn)",
};

/** What a reader is told where a turn resumed by itself (SPEC R13.9). */
function resumedText(d) {
  const after = d.reason === "shutdown" ? "the server restarted" : "the server stopped mid-answer";
  return `Resumed by itself after ${after} (attempt ${d.attempt || 2}): the answer starts again.`;
}

class SessionView {
  constructor(apiClient, id) {
    this.api = apiClient;
    this.id = id;
    this.turns = new Map();
    this.cards = new Map();
    this.approvals = new Map();
    this.banners = new Map();
    this.messageIds = new Set();
    this.follower = null;
    this.closed = false;
    this.session = null;
    this.deferred = null;
    this.ticker = setInterval(() => this.tick(), 1000);
  }

  close() {
    this.closed = true;
    clearInterval(this.ticker);
    if (this.follower) this.follower.stop();
  }

  /**
   * Renders the transcript, then follows the events after it. The session is read before and
   * after the messages until its last_event_seq holds still, so the transcript matches that
   * seq. A turn still running has shown text that is in no message yet: its rows are left out
   * and its events are replayed from its turn.started instead, so reloading mid-answer shows
   * the whole answer so far, once.
   */
  async open() {
    let session = await this.api.session(this.id);
    let messages = [];
    for (let attempt = 0; attempt < 3; attempt++) {
      messages = (await this.api.messages(this.id)).messages;
      const again = await this.api.session(this.id);
      const stable = again.last_event_seq === session.last_event_seq;
      session = again;
      if (stable) break;
    }
    if (this.closed) return;
    this.session = session;
    const upTo = session.last_event_seq;
    let since = upTo;
    let liveTurn = null;
    if (session.state === "running") {
      const lastUser = [...messages].reverse().find((m) => m.role === "user" && m.turn_id);
      const started = lastUser
        ? await this.findBack(upTo, (e) => e.kind === "turn.started" && e.turn_id === lastUser.turn_id)
        : null;
      if (started) {
        liveTurn = lastUser.turn_id;
        since = started.seq - 1;
      }
    }
    for (const m of messages) {
      if (liveTurn && m.turn_id === liveTurn && m.role !== "user") continue;
      this.renderMessage(m);
    }
    this.showSession(session);
    this.deferred = { upTo, session };
    if (since >= upTo) this.flushDeferred();
    await this.findUnknownTurns(messages, upTo);
    if (this.closed) return;
    this.follower = follow(this.api, this.id, since, {
      onEvent: (e) => this.onEvent(e),
      onStatus: (s) => this.connection(s),
      onStop: (err) => showError(ui.chatError, `Stopped following this session: ${err.message || err.code}`),
    });
    this.scroll(true);
  }

  /** The latest event at or before seq `upTo` that matches, reading pages backwards (bounded). */
  async findBack(upTo, pred) {
    let hi = upTo;
    for (let page = 0; page < BACKFILL_PAGES && hi > 0; page++) {
      const lo = Math.max(0, hi - PAGE);
      const { events } = await this.api.eventsPage(this.id, lo, hi - lo);
      const hit = events.filter((e) => e.seq <= hi).reverse().find(pred);
      if (hit) return hit;
      hi = lo;
    }
    return null;
  }

  /** Questions the session waits on a person for, once the replay has reached the snapshot. */
  flushDeferred() {
    if (!this.deferred) return;
    const { session } = this.deferred;
    this.deferred = null;
    for (const a of session.pending_approvals || []) this.approval(a, null);
    for (const r of session.unknown_tool_runs || []) this.unknownToolRun(r.call_id, r.name);
  }

  /** A retry banner for the latest turns left unknown by a crash, unless retried already. */
  async findUnknownTurns(messages, upTo) {
    const unknown = messages
      .filter((m) => m.display && m.display.boundary && m.display.closed_as === "unknown" && m.turn_id)
      .slice(-3)
      .map((m) => m.turn_id);
    if (unknown.length === 0) return;
    const wanted = new Set(unknown);
    let hi = upTo;
    for (let page = 0; page < BACKFILL_PAGES && hi > 0 && wanted.size > 0; page++) {
      const lo = Math.max(0, hi - PAGE);
      const { events } = await this.api.eventsPage(this.id, lo, hi - lo);
      for (const e of events) {
        if (e.kind !== "turn.unknown" || !wanted.has(e.turn_id) || e.seq > hi) continue;
        wanted.delete(e.turn_id);
        const adm = await this.api.admission(e.data.admission_id || e.admission_id);
        if (adm.status === "unknown" && !adm.retried_by) this.unknownTurn(e.data);
      }
      hi = lo;
    }
  }

  turn(turnId, admissionId) {
    const key = turnId || "none";
    let t = this.turns.get(key);
    if (!t) {
      t = new Turn(turnId);
      this.turns.set(key, t);
      // After the bubble of the input that started it, when this page sent that input.
      const bubble = admissionId
        ? ui.transcript.querySelector(`li.user[data-admission="${CSS.escape(admissionId)}"]`)
        : null;
      if (bubble) bubble.after(t.node);
      else ui.transcript.append(t.node);
    }
    return t;
  }

  card(callId, name, args, turn) {
    let c = this.cards.get(callId);
    if (c) {
      c.describe(name, args);
    } else {
      c = new ToolCard(callId, name, args);
      this.cards.set(callId, c);
      turn.addCard(c);
    }
    return c;
  }

  userBubble(text) {
    const li = el("li", { class: "msg user" }, el("span", { class: "who" }, "you"), el("div", { class: "plain" }, text));
    ui.transcript.append(li);
    return li;
  }

  renderMessage(m) {
    if (this.messageIds.has(m.id)) return;
    this.messageIds.add(m.id);
    if (m.role === "user") {
      this.userBubble(m.content || "");
    } else if (m.role === "assistant") {
      const t = this.turn(m.turn_id);
      if (m.content) t.addText(m.content);
      for (const call of m.tool_calls || []) {
        const fn = call.function || {};
        this.card(call.id, call.name || fn.name, call.arguments ?? call.args ?? fn.arguments, t);
      }
      if (m.display && m.display.boundary) {
        const reason = m.display.failure_reason ? `: ${m.display.failure_reason}` : "";
        t.note(`${BOUNDARY[m.display.closed_as] || m.display.closed_as}${reason}`, "warn");
      }
    } else if (m.role === "tool") {
      const c = this.cards.get(m.tool_call_id);
      if (c) {
        c.setStatus("done");
        c.setResult(m.content || "");
      }
    } else if (m.role === "system" && m.summary_epoch) {
      const n = m.display && m.display.replaced_messages;
      // A summary made without a model (the summarizer failed) says so, and why.
      const why = m.display && m.display.fallback;
      const how = why ? `, without a model (${why})` : "";
      ui.transcript.append(
        el("li", { class: "msg system" }, `Earlier messages were summarized for the model${n ? ` (${n} messages)` : ""}${how}; they are all kept here.`),
      );
    }
  }

  showSession(s) {
    ui.title.textContent = s.title || "Untitled session";
    this.setState(s.state, s.queue_depth);
    ui.usage.textContent = s.usage ? usageText(s.usage, s.usage.cost_usd) : "";
  }

  setState(state, queueDepth) {
    if (this.state && this.state !== state) refreshSessionsSoon();
    this.state = state;
    const queued = queueDepth > 0 ? ` · ${queueDepth} queued` : "";
    ui.state.textContent = `${state}${queued}`;
    ui.state.dataset.state = state;
    ui.interrupt.disabled = state !== "running";
  }

  connection(status) {
    ui.state.classList.toggle("reconnecting", status === "reconnecting");
  }

  onEvent(e) {
    if (this.closed) return;
    const d = e.data || {};
    switch (e.kind) {
      case "turn.started":
        this.turn(e.turn_id, e.admission_id || d.admission_id);
        break;
      case "status":
        this.setState(d.state, d.queue_depth);
        break;
      case "message.delta":
        this.turn(e.turn_id).liveText().append(d.text || "");
        break;
      case "message.complete":
        if (d.message_id && this.messageIds.has(d.message_id)) {
          // Already in the transcript: drop the streamed copy.
          const t = this.turn(e.turn_id);
          if (t.live) t.live.node.remove();
          t.live = null;
        } else {
          if (d.message_id) this.messageIds.add(d.message_id);
          this.turn(e.turn_id).complete(d.text || "");
        }
        break;
      case "turn.finished":
        this.turn(e.turn_id).finish(d);
        this.refreshUsage();
        break;
      case "turn.resumed": {
        // The cut attempt's streamed text is replaced by the resumed attempt's answer.
        const t = this.turn(e.turn_id);
        t.discardLive();
        t.note(resumedText(d), "note");
        break;
      }
      case "turn.unknown":
        this.turn(e.turn_id).finish({});
        this.turn(e.turn_id).note(BOUNDARY.unknown, "warn");
        this.unknownTurn({ ...d, admission_id: d.admission_id || e.admission_id });
        break;
      case "tool.started":
        this.card(d.call_id, d.name, d.args, this.turn(e.turn_id)).setStatus("running");
        break;
      case "tool.progress": {
        const c = this.cards.get(d.call_id);
        if (c) c.setProgress(d.message || "working…");
        break;
      }
      case "tool.completed": {
        const c = this.card(d.call_id, d.name, undefined, this.turn(e.turn_id));
        c.setStatus(d.status);
        c.setResult(d.preview ?? "", d.duration_ms);
        if (d.status === "unknown") this.unknownToolRun(d.call_id, d.name);
        else this.dropBanner(`tool:${d.call_id}`);
        break;
      }
      case "approval.requested":
        this.approval(d, e.turn_id);
        break;
      case "approval.resolved":
        this.resolveApproval(d.approval_id, d.decision);
        break;
      case "compression.completed":
        ui.transcript.append(
          el("li", { class: "msg system" }, `Context compressed: ${d.before_tokens} → ${d.after_tokens} tokens (${d.compressed_messages} messages summarized).`),
        );
        break;
      default:
        break;
    }
    if (this.deferred && e.seq >= this.deferred.upTo) this.flushDeferred();
    this.scroll(false);
  }

  async refreshUsage() {
    try {
      const s = await this.api.session(this.id);
      if (!this.closed) ui.usage.textContent = usageText(s.usage, s.usage.cost_usd);
    } catch {
      // The next turn refreshes it again.
    }
  }

  approval(d, turnId) {
    if (this.approvals.has(d.approval_id)) return;
    const c = this.card(d.call_id, d.name, d.args, this.turn(turnId));
    c.setStatus("approval");
    const countdown = el("span", { class: "countdown", "aria-live": "off" });
    const approve = button("Approve", () => this.decide(d.approval_id, "approve"), { class: "approve" });
    const deny = button("Deny", () => this.decide(d.approval_id, "deny"), { class: "deny" });
    const error = el("p", { class: "error", role: "alert", hidden: true });
    const box = el(
      "div",
      { class: "approval", role: "group", "aria-label": `Approval for ${d.name}` },
      el("p", {}, d.reason ? `Approval needed: ${d.reason}` : "Approval needed to run this tool."),
      el("div", { class: "actions" }, approve, deny, countdown),
      error,
    );
    c.extra.append(box);
    this.approvals.set(d.approval_id, { box, countdown, approve, deny, error, card: c, expiresAt: d.expires_at });
    this.tick();
  }

  async decide(approvalId, decision) {
    const a = this.approvals.get(approvalId);
    if (!a) return;
    a.approve.disabled = a.deny.disabled = true;
    try {
      const r = await this.api.decideApproval(this.id, approvalId, decision);
      this.resolveApproval(approvalId, r && r.status === "denied" ? "deny" : decision);
    } catch (e) {
      if (e instanceof ApiError && e.code === "approval_closed") {
        showError(a.error, "This approval was already decided or has expired.");
      } else {
        showError(a.error, `Could not send the decision: ${describe(e)}`);
        a.approve.disabled = a.deny.disabled = secondsLeft(a.expiresAt) === 0;
      }
    }
  }

  resolveApproval(approvalId, decision) {
    const a = this.approvals.get(approvalId);
    if (!a) return;
    this.approvals.delete(approvalId);
    const words = { approve: "Approved", deny: "Denied", timeout: "Denied: no answer in time" };
    a.box.replaceChildren(el("p", { class: `resolved ${decision}` }, words[decision] || decision));
    a.card.setStatus(decision === "approve" ? "pending" : "denied");
  }

  tick() {
    for (const a of this.approvals.values()) {
      const s = secondsLeft(a.expiresAt);
      a.countdown.textContent = s > 0 ? `expires in ${formatDuration(s)}` : "expired";
      if (s === 0) a.approve.disabled = a.deny.disabled = true;
    }
  }

  banner(key, text, actions) {
    if (this.banners.has(key)) return;
    const error = el("p", { class: "error", role: "alert", hidden: true });
    const node = el("div", { class: "banner", role: "status" }, el("p", {}, text), el("div", { class: "actions" }, ...actions(error)), error);
    this.banners.set(key, node);
    ui.banners.append(node);
  }

  dropBanner(key) {
    const node = this.banners.get(key);
    if (node) node.remove();
    this.banners.delete(key);
  }

  unknownTurn(d) {
    const admissionId = d.admission_id;
    if (!admissionId) return;
    const key = `turn:${admissionId}`;
    const why = d.failure_message ? ` (${preview(d.failure_message, 200)})` : "";
    this.banner(key, `A turn's outcome is unknown: the gateway stopped while it ran${why}.`, (error) => [
      button("Retry the turn", async (ev) => {
        ev.target.disabled = true;
        try {
          await this.api.retryAdmission(admissionId);
          this.dropBanner(key);
        } catch (e) {
          showError(error, `Could not retry: ${describe(e)}`);
          ev.target.disabled = false;
        }
      }, { class: "retry" }),
      button("Dismiss", () => this.dropBanner(key), { class: "secondary" }),
    ]);
  }

  unknownToolRun(callId, name) {
    const key = `tool:${callId}`;
    const decide = (decision) => async (ev) => {
      ev.target.disabled = true;
      try {
        await this.api.decideToolRun(this.id, callId, decision);
        this.dropBanner(key);
      } catch (e) {
        ev.target.disabled = false;
        const err = this.banners.get(key)?.querySelector(".error");
        if (err) showError(err, `Could not decide: ${describe(e)}`);
      }
    };
    this.banner(
      key,
      `The tool call ${name || callId} may or may not have run (the gateway stopped while it ran). Run it again, or skip it?`,
      () => [
        button("Retry the tool", decide("retry"), { class: "retry" }),
        button("Skip it", decide("skip"), { class: "secondary skip" }),
      ],
    );
  }

  async send(text) {
    const bubble = this.userBubble(text);
    bubble.classList.add("pending");
    this.scroll(true);
    try {
      const receipt = await this.api.submit(this.id, text);
      bubble.dataset.admission = receipt.admission_id;
      bubble.classList.remove("pending");
      if (this.session && !this.session.title) {
        this.session.title = text.slice(0, 60);
        ui.title.textContent = this.session.title;
        this.api.renameSession(this.id, this.session.title).then(refreshSessions, () => {});
      }
      return true;
    } catch (e) {
      bubble.remove();
      showError(ui.chatError, `Not sent: ${describe(e)}`);
      return false;
    }
  }

  scroll(force) {
    const t = ui.transcript;
    const near = t.scrollHeight - t.scrollTop - t.clientHeight < 120;
    if (force || near) requestAnimationFrame(() => (t.scrollTop = t.scrollHeight));
  }
}

ui.composer.addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const text = ui.input.value.trim();
  if (!text || !view) return;
  showError(ui.chatError, "");
  ui.input.value = "";
  const sent = await view.send(text);
  if (!sent && !ui.input.value) ui.input.value = text;
});

ui.input.addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
    ev.preventDefault();
    ui.composer.requestSubmit();
  }
});

ui.interrupt.addEventListener("click", async () => {
  if (!view) return;
  ui.interrupt.disabled = true;
  try {
    await api.interrupt(view.id);
  } catch (e) {
    showError(ui.chatError, `Could not interrupt: ${describe(e)}`);
    ui.interrupt.disabled = view.state !== "running";
  }
});

// ---------- start ----------

const saved = localStorage.getItem(TOKEN_KEY);
if (saved) {
  signIn(saved).catch((e) => {
    if (e instanceof ApiError && e.status === 401) {
      signedOut("Your saved token is no longer accepted (401 unauthorized). Sign in again.");
    } else {
      // Keep the token: the server may only be restarting.
      ui.signin.hidden = false;
      showError(ui.signinError, `Could not reach the server: ${describe(e)}`);
      ui.token.value = saved;
    }
  });
} else {
  signedOut();
}

// One open session's chat: what it shows is decided by session_state.js; this file fetches the
// transcript, follows the events and draws. See SessionView.open for how the transcript and the
// live events are joined without a gap or a repeat.
import { ApiError } from "./api.js";
import { follow } from "./events.js";
import { ui, showError, describe } from "./page.js";
import {
  el,
  button,
  ToolCard,
  TurnView,
  placeChildren,
  secondsLeft,
  formatDuration,
  preview,
} from "./render.js";
import {
  initialState,
  applyEvent,
  applySession,
  addMessages,
  addUnknownTurn,
  sendStarted,
  sendAccepted,
  sendFailed,
  resolveApproval,
  dropBanner,
  addReportMessages,
  turnsMissingReports,
  headerUsage,
} from "./session_state.js";
import { WorkView, reportNode } from "./work_view.js";
import { attachmentNodes } from "./attach.js";
import { MODELS_HREF } from "./route.js";

/** Pages of 500 events read backwards at most, to find where a running turn began. */
const BACKFILL_PAGES = 8;
const PAGE = 500;

const DECIDED = { approve: "Approved", deny: "Denied", timeout: "Denied: no answer in time" };

/**
 * One open session. What it shows is `this.state` (session_state.js): every event, transcript
 * row and action of this page becomes a new state through a pure function, and `draw` brings
 * the page up to it, touching only what changed. The DOM keeps only what is the page's own:
 * the buttons of a question being answered and the errors shown under them.
 */
export class SessionView {
  /** `onListChanged` is called when the session list may show something else now. */
  constructor(apiClient, id, onListChanged) {
    this.api = apiClient;
    this.id = id;
    this.onListChanged = onListChanged;
    this.state = initialState();
    /** The state the page shows. */
    this.drawn = this.state;
    this.rows = new Map();
    this.turnViews = new Map();
    this.cards = new Map();
    this.boxes = new Map();
    this.bannerNodes = new Map();
    this.sent = 0;
    this.follower = null;
    this.closed = false;
    this.session = null;
    /** The session's usage as last read (`GET /v1/sessions/{id}`), for the header. */
    this.usage = null;
    /** The sub-agents and background processes the session started (work_view.js). */
    this.work = new WorkView(apiClient, id, ui.work);
    /** Turn id → reads of the transcript made for its report row (at most two). */
    this.reportReads = new Map();
    this.readingReports = false;
    this.ticker = setInterval(() => this.tick(), 1000);
    this.onRegenerate = (ev) => this.regenerate(ev.detail && ev.detail.turnId);
    ui.transcript.addEventListener("regenerate", this.onRegenerate);
  }

  /** Sends again the input of turn `turnId` (the user message shown just before it). */
  regenerate(turnId) {
    const entries = this.state.entries;
    const at = entries.findIndex((r) => r.type === "turn" && this.state.turns[r.turnKey] && this.state.turns[r.turnKey].id === turnId);
    const input = entries.slice(0, at < 0 ? entries.length : at).reverse().find((r) => r.type === "user");
    if (!input) return;
    this.send(input.text, input.attachments || []);
  }

  close() {
    this.closed = true;
    ui.transcript.removeEventListener("regenerate", this.onRegenerate);
    ui.model.hidden = true;
    this.work.close();
    clearInterval(this.ticker);
    if (this.follower) this.follower.stop();
  }

  /** Moves to state `next` and draws it, unless another session has the page by now. */
  update(next) {
    this.state = next;
    if (!this.closed) this.draw();
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
    const shown = messages.filter((m) => !(liveTurn && m.turn_id === liveTurn && m.role !== "user"));
    this.update(addMessages(this.state, shown));
    ui.title.textContent = session.title || "Untitled session";
    this.usage = session.usage || null;
    this.drawUsage();
    await this.showModels(session);
    if (this.closed) return;
    this.update(applySession(this.state, session, since));
    await this.work.open(session);
    if (this.closed) return;
    await this.findUnknownTurns(messages, upTo);
    if (this.closed) return;
    this.follower = follow(this.api, this.id, since, {
      onEvent: (e) => this.onEvent(e),
      onStatus: (s) => this.connection(s),
      onStop: (err) => showError(ui.chatError, `Stopped following this session: ${err.message || err.code}`),
    });
    this.scroll(true);
  }

  /**
   * The model picker: the models `GET /v1/models` names, the session's selected. A choice is
   * sent at once (PATCH) and applies from the next turn; a refused one puts the picker back.
   * With no model at all, the page says so before anything is sent.
   */
  async showModels(session) {
    let models = [];
    try {
      models = await this.api.models();
    } catch (e) {
      showError(ui.chatError, `The models could not be read: ${describe(e)}`);
    }
    if (this.closed) return;
    const picker = ui.model;
    const ids = models.map((m) => m.id);
    picker.replaceChildren(
      ...models.map((m) => el("option", { value: m.id }, m.provider ? `${m.id} · ${m.provider}` : m.id)),
    );
    picker.hidden = models.length === 0;
    picker.value = session.model || ids[0] || "";
    picker.onchange = async () => {
      const chosen = picker.value;
      picker.disabled = true;
      try {
        const now = await this.api.setModel(this.id, chosen);
        if (this.session) this.session.model = now.model;
        picker.value = now.model || chosen;
      } catch (e) {
        picker.value = (this.session && this.session.model) || ids[0] || "";
        showError(ui.chatError, `The model was not changed: ${describe(e)}`);
      } finally {
        picker.disabled = false;
      }
    };
    if (models.length === 0) {
      ui.banners.append(
        el(
          "p",
          { class: "banner no-model", role: "status" },
          "No model is configured: the server has no provider, so a message would not be answered. ",
          el("a", { href: MODELS_HREF, class: "connect-model" }, "Connect a model"),
          " (the operator can), or see the README's quick start.",
        ),
      );
    }
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
        if (adm.status === "unknown" && !adm.retried_by) this.update(addUnknownTurn(this.state, e));
      }
      hi = lo;
    }
  }

  onEvent(e) {
    if (this.closed) return;
    this.update(applyEvent(this.state, e));
    this.work.onEvent(e);
    if (e.kind === "turn.finished") this.refreshSession();
    this.findReports();
    this.scroll(false);
  }

  /**
   * A report admitted while the page is open has no event that carries its text: once its
   * turn is known, the transcript is read for its row (twice at most per turn).
   */
  async findReports() {
    const missing = turnsMissingReports(this.state, this.work.state.reportAdmissions).filter(
      (t) => (this.reportReads.get(t) || 0) < 2,
    );
    if (missing.length === 0 || this.readingReports) return;
    this.readingReports = true;
    for (const t of missing) this.reportReads.set(t, (this.reportReads.get(t) || 0) + 1);
    try {
      const { messages } = await this.api.messages(this.id);
      if (!this.closed) this.update(addReportMessages(this.state, messages));
    } catch {
      // Tried again on the next event.
    } finally {
      this.readingReports = false;
    }
    if (!this.closed && turnsMissingReports(this.state, this.work.state.reportAdmissions).length > 0) {
      setTimeout(() => !this.closed && this.findReports(), 1500);
    }
  }

  connection(status) {
    ui.state.classList.toggle("reconnecting", status === "reconnecting");
  }

  /** Reads the session again for what the header shows: its usage, and its title once it has one. */
  async refreshSession() {
    try {
      const s = await this.api.session(this.id);
      if (this.closed) return;
      this.usage = s.usage || null;
      this.drawUsage();
      if (s.title && this.session && !this.session.title) {
        this.session.title = s.title;
        ui.title.textContent = s.title;
        this.onListChanged();
      }
    } catch {
      // The next turn refreshes it again.
    }
  }

  drawUsage() {
    ui.usage.textContent = headerUsage(this.usage, this.state.status.state);
  }

  // ---------- drawing the state ----------
  // Cards first, as the turns place them; the turns before the transcript rows that hold them.

  draw() {
    const s = this.state;
    const was = this.drawn;
    if (s === was) return;
    this.drawn = s;
    if (s.status !== was.status) this.drawStatus(s.status, was.status);
    for (const c of changed(s.tools, was.tools)) this.drawTool(c);
    for (const a of changed(s.approvals, was.approvals)) this.drawApproval(a);
    if (s.turns !== was.turns) {
      for (const [key, t] of Object.entries(s.turns)) {
        if (t !== was.turns[key]) this.turnView(key).show(t, (callId) => this.cards.get(callId).node);
      }
    }
    if (s.entries !== was.entries) this.drawRows(s.entries);
    if (s.banners !== was.banners) this.drawBanners(s.banners);
  }

  drawStatus({ state, queueDepth }, was) {
    if (was.state && was.state !== state) this.onListChanged();
    const queued = queueDepth > 0 ? ` · ${queueDepth} queued` : "";
    ui.state.textContent = `${state}${queued}`;
    ui.state.dataset.state = state;
    ui.interrupt.disabled = state !== "running";
    this.drawUsage();
  }

  turnView(key) {
    let t = this.turnViews.get(key);
    if (!t) {
      t = new TurnView(this.state.turns[key].id);
      this.turnViews.set(key, t);
    }
    return t;
  }

  drawTool(tool) {
    const c = this.cards.get(tool.callId);
    if (c) c.show(tool);
    else this.cards.set(tool.callId, new ToolCard(tool));
  }

  drawRows(entries) {
    const rows = new Map();
    const nodes = entries.map((r) => {
      if (r.type === "turn") return this.turnView(r.turnKey).node;
      let node = this.rows.get(r.key);
      if (!node && r.type === "report") {
        node = reportNode(r.report);
      } else if (!node && r.type === "user") {
        const files = r.attachments && r.attachments.length
          ? el("div", { class: "files" }, ...attachmentNodes(this.api, r.attachments))
          : null;
        const text = r.text ? el("div", { class: "plain" }, r.text) : null;
        node = el("li", { class: "msg user" }, el("span", { class: "who" }, "you"), files, text);
      } else if (!node) {
        node = el("li", { class: "msg system" }, r.text);
      }
      if (r.type === "user") {
        node.classList.toggle("pending", r.pending);
        if (r.admissionId) node.dataset.admission = r.admissionId;
      }
      rows.set(r.key, node);
      return node;
    });
    this.rows = rows;
    placeChildren(ui.transcript, nodes);
  }

  drawApproval(a) {
    let box = this.boxes.get(a.approvalId);
    if (!box) {
      const countdown = el("span", { class: "countdown", "aria-live": "off" });
      const approve = button("Approve", () => this.decide(a.approvalId, "approve"), { class: "approve" });
      const deny = button("Deny", () => this.decide(a.approvalId, "deny"), { class: "deny" });
      const error = el("p", { class: "error", role: "alert", hidden: true });
      const node = el(
        "div",
        { class: "approval", role: "group", "aria-label": `Approval for ${a.name}` },
        el("p", {}, a.reason ? `Approval needed: ${a.reason}` : "Approval needed to run this tool."),
        el("div", { class: "actions" }, approve, deny, countdown),
        error,
      );
      box = { node, countdown, approve, deny, error, resolved: false };
      this.boxes.set(a.approvalId, box);
      this.cards.get(a.callId).extra.append(node);
      this.tick();
    }
    if (a.decision && !box.resolved) {
      box.resolved = true;
      box.node.replaceChildren(el("p", { class: `resolved ${a.decision}` }, DECIDED[a.decision] || a.decision));
    }
  }

  drawBanners(banners) {
    const nodes = new Map();
    for (const b of banners) nodes.set(b.key, this.bannerNodes.get(b.key) || this.bannerNode(b));
    this.bannerNodes = nodes;
    placeChildren(ui.banners, [...nodes.values()]);
  }

  bannerNode(b) {
    const error = el("p", { class: "error", role: "alert", hidden: true });
    const text = b.kind === "turn" ? unknownTurnText(b) : unknownToolRunText(b);
    const actions = b.kind === "turn" ? this.retryTurnButtons(b, error) : this.toolRunButtons(b, error);
    return el("div", { class: "banner", role: "status" }, el("p", {}, text), el("div", { class: "actions" }, ...actions), error);
  }

  retryTurnButtons(b, error) {
    return [
      button("Retry the turn", async (ev) => {
        ev.target.disabled = true;
        try {
          await this.api.retryAdmission(b.admissionId);
          this.update(dropBanner(this.state, b.key));
        } catch (e) {
          showError(error, `Could not retry: ${describe(e)}`);
          ev.target.disabled = false;
        }
      }, { class: "retry" }),
      button("Dismiss", () => this.update(dropBanner(this.state, b.key)), { class: "secondary" }),
    ];
  }

  toolRunButtons(b, error) {
    const decide = (decision) => async (ev) => {
      ev.target.disabled = true;
      try {
        await this.api.decideToolRun(this.id, b.callId, decision);
        this.update(dropBanner(this.state, b.key));
      } catch (e) {
        ev.target.disabled = false;
        showError(error, `Could not decide: ${describe(e)}`);
      }
    };
    return [
      button("Retry the tool", decide("retry"), { class: "retry" }),
      button("Skip it", decide("skip"), { class: "secondary skip" }),
    ];
  }

  // ---------- this page's own actions ----------

  async decide(approvalId, decision) {
    const a = this.state.approvals[approvalId];
    const box = this.boxes.get(approvalId);
    if (!a || a.decision || !box) return;
    box.approve.disabled = box.deny.disabled = true;
    try {
      const r = await this.api.decideApproval(this.id, approvalId, decision);
      this.update(resolveApproval(this.state, approvalId, r && r.status === "denied" ? "deny" : decision));
    } catch (e) {
      if (e instanceof ApiError && e.code === "approval_closed") {
        showError(box.error, "This approval was already decided or has expired.");
      } else {
        showError(box.error, `Could not send the decision: ${describe(e)}`);
        box.approve.disabled = box.deny.disabled = secondsLeft(a.expiresAt) === 0;
      }
    }
  }

  /** The countdown of each open approval, the children's too. */
  tick() {
    this.work.tick();
    for (const [id, box] of this.boxes) {
      const a = this.state.approvals[id];
      if (box.resolved || !a || a.decision) continue;
      const s = secondsLeft(a.expiresAt);
      box.countdown.textContent = s > 0 ? `expires in ${formatDuration(s)}` : "expired";
      if (s === 0) box.approve.disabled = box.deny.disabled = true;
    }
  }

  /** Sends `text` with `files` (the uploaded files' references); true when it was taken. */
  async send(text, files = []) {
    this.sent += 1;
    const sentId = this.sent;
    this.update(sendStarted(this.state, sentId, text, files));
    this.scroll(true);
    try {
      const attachments = files.map((f) => ({ file_id: f.file_id }));
      const receipt = await this.api.submit(this.id, text, attachments);
      this.update(sendAccepted(this.state, sentId, receipt.admission_id));
      // The server names an untitled session after its first message.
      if (this.session && !this.session.title) this.refreshSession();
      return true;
    } catch (e) {
      this.update(sendFailed(this.state, sentId));
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

/** The values of map `now` that are not the same object in map `was`. */
function changed(now, was) {
  return now === was ? [] : Object.entries(now).filter(([k, v]) => v !== was[k]).map(([, v]) => v);
}

function unknownTurnText(b) {
  const why = b.failureMessage ? ` (${preview(b.failureMessage, 200)})` : "";
  return `A turn's outcome is unknown: the gateway stopped while it ran${why}.`;
}

function unknownToolRunText(b) {
  return `The tool call ${b.name || b.callId} may or may not have run (the gateway stopped while it ran). Run it again, or skip it?`;
}

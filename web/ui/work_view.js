// The open session's Work section: one card per sub-agent and per background process it
// started (work_state.js decides what they say), above the transcript; and the card a report
// row of the transcript is drawn as. Seeded from `GET …/subagents` and `GET …/processes` when
// the session opens, then kept live by the session's events (session_view.js hands them on).
// A running sub-agent's approvals live in its own session: they are read from
// `GET /v1/sessions/{child}` every few seconds while it runs and decided from its card.
import { ApiError } from "./api.js";
import { showError, describe } from "./page.js";
import { el, button, placeChildren, prettyArgs, preview, secondsLeft, formatDuration } from "./render.js";
import {
  initialWork,
  seedWork,
  applyWorkEvent,
  setChildApprovals,
  approvalDecided,
  runningChildren,
  workCards,
  workSummary,
  processStatusText,
  subagentStatusText,
  parseReport,
} from "./work_state.js";

/**
 * A child's approvals are read when its `approval.requested`/`approval.resolved` is relayed
 * into this session's events; this slow round is only a safety net. How many children at most.
 */
const POLL_MS = 15000;
const POLL_CHILDREN = 5;

const childHref = (id) => `#/s/${encodeURIComponent(id)}`;

export class WorkView {
  /** `root` is the page's Work section; `sessionId` the open session. */
  constructor(apiClient, sessionId, root) {
    this.api = apiClient;
    this.id = sessionId;
    this.root = root;
    this.state = initialWork();
    this.drawn = null;
    this.cards = new Map();
    this.closed = false;
    this.polling = false;
    this.pollAgain = false;
    this.refreshing = null;
    /** Approvals decided from this page: a read begun before the decision does not bring them back. */
    this.decided = new Set();
    this.parentLine = el("p", { class: "work-parent", hidden: true });
    this.summary = el("summary", { class: "work-summary" });
    this.list = el("ul", { class: "work-list", "aria-label": "Sub-agents and background processes" });
    this.error = el("p", { class: "error", role: "alert", hidden: true });
    this.box = el("details", { class: "work-box" }, this.summary, this.list);
    /** Open while something runs or waits, closed once all ended, unless the reader chose. */
    this.chosen = false;
    this.summary.addEventListener("click", () => (this.chosen = true));
    this.waiting = 0;
    root.replaceChildren(this.parentLine, this.box, this.error);
    root.hidden = true;
    this.poller = setInterval(() => this.poll(), POLL_MS);
  }

  close() {
    this.closed = true;
    clearInterval(this.poller);
    this.root.hidden = true;
    this.root.replaceChildren();
  }

  update(next) {
    this.state = next;
    if (!this.closed) this.draw();
  }

  /** Reads both lists once the session is open; `session` is its `GET` answer. */
  async open(session) {
    // A rotated session has a parent too; a sub-agent's is on the platform "subagent".
    if (session && session.platform === "subagent" && session.parent_session_id) {
      this.parentLine.replaceChildren(
        "A sub-agent works in this session. ",
        el("a", { href: childHref(session.parent_session_id), class: "work-parent-link" }, "Open the session that started it"),
      );
      this.parentLine.hidden = false;
      this.root.hidden = false;
    }
    await this.refresh();
    // Approvals asked before this page opened.
    await this.poll();
  }

  /** Reads `GET …/subagents` and `GET …/processes` again and merges what they say. */
  refresh() {
    if (this.refreshing) return this.refreshing;
    this.refreshing = (async () => {
      try {
        const [subagents, processes] = await Promise.all([this.api.subagents(this.id), this.api.processes(this.id)]);
        if (this.closed) return;
        showError(this.error, "");
        this.update(seedWork(this.state, { subagents: subagents.subagents, processes: processes.processes }));
      } catch (e) {
        if (!this.closed && !(e instanceof ApiError && e.status === 401)) {
          showError(this.error, `Could not read this session's sub-agents and processes: ${describe(e)}`);
          this.root.hidden = false;
        }
      } finally {
        this.refreshing = null;
      }
    })();
    return this.refreshing;
  }

  /** One event of the session; an ended sub-agent or process is read again for its report. */
  onEvent(e) {
    if (this.closed) return;
    const relayed = e.data && e.data.session_id && e.data.session_id !== this.id;
    if (relayed && (e.kind === "approval.requested" || e.kind === "approval.resolved")) {
      this.poll();
      return;
    }
    const next = applyWorkEvent(this.state, e);
    if (next === this.state) return;
    this.update(next);
    if (e.kind === "subagent.finished" || e.kind === "process.exited") this.refresh();
    if (e.kind === "subagent.started") this.poll();
  }

  /** Reads the pending approvals of the running children (a few at most), one round at a time. */
  async poll() {
    if (this.closed) return;
    if (this.polling) {
      // An approval relayed while a round reads: read once more after it.
      this.pollAgain = true;
      return;
    }
    const children = runningChildren(this.state).slice(0, POLL_CHILDREN);
    if (children.length === 0) return;
    this.polling = true;
    try {
      await Promise.all(
        children.map(async (child) => {
          try {
            const s = await this.api.session(child);
            const pending = (s.pending_approvals || []).filter((a) => !this.decided.has(a.approval_id));
            if (!this.closed) this.update(setChildApprovals(this.state, child, pending));
          } catch {
            // Read again on the next round.
          }
        }),
      );
    } finally {
      this.polling = false;
    }
    if (this.pollAgain) {
      this.pollAgain = false;
      this.poll();
    }
  }

  // ---------- drawing ----------

  draw() {
    const s = this.state;
    if (s === this.drawn) return;
    this.drawn = s;
    const cards = workCards(s);
    this.root.hidden = cards.length === 0 && this.parentLine.hidden && this.error.hidden;
    this.box.hidden = cards.length === 0;
    this.summary.textContent = `Work: ${workSummary(s)}`;
    const live = cards.some(({ item }) => item.status === "running");
    const waiting = cards.reduce((n, { item }) => n + (item.approvals ? item.approvals.length : 0), 0);
    // A new question opens the section whatever was chosen: it needs an answer.
    if (waiting > this.waiting) this.box.open = true;
    else if (!this.chosen) this.box.open = live;
    this.waiting = waiting;
    const nodes = cards.map(({ kind, key, item }) => {
      let card = this.cards.get(key);
      if (!card) {
        card = kind === "subagent" ? new SubagentCard(this, item) : new ProcessCard(item);
        this.cards.set(key, card);
      }
      card.show(item);
      return card.node;
    });
    placeChildren(this.list, nodes);
  }

  /** The countdowns of the children's open approvals. */
  tick() {
    for (const card of this.cards.values()) if (card.tick) card.tick();
  }

  /** Decides approval `a` of the child session `child` from its card. */
  async decide(child, a, decision, box) {
    box.approve.disabled = box.deny.disabled = true;
    try {
      await this.api.decideApproval(child, a.approvalId, decision);
      box.decided = decision;
      this.decided.add(a.approvalId);
      this.update(approvalDecided(this.state, a.approvalId));
    } catch (e) {
      if (e instanceof ApiError && (e.code === "approval_closed" || e.status === 409 || e.status === 404)) {
        showError(box.error, "This approval was already decided or has expired.");
      } else {
        showError(box.error, `Could not send the decision: ${describe(e)}`);
        box.approve.disabled = box.deny.disabled = false;
      }
    }
  }
}

/** A sub-agent: its goal, its status, a link to its session, its approvals and its report. */
class SubagentCard {
  constructor(view, t) {
    this.view = view;
    this.status = el("span", { class: "work-status" });
    this.goal = el("p", { class: "work-goal" });
    this.link = el("a", { class: "work-link" }, "Open the sub-agent's session");
    this.approvals = el("div", { class: "work-approvals" });
    this.reportBody = el("div", { class: "report-body" });
    this.report = el("details", { class: "work-report", hidden: true }, el("summary", {}, "Report"), this.reportBody);
    this.boxes = new Map();
    this.node = el(
      "li",
      { class: "work-card subagent", dataset: { task: t.taskId } },
      el("header", {}, el("span", { class: "work-kind" }, "sub-agent"), this.status),
      this.goal,
      this.link,
      this.approvals,
      this.report,
    );
    this.shownResult = undefined;
  }

  show(t) {
    this.node.dataset.status = t.status;
    this.status.textContent = subagentStatusText(t);
    this.goal.textContent = t.goal || "(no goal)";
    if (t.childSessionId) {
      this.link.setAttribute("href", childHref(t.childSessionId));
      this.node.dataset.child = t.childSessionId;
    }
    if (t.result !== this.shownResult) {
      this.shownResult = t.result;
      this.report.hidden = !t.result;
      if (t.result) {
        const r = parseReport(t.result);
        this.reportBody.textContent = r ? r.body : t.result;
      }
    }
    const child = t.childSessionId;
    const boxes = new Map();
    const nodes = t.approvals.map((a) => {
      const box = this.boxes.get(a.approvalId) || this.approvalBox(child, a);
      boxes.set(a.approvalId, box);
      return box.node;
    });
    this.boxes = boxes;
    placeChildren(this.approvals, nodes);
    this.tick();
  }

  approvalBox(child, a) {
    const box = { countdown: el("span", { class: "countdown", "aria-live": "off" }), error: el("p", { class: "error", role: "alert", hidden: true }) };
    box.approve = button("Approve", () => this.view.decide(child, a, "approve", box), { class: "approve" });
    box.deny = button("Deny", () => this.view.decide(child, a, "deny", box), { class: "deny" });
    box.expiresAt = a.expiresAt;
    box.node = el(
      "div",
      { class: "approval", role: "group", "aria-label": `Approval for ${a.name || "a tool"} in the sub-agent`, dataset: { approval: a.approvalId } },
      el("p", {}, `The sub-agent asks to run ${a.name || "a tool"}${a.reason ? `: ${a.reason}` : "."}`),
      el("details", { class: "tool-args-box" }, el("summary", {}, "arguments"), el("pre", { class: "tool-args" }, preview(prettyArgs(a.args), 2000))),
      el("div", { class: "actions" }, box.approve, box.deny, box.countdown),
      box.error,
    );
    return box;
  }

  tick() {
    for (const box of this.boxes.values()) {
      if (!box.expiresAt || box.decided) continue;
      const s = secondsLeft(box.expiresAt);
      box.countdown.textContent = s > 0 ? `expires in ${formatDuration(s)}` : "expired";
      if (s === 0) box.approve.disabled = box.deny.disabled = true;
    }
  }
}

/** A background process: its command, its status and exit code, and its last output. */
class ProcessCard {
  constructor(p) {
    this.status = el("span", { class: "work-status" });
    this.tail = el("pre", { class: "work-tail-text" });
    this.tailBox = el("details", { class: "work-tail", hidden: true }, el("summary", {}, "Last output"), this.tail);
    this.command = el("pre", { class: "work-command" });
    this.node = el(
      "li",
      { class: "work-card process", dataset: { process: p.processId } },
      el("header", {}, el("span", { class: "work-kind" }, "background process"), this.status),
      this.command,
      this.tailBox,
    );
  }

  show(p) {
    this.node.dataset.status = p.status;
    if (p.exitCode !== null) this.node.dataset.exitCode = String(p.exitCode);
    this.status.textContent = processStatusText(p);
    this.command.textContent = p.command || "";
    this.tailBox.hidden = !p.tail;
    if (p.tail) this.tail.textContent = p.tail;
  }
}

const REPORT_WHAT = { subagent: "Report of a sub-agent", process: "Report of a background process" };

/**
 * A report row of the transcript (`{report}` of session_state.js): from the gateway, not the
 * user — what reported, how it ended, its first line (goal or command) and its text.
 */
export function reportNode(r) {
  const status = r.kind === "process" ? processStatusText({ status: r.status, exitCode: r.exitCode }) : subagentStatusText(r);
  const link = r.kind === "subagent" && r.childSessionId
    ? el("a", { href: childHref(r.childSessionId), class: "work-link" }, "Open the sub-agent's session")
    : null;
  return el(
    "li",
    { class: "msg report", dataset: { kind: r.kind, status: r.status } },
    el("span", { class: "who" }, "report from the gateway"),
    el(
      "div",
      { class: "report-card", dataset: r.exitCode === null ? { status: r.status } : { status: r.status, exitCode: String(r.exitCode) } },
      el("header", {}, el("span", { class: "report-what" }, REPORT_WHAT[r.kind] || "Report"), el("span", { class: "work-status" }, status)),
      r.title ? el("p", { class: "report-title" }, r.title) : null,
      el("div", { class: "report-body" }, r.body || "(empty)"),
      link,
    ),
  );
}

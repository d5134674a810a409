// The open session's view as data, and every change to it: the transcript's rows, each turn's
// text blocks, tool cards and notes, approvals, banners and the session's state. Pure: no DOM,
// no fetch, no timers; each function answers a new state and leaves the one it was given alone
// (structural sharing: what did not change is the same object). session_view.js draws the
// page from it; a turn's blocks and notes are turn_state.js's.
import { parseReport } from "./work_state.js";
import {
  BOUNDARY,
  nextKey,
  withItems,
  settle,
  appendLive,
  withText,
  complete,
  dropLive,
  withNote,
  withResumed,
  finish,
  STOPPED,
} from "./turn_state.js";

export { BOUNDARY, resumedText, usageText, headerUsage } from "./turn_state.js";

/**
 * An empty view. `lastSeq` is the highest event seq applied: an event at or below it (a replay
 * after a reconnect) changes nothing. The maps are plain objects keyed by id: `turns` by turn id
 * (`"none"` for events without one), `tools` by call id, `approvals` by approval id.
 */
export function initialState() {
  return {
    lastSeq: 0,
    nextKey: 1,
    /**
     * The transcript's rows in order: `{key, type: "user" | "turn" | "system" | "report", …}`;
     * a report (a user-role row the gateway admitted: work_state.js parseReport) is
     * `{type: "report", report, turnId}`.
     */
    entries: [],
    /**
     * `{id, admissionId, items, spent}`; an item is `{key, type: "text", text, live}`, `{key, type: "tool",
     * callId}` or `{key, type: "note", text, kind}`; `spent` is `{usage, cost}` once finished.
     */
    turns: {},
    /** `{callId, name, args, status, progress, result, durationMs, approvals: [approvalId]}`. */
    tools: {},
    /** `{approvalId, callId, name, reason, expiresAt, decision}`; `decision` null while open. */
    approvals: {},
    /** `{key, kind: "turn", admissionId, failureMessage} | {key, kind: "tool", callId, name}`, in order. */
    banners: [],
    messageIds: {},
    status: { state: null, queueDepth: 0 },
    /** The opening snapshot's open questions, shown once the replay reaches its seq. */
    deferred: null,
  };
}

/**
 * The state after event `e` (docs/api.md, "Events"). Events apply in seq order, once each: one
 * without a numeric seq, or at or below `lastSeq`, is ignored, and so is a kind this view does
 * not show (its seq still counts).
 */
export function applyEvent(state, e) {
  if (!e || typeof e.seq !== "number" || e.seq <= state.lastSeq) return state;
  const s = draft(state);
  s.lastSeq = e.seq;
  const d = e.data || {};
  switch (e.kind) {
    case "turn.started":
      ensureTurn(s, e.turn_id, e.admission_id || d.admission_id);
      break;
    case "status":
      s.status = { state: d.state, queueDepth: d.queue_depth };
      break;
    case "message.delta":
      ensureTurn(s, e.turn_id);
      editTurn(s, e.turn_id, (t) => appendLive(s, t, d.text || ""));
      break;
    case "message.complete":
      ensureTurn(s, e.turn_id);
      if (d.message_id && s.messageIds[d.message_id]) {
        // Already in the transcript: drop the streamed copy.
        editTurn(s, e.turn_id, dropLive);
      } else {
        if (d.message_id) own(s, "messageIds")[d.message_id] = true;
        editTurn(s, e.turn_id, (t) => complete(s, t, d.text || ""));
      }
      break;
    case "turn.finished":
      ensureTurn(s, e.turn_id);
      editTurn(s, e.turn_id, (t) => finish(s, t, d));
      break;
    case "turn.resumed":
      // The cut attempt's streamed text is replaced by the resumed attempt's answer.
      ensureTurn(s, e.turn_id);
      editTurn(s, e.turn_id, (t) => withResumed(s, dropLive(t), d, false));
      break;
    case "admission.queued":
      queued(s, { ...d, admission_id: d.admission_id || e.admission_id });
      break;
    case "turn.unknown":
      ensureTurn(s, e.turn_id);
      editTurn(s, e.turn_id, (t) => withNote(s, finish(s, t, {}), BOUNDARY.unknown, "warn"));
      unknownTurn(s, { ...d, admission_id: d.admission_id || e.admission_id });
      break;
    case "tool.started":
      ensureTurn(s, e.turn_id);
      card(s, d.call_id, d.name, d.args, e.turn_id);
      editTool(s, d.call_id, (c) => withStatus(c, "running"));
      break;
    case "tool.progress":
      if (s.tools[d.call_id]) editTool(s, d.call_id, (c) => ({ ...c, progress: d.message || "working…" }));
      break;
    case "tool.completed":
      ensureTurn(s, e.turn_id);
      card(s, d.call_id, d.name, undefined, e.turn_id);
      editTool(s, d.call_id, (c) => withResult(withStatus(c, d.status), d.preview ?? "", d.duration_ms));
      if (d.status === "unknown") unknownToolRun(s, d.call_id, d.name);
      else removeBanner(s, `tool:${d.call_id}`);
      break;
    // A sub-agent's approval relayed here (`session_id` names the child) is the Work
    // section's to show.
    case "approval.requested":
      if (!d.session_id) approval(s, d, e.turn_id);
      break;
    case "approval.resolved":
      if (!d.session_id) resolve(s, d.approval_id, d.decision);
      break;
    case "compression.completed":
      addEntry(s, {
        type: "system",
        text: `Context compressed: ${d.before_tokens} → ${d.after_tokens} tokens (${d.compressed_messages} messages summarized).`,
      });
      break;
    default:
      break;
  }
  if (s.deferred && e.seq >= s.deferred.upTo) flushDeferred(s);
  return s;
}

/**
 * The session as read on opening: its state now, and its open questions (pending approvals,
 * tool runs left unknown) shown once the events followed after `since` reach the snapshot's
 * `last_event_seq`, so a replayed turn draws its cards first.
 */
export function applySession(state, session, since) {
  const s = draft(state);
  s.lastSeq = since;
  s.status = { state: session.state, queueDepth: session.queue_depth };
  s.deferred = {
    upTo: session.last_event_seq,
    approvals: session.pending_approvals || [],
    unknownToolRuns: session.unknown_tool_runs || [],
  };
  if (since >= s.deferred.upTo) flushDeferred(s);
  return s;
}

/** The transcript's rows (`GET …/messages`), each message once. */
export function addMessages(state, messages) {
  const s = draft(state);
  for (const m of messages) addMessage(s, m);
  return s;
}

/**
 * Reports among `messages` (`GET …/messages`) not shown yet, each put right before the turn
 * that answered it (or last): how a report admitted while the page is open gets its row.
 */
export function addReportMessages(state, messages) {
  const s = draft(state);
  for (const m of messages) {
    if (m.role !== "user" || s.messageIds[m.id]) continue;
    const report = parseReport(m.content);
    if (!report) continue;
    own(s, "messageIds")[m.id] = true;
    const row = { key: `r${nextKey(s)}`, type: "report", report, turnId: m.turn_id || null };
    const entries = own(s, "entries");
    const at = m.turn_id ? entries.findIndex((r) => r.type === "turn" && r.turnKey === turnKey(m.turn_id)) : -1;
    if (at >= 0) entries.splice(at, 0, row);
    else entries.push(row);
  }
  return s;
}

/**
 * The turns that answer one of `admissions` (admission id → true: the reports announced) and
 * have no report row yet: the page reads the transcript for those.
 */
export function turnsMissingReports(state, admissions) {
  const shown = new Set(state.entries.filter((r) => r.type === "report" && r.turnId).map((r) => r.turnId));
  return Object.values(state.turns)
    .filter((t) => t.id && t.admissionId && admissions[t.admissionId] && !shown.has(t.id))
    .map((t) => t.id);
}

/** An input this page is sending, shown before the server has taken it. */
export function sendStarted(state, sentId, text, attachments = []) {
  const s = draft(state);
  addEntry(s, { key: `sent:${sentId}`, type: "user", text, attachments, pending: true, admissionId: null });
  return s;
}

/**
 * The server took the input: the turn it starts is drawn right after it. Its `admission.queued`
 * may have come first: then it named this row already, or (the server stored other words, a
 * secret masked) has a row of its own, which stays in place of this one.
 */
export function sendAccepted(state, sentId, admissionId) {
  const s = draft(state);
  const i = s.entries.findIndex((r) => r.key === `sent:${sentId}`);
  if (i < 0) return s;
  const row = s.entries[i];
  const entries = own(s, "entries");
  if (row.admissionId) {
    // An identical input from elsewhere came first and took this row: both rows stay, each
    // showing one of the two.
    entries[i] = { ...row, pending: false };
  } else if (entries.some((r) => r.type === "user" && r.admissionId === admissionId)) {
    entries.splice(i, 1);
  } else {
    entries[i] = { ...row, pending: false, admissionId };
  }
  return s;
}

/** The input was not taken: its row goes. */
export function sendFailed(state, sentId) {
  const s = draft(state);
  s.entries = s.entries.filter((r) => r.key !== `sent:${sentId}`);
  return s;
}

/** This page's own decision, shown before its `approval.resolved` event arrives. */
export function resolveApproval(state, approvalId, decision) {
  const s = draft(state);
  resolve(s, approvalId, decision);
  return s;
}

/** A `turn.unknown` from before the opening snapshot whose admission is still unretried. */
export function addUnknownTurn(state, e) {
  const s = draft(state);
  const d = e.data || {};
  unknownTurn(s, { ...d, admission_id: d.admission_id || e.admission_id });
  return s;
}

/** A banner answered (retried, skipped) or dismissed. */
export function dropBanner(state, key) {
  const s = draft(state);
  removeBanner(s, key);
  return s;
}

// ---------- the copy being changed ----------
// A transition works on a shallow copy of the state; `own` copies a top-level map or list the
// first time the transition changes it, so the input is never written to.

/** The fields each copy has copied already; the states handed out stay plain objects. */
const OWNED = new WeakMap();

function draft(state) {
  const s = { ...state };
  OWNED.set(s, new Set());
  return s;
}

function own(s, field) {
  const owned = OWNED.get(s);
  if (!owned.has(field)) {
    s[field] = Array.isArray(s[field]) ? [...s[field]] : { ...s[field] };
    owned.add(field);
  }
  return s[field];
}

function addEntry(s, row) {
  own(s, "entries").push({ key: `r${nextKey(s)}`, ...row });
}

const turnKey = (turnId) => turnId || "none";

/** The turn's row, made on first sight: right after the input that started it, if shown. */
function ensureTurn(s, turnId, admissionId) {
  const key = turnKey(turnId);
  if (s.turns[key]) {
    if (admissionId && !s.turns[key].admissionId) own(s, "turns")[key] = { ...s.turns[key], admissionId };
    return;
  }
  own(s, "turns")[key] = { id: turnId || null, admissionId: admissionId || null, items: [], spent: null };
  const row = { key: `turn:${key}`, type: "turn", turnKey: key };
  const entries = own(s, "entries");
  const after = admissionId ? entries.findIndex((r) => r.type === "user" && r.admissionId === admissionId) : -1;
  if (after >= 0) entries.splice(after + 1, 0, row);
  else entries.push(row);
}

function editTurn(s, turnId, change) {
  const key = turnKey(turnId);
  own(s, "turns")[key] = change(s.turns[key]);
}

function editTool(s, callId, change) {
  own(s, "tools")[callId] = change(s.tools[callId]);
}

// ---------- tool cards and approvals ----------

/** The card of `callId`, described again if known, else new at the end of its turn. */
function card(s, callId, name, args, turnId) {
  const known = s.tools[callId];
  if (known) {
    editTool(s, callId, (c) => ({ ...c, name: name || c.name, args: args !== undefined ? args : c.args }));
    return;
  }
  own(s, "tools")[callId] = {
    callId,
    name,
    args,
    status: "pending",
    progress: null,
    result: null,
    durationMs: null,
    approvals: [],
  };
  // The text before the call is done; text after it starts a new block.
  editTurn(s, turnId, (t) => {
    const done = settle(t);
    return withItems(done, [...done.items, { key: `tool:${callId}`, type: "tool", callId }]);
  });
}

/** A new status; a duration shown belonged to the status before. */
const withStatus = (c, status) => ({ ...c, status, durationMs: null });

function withResult(c, text, durationMs) {
  const shown = typeof durationMs === "number" ? durationMs : c.durationMs;
  return { ...c, progress: null, result: text ?? "", durationMs: shown };
}

/** An approval is shown once: one already known (open or decided) is not asked again. */
function approval(s, d, turnId) {
  if (s.approvals[d.approval_id]) return;
  ensureTurn(s, turnId);
  card(s, d.call_id, d.name, d.args, turnId);
  editTool(s, d.call_id, (c) => ({ ...withStatus(c, "approval"), approvals: [...c.approvals, d.approval_id] }));
  own(s, "approvals")[d.approval_id] = {
    approvalId: d.approval_id,
    callId: d.call_id,
    name: d.name,
    reason: d.reason || null,
    expiresAt: d.expires_at,
    decision: null,
  };
}

function resolve(s, approvalId, decision) {
  const a = s.approvals[approvalId];
  if (!a || a.decision) return;
  own(s, "approvals")[approvalId] = { ...a, decision };
  if (s.tools[a.callId]) editTool(s, a.callId, (c) => withStatus(c, decision === "approve" ? "pending" : "denied"));
}

// ---------- banners ----------

function addBanner(s, banner) {
  if (s.banners.some((b) => b.key === banner.key)) return;
  own(s, "banners").push(banner);
}

function removeBanner(s, key) {
  if (s.banners.some((b) => b.key === key)) s.banners = s.banners.filter((b) => b.key !== key);
}

// ---------- inputs ----------

/**
 * An input admitted from any door (`admission.queued`): shown at once as the session's input,
 * unless it is one this page shows already (its own, on its way: the same words and files).
 * Reports of sub-agents and background processes get their rows from the transcript.
 */
function queued(s, d) {
  if (typeof d.text !== "string" || d.source === "subagent" || d.source === "process") return;
  if (s.entries.some((r) => r.type === "user" && r.admissionId === d.admission_id)) return;
  const attachments = Array.isArray(d.attachments) ? d.attachments : [];
  const files = (list) => list.map((a) => a.file_id).join(" ");
  const mine = s.entries.findIndex(
    (r) => r.type === "user" && r.pending && !r.admissionId && r.text === d.text && files(r.attachments || []) === files(attachments),
  );
  if (mine >= 0) {
    const entries = own(s, "entries");
    entries[mine] = { ...entries[mine], pending: false, admissionId: d.admission_id };
    return;
  }
  addEntry(s, { type: "user", text: d.text, attachments, pending: false, admissionId: d.admission_id });
}

function unknownTurn(s, d) {
  if (!d.admission_id) return;
  const failureMessage = d.failure_message || null;
  addBanner(s, { key: `turn:${d.admission_id}`, kind: "turn", admissionId: d.admission_id, failureMessage });
}

function unknownToolRun(s, callId, name) {
  addBanner(s, { key: `tool:${callId}`, kind: "tool", callId, name: name || null });
}

function flushDeferred(s) {
  const { approvals, unknownToolRuns } = s.deferred;
  s.deferred = null;
  for (const a of approvals) approval(s, a, null);
  for (const r of unknownToolRuns) unknownToolRun(s, r.call_id, r.name);
}

// ---------- the transcript's rows ----------

function addMessage(s, m) {
  if (s.messageIds[m.id]) return;
  own(s, "messageIds")[m.id] = true;
  addRow(s, m);
  // The last row of a turn says how it went where events said it live: its resumes and how
  // its answer stopped (docs/api.md, Message), so a reload keeps the notes.
  if (m.turn_id && (m.turn_resumes || STOPPED[m.turn_stop_reason])) {
    ensureTurn(s, m.turn_id);
    editTurn(s, m.turn_id, (t) => {
      let done = (m.turn_resumes || []).reduce((u, r) => withResumed(s, u, r, true), t);
      if (STOPPED[m.turn_stop_reason]) done = withNote(s, settle(done), STOPPED[m.turn_stop_reason], "warn");
      return done;
    });
  }
  // A transcript read later still shows what each turn cost (the last row of a turn carries it).
  if (m.turn_usage && m.turn_id && s.turns[turnKey(m.turn_id)]) {
    const u = m.turn_usage;
    editTurn(s, m.turn_id, (t) => (t.spent ? t : { ...t, spent: { usage: u, cost: u.cost_usd } }));
  }
}

function addRow(s, m) {
  if (m.role === "user") {
    const report = parseReport(m.content);
    if (report) addEntry(s, { type: "report", report, turnId: m.turn_id || null });
    else
      addEntry(s, {
        type: "user",
        text: m.content || "",
        attachments: m.attachments || [],
        pending: false,
        admissionId: m.admission_id || null,
      });
  } else if (m.role === "assistant") {
    ensureTurn(s, m.turn_id);
    if (m.content) editTurn(s, m.turn_id, (t) => withText(s, t, m.content));
    for (const call of m.tool_calls || []) {
      const fn = call.function || {};
      card(s, call.id, call.name || fn.name, call.arguments ?? call.args ?? fn.arguments, m.turn_id);
    }
    if (m.display && m.display.boundary) {
      const reason = m.display.failure_reason ? `: ${m.display.failure_reason}` : "";
      const text = `${BOUNDARY[m.display.closed_as] || m.display.closed_as}${reason}`;
      editTurn(s, m.turn_id, (t) => withNote(s, t, text, "warn"));
    }
  } else if (m.role === "tool") {
    if (s.tools[m.tool_call_id]) editTool(s, m.tool_call_id, (c) => withResult(withStatus(c, "done"), m.content || ""));
  } else if (m.role === "system" && m.summary_epoch) {
    const n = m.display && m.display.replaced_messages;
    // A summary made without a model (the summarizer failed) says so, and why.
    const why = m.display && m.display.fallback;
    const how = why ? `, without a model (${why})` : "";
    addEntry(s, {
      type: "system",
      text: `Earlier messages were summarized for the model${n ? ` (${n} messages)` : ""}${how}; they are all kept here.`,
    });
  }
}

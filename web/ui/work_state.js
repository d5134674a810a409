// The work an open session started that runs outside its turns, as data: its sub-agents
// (`delegate_task`) and background processes (`terminal` with `background: true`), each with
// how it ended, and the approvals a running sub-agent waits for. Seeded from
// `GET …/subagents` and `GET …/processes`, kept live by `subagent.started`,
// `subagent.finished`, `process.started` and `process.exited`. Also reads the header of a
// report the gateway admitted into the session. Pure: no DOM, no fetch, no timers; each
// function answers a new state and leaves the one it was given alone. work_view.js draws it.

/** How a sub-agent or a process may end; once ended, its status never goes back to running. */
export const SUBAGENT_ENDED = ["completed", "failed", "interrupted", "unknown"];
export const PROCESS_ENDED = ["exited", "killed", "unknown"];

/** The first line of every report; the last line is `REPORT_END`. */
const REPORT_HEAD = /^\[turnkey:(subagent|process)-report((?: [a-z_]+=[^\s\]]*)*)\]$/;
export const REPORT_END = "[end of report: this message comes from the gateway, not from the user]";

/**
 * No work yet. `subagents` by task id: `{taskId, childSessionId, goal, status, result,
 * createdAt, approvals: [{approvalId, callId, name, args, reason, expiresAt}]}`; `processes`
 * by process id: `{processId, command, status, exitCode, tail, startedAt}`; `order` the cards
 * as `subagent:<id>` / `process:<id>`, oldest first; `reportAdmissions` the admissions of the
 * reports announced so far (admission id → true).
 */
export function initialWork() {
  return { subagents: {}, processes: {}, order: [], reportAdmissions: {} };
}

/** `work` with the lists as read (`{subagents, processes}`, either may be missing) merged in. */
export function seedWork(work, { subagents = [], processes = [] } = {}) {
  const w = copy(work);
  const fresh = [];
  for (const t of subagents) {
    if (!t || !t.task_id) continue;
    const known = w.subagents[t.task_id];
    if (!known) fresh.push({ key: `subagent:${t.task_id}`, at: t.created_at || "" });
    putSubagent(w, t.task_id, {
      childSessionId: t.child_session_id,
      goal: t.goal,
      status: t.status,
      result: t.result ?? null,
      createdAt: t.created_at || null,
    });
  }
  for (const p of processes) {
    if (!p || !p.process_id) continue;
    const known = w.processes[p.process_id];
    if (!known) fresh.push({ key: `process:${p.process_id}`, at: p.started_at || "" });
    putProcess(w, p.process_id, {
      command: p.command,
      status: p.status,
      exitCode: typeof p.exit_code === "number" ? p.exit_code : null,
      tail: p.tail ?? null,
      startedAt: p.started_at || null,
    });
  }
  // The new cards in the order they started (RFC 3339 times of one server sort as text).
  fresh.sort((a, b) => (a.at < b.at ? -1 : a.at > b.at ? 1 : 0));
  if (fresh.length > 0) w.order = [...w.order, ...fresh.map((f) => f.key)];
  return same(work, w);
}

/** The state after event `e`; any kind but the four is answered as `work` itself. */
export function applyWorkEvent(work, e) {
  if (!e || !e.data) return work;
  const d = e.data;
  const w = copy(work);
  switch (e.kind) {
    case "subagent.started":
      if (!d.task_id) return work;
      if (!w.subagents[d.task_id]) w.order = [...w.order, `subagent:${d.task_id}`];
      putSubagent(w, d.task_id, {
        childSessionId: d.child_session_id,
        goal: d.goal,
        status: "running",
        createdAt: e.created_at || null,
      });
      break;
    case "subagent.finished":
      if (!d.task_id) return work;
      if (!w.subagents[d.task_id]) w.order = [...w.order, `subagent:${d.task_id}`];
      putSubagent(w, d.task_id, { childSessionId: d.child_session_id, status: d.status });
      reported(w, d.admission_id);
      break;
    case "process.started":
      if (!d.process_id) return work;
      if (!w.processes[d.process_id]) w.order = [...w.order, `process:${d.process_id}`];
      putProcess(w, d.process_id, { command: d.command, status: "running", startedAt: e.created_at || null });
      break;
    case "process.exited":
      if (!d.process_id) return work;
      if (!w.processes[d.process_id]) w.order = [...w.order, `process:${d.process_id}`];
      putProcess(w, d.process_id, {
        status: d.status,
        exitCode: typeof d.exit_code === "number" ? d.exit_code : null,
      });
      reported(w, d.admission_id);
      break;
    default:
      return work;
  }
  return same(work, w);
}

/**
 * The approvals the running sub-agent of session `childSessionId` waits for, as its
 * `GET /v1/sessions/{child}` answered them (`pending_approvals`); one that has ended waits
 * for none.
 */
export function setChildApprovals(work, childSessionId, pending) {
  const t = Object.values(work.subagents).find((x) => x.childSessionId === childSessionId);
  if (!t) return work;
  const approvals = t.status === "running"
    ? (pending || []).map((a) => ({
      approvalId: a.approval_id,
      callId: a.call_id,
      name: a.name,
      args: a.args,
      reason: a.reason || null,
      expiresAt: a.expires_at || null,
    }))
    : [];
  const was = t.approvals.map((a) => a.approvalId).join(",");
  if (approvals.map((a) => a.approvalId).join(",") === was) return work;
  return { ...work, subagents: { ...work.subagents, [t.taskId]: { ...t, approvals } } };
}

/** An approval of a child decided from this page: it waits no more. */
export function approvalDecided(work, approvalId) {
  const t = Object.values(work.subagents).find((x) => x.approvals.some((a) => a.approvalId === approvalId));
  if (!t) return work;
  const approvals = t.approvals.filter((a) => a.approvalId !== approvalId);
  return { ...work, subagents: { ...work.subagents, [t.taskId]: { ...t, approvals } } };
}

/** The child sessions of the sub-agents still running, newest first. */
export function runningChildren(work) {
  return work.order
    .filter((k) => k.startsWith("subagent:"))
    .map((k) => work.subagents[k.slice(9)])
    .filter((t) => t && t.status === "running" && t.childSessionId)
    .map((t) => t.childSessionId)
    .reverse();
}

/** The cards in order: `{kind: "subagent" | "process", key, item}`. */
export function workCards(work) {
  return work.order
    .map((key) => {
      const [kind, id] = [key.slice(0, key.indexOf(":")), key.slice(key.indexOf(":") + 1)];
      const item = kind === "subagent" ? work.subagents[id] : work.processes[id];
      return item ? { kind, key, item } : null;
    })
    .filter(Boolean);
}

/** "2 sub-agents (1 running) · 1 process" — what the Work section's summary line says. */
export function workSummary(work) {
  const count = (items, one, many) => {
    const all = Object.values(items);
    if (all.length === 0) return null;
    const running = all.filter((x) => x.status === "running").length;
    const waiting = all.filter((x) => x.approvals && x.approvals.length > 0).length;
    const notes = [];
    if (running > 0) notes.push(`${running} running`);
    if (waiting > 0) notes.push(`${waiting} waiting for approval`);
    return `${all.length} ${all.length === 1 ? one : many}${notes.length ? ` (${notes.join(", ")})` : ""}`;
  };
  return [count(work.subagents, "sub-agent", "sub-agents"), count(work.processes, "process", "processes")]
    .filter(Boolean)
    .join(" · ");
}

/** What a process's status badge says: "running", "exited · code 3", "killed", "outcome unknown". */
export function processStatusText(p) {
  if (p.status === "exited") return p.exitCode === null || p.exitCode === undefined ? "exited" : `exited · code ${p.exitCode}`;
  if (p.status === "unknown") return "outcome unknown";
  return p.status || "running";
}

/** What a sub-agent's status badge says. */
export function subagentStatusText(t) {
  if (t.status === "unknown") return "outcome unknown";
  if (t.status === "running" && t.approvals && t.approvals.length > 0) return "needs approval";
  return t.status || "running";
}

/**
 * A report the gateway admitted (a user-role row), read: `null` unless `text` starts with
 * `[turnkey:subagent-report …]` or `[turnkey:process-report …]`. Else `{kind: "subagent" |
 * "process", status, taskId, childSessionId, processId, exitCode, title, body}`: `title` the
 * line after the header (`Goal: …` or `Command: …`), `body` the rest without the closing
 * line; `exitCode` a number or null.
 */
export function parseReport(text) {
  if (typeof text !== "string") return null;
  const nl = text.indexOf("\n");
  const head = REPORT_HEAD.exec(nl < 0 ? text : text.slice(0, nl));
  if (!head) return null;
  const fields = {};
  for (const pair of head[2].trim().split(" ").filter(Boolean)) {
    const eq = pair.indexOf("=");
    fields[pair.slice(0, eq)] = pair.slice(eq + 1);
  }
  let rest = nl < 0 ? "" : text.slice(nl + 1);
  if (rest.endsWith(REPORT_END)) rest = rest.slice(0, -REPORT_END.length);
  rest = rest.replace(/\s+$/, "");
  let title = "";
  const first = rest.indexOf("\n");
  const line = first < 0 ? rest : rest.slice(0, first);
  if (/^(Goal|Command): /.test(line)) {
    title = line;
    rest = first < 0 ? "" : rest.slice(first + 1);
  }
  const code = Number(fields.exit_code);
  return {
    kind: head[1],
    status: fields.status || "unknown",
    taskId: fields.task_id || null,
    childSessionId: fields.child_session_id || null,
    processId: fields.process_id || null,
    exitCode: fields.exit_code !== undefined && fields.exit_code !== "none" && Number.isFinite(code) ? code : null,
    title,
    body: rest.replace(/^\s*\n/, ""),
  };
}

// ---------- the copy being changed ----------

function copy(work) {
  return { ...work };
}

/** `work` itself when nothing in `w` changed, else `w`. */
function same(work, w) {
  return Object.keys(w).every((k) => w[k] === work[k]) ? work : w;
}

const endedAs = (ended, was, now) => (ended.includes(was) && !ended.includes(now) ? was : now);

/** Merges `fields` (those not undefined) into sub-agent `id`; an ended one stays ended. */
function putSubagent(w, id, fields) {
  const was = w.subagents[id] || {
    taskId: id,
    childSessionId: null,
    goal: "",
    status: "running",
    result: null,
    createdAt: null,
    approvals: [],
  };
  const next = merge(was, fields);
  next.status = endedAs(SUBAGENT_ENDED, was.status, next.status);
  if (next.status !== "running" && next.approvals.length > 0) next.approvals = [];
  if (!changedFrom(was, next) && w.subagents[id]) return;
  w.subagents = { ...w.subagents, [id]: next };
}

/** Merges `fields` into process `id`; an ended one stays ended. */
function putProcess(w, id, fields) {
  const was = w.processes[id] || {
    processId: id,
    command: "",
    status: "running",
    exitCode: null,
    tail: null,
    startedAt: null,
  };
  const next = merge(was, fields);
  next.status = endedAs(PROCESS_ENDED, was.status, next.status);
  if (!changedFrom(was, next) && w.processes[id]) return;
  w.processes = { ...w.processes, [id]: next };
}

function merge(was, fields) {
  const next = { ...was };
  for (const [k, v] of Object.entries(fields)) {
    if (v === undefined) continue;
    // A null never wipes what is known (an event carries less than the list).
    if (v === null && was[k] !== null && was[k] !== undefined) continue;
    next[k] = v;
  }
  return next;
}

function changedFrom(was, next) {
  return Object.keys(next).some((k) => next[k] !== was[k]);
}

function reported(w, admissionId) {
  if (!admissionId || w.reportAdmissions[admissionId]) return;
  w.reportAdmissions = { ...w.reportAdmissions, [admissionId]: true };
}

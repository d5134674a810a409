// Unit tests of the Work section's state (../work_state.js) and of report rows in the
// transcript (../session_state.js), without a browser: `node --test web/ui/test/`. Every state
// handed to a transition is frozen first, so a transition that writes to its input throws.
import test from "node:test";
import assert from "node:assert/strict";
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
  REPORT_END,
} from "../work_state.js";
import { initialState, applyEvent, addMessages, addReportMessages, turnsMissingReports } from "../session_state.js";

function deepFreeze(v) {
  if (v && typeof v === "object" && !Object.isFrozen(v)) {
    Object.freeze(v);
    for (const x of Object.values(v)) deepFreeze(x);
  }
  return v;
}

let seq = 0;
function ev(kind, data = {}, extra = {}) {
  seq += 1;
  return { session_id: "p1", seq, kind, turn_id: null, created_at: "2026-12-01T00:00:00Z", data, ...extra };
}

function play(events, work = initialWork()) {
  return events.reduce((w, e) => deepFreeze(applyWorkEvent(deepFreeze(w), e)), deepFreeze(work));
}

const cards = (w) => workCards(w).map(({ kind, item }) => `${kind}:${item.status}`);

const SUB_REPORT =
  "[turnkey:subagent-report task_id=t1 status=completed child_session_id=c1]\nGoal: find the number\n\nalpha answer: 42\n" +
  REPORT_END;
const PROC_REPORT =
  "[turnkey:process-report process_id=pr1 status=exited exit_code=3]\nCommand: echo hi; exit 3\nIt exited with code 3.\n\nLast output:\nhi\n" +
  REPORT_END;

test("the four events make and settle the cards, in the order they started", () => {
  const w = play([
    ev("subagent.started", { task_id: "t1", child_session_id: "c1", goal: "find the number" }),
    ev("process.started", { process_id: "pr1", command: "echo hi; exit 3" }),
  ]);
  assert.deepEqual(cards(w), ["subagent:running", "process:running"]);
  assert.equal(w.subagents.t1.goal, "find the number");
  assert.equal(w.subagents.t1.childSessionId, "c1");
  assert.equal(w.processes.pr1.command, "echo hi; exit 3");
  assert.deepEqual(runningChildren(w), ["c1"]);
  assert.equal(workSummary(w), "1 sub-agent (1 running) · 1 process (1 running)");

  const done = play(
    [
      ev("process.exited", { process_id: "pr1", exit_code: 3, status: "exited", admission_id: "a-proc" }),
      ev("subagent.finished", { task_id: "t1", status: "completed", admission_id: "a-sub", child_session_id: "c1" }),
    ],
    w,
  );
  assert.deepEqual(cards(done), ["subagent:completed", "process:exited"]);
  assert.equal(done.processes.pr1.exitCode, 3);
  assert.equal(processStatusText(done.processes.pr1), "exited · code 3");
  assert.equal(done.subagents.t1.goal, "find the number", "the finish keeps what the start said");
  assert.deepEqual(done.reportAdmissions, { "a-proc": true, "a-sub": true });
  assert.deepEqual(runningChildren(done), []);
  assert.equal(workSummary(done), "1 sub-agent · 1 process");
  // The earlier state is untouched, and another kind of event changes nothing.
  assert.deepEqual(cards(w), ["subagent:running", "process:running"]);
  assert.equal(play([ev("turn.started", { admission_id: "x" })], done), done);
});

test("a finish seen before its start still makes a card, and a replayed start does not reopen it", () => {
  const w = play([
    ev("subagent.finished", { task_id: "t9", status: "failed", admission_id: "a9", child_session_id: "c9" }),
    ev("subagent.started", { task_id: "t9", child_session_id: "c9", goal: "late start" }),
    ev("process.exited", { process_id: "p9", exit_code: null, status: "unknown", admission_id: "b9" }),
    ev("process.started", { process_id: "p9", command: "sleep 30" }),
  ]);
  assert.deepEqual(cards(w), ["subagent:failed", "process:unknown"]);
  assert.equal(w.subagents.t9.goal, "late start");
  assert.equal(w.processes.p9.command, "sleep 30");
  assert.equal(w.processes.p9.exitCode, null);
  assert.equal(processStatusText(w.processes.p9), "outcome unknown");
  // The same events again change nothing: the same state is answered.
  const again = play([ev("subagent.finished", { task_id: "t9", status: "failed", admission_id: "a9", child_session_id: "c9" })], w);
  assert.equal(again, w);
});

test("seeding from the two lists orders the cards by start and merges with the events", () => {
  const seeded = deepFreeze(
    seedWork(initialWork(), {
      subagents: [
        { task_id: "t2", child_session_id: "c2", goal: "second", status: "running", depth: 1, created_at: "2026-12-01T10:00:02Z" },
        { task_id: "t1", child_session_id: "c1", goal: "first", status: "completed", result: SUB_REPORT, depth: 1, created_at: "2026-12-01T10:00:00Z" },
      ],
      processes: [
        { process_id: "pr1", command: "make", status: "exited", exit_code: 0, tail: "ok\n", started_at: "2026-12-01T10:00:01Z" },
      ],
    }),
  );
  assert.deepEqual(
    workCards(seeded).map((c) => c.key),
    ["subagent:t1", "process:pr1", "subagent:t2"],
  );
  assert.equal(seeded.subagents.t1.result, SUB_REPORT);
  assert.equal(seeded.processes.pr1.tail, "ok\n");
  assert.deepEqual(runningChildren(seeded), ["c2"]);
  // An event replayed from before the lists were read does not undo what they say.
  const replayed = play([ev("subagent.started", { task_id: "t1", child_session_id: "c1", goal: "first" })], seeded);
  assert.equal(replayed.subagents.t1.status, "completed");
  assert.equal(replayed.subagents.t1.result, SUB_REPORT);
  // Reading the lists again with nothing new answers the same state.
  assert.equal(seedWork(seeded, { subagents: [{ task_id: "t1", child_session_id: "c1", goal: "first", status: "completed", result: SUB_REPORT, created_at: "2026-12-01T10:00:00Z" }] }), seeded);
  // A later read brings the finished child's report.
  const later = seedWork(play([ev("subagent.finished", { task_id: "t2", status: "completed", admission_id: "a2", child_session_id: "c2" })], seeded), {
    subagents: [{ task_id: "t2", child_session_id: "c2", goal: "second", status: "completed", result: "[turnkey:subagent-report …]", created_at: "2026-12-01T10:00:02Z" }],
  });
  assert.equal(later.subagents.t2.result, "[turnkey:subagent-report …]");
  assert.equal(later.order.length, 3, "no card twice");
});

test("a running child's pending approvals are kept on its card until decided or ended", () => {
  const w = play([ev("subagent.started", { task_id: "t1", child_session_id: "c1", goal: "g" })]);
  const pending = [{ approval_id: "ap1", call_id: "k1", name: "terminal", args: { command: "rm x" }, reason: "dangerous", expires_at: "2030-01-01T00:00:00Z" }];
  const asked = deepFreeze(setChildApprovals(w, "c1", pending));
  assert.deepEqual(asked.subagents.t1.approvals.map((a) => [a.approvalId, a.name, a.reason]), [["ap1", "terminal", "dangerous"]]);
  assert.equal(subagentStatusText(asked.subagents.t1), "needs approval");
  assert.equal(workSummary(asked), "1 sub-agent (1 running, 1 waiting for approval)");
  assert.equal(setChildApprovals(asked, "c1", pending), asked, "the same list again changes nothing");
  assert.equal(setChildApprovals(asked, "someone-else", []), asked);
  const decided = approvalDecided(asked, "ap1");
  assert.deepEqual(decided.subagents.t1.approvals, []);
  assert.equal(subagentStatusText(decided.subagents.t1), "running");
  // A child that ended waits for nothing, whatever a late read says.
  const ended = play([ev("subagent.finished", { task_id: "t1", status: "completed", admission_id: "a1", child_session_id: "c1" })], asked);
  assert.deepEqual(ended.subagents.t1.approvals, []);
  assert.deepEqual(setChildApprovals(ended, "c1", pending).subagents.t1.approvals, []);
});

test("a report's header, title and body are read; anything else is not a report", () => {
  assert.deepEqual(parseReport(SUB_REPORT), {
    kind: "subagent",
    status: "completed",
    taskId: "t1",
    childSessionId: "c1",
    processId: null,
    exitCode: null,
    title: "Goal: find the number",
    body: "alpha answer: 42",
  });
  const p = parseReport(PROC_REPORT);
  assert.equal(p.kind, "process");
  assert.equal(p.status, "exited");
  assert.equal(p.processId, "pr1");
  assert.equal(p.exitCode, 3);
  assert.equal(p.title, "Command: echo hi; exit 3");
  assert.equal(p.body, "It exited with code 3.\n\nLast output:\nhi");
  const lost = parseReport("[turnkey:process-report process_id=pr2 status=unknown exit_code=none]\nCommand: x\nIts outcome cannot be known.\n" + REPORT_END);
  assert.equal(lost.exitCode, null);
  assert.equal(lost.status, "unknown");
  for (const text of [
    "hello",
    "",
    null,
    " [turnkey:subagent-report task_id=t1 status=completed]",
    "[turnkey:schedule-fired id=1]\nrun it",
    "Please quote [turnkey:subagent-report task_id=t1 status=completed child_session_id=c1]",
  ]) {
    assert.equal(parseReport(text), null, String(text));
  }
});

test("report rows of the transcript are report entries, not user bubbles", () => {
  const s = addMessages(initialState(), [
    { id: "m1", role: "user", content: "Research alpha", turn_id: "u1" },
    { id: "m2", role: "assistant", content: "I asked a sub-agent.", turn_id: "u1" },
    { id: "m3", role: "user", content: SUB_REPORT, turn_id: "u2" },
    { id: "m4", role: "assistant", content: "The sub-agent found 42.", turn_id: "u2" },
  ]);
  assert.deepEqual(
    s.entries.map((r) => (r.type === "turn" ? `turn:${r.turnKey}` : `${r.type}`)),
    ["user", "turn:u1", "report", "turn:u2"],
  );
  const report = s.entries[2];
  assert.equal(report.report.kind, "subagent");
  assert.equal(report.report.childSessionId, "c1");
  assert.equal(report.turnId, "u2");
});

test("a report admitted while the page is open gets its row before its turn, once", () => {
  seq = 0;
  const live = [
    ev("turn.started", { admission_id: "a-proc" }, { turn_id: "u3", admission_id: "a-proc" }),
    ev("message.delta", { text: "It failed" }, { turn_id: "u3" }),
  ].reduce((s, e) => deepFreeze(applyEvent(s, e)), deepFreeze(initialState()));
  const admissions = { "a-proc": true };
  assert.deepEqual(turnsMissingReports(live, admissions), ["u3"]);
  assert.deepEqual(turnsMissingReports(live, {}), [], "not a report's turn");
  const messages = [
    { id: "m1", role: "user", content: "Build it", turn_id: "u1" },
    { id: "m5", role: "user", content: PROC_REPORT, turn_id: "u3" },
  ];
  const shown = deepFreeze(addReportMessages(live, messages));
  assert.deepEqual(shown.entries.map((r) => r.type), ["report", "turn"]);
  assert.equal(shown.entries[0].report.exitCode, 3);
  assert.deepEqual(turnsMissingReports(shown, admissions), []);
  assert.equal(addReportMessages(shown, messages).entries.length, 2, "not twice");
});

// Unit tests of the session view's state (../session_state.js), without a browser: run with
// `node --test web/ui/test/*.test.mjs` (.ci/run; `cargo test` runs them too when node is there).
// Every state handed to a transition is frozen first, so a transition that writes to its input
// throws here instead of passing.
import test from "node:test";
import assert from "node:assert/strict";
import {
  initialState,
  applyEvent,
  applySession,
  addMessages,
  sendStarted,
  sendAccepted,
  sendFailed,
  resolveApproval,
  dropBanner,
  headerUsage,
} from "../session_state.js";

function deepFreeze(v) {
  if (v && typeof v === "object" && !Object.isFrozen(v)) {
    Object.freeze(v);
    for (const x of Object.values(v)) deepFreeze(x);
  }
  return v;
}

/** Applies `events` in turn to `state`, freezing every state before it is used. */
function play(events, state = initialState()) {
  return events.reduce((s, e) => deepFreeze(applyEvent(deepFreeze(s), e)), deepFreeze(state));
}

let seq = 0;
/** An event as the server sends it, with the next seq. */
function ev(kind, data = {}, turnId = "turn-a", extra = {}) {
  seq += 1;
  return { session_id: "s1", seq, kind, turn_id: turnId, created_at: "2026-12-01T00:00:00Z", data, ...extra };
}

/** A turn's blocks in order, as short strings: `text:…`, `live:…`, `tool:…`, `note:kind:…`. */
function blocks(state, turnId = "turn-a") {
  const t = state.turns[turnId];
  assert.ok(t, `no turn ${turnId}`);
  return t.items.map((i) => {
    if (i.type === "text") return `${i.live ? "live" : "text"}:${i.text}`;
    if (i.type === "tool") return `tool:${i.callId}`;
    return `note:${i.kind}:${i.text}`;
  });
}

const rows = (state) => state.entries.map((r) => (r.type === "turn" ? `turn:${r.turnKey}` : `${r.type}:${r.text}`));

test("a streamed answer grows in one live block, then message.complete replaces it", () => {
  const streamed = play([ev("turn.started", { admission_id: "adm-a" }), ev("message.delta", { text: "Hel" }), ev("message.delta", { text: "lo wor" })]);
  assert.deepEqual(blocks(streamed), ["live:Hello wor"]);
  const liveKey = streamed.turns["turn-a"].items[0].key;

  const done = play([ev("message.complete", { message_id: "m1", text: "Hello world." })], streamed);
  assert.deepEqual(blocks(done), ["text:Hello world."], "the authoritative text, in the same block, no longer live");
  assert.equal(done.turns["turn-a"].items[0].key, liveKey);
  assert.deepEqual(rows(done), ["turn:turn-a"]);
  // The streamed state is untouched: a new state was answered.
  assert.deepEqual(blocks(streamed), ["live:Hello wor"]);
});

test("an event whose seq was applied already changes nothing (a reconnect's replay)", () => {
  const first = ev("turn.started");
  const delta = ev("message.delta", { text: "once " });
  const s = play([first, delta]);
  assert.equal(applyEvent(s, delta), s, "the same delta again");
  assert.equal(applyEvent(s, first), s, "an older seq");
  assert.equal(applyEvent(s, { ...delta, seq: undefined }), s, "no seq at all");
  const after = play([first, delta, delta, ev("message.delta", { text: "twice" })]);
  assert.deepEqual(blocks(after), ["live:once twice"]);
  assert.equal(after.lastSeq, seq);
});

test("a tool round shows text, the card started, its progress and its result, in order", () => {
  let s = play([ev("turn.started"), ev("message.delta", { text: "Let me look." })]);
  s = play([ev("tool.started", { call_id: "c1", name: "read_file", args: { path: "notes.txt" } })], s);
  assert.deepEqual(blocks(s), ["text:Let me look.", "tool:c1"], "the text before the call is done");
  assert.equal(s.tools.c1.status, "running");
  assert.deepEqual(s.tools.c1.args, { path: "notes.txt" });

  s = play([ev("tool.progress", { call_id: "c1", message: "reading" })], s);
  assert.equal(s.tools.c1.progress, "reading");
  assert.equal(s.tools.c1.result, null);

  s = play([ev("tool.completed", { call_id: "c1", name: "read_file", status: "ok", preview: "hello", duration_ms: 1200 })], s);
  assert.deepEqual(
    { status: s.tools.c1.status, progress: s.tools.c1.progress, result: s.tools.c1.result, ms: s.tools.c1.durationMs },
    { status: "ok", progress: null, result: "hello", ms: 1200 },
  );
  assert.deepEqual(s.tools.c1.args, { path: "notes.txt" }, "the completion keeps the arguments");

  s = play([ev("message.delta", { text: "It says hello." })], s);
  assert.deepEqual(blocks(s), ["text:Let me look.", "tool:c1", "live:It says hello."], "text after the call is a new block");
  // Progress for a call never started is not shown anywhere.
  s = play([ev("tool.progress", { call_id: "c9", message: "?" })], s);
  assert.equal(s.tools.c9, undefined);
});

test("an approval is asked on its card, then decided once", () => {
  const request = { approval_id: "ap1", call_id: "c1", name: "terminal", args: { command: "ls" }, reason: "runs a command", expires_at: "2026-12-01T00:05:00Z" };
  let s = play([ev("turn.started"), ev("approval.requested", request)]);
  assert.deepEqual(blocks(s), ["tool:c1"]);
  assert.equal(s.tools.c1.status, "approval");
  assert.deepEqual(s.tools.c1.approvals, ["ap1"]);
  assert.deepEqual(
    { decision: s.approvals.ap1.decision, reason: s.approvals.ap1.reason, expiresAt: s.approvals.ap1.expiresAt },
    { decision: null, reason: "runs a command", expiresAt: "2026-12-01T00:05:00Z" },
  );
  // The same approval again (the opening snapshot also lists it) adds no second question.
  s = play([ev("approval.requested", request)], s);
  assert.deepEqual(s.tools.c1.approvals, ["ap1"]);

  s = play([ev("approval.resolved", { approval_id: "ap1", call_id: "c1", decision: "approve" })], s);
  assert.equal(s.approvals.ap1.decision, "approve");
  assert.equal(s.tools.c1.status, "pending", "approved: waiting to run");
  // A later decision for a closed approval changes nothing.
  const late = resolveApproval(deepFreeze(s), "ap1", "deny");
  assert.equal(late.approvals.ap1.decision, "approve");

  const denied = play([ev("approval.requested", { ...request, approval_id: "ap2", call_id: "c2" }), ev("approval.resolved", { approval_id: "ap2", decision: "timeout" })], s);
  assert.equal(denied.approvals.ap2.decision, "timeout");
  assert.equal(denied.tools.c2.status, "denied");
});

test("a sub-agent's approval relayed into the session is left to the Work section", () => {
  const relayed = { approval_id: "ap9", call_id: "c1", name: "terminal", args: {}, reason: "r", session_id: "child-1", turn_id: "turn-child" };
  const s = play([ev("turn.started"), ev("approval.requested", relayed), ev("approval.resolved", { approval_id: "ap9", call_id: "c1", decision: "approve", session_id: "child-1" })]);
  assert.deepEqual(s.approvals, {});
  assert.deepEqual(blocks(s), []);
  assert.equal(s.tools.c1, undefined);
});

test("an interrupted turn stops streaming, says so and shows what it spent", () => {
  const s = play([
    ev("turn.started"),
    ev("message.delta", { text: "n1 n2 " }),
    ev("turn.finished", { result: "interrupted", failure_reason: "interrupted", usage: { input_tokens: 12, output_tokens: 3 }, cost: 0.001 }),
  ]);
  assert.deepEqual(blocks(s), ["text:n1 n2 ", "note:warn:Interrupted"]);
  assert.deepEqual(s.turns["turn-a"].spent, { usage: { input_tokens: 12, output_tokens: 3 }, cost: 0.001 });

  const failed = play([ev("turn.started", {}, "turn-b"), ev("turn.finished", { result: "failed", failure_reason: "provider_error", usage: {} }, "turn-b")]);
  assert.deepEqual(blocks(failed, "turn-b"), ["note:warn:Failed: provider_error"]);
  assert.equal(failed.turns["turn-b"].spent, null, "nothing spent, no usage line");

  const explained = play([
    ev("turn.started", {}, "turn-c"),
    ev("turn.finished", { result: "failed", failure_reason: "max_iterations", failure_message: "the turn reached its iteration limit", usage: {} }, "turn-c"),
  ]);
  assert.deepEqual(blocks(explained, "turn-c"), ["note:warn:Failed: the turn reached its iteration limit (max_iterations)"]);
});

test("status events give the session's state and queue depth", () => {
  let s = play([ev("status", { state: "running", queue_depth: 2 }, null)]);
  assert.deepEqual(s.status, { state: "running", queueDepth: 2 });
  s = play([ev("status", { state: "idle", queue_depth: 0 }, null)], s);
  assert.deepEqual(s.status, { state: "idle", queueDepth: 0 });
  assert.deepEqual(s.entries, [], "a status adds no row");
});

test("an event of a kind the view does not show is passed over without throwing", () => {
  const s = play([ev("turn.started"), ev("message.delta", { text: "hi" })]);
  const odd = ev("admission.queued", { admission_id: "adm-x", seq_in_queue: 1 });
  const after = play([odd, ev("something.new", null, null), { seq: seq + 1, kind: "no.data" }], s);
  seq += 1;
  assert.deepEqual(after.entries, s.entries);
  assert.deepEqual(after.turns, s.turns);
  assert.equal(after.lastSeq, seq, "its seq still counts");
});

test("events of another turn go to that turn, drawn after the input that started it", () => {
  let s = play([ev("turn.started", { admission_id: "adm-a" }), ev("message.delta", { text: "first " })]);
  s = deepFreeze(sendStarted(s, "k2", "second question"));
  s = deepFreeze(sendAccepted(s, "k2", "adm-b"));
  s = deepFreeze(sendStarted(s, "k3", "third question"));
  s = play([ev("turn.started", { admission_id: "adm-b" }, "turn-b"), ev("message.delta", { text: "second" }, "turn-b")], s);
  s = play([ev("message.delta", { text: "answer" })], s);
  assert.deepEqual(blocks(s, "turn-a"), ["live:first answer"]);
  assert.deepEqual(blocks(s, "turn-b"), ["live:second"]);
  assert.deepEqual(rows(s), ["turn:turn-a", "user:second question", "turn:turn-b", "user:third question"]);
  // An event without a turn id has a turn of its own.
  s = play([ev("message.delta", { text: "stray" }, null)], s);
  assert.deepEqual(blocks(s, "none"), ["live:stray"]);
  assert.deepEqual(blocks(s, "turn-a"), ["live:first answer"]);
});

test("a resumed turn drops the cut text; a turn left unknown gets a note and a banner", () => {
  let s = play([ev("turn.started"), ev("message.delta", { text: "s01 s02 " })]);
  s = play([ev("turn.resumed", { admission_id: "adm-a", attempt: 2, reason: "crash" }), ev("message.delta", { text: "s01 " })], s);
  assert.deepEqual(blocks(s), [
    "note:note:Resumed by itself after the server stopped mid-answer (attempt 2): the answer starts again.",
    "live:s01 ",
  ]);
  s = play([ev("turn.unknown", { reason: "crash", failure_message: "process died" }, "turn-a", { admission_id: "adm-a" })], s);
  assert.deepEqual(blocks(s).slice(1), ["text:s01 ", "note:warn:Outcome unknown (the gateway stopped during this turn)"]);
  assert.deepEqual(s.banners, [{ key: "turn:adm-a", kind: "turn", admissionId: "adm-a", failureMessage: "process died" }]);
  assert.deepEqual(dropBanner(deepFreeze(s), "turn:adm-a").banners, []);
});

test("a tool run left unknown asks a person; its completion takes the question away", () => {
  let s = play([ev("turn.started"), ev("tool.started", { call_id: "c1", name: "terminal", args: {} })]);
  s = play([ev("tool.completed", { call_id: "c1", name: "terminal", status: "unknown", preview: "" })], s);
  assert.equal(s.tools.c1.status, "unknown");
  assert.deepEqual(s.banners, [{ key: "tool:c1", kind: "tool", callId: "c1", name: "terminal" }]);
  s = play([ev("tool.completed", { call_id: "c1", name: "terminal", status: "skipped", preview: "skipped" })], s);
  assert.deepEqual(s.banners, []);
});

test("the transcript: rows once each, and a message.complete already in it drops the streamed copy", () => {
  const messages = [
    { id: "m1", role: "user", content: "hi", turn_id: "turn-a" },
    { id: "m2", role: "assistant", content: "Looking.", turn_id: "turn-a", tool_calls: [{ id: "c1", function: { name: "read_file", arguments: "{}" } }] },
    { id: "m3", role: "tool", tool_call_id: "c1", content: "file text" },
    { id: "m4", role: "assistant", content: "Done.", turn_id: "turn-a" },
    { id: "m5", role: "system", summary_epoch: 1, display: { replaced_messages: 4 } },
  ];
  let s = deepFreeze(addMessages(initialState(), messages));
  s = deepFreeze(addMessages(s, messages));
  assert.deepEqual(rows(s), ["user:hi", "turn:turn-a", "system:Earlier messages were summarized for the model (4 messages); they are all kept here."]);
  assert.deepEqual(blocks(s), ["text:Looking.", "tool:c1", "text:Done."]);
  assert.deepEqual({ status: s.tools.c1.status, result: s.tools.c1.result, name: s.tools.c1.name }, { status: "done", result: "file text", name: "read_file" });

  s = play([ev("message.delta", { text: "Done" }), ev("message.complete", { message_id: "m4", text: "Done." })], s);
  assert.deepEqual(blocks(s), ["text:Looking.", "tool:c1", "text:Done."], "no second copy");
});

test("the opening snapshot's open questions wait until the replay reaches its seq", () => {
  seq = 100;
  const session = {
    state: "running",
    queue_depth: 1,
    last_event_seq: 103,
    pending_approvals: [{ approval_id: "ap1", call_id: "c1", name: "terminal", args: {}, expires_at: "2026-12-01T00:05:00Z" }],
    unknown_tool_runs: [{ call_id: "c0", name: "terminal" }],
  };
  let s = deepFreeze(applySession(initialState(), session, 100));
  assert.deepEqual(s.status, { state: "running", queueDepth: 1 });
  assert.deepEqual(s.approvals, {});
  s = play([ev("turn.started"), ev("approval.requested", session.pending_approvals[0])], s);
  assert.deepEqual(s.banners, [], "not yet: seq 102 of 103");
  s = play([ev("status", { state: "running", queue_depth: 1 }, null)], s);
  assert.deepEqual(rows(s), ["turn:turn-a"], "the approval stays on its replayed turn");
  assert.deepEqual(s.tools.c1.approvals, ["ap1"]);
  assert.deepEqual(s.banners.map((b) => b.key), ["tool:c0"]);
  assert.equal(s.deferred, null);

  // Nothing to replay: shown at once.
  const now = applySession(initialState(), { ...session, pending_approvals: [] }, 103);
  assert.deepEqual(now.banners.map((b) => b.key), ["tool:c0"]);
});

test("a transcript read later shows what each turn cost", () => {
  const usage = { input_tokens: 30, output_tokens: 5, cache_read_tokens: 0, cost_usd: 0.002 };
  const s = deepFreeze(
    addMessages(initialState(), [
      { id: "m1", role: "user", content: "hi", turn_id: "t1" },
      { id: "m2", role: "assistant", content: "hello", turn_id: "t1", turn_usage: usage },
    ]),
  );
  assert.deepEqual(s.turns.t1.spent, { usage, cost: 0.002 });
});

test("an input another client sent shows at once from its admission.queued, before its turn", () => {
  const queued = ev("admission.queued", { admission_id: "adm-x", seq_in_queue: 1, text: "sent from the terminal", source: "user" }, null, { admission_id: "adm-x" });
  let s = play([queued]);
  assert.deepEqual(rows(s), ["user:sent from the terminal"]);
  assert.equal(s.entries[0].admissionId, "adm-x");
  assert.equal(s.entries[0].pending, false);
  s = play([ev("turn.started", { admission_id: "adm-x" }, "turn-x", { admission_id: "adm-x" }), ev("message.delta", { text: "ok" }, "turn-x")], s);
  assert.deepEqual(rows(s), ["user:sent from the terminal", "turn:turn-x"], "its turn right after it");
  // A file sent without text shows as its references.
  const file = { file_id: "f1", name: "dot.png", content_type: "image/png", bytes: 70 };
  s = play([ev("admission.queued", { admission_id: "adm-f", seq_in_queue: 1, text: "", attachments: [file], source: "user" }, null)], s);
  assert.deepEqual(s.entries.at(-1).attachments, [file]);
  // A schedule's input is the session's input too; a report has its own row (from the transcript).
  s = play([ev("admission.queued", { admission_id: "adm-s", seq_in_queue: 1, text: "daily check", source: "schedule" }, null)], s);
  assert.equal(rows(s).at(-1), "user:daily check");
  const before = s.entries;
  s = play([ev("admission.queued", { admission_id: "adm-r", seq_in_queue: 1, text: "[turnkey:report]", source: "subagent" }, null)], s);
  s = play([ev("admission.queued", { admission_id: "adm-p", seq_in_queue: 1, text: "[turnkey:report]", source: "process" }, null)], s);
  assert.equal(s.entries, before);
  // An input already in the transcript (a steered one, read on opening mid-turn) is not
  // shown again when its admission.queued is replayed.
  let opened = deepFreeze(addMessages(initialState(), [{ id: "m1", role: "user", content: "steer this way", turn_id: "t1", admission_id: "adm-t" }]));
  opened = play([ev("admission.queued", { admission_id: "adm-t", seq_in_queue: 1, text: "steer this way", source: "user" }, null)], opened);
  assert.deepEqual(rows(opened), ["user:steer this way"]);
  // An older server's event, without the text, shows nothing.
  s = play([ev("admission.queued", { admission_id: "adm-o", seq_in_queue: 1 }, null)], s);
  assert.equal(s.entries, before);
});

test("this page's own input is shown once, whether its event or its receipt comes first", () => {
  // The event first: it is recognized as the input on its way.
  let s = deepFreeze(sendStarted(initialState(), 1, "mine", []));
  s = play([ev("admission.queued", { admission_id: "adm-1", seq_in_queue: 1, text: "mine", source: "user" }, null)], s);
  assert.deepEqual(rows(s), ["user:mine"]);
  s = deepFreeze(sendAccepted(s, 1, "adm-1"));
  assert.deepEqual(rows(s), ["user:mine"]);
  assert.deepEqual([s.entries[0].admissionId, s.entries[0].pending], ["adm-1", false]);
  // The receipt first.
  s = deepFreeze(sendStarted(s, 2, "again", []));
  s = deepFreeze(sendAccepted(s, 2, "adm-2"));
  s = play([ev("admission.queued", { admission_id: "adm-2", seq_in_queue: 1, text: "again", source: "user" }, null)], s);
  assert.deepEqual(rows(s), ["user:mine", "user:again"]);
  // The server stored other words (a secret masked): the receipt names the event's row, and
  // the page keeps the server's words.
  s = deepFreeze(sendStarted(s, 3, "key sk-abc", []));
  s = play([ev("admission.queued", { admission_id: "adm-3", seq_in_queue: 1, text: "key [redacted]", source: "user" }, null)], s);
  s = deepFreeze(sendAccepted(s, 3, "adm-3"));
  assert.deepEqual(rows(s), ["user:mine", "user:again", "user:key [redacted]"]);
  // Another client's identical words while this page sends: the page's row takes the first.
  s = deepFreeze(sendStarted(s, 4, "same", []));
  s = play([ev("admission.queued", { admission_id: "adm-4", seq_in_queue: 1, text: "same", source: "user" }, null)], s);
  s = play([ev("admission.queued", { admission_id: "adm-5", seq_in_queue: 1, text: "same", source: "user" }, null)], s);
  s = deepFreeze(sendAccepted(s, 4, "adm-5"));
  assert.deepEqual(rows(s).slice(3), ["user:same", "user:same"]);
  assert.deepEqual(s.entries.slice(3).map((r) => r.admissionId).sort(), ["adm-4", "adm-5"]);
  // A send that failed leaves nothing behind.
  s = deepFreeze(sendFailed(sendStarted(s, 6, "lost", []), 6));
  assert.equal(rows(s).length, 5);
});

test("a reload keeps a turn's resumed and cut-off notes, the same as they were shown live", () => {
  seq = 200;
  const live = play([
    ev("turn.started", { admission_id: "adm-a" }),
    ev("message.delta", { text: "cut " }),
    ev("turn.resumed", { admission_id: "adm-a", attempt: 2, reason: "crash" }),
    ev("turn.resumed", { admission_id: "adm-a", attempt: 3, reason: "shutdown" }),
    ev("message.delta", { text: "The answer, cut" }),
    ev("message.complete", { message_id: "m2", text: "The answer, cut", stop_reason: "truncated" }),
    ev("turn.finished", { result: "completed", stop_reason: "truncated" }),
  ]);
  const reloaded = deepFreeze(
    addMessages(initialState(), [
      { id: "m1", role: "user", content: "go", turn_id: "turn-a" },
      {
        id: "m2",
        role: "assistant",
        content: "The answer, cut",
        turn_id: "turn-a",
        turn_stop_reason: "truncated",
        turn_resumes: [
          { attempt: 2, reason: "crash" },
          { attempt: 3, reason: "shutdown" },
        ],
      },
    ]),
  );
  assert.deepEqual(blocks(reloaded), [
    "note:note:Resumed by itself after the server stopped mid-answer (attempt 2): the answer starts again.",
    "note:note:Resumed by itself after the server restarted (attempt 3): the answer starts again.",
    "text:The answer, cut",
    "note:warn:Cut off by the output limit",
  ]);
  assert.deepEqual(blocks(reloaded), blocks(live));
  const repeated = deepFreeze(
    addMessages(initialState(), [{ id: "m9", role: "assistant", content: "again", turn_id: "turn-a", turn_stop_reason: "repeated" }]),
  );
  assert.deepEqual(blocks(repeated), ["text:again", "note:warn:Stopped: the model repeated its earlier answer"]);
  // A turn still running when the page opens: its resumed note comes from its user row (its
  // last row so far), and a replay of the same turn.resumed does not add it again.
  let running = deepFreeze(
    addMessages(initialState(), [{ id: "m1", role: "user", content: "go", turn_id: "turn-a", turn_resumes: [{ attempt: 2, reason: "crash" }] }]),
  );
  running = play([ev("turn.resumed", { admission_id: "adm-a", attempt: 2, reason: "crash" }), ev("turn.started", { admission_id: "adm-a", resumed: true })], running);
  assert.deepEqual(blocks(running), ["note:note:Resumed by itself after the server stopped mid-answer (attempt 2): the answer starts again."]);
});

test("the header counts tokens only once there are some, and says so while a turn runs", () => {
  const none = { input_tokens: 0, output_tokens: 0, cache_read_tokens: 0, cost_usd: 0 };
  const some = { input_tokens: 120, output_tokens: 30, cache_read_tokens: 0, cost_usd: 0.0012 };
  assert.equal(headerUsage(none, "idle"), "");
  assert.equal(headerUsage(null, "idle"), "");
  assert.equal(headerUsage(none, "running"), "counting this turn…");
  assert.doesNotMatch(headerUsage(none, "running"), /\b0\b/);
  assert.equal(headerUsage(some, "idle"), "120 in · 30 out tokens · $0.0012");
  assert.equal(headerUsage(some, "running"), "120 in · 30 out tokens · $0.0012 · counting this turn…");
});

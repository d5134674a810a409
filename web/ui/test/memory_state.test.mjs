// Unit tests of the Memory page's logic (../memory_state.js) and of the API client's memory
// calls (../api.js, with `fetch` replaced), without a browser: `node --test web/ui/test/*.test.mjs`.
// Inputs are frozen, so a function that writes to what it was given throws here.
import test from "node:test";
import assert from "node:assert/strict";
import {
  groupDigits,
  charCount,
  fullness,
  roomText,
  sortEntries,
  memoryStores,
  findEntry,
  sortChanges,
  describeChange,
  undoAction,
  pendingView,
  sortPending,
  refusalText,
} from "../memory_state.js";
import { Api, ApiError } from "../api.js";

function deepFreeze(v) {
  if (v && typeof v === "object" && !Object.isFrozen(v)) {
    Object.freeze(v);
    for (const x of Object.values(v)) deepFreeze(x);
  }
  return v;
}

const entry = (id, target, text, created_at = "2026-12-01T10:00:00Z", updated_at = created_at) => ({ id, target, text, created_at, updated_at });

/** An answer of GET /v1/memory. */
const answer = deepFreeze({
  memory: {
    entries: [
      entry("m2", "memory", "The build uses cargo nextest.", "2026-12-02T09:00:00Z"),
      entry("m1", "memory", "Deploys go out on Tuesdays.", "2026-12-01T09:00:00Z"),
    ],
    chars: 1234,
    limit: 2200,
  },
  profile: { entries: [entry("p1", "profile", "Prefers short answers.")], chars: 22, limit: 1375 },
});

test("fullness says how many characters of how many, with a percentage that says 100 only when full", () => {
  assert.deepEqual(fullness({ chars: 1234, limit: 2200 }), {
    chars: 1234,
    limit: 2200,
    left: 966,
    percent: 56,
    level: "ok",
    text: "1,234 of 2,200 characters",
  });
  assert.equal(fullness({ chars: 2199, limit: 2200 }).percent, 99, "rounded down: not full yet");
  assert.equal(fullness({ chars: 2199, limit: 2200 }).level, "high");
  assert.equal(fullness({ chars: 1760, limit: 2200 }).level, "high", "80 % is high");
  assert.equal(fullness({ chars: 1759, limit: 2200 }).level, "ok");
  assert.equal(fullness({ chars: 1, limit: 2200 }).percent, 1, "anything stored shows");
  assert.equal(fullness({ chars: 0, limit: 2200 }).percent, 0);
  const full = fullness({ chars: 2200, limit: 2200 });
  assert.deepEqual([full.percent, full.level, full.left], [100, "full", 0]);
  // A limit lowered below what is stored: over 100 % shows as full, nothing left.
  const over = fullness({ chars: 2500, limit: 2200 });
  assert.deepEqual([over.percent, over.level, over.left, over.text], [100, "full", 0, "2,500 of 2,200 characters"]);
  assert.deepEqual(fullness(undefined), { chars: 0, limit: 0, left: 0, percent: 0, level: "ok", text: "0 of 0 characters" });
});

test("numbers are grouped by thousands whatever the locale; characters are code points", () => {
  assert.deepEqual([0, 999, 1000, 1234567, -4200].map(groupDigits), ["0", "999", "1,000", "1,234,567", "-4,200"]);
  assert.equal(charCount("héllo"), 5);
  assert.equal(charCount("👍🏽 ok"), 5, "an emoji and its modifier are two code points, not four UTF-16 units");
  assert.equal(charCount(null), 0);
});

test("the room line says how much is left, or how much too much, counting the text replaced", () => {
  const store = { chars: 2190, limit: 2200 };
  assert.equal(roomText(store, "12345"), "5 characters · 5 left in this store");
  assert.equal(roomText(store, "x"), "1 character · 9 left in this store");
  assert.equal(roomText(store, "123456789012"), "12 characters · 2 more than this store has room for");
  assert.equal(roomText(store, "123456789012", "abcdef"), "12 characters · 4 left in this store", "editing frees the old text");
});

test("the stores come in a fixed order, entries oldest first, ids breaking ties", () => {
  const stores = memoryStores(answer);
  assert.deepEqual(stores.map((s) => s.target), ["memory", "profile"]);
  assert.deepEqual(stores[0].entries.map((e) => e.id), ["m1", "m2"]);
  assert.equal(stores[0].fullness.text, "1,234 of 2,200 characters");
  assert.equal(stores[1].fullness.percent, 1);
  const tied = sortEntries(deepFreeze([entry("b", "memory", "x"), entry("a", "memory", "y")]));
  assert.deepEqual(tied.map((e) => e.id), ["a", "b"]);
  // A store missing from the answer is empty, not an error.
  const half = memoryStores({ memory: answer.memory });
  assert.deepEqual([half[1].entries, half[1].fullness.text], [[], "0 of 0 characters"]);
  assert.equal(findEntry(stores, "p1").text, "Prefers short answers.");
  assert.equal(findEntry(stores, "nope"), null);
  assert.equal(findEntry(stores, null), null);
});

test("changes are shown newest first and say what happened and who did it", () => {
  const changes = deepFreeze([
    { id: "c1", at: "2026-12-01T10:00:00Z", action: "add", target: "memory", by: "tool" },
    { id: "c3", at: "2026-12-03T10:00:00Z", action: "remove", target: "profile", by: "api" },
    { id: "c2", at: "2026-12-02T10:00:00Z", action: "replace", target: "memory", by: "review" },
  ]);
  assert.deepEqual(sortChanges(changes).map((c) => c.id), ["c3", "c2", "c1"]);
  assert.deepEqual(describeChange(changes[0]), { title: "Added to the agent's notes", by: "by the agent" });
  assert.deepEqual(describeChange(changes[1]), { title: "Removed from the user profile", by: "through the API or this page" });
  assert.deepEqual(describeChange(changes[2]), { title: "Changed in the agent's notes", by: "by the background review" });
});

test("undo of an add deletes the entry while it exists", () => {
  const stores = deepFreeze(memoryStores(answer));
  const add = deepFreeze({ id: "c1", target: "memory", entry_id: "m1", action: "add", before: null, after: "Deploys go out on Tuesdays." });
  assert.deepEqual(undoAction(add, stores), { kind: "delete", id: "m1", description: "Delete the entry it added" });
  const edited = undoAction({ ...add, after: "Deploys go out on Mondays." }, stores);
  assert.equal(edited.kind, "delete");
  assert.match(edited.description, /changed since/);
  const gone = undoAction({ ...add, entry_id: "m9" }, stores);
  assert.equal(gone.kind, null);
  assert.match(gone.reason, /gone already/);
});

test("undo of a remove adds the removed text back to the same store, once", () => {
  const stores = deepFreeze(memoryStores(answer));
  const remove = deepFreeze({ id: "c2", target: "profile", entry_id: "p7", action: "remove", before: "Lives in Lisbon.", after: null });
  assert.deepEqual(undoAction(remove, stores), {
    kind: "add",
    target: "profile",
    text: "Lives in Lisbon.",
    description: "Add the removed text back to the user profile",
  });
  // Undone already: the text is in the store again, so a second undo would add it twice.
  const again = undoAction({ ...remove, before: "Prefers short answers." }, stores);
  assert.equal(again.kind, null);
  assert.match(again.reason, /again/);
  // The same text in the other store does not count.
  assert.equal(undoAction({ ...remove, target: "memory", before: "Prefers short answers." }, stores).kind, "add");
  assert.equal(undoAction({ ...remove, before: null }, stores).kind, null, "nothing recorded, nothing to add");
});

test("undo of a replace patches the entry back to its earlier text", () => {
  const stores = deepFreeze(memoryStores(answer));
  const replace = deepFreeze({
    id: "c3",
    target: "memory",
    entry_id: "m2",
    action: "replace",
    before: "The build uses cargo test.",
    after: "The build uses cargo nextest.",
  });
  assert.deepEqual(undoAction(replace, stores), {
    kind: "patch",
    id: "m2",
    text: "The build uses cargo test.",
    description: "Put the earlier text back",
  });
  assert.match(undoAction({ ...replace, after: "Something else." }, stores).description, /changed again since/);
  assert.equal(undoAction({ ...replace, entry_id: "m9" }, stores).kind, null, "the entry was removed since");
  assert.equal(undoAction({ ...replace, before: "The build uses cargo nextest." }, stores).kind, null, "already the earlier text");
  assert.equal(undoAction({ ...replace, action: "merge" }, stores).kind, null, "an unknown action");
});

test("a pending write shows what it adds, replaces or removes", () => {
  const base = { id: "w1", session_id: "s1", created_at: "2026-12-01T10:00:00Z" };
  assert.deepEqual(pendingView({ ...base, target: "memory", action: "add", text: "Uses tabs.", old_text: null }), {
    title: "Add to the agent's notes",
    oldText: null,
    newText: "Uses tabs.",
  });
  assert.deepEqual(pendingView({ ...base, target: "profile", action: "replace", text: "Lives in Porto.", old_text: "Lisbon" }), {
    title: "Change an entry of the user profile",
    oldText: "Lisbon",
    newText: "Lives in Porto.",
  });
  assert.deepEqual(pendingView({ ...base, target: "profile", action: "remove", text: null, old_text: "Porto" }), {
    title: "Remove an entry from the user profile",
    oldText: "Porto",
    newText: null,
  });
  const order = sortPending(deepFreeze([{ id: "b", created_at: "2026-12-02T00:00:00Z" }, { id: "a", created_at: "2026-12-01T00:00:00Z" }]));
  assert.deepEqual(order.map((p) => p.id), ["a", "b"]);
});

test("a refused write says why once, in the server's words; other errors are left to the caller", () => {
  // The server's messages, as actors/src/memory words them.
  const server = {
    memory_full: "not saved: memory is full (2180 of 2200 characters used; this needs 40 more). Replace or remove an entry first, or write it shorter.",
    memory_secret:
      "not saved: it holds what looks like a secret (an OpenAI-style API key); memory must never keep keys, tokens or passwords, so say where the secret lives instead",
    memory_instruction:
      "not saved: it reads as an instruction to the model (an order to drop earlier instructions); memory holds facts and preferences, written as such",
    memory_invisible_text: "not saved: it holds an invisible or control character (U+200B at character 4); write it in plain visible text",
  };
  for (const [code, message] of Object.entries(server)) {
    const text = refusalText(new ApiError(422, code, message));
    assert.equal(text, `Not saved: ${message.slice("not saved: ".length)}`, code);
    // Nothing said twice (issue 38: "the text looks like a secret … (it holds what looks like a secret …)").
    const words = text.toLowerCase().match(/[a-z]+/g);
    const threes = words.slice(2).map((w, i) => `${words[i]} ${words[i + 1]} ${w}`);
    assert.equal(new Set(threes).size, threes.length, `${code}: ${text}`);
  }
  assert.match(refusalText(new ApiError(422, "memory_full", server.memory_full)), /2180 of 2200 characters used/, "the server's numbers");
  // Without the server's reason, the page's own sentence.
  assert.match(refusalText({ code: "memory_secret", message: "" }), /^Not saved: the text looks like a secret/);
  assert.match(refusalText({ code: "not_found", message: "no entry m1" }), /no longer exists/);
  assert.equal(refusalText({ code: "internal", message: "boom" }), null);
  assert.equal(refusalText({ code: "toString", message: "" }), null, "only the API's own codes");
  assert.equal(refusalText(null), null);
});

// ---------- the API client's memory calls ----------

/** Replaces fetch for one test: answers `replies` in turn and records every request. */
function stubFetch(t, replies) {
  const calls = [];
  const saved = globalThis.fetch;
  globalThis.fetch = async (path, init) => {
    calls.push({ path, method: init.method, body: init.body ? JSON.parse(init.body) : undefined, auth: init.headers.Authorization });
    const [status, json] = replies.shift() ?? [500, null];
    return new Response(json === null ? null : JSON.stringify(json), { status, headers: { "Content-Type": "application/json" } });
  };
  t.after(() => (globalThis.fetch = saved));
  return calls;
}

test("the client calls every memory endpoint with its method, path and body", async (t) => {
  const e = entry("m 1", "memory", "x");
  const calls = stubFetch(t, [
    [200, answer],
    [201, e],
    [200, e],
    [204, null],
    [200, { changes: [] }],
    [200, { pending: [] }],
    [200, { id: "w/1", status: "approved" }],
  ]);
  const api = new Api("tok");
  assert.deepEqual(await api.memory(), answer);
  assert.deepEqual(await api.addMemory("profile", "Prefers tea."), e);
  await api.editMemory("m 1", "Prefers coffee.");
  assert.equal(await api.deleteMemory("m 1"), null, "204 has no body");
  await api.memoryChanges();
  await api.memoryPending();
  assert.deepEqual(await api.decideMemoryPending("w/1", "approve"), { id: "w/1", status: "approved" });
  assert.deepEqual(
    calls.map((c) => [c.method, c.path, c.body]),
    [
      ["GET", "/v1/memory", undefined],
      ["POST", "/v1/memory", { target: "profile", text: "Prefers tea." }],
      ["PATCH", "/v1/memory/m%201", { text: "Prefers coffee." }],
      ["DELETE", "/v1/memory/m%201", undefined],
      ["GET", "/v1/memory/changes", undefined],
      ["GET", "/v1/memory/pending", undefined],
      ["POST", "/v1/memory/pending/w%2F1", { decision: "approve" }],
    ],
  );
  assert.ok(calls.every((c) => c.auth === "Bearer tok"));
});

test("a refused memory write is an ApiError with its code, and a 401 signs out", async (t) => {
  stubFetch(t, [
    [422, { error: { code: "memory_full", message: "memory is full (2200 of 2200 characters used; this needs 5 more)" } }],
    [401, { error: { code: "unauthorized", message: "bad token" } }],
  ]);
  let signedOut = 0;
  const api = new Api("tok", () => signedOut++);
  await assert.rejects(api.addMemory("memory", "more"), (e) => e instanceof ApiError && e.status === 422 && e.code === "memory_full");
  assert.equal(signedOut, 0);
  await assert.rejects(api.memory(), (e) => e instanceof ApiError && e.status === 401);
  assert.equal(signedOut, 1);
});

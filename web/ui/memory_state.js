// The Memory page as data: the answers of /v1/memory, /v1/memory/changes and /v1/memory/pending
// turned into what memory_view.js shows (each store's entries in order and how full it is, the
// history newest first with what "Undo" of each change would do, the review's proposed writes,
// why a write was refused). Pure: no DOM, no fetch; unit-tested in test/memory_state.test.mjs.

/** The two stores, in the order the page shows them. */
export const TARGETS = ["memory", "profile"];

/** Each store's heading. */
export const TARGET_LABEL = {
  memory: "The agent's notes",
  profile: "About you (user profile)",
};

/** Each store inside a sentence. */
const IN_TARGET = {
  memory: "the agent's notes",
  profile: "the user profile",
};

/** Who made a change (`by` of a change record). */
export const BY_LABEL = {
  tool: "by the agent",
  review: "by the background review",
  api: "through the API or this page",
};

/** A store's name inside a sentence; an unknown one as it is. */
export function inTarget(target) {
  return IN_TARGET[target] ?? `"${target}"`;
}

/** `1234` → `"1,234"`, whatever the browser's locale (the page says "characters" in English). */
export function groupDigits(n) {
  const v = Math.round(Number(n) || 0);
  const digits = String(Math.abs(v)).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  return v < 0 ? `-${digits}` : digits;
}

/** Characters as the server counts them: code points, not UTF-16 units (an emoji is one). */
export function charCount(text) {
  return [...String(text ?? "")].length;
}

/**
 * How full a store is: `{chars, limit, left, percent, level, text}`. `percent` (0–100) is
 * rounded down, and at least 1 when anything is stored, so it says 100 only when full; `level`
 * is `ok`, `high` (80 % and more) or `full` (nothing left; also past a limit lowered since).
 */
export function fullness(store) {
  const chars = Math.max(0, Math.floor(Number(store && store.chars) || 0));
  const limit = Math.max(0, Math.floor(Number(store && store.limit) || 0));
  let percent;
  if (limit === 0) percent = chars > 0 ? 100 : 0;
  else percent = Math.min(100, Math.max(chars > 0 ? 1 : 0, Math.floor((chars * 100) / limit)));
  const full = chars > 0 && chars >= limit;
  return {
    chars,
    limit,
    left: Math.max(0, limit - chars),
    percent,
    level: full ? "full" : percent >= 80 ? "high" : "ok",
    text: `${groupDigits(chars)} of ${groupDigits(limit)} characters`,
  };
}

/**
 * What the form under a textarea says: how long the text is and about how much of the store
 * would be left with it (`replacing`: the entry's text it replaces). The server decides; this
 * only helps to see a refusal coming.
 */
export function roomText(store, text, replacing = "") {
  const f = fullness(store);
  const n = charCount(text);
  const left = f.limit - f.chars + charCount(replacing) - n;
  const size = `${groupDigits(n)} character${n === 1 ? "" : "s"}`;
  return left >= 0
    ? `${size} · ${groupDigits(left)} left in this store`
    : `${size} · ${groupDigits(-left)} more than this store has room for`;
}

/** Milliseconds since the epoch of an RFC 3339 time; an unreadable one sorts first. */
function when(iso) {
  const t = Date.parse(iso);
  return Number.isNaN(t) ? 0 : t;
}

/** A store's entries oldest first (the order the agent reads them in), by id when at the same time. */
export function sortEntries(entries) {
  return [...(entries || [])].sort(
    (a, b) => when(a.created_at) - when(b.created_at) || String(a.id).localeCompare(String(b.id)),
  );
}

/**
 * The stores as the page shows them, from the answer of `GET /v1/memory`:
 * `[{target, label, entries, fullness}]` in the order of TARGETS; a store the answer lacks is empty.
 */
export function memoryStores(answer) {
  return TARGETS.map((target) => {
    const store = (answer && answer[target]) || {};
    return {
      target,
      label: TARGET_LABEL[target],
      entries: sortEntries(store.entries),
      chars: store.chars ?? 0,
      limit: store.limit ?? 0,
      fullness: fullness(store),
    };
  });
}

/** The entry with `id` in any store, or null. */
export function findEntry(stores, id) {
  if (id === null || id === undefined) return null;
  for (const s of stores) {
    const e = s.entries.find((x) => x.id === id);
    if (e) return e;
  }
  return null;
}

/** Change records newest first (the server sends them so; an equal time keeps its order). */
export function sortChanges(changes) {
  return [...(changes || [])]
    .map((c, i) => [c, i])
    .sort(([a, i], [b, j]) => when(b.at) - when(a.at) || i - j)
    .map(([c]) => c);
}

/** A change record's headline and who made it: `{title, by}`. */
export function describeChange(change) {
  const where = inTarget(change.target);
  const title =
    change.action === "add"
      ? `Added to ${where}`
      : change.action === "replace"
        ? `Changed in ${where}`
        : change.action === "remove"
          ? `Removed from ${where}`
          : `${change.action} in ${where}`;
  return { title, by: BY_LABEL[change.by] ?? `by ${change.by}` };
}

/**
 * What "Undo" of a change record does, given the stores as they are now:
 * - an add: delete the entry it added, if it still exists: `{kind: "delete", id}`;
 * - a remove: add the removed text (`before`) to the same store again: `{kind: "add", target, text}`;
 * - a replace: put the entry's text back to `before`: `{kind: "patch", id, text}`.
 * Each with `description`, what the button does in words. When there is nothing to undo (the
 * entry is gone, or its text is back already, or the record lacks the text) the answer is
 * `{kind: null, reason}`.
 */
export function undoAction(change, stores) {
  const where = inTarget(change.target);
  const entry = findEntry(stores, change.entry_id);
  switch (change.action) {
    case "add": {
      if (!entry) return { kind: null, reason: "The entry it added is gone already." };
      const since = change.after !== null && change.after !== undefined && entry.text !== change.after;
      return {
        kind: "delete",
        id: entry.id,
        description: `Delete the entry it added${since ? " (changed since)" : ""}`,
      };
    }
    case "remove": {
      if (typeof change.before !== "string") return { kind: null, reason: "The removed text was not recorded." };
      const store = stores.find((s) => s.target === change.target);
      if (store && store.entries.some((e) => e.text === change.before)) {
        return { kind: null, reason: `That text is in ${where} again.` };
      }
      return { kind: "add", target: change.target, text: change.before, description: `Add the removed text back to ${where}` };
    }
    case "replace": {
      if (typeof change.before !== "string") return { kind: null, reason: "The earlier text was not recorded." };
      if (!entry) return { kind: null, reason: "The entry was removed since." };
      if (entry.text === change.before) return { kind: null, reason: "The entry has the earlier text again." };
      const since = typeof change.after === "string" && entry.text !== change.after;
      return {
        kind: "patch",
        id: entry.id,
        text: change.before,
        description: `Put the earlier text back${since ? " (changed again since)" : ""}`,
      };
    }
    default:
      return { kind: null, reason: `A change of kind "${change.action}" cannot be undone here.` };
  }
}

/**
 * A write the background review proposed, as the page shows it: `{title, oldText, newText}`
 * (either text null when the write has none: an add has no old text, a remove no new one).
 */
export function pendingView(p) {
  const where = inTarget(p.target);
  const title =
    p.action === "add"
      ? `Add to ${where}`
      : p.action === "replace"
        ? `Change an entry of ${where}`
        : p.action === "remove"
          ? `Remove an entry from ${where}`
          : `${p.action} in ${where}`;
  const text = (v) => (typeof v === "string" ? v : null);
  return { title, oldText: text(p.old_text), newText: text(p.text) };
}

/** The pending writes, oldest first: the order they were proposed in. */
export function sortPending(pending) {
  return [...(pending || [])].sort((a, b) => when(a.created_at) - when(b.created_at));
}

/**
 * What a refused write says when the server gave no reason, for the codes the API refuses a
 * text with; null for any other.
 */
const REFUSED = {
  memory_full: "Not saved: the store is full. Shorten or delete an entry first.",
  memory_instruction: "Not saved: the text reads like an instruction to the model, which memory may not hold.",
  memory_invisible_text: "Not saved: the text has an invisible or control character.",
  memory_secret: "Not saved: the text looks like a secret (a key, token or password); keep secrets out of memory.",
  not_found: "That entry no longer exists; the page now shows the stores as they are.",
};

/**
 * The sentence for a refused write `{code, message}` (an ApiError); or null. The server's
 * message says what was found and what to do (it starts "not saved: "): the page shows it as
 * the server words it, once, rather than a sentence of its own followed by the same reason.
 */
export function refusalText(error) {
  if (!error || !Object.hasOwn(REFUSED, error.code)) return null;
  if (error.code === "not_found") return REFUSED.not_found;
  const reason = String(error.message ?? "").replace(/^not saved:\s*/i, "").trim();
  return reason ? `Not saved: ${reason}` : REFUSED[error.code];
}

// A turn's blocks as data, and how what a turn did is told in words: its text (at most one
// block live, the one the next streamed words go into), its notes (resumed, cut off, failed)
// and what it cost. Pure, like session_state.js, whose transitions use these on the copy of
// the state they are making (`s`, whose `nextKey` numbers new blocks).

/** What a turn's note says where a turn closed without its answer. */
export const BOUNDARY = {
  interrupted: "Interrupted",
  failed: "Failed",
  unknown: "Outcome unknown (the gateway stopped during this turn)",
};

/**
 * The header's count of the session's tokens and cost (`usage` as `GET /v1/sessions/{id}`
 * has it): nothing before anything was spent, and while a turn runs a word that it is counted
 * when it ends (the session's usage grows at a turn's end, so "0 tokens" would be wrong).
 */
export function headerUsage(usage, state) {
  const u = usage || {};
  const spent = (u.input_tokens || 0) + (u.output_tokens || 0) > 0 || u.cost_usd > 0;
  const counting = state === "running" ? "counting this turn…" : "";
  const total = spent ? usageText(u) : "";
  return [total, counting].filter(Boolean).join(" · ");
}

/** `{input_tokens, output_tokens, cache_read_tokens}` and the cost in USD, in words: "12 in · 34 out tokens · $0.0012". */
export function usageText(usage, cost) {
  if (!usage) return "";
  const parts = [`${usage.input_tokens ?? 0} in · ${usage.output_tokens ?? 0} out tokens`];
  if (usage.cache_read_tokens) parts.push(`${usage.cache_read_tokens} cached`);
  const c = typeof cost === "number" ? cost : usage.cost_usd;
  if (typeof c === "number") parts.push(`$${c.toFixed(c < 0.01 ? 4 : 2)}`);
  return parts.join(" · ");
}

/** Display text of a turn's `turn.resumed` (SPEC R13.9). */
export function resumedText(d) {
  const after = d.reason === "shutdown" ? "the server restarted" : "the server stopped mid-answer";
  return `Resumed by itself after ${after} (attempt ${d.attempt || 2}): the answer starts again.`;
}

/** A new key for a block or row of the state being made. */
export function nextKey(s) {
  const k = s.nextKey;
  s.nextKey = k + 1;
  return k;
}

export const withItems = (t, items) => ({ ...t, items });
/** The same turn with no live block: the text so far is done. */
export function settle(t) {
  if (!t.items.some((i) => i.live)) return t;
  return withItems(t, t.items.map((i) => (i.live ? { ...i, live: false } : i)));
}

export function appendLive(s, t, text) {
  const i = t.items.findIndex((b) => b.live);
  if (i < 0) return withItems(t, [...t.items, { key: `b${nextKey(s)}`, type: "text", text, live: true }]);
  const items = [...t.items];
  items[i] = { ...items[i], text: items[i].text + text };
  return withItems(t, items);
}

/** A finished text (from the transcript): its own block. */
export function withText(s, t, text) {
  const done = settle(t);
  return withItems(done, [...done.items, { key: `b${nextKey(s)}`, type: "text", text, live: false }]);
}

/** The authoritative final answer replaces what was streamed. */
export function complete(s, t, text) {
  const i = t.items.findIndex((b) => b.live);
  if (i < 0) return text ? withText(s, t, text) : t;
  const items = [...t.items];
  items[i] = { ...items[i], text, live: false };
  return withItems(t, items);
}

/** Drops the text streamed so far, unfinished. */
export function dropLive(t) {
  return t.items.some((i) => i.live) ? withItems(t, t.items.filter((i) => !i.live)) : t;
}

/** At most `n` characters of `text`, an ellipsis when cut. */
function clip(text, n) {
  const chars = Array.from(text);
  return chars.length > n ? `${chars.slice(0, n).join("")}…` : text;
}

export function withNote(s, t, text, kind) {
  return withItems(t, [...t.items, { key: `b${nextKey(s)}`, type: "note", text, kind }]);
}

/** What a turn's note says about an answer that ended otherwise than by itself. */
export const STOPPED = {
  truncated: "Cut off by the output limit",
  repeated: "Stopped: the model repeated its earlier answer",
};

/**
 * The turn with a note for each of its resumes (`{attempt, reason}`, as `turn.resumed` says),
 * each once: at its end as it happens (`atStart` false), before its answer when read from
 * the transcript.
 */
export function withResumed(s, t, resume, atStart) {
  if (t.items.some((i) => i.type === "note" && i.attempt === (resume.attempt || 2))) return t;
  const note = { key: `b${nextKey(s)}`, type: "note", text: resumedText(resume), kind: "note", attempt: resume.attempt || 2 };
  if (!atStart) return withItems(t, [...t.items, note]);
  const at = t.items.findIndex((i) => !(i.type === "note" && i.attempt));
  const items = [...t.items];
  items.splice(at < 0 ? items.length : at, 0, note);
  return withItems(t, items);
}

export function finish(s, t, d) {
  let done = settle(t);
  if (d.result && d.result !== "completed") {
    const code = d.failure_reason && d.failure_reason !== d.result ? d.failure_reason : "";
    // A failed turn says why in words (the server's failure_message), its code after it.
    const message = d.result === "failed" && d.failure_message ? clip(d.failure_message, 300) : "";
    const why = message ? `: ${message}${code ? ` (${code})` : ""}` : code ? `: ${code}` : "";
    done = withNote(s, done, `${d.result.charAt(0).toUpperCase() + d.result.slice(1)}${why}`, "warn");
  } else if (STOPPED[d.stop_reason]) {
    done = withNote(s, done, STOPPED[d.stop_reason], "warn");
  }
  const u = d.usage || {};
  const spent = (u.input_tokens || 0) + (u.output_tokens || 0) > 0 || d.cost > 0;
  return spent && d.usage ? { ...done, spent: { usage: d.usage, cost: d.cost } } : done;
}

// DOM building blocks of the chat: elements made with createElement and textContent only.
import { renderMarkdown } from "./markdown.js";
import { usageText } from "./turn_state.js";

/** `el("div", {class: "x", "aria-label": "y"}, child, "text")`. Attributes are never event handlers. */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) throw new Error(`no inline handlers: ${k}`);
    if (k === "class") node.className = v;
    else if (k === "dataset") Object.assign(node.dataset, v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

export function button(label, onClick, attrs = {}) {
  const b = el("button", { type: "button", ...attrs }, label);
  b.addEventListener("click", onClick);
  return b;
}

/** Pretty JSON of a tool's arguments; a string that is JSON is parsed first. */
export function prettyArgs(args) {
  let v = args;
  if (typeof v === "string") {
    try {
      v = JSON.parse(v);
    } catch {
      return v;
    }
  }
  return JSON.stringify(v ?? {}, null, 2);
}

export function preview(text, max = 600) {
  const s = typeof text === "string" ? text : JSON.stringify(text);
  return s.length > max ? `${s.slice(0, max)}…` : s;
}

/** A Markdown block whose text can be replaced (re-rendered) as it streams. */
export class TextBlock {
  constructor() {
    this.node = el("div", { class: "md" });
    this.text = "";
    this.pending = false;
  }

  set(text) {
    this.text = text;
    this.schedule();
  }

  schedule() {
    // Deltas arrive in bursts: render at most once a frame.
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => this.flush());
  }

  flush() {
    this.pending = false;
    const rendered = renderMarkdown(this.text);
    for (const pre of rendered.querySelectorAll ? rendered.querySelectorAll("pre") : []) {
      const code = pre.querySelector("code");
      pre.append(button("Copy", (ev) => copyText(code ? code.textContent : pre.textContent, ev.currentTarget), { class: "copy secondary" }));
    }
    this.node.replaceChildren(rendered);
  }
}

/**
 * Puts `text` on the clipboard and says so on `btn` for a moment. The Clipboard API needs a
 * secure context (https, or the loopback); elsewhere a selection is copied the old way.
 */
export async function copyText(text, btn) {
  let ok = false;
  try {
    if (navigator.clipboard && window.isSecureContext) {
      await navigator.clipboard.writeText(text);
      ok = true;
    }
  } catch {
    ok = false;
  }
  if (!ok) {
    const area = el("textarea", { class: "visually-hidden", readonly: true });
    area.value = text;
    document.body.append(area);
    area.select();
    try {
      ok = document.execCommand("copy");
    } catch {
      ok = false;
    }
    area.remove();
  }
  if (btn) {
    const label = btn.textContent;
    btn.textContent = ok ? "Copied" : "Not copied";
    setTimeout(() => (btn.textContent = label), 1500);
  }
  return ok;
}

const STATUS_LABEL = {
  pending: "waiting",
  running: "running",
  ok: "ok",
  error: "error",
  skipped: "skipped",
  denied: "denied",
  unknown: "outcome unknown",
  done: "done",
  approval: "needs approval",
};

/** A tool call drawn from its state (session_state.js): name, arguments, progress, status, result. */
export class ToolCard {
  constructor(tool) {
    this.callId = tool.callId;
    this.status = el("span", { class: "tool-status" });
    this.progress = el("p", { class: "tool-progress", hidden: true });
    this.result = el("pre", { class: "tool-result", hidden: true });
    this.extra = el("div", { class: "tool-extra" });
    this.name = el("span", { class: "tool-name" }, tool.name || "tool");
    this.args = el("pre", { class: "tool-args" }, prettyArgs(tool.args));
    this.shownArgs = tool.args;
    this.node = el(
      "section",
      { class: "tool-card", dataset: { callId: tool.callId }, "aria-label": `tool ${tool.name || ""}` },
      el("header", {}, this.name, this.status),
      el("details", { class: "tool-args-box" }, el("summary", {}, "arguments"), this.args),
      this.progress,
      this.extra,
      this.result,
    );
    this.show(tool);
  }

  show(tool) {
    if (tool.name) this.name.textContent = tool.name;
    if (tool.args !== this.shownArgs) {
      this.args.textContent = prettyArgs(tool.args);
      this.shownArgs = tool.args;
    }
    this.node.dataset.status = tool.status;
    const label = STATUS_LABEL[tool.status] ?? tool.status;
    const took = typeof tool.durationMs === "number" ? ` · ${(tool.durationMs / 1000).toFixed(1)} s` : "";
    this.status.textContent = `${label}${took}`;
    this.progress.hidden = tool.progress === null;
    if (tool.progress !== null) this.progress.textContent = tool.progress;
    this.result.hidden = tool.result === null;
    if (tool.result !== null) this.result.textContent = preview(tool.result);
  }
}

/** The assistant side of one turn, drawn from its state: blocks and cards in order, then its usage. */
export class TurnView {
  constructor(turnId) {
    this.body = el("div", { class: "turn-body" });
    this.footer = el("p", { class: "turn-foot", hidden: true });
    this.text = "";
    // Copy the answer (its Markdown as written); Regenerate asks the session view to send the
    // turn's input again (a `regenerate` event it listens for).
    this.copy = button("Copy answer", (ev) => copyText(this.text, ev.currentTarget), { class: "copy secondary", hidden: true });
    this.regenerate = button(
      "Regenerate",
      () => this.node.dispatchEvent(new CustomEvent("regenerate", { bubbles: true, detail: { turnId } })),
      { class: "regenerate secondary", hidden: true },
    );
    this.actions = el("div", { class: "turn-actions" }, this.copy, this.regenerate);
    this.node = el(
      "li",
      { class: "msg assistant", dataset: { turn: turnId || "" } },
      el("span", { class: "who" }, "assistant"),
      this.body,
      this.footer,
      this.actions,
    );
    /** Item key → its TextBlock, or the node of a note. */
    this.blocks = new Map();
  }

  /** Draws `turn`; `cardNode(callId)` is the node of a tool card, drawn elsewhere. */
  show(turn, cardNode) {
    const blocks = new Map();
    const nodes = turn.items.map((item) => {
      if (item.type === "tool") return cardNode(item.callId);
      let b = this.blocks.get(item.key);
      if (item.type === "note") {
        b = b || el("p", { class: `turn-note ${item.kind}` }, item.text);
        blocks.set(item.key, b);
        return b;
      }
      b = b || new TextBlock();
      if (!this.blocks.has(item.key) || b.text !== item.text) b.set(item.text);
      b.node.classList.toggle("streaming", item.live);
      blocks.set(item.key, b);
      return b.node;
    });
    this.blocks = blocks;
    placeChildren(this.body, nodes);
    this.text = turn.items
      .filter((i) => i.type === "text" && !i.live)
      .map((i) => i.text)
      .join("\n\n");
    this.copy.hidden = !this.text;
    this.regenerate.hidden = !this.text || turn.items.some((i) => i.live);
    if (turn.spent) {
      this.footer.textContent = usageText(turn.spent.usage, turn.spent.cost);
      this.footer.hidden = false;
    }
  }
}

/** Makes `parent`'s children exactly `nodes`, in order, moving only the ones out of place. */
export function placeChildren(parent, nodes) {
  nodes.forEach((node, i) => {
    const at = parent.childNodes[i];
    if (at !== node) parent.insertBefore(node, at ?? null);
  });
  while (parent.childNodes.length > nodes.length) parent.lastChild.remove();
}

/** Seconds left until `iso`, never negative. */
export function secondsLeft(iso) {
  return Math.max(0, Math.round((Date.parse(iso) - Date.now()) / 1000));
}

export function formatDuration(s) {
  const m = Math.floor(s / 60);
  return m > 0 ? `${m} min ${String(s % 60).padStart(2, "0")} s` : `${s} s`;
}

export function formatTime(iso) {
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? "" : d.toLocaleString();
}

const DIFF_CLASS = { " ": "same", "-": "del", "+": "add" };

/**
 * A line diff (`[{op, text}]`, diff.js lineDiff) as a `<pre>`: each line marked "+ ",
 * "- " or "  " as well as coloured, so it reads without colour too.
 */
export function diffBlock(lines, label) {
  return el(
    "pre",
    { class: "diff", "aria-label": label || null },
    ...lines.map((l) => el("span", { class: `diff-line ${DIFF_CLASS[l.op] || "same"}` }, `${l.op} ${l.text}\n`)),
  );
}

/**
 * Makes `nodes` the children of `root`, keeping its scroll position and the keyboard focus: the
 * element focused before (marked with `data-focus-key`) or `focusKey` is focused again after.
 */
export function replaceKeepingFocus(root, nodes, focusKey = null) {
  const active = document.activeElement;
  const inside = active && root.contains(active) && active.dataset ? active : null;
  const key = focusKey || (inside ? inside.dataset.focusKey : null);
  const top = root.scrollTop;
  root.replaceChildren(...nodes);
  root.scrollTop = top;
  if (!key) return;
  const again = [...root.querySelectorAll("[data-focus-key]")].find((n) => n.dataset.focusKey === key);
  if (!again || again.disabled) return;
  again.focus({ preventScroll: true });
  // The same text field drawn anew: the caret stays where it was.
  if (inside && inside.dataset.focusKey === key && typeof inside.selectionStart === "number" && "setSelectionRange" in again) {
    again.setSelectionRange(inside.selectionStart, inside.selectionEnd);
  }
}

/** A link to the session something came from (a memory change, a proposal), or null. */
export function sessionLink(sessionId) {
  return sessionId ? el("a", { href: `#/s/${encodeURIComponent(sessionId)}` }, "open its session") : null;
}

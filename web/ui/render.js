// DOM building blocks of the chat: elements made with createElement and textContent only.
import { renderMarkdown } from "./markdown.js";

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

  append(text) {
    this.text += text;
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
    this.node.replaceChildren(renderMarkdown(this.text));
  }
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

/** A tool call: name, arguments, live progress, status and a preview of its result. */
export class ToolCard {
  constructor(callId, name, args) {
    this.callId = callId;
    this.status = el("span", { class: "tool-status" });
    this.progress = el("p", { class: "tool-progress", hidden: true });
    this.result = el("pre", { class: "tool-result", hidden: true });
    this.extra = el("div", { class: "tool-extra" });
    this.name = el("span", { class: "tool-name" }, name || "tool");
    this.args = el("pre", { class: "tool-args" }, prettyArgs(args));
    this.node = el(
      "section",
      { class: "tool-card", dataset: { callId }, "aria-label": `tool ${name || ""}` },
      el("header", {}, this.name, this.status),
      el("details", { class: "tool-args-box" }, el("summary", {}, "arguments"), this.args),
      this.progress,
      this.extra,
      this.result,
    );
    this.setStatus("pending");
  }

  describe(name, args) {
    if (name) this.name.textContent = name;
    if (args !== undefined) this.args.textContent = prettyArgs(args);
  }

  setStatus(status) {
    this.node.dataset.status = status;
    this.status.textContent = STATUS_LABEL[status] ?? status;
  }

  setProgress(message) {
    this.progress.hidden = false;
    this.progress.textContent = message;
  }

  setResult(text, durationMs) {
    this.progress.hidden = true;
    this.result.hidden = false;
    this.result.textContent = preview(text ?? "");
    if (typeof durationMs === "number") this.status.textContent += ` · ${(durationMs / 1000).toFixed(1)} s`;
  }
}

/** "12 in · 34 out tokens · $0.0012". */
export function usageText(usage, cost) {
  if (!usage) return "";
  const parts = [`${usage.input_tokens ?? 0} in · ${usage.output_tokens ?? 0} out tokens`];
  if (usage.cache_read_tokens) parts.push(`${usage.cache_read_tokens} cached`);
  const c = typeof cost === "number" ? cost : usage.cost_usd;
  if (typeof c === "number") parts.push(`$${c.toFixed(c < 0.01 ? 4 : 2)}`);
  return parts.join(" · ");
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

// The Memory page (#/memory): the caller's two stores with how full each is, every entry with
// Edit and Delete, an Add form per store, the writes the background review proposed (Approve or
// Deny), and the history of changes with Undo. What it shows is decided by memory_state.js;
// this file fetches, draws and acts. After every action the page reads all three lists again,
// so it shows what the server has, whoever else changed it meanwhile.
import { ApiError } from "./api.js";
import { focusedKey, runAction, say } from "./actions.js";
import { describe } from "./page.js";
import { el, button, diffBlock, formatTime, preview, replaceKeepingFocus, sessionLink } from "./render.js";
import { lineDiff } from "./diff.js";
import {
  memoryStores,
  findEntry,
  sortChanges,
  sortPending,
  describeChange,
  undoAction,
  pendingView,
  refusalText,
  roomText,
  inTarget,
} from "./memory_state.js";

/** Changes shown at first, and added by each "Show more". */
const HISTORY_PAGE = 30;

/** Rows of a textarea for `text`: its lines, between 2 and 12. */
function rowsFor(text) {
  return Math.min(12, Math.max(2, String(text).split("\n").length + 1));
}

export class MemoryView {
  /** Draws into `root` (the page's body), reading and writing through `apiClient`. */
  constructor(apiClient, root) {
    this.kind = "memory";
    this.api = apiClient;
    this.root = root;
    this.closed = false;
    /** memory_state.js memoryStores, or null until read. */
    this.stores = null;
    this.changes = null;
    this.pending = null;
    /** What failed the last time each list was read (an Error), or null. */
    this.loadErrors = { memory: null, changes: null, pending: null };
    /** The id of the entry open in its editor, or null. */
    this.editing = null;
    /** Text typed and not sent yet: `add:<target>` and `edit:<entry id>`. */
    this.drafts = new Map();
    /** Errors shown under what failed: `add:<target>`, `entry:<id>`, `change:<id>`, `pending:<id>`. */
    this.errors = new Map();
    this.busy = false;
    this.historyShown = HISTORY_PAGE;
    this.status = el("p", { class: "visually-hidden", role: "status" });
  }

  close() {
    this.closed = true;
  }

  async open() {
    this.draw();
    await this.reload();
  }

  /** The page has one route: nothing to change. */
  async show() {}

  /** Reads the stores, the history and the pending writes, then draws; a failure is shown where that list goes. */
  async reload(focusKey = null) {
    const [memory, changes, pending] = await Promise.allSettled([
      this.api.memory(),
      this.api.memoryChanges(),
      this.api.memoryPending(),
    ]);
    if (this.closed) return;
    const failed = (r) => (r.status === "rejected" ? r.reason : null);
    this.loadErrors = { memory: failed(memory), changes: failed(changes), pending: failed(pending) };
    if (memory.status === "fulfilled") this.stores = memoryStores(memory.value);
    if (changes.status === "fulfilled") this.changes = sortChanges(changes.value && changes.value.changes);
    if (pending.status === "fulfilled") this.pending = sortPending(pending.value && pending.value.pending);
    if (this.editing && this.stores && !findEntry(this.stores, this.editing)) this.editing = null;
    this.draw(focusKey);
  }

  /** Says `text` to a screen reader. */
  say(text) {
    say(this.status, text);
  }

  /**
   * Runs one action (`work`, a request): while it runs the page's buttons are disabled; then
   * the page is read again. A failure is shown under what failed (`key`), as the refusal's
   * reason when the API refused the text, else as `what: <the error>`.
   */
  act(key, what, work, { done = "", after = null, focus = null } = {}) {
    const next = () => {
      if (after) after();
      return false;
    };
    const focusKey = focus || focusedKey(this.root);
    return runAction(this, key, work, { done, next, focusKey, explain: (e) => this.explain(e, what) });
  }

  explain(e, what) {
    const refused = refusalText(e);
    if (refused) return refused;
    if (e instanceof ApiError && e.status === 409) return "This was decided already; the page now shows what is still waiting.";
    return `${what}: ${describe(e)}`;
  }

  errorNode(key) {
    const message = this.errors.get(key);
    return el("p", { class: "error", role: "alert", hidden: !message }, message || "");
  }

  /** A list's failure to load, with a button to read it again. */
  loadFailed(what, error, key) {
    return el(
      "div",
      { class: "load-failed" },
      el("p", { class: "error", role: "alert" }, `Could not read ${what}: ${describe(error)}`),
      button("Try again", () => this.act(key, "Could not read", async () => {}), { class: "secondary", "data-focus-key": key }),
    );
  }

  // ---------- drawing ----------

  draw(focusKey = null) {
    if (this.closed) return;
    const nodes = [
      el(
        "p",
        { class: "hint" },
        "What the agent keeps between sessions, for you alone: its own notes, and what it knows about you. " +
          "A new session reads both; a session already running does not see a change.",
      ),
      this.status,
      this.pendingPanel(),
    ];
    if (this.loadErrors.memory) {
      nodes.push(el("section", { class: "panel" }, this.loadFailed("the memory", this.loadErrors.memory, "retry:memory")));
    } else if (!this.stores) {
      nodes.push(el("p", { class: "hint" }, "Loading…"));
    }
    if (this.stores) nodes.push(...this.stores.map((s) => this.storePanel(s)));
    nodes.push(this.historyPanel());
    replaceKeepingFocus(this.root, nodes, focusKey);
  }

  storePanel(store) {
    const f = store.fullness;
    const head = `store-${store.target}`;
    const meter = el("meter", {
      min: 0,
      max: Math.max(1, f.limit),
      value: Math.min(f.chars, Math.max(1, f.limit)),
      low: Math.round(f.limit * 0.8),
      high: Math.round(f.limit * 0.95),
      optimum: 0,
      "aria-label": `${store.label}: ${f.text} used`,
    });
    const entries =
      store.entries.length === 0
        ? el("p", { class: "hint" }, "Nothing here yet.")
        : el("ol", { class: "entries" }, ...store.entries.map((e) => this.entryNode(store, e)));
    return el(
      "section",
      { class: "panel store", "aria-labelledby": head, dataset: { target: store.target, level: f.level } },
      el("h3", { id: head }, store.label),
      el("div", { class: "fullness" }, meter, el("span", { class: "fullness-text" }, `${f.text} (${f.percent}%)`)),
      entries,
      this.addForm(store),
    );
  }

  entryNode(store, entry) {
    if (this.editing === entry.id) return this.editNode(store, entry);
    const changed = entry.updated_at && entry.updated_at !== entry.created_at ? ` · changed ${formatTime(entry.updated_at)}` : "";
    const short = preview(entry.text, 60);
    return el(
      "li",
      { class: "entry" },
      el("p", { class: "entry-text" }, entry.text),
      el(
        "div",
        { class: "entry-foot" },
        el("span", { class: "meta" }, `added ${formatTime(entry.created_at)}${changed}`),
        el(
          "span",
          { class: "actions" },
          button("Edit", () => this.startEdit(entry), { class: "secondary", "aria-label": `Edit: ${short}`, "data-focus-key": `edit:${entry.id}` }),
          button("Delete", () => this.remove(store, entry), { class: "danger", "aria-label": `Delete: ${short}`, "data-focus-key": `delete:${entry.id}` }),
        ),
      ),
      this.errorNode(`entry:${entry.id}`),
    );
  }

  editNode(store, entry) {
    const area = el("textarea", {
      id: "memory-edit",
      rows: rowsFor(entry.text),
      "aria-describedby": "memory-edit-room",
      "data-focus-key": `edit-text:${entry.id}`,
    });
    area.value = this.drafts.get(`edit:${entry.id}`) ?? entry.text;
    const room = el("p", { class: "hint", id: "memory-edit-room" }, roomText(store, area.value, entry.text));
    area.addEventListener("input", () => {
      this.drafts.set(`edit:${entry.id}`, area.value);
      room.textContent = roomText(store, area.value, entry.text);
    });
    const form = el(
      "form",
      { class: "entry-edit" },
      el("label", { for: "memory-edit" }, `Edit this entry of ${inTarget(store.target)}`),
      area,
      room,
      el(
        "div",
        { class: "actions" },
        el("button", { type: "submit", "data-focus-key": `save:${entry.id}` }, "Save"),
        button("Cancel", () => this.cancelEdit(entry), { class: "secondary" }),
        el("span", { class: "hint" }, "Ctrl+Enter saves, Escape cancels"),
      ),
      this.errorNode(`entry:${entry.id}`),
    );
    area.addEventListener("keydown", (ev) => {
      if (ev.key === "Escape") {
        ev.preventDefault();
        this.cancelEdit(entry);
      } else if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) {
        ev.preventDefault();
        form.requestSubmit();
      }
    });
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      this.save(entry, area.value);
    });
    return el("li", { class: "entry editing" }, form);
  }

  addForm(store) {
    const id = `memory-add-${store.target}`;
    const roomId = `${id}-room`;
    const key = `add:${store.target}`;
    const area = el("textarea", { id, rows: 2, "aria-describedby": roomId, "data-focus-key": `add-text:${store.target}` });
    area.value = this.drafts.get(key) ?? "";
    const room = el("p", { class: "hint", id: roomId }, roomText(store, area.value));
    area.addEventListener("input", () => {
      this.drafts.set(key, area.value);
      room.textContent = roomText(store, area.value);
    });
    const form = el(
      "form",
      { class: "add-form" },
      el("label", { for: id }, `Add to ${inTarget(store.target)}`),
      area,
      room,
      el("div", { class: "actions" }, el("button", { type: "submit", "data-focus-key": `add-button:${store.target}` }, "Add")),
      this.errorNode(key),
    );
    area.addEventListener("keydown", (ev) => {
      if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) {
        ev.preventDefault();
        form.requestSubmit();
      }
    });
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      this.add(store, area.value);
    });
    return form;
  }

  pendingPanel() {
    let body;
    if (this.loadErrors.pending) body = this.loadFailed("the waiting writes", this.loadErrors.pending, "retry:pending");
    else if (!this.pending) body = el("p", { class: "hint" }, "Loading…");
    else if (this.pending.length === 0) body = el("p", { class: "hint" }, "Nothing is waiting for you.");
    else body = el("ol", { class: "cards" }, ...this.pending.map((p) => this.pendingNode(p)));
    return el(
      "section",
      { class: "panel", "aria-labelledby": "memory-pending" },
      el("h3", { id: "memory-pending" }, "Waiting for your decision", this.pending && this.pending.length ? ` (${this.pending.length})` : ""),
      el("p", { class: "hint" }, "Writes the background review proposed after a session. Nothing is saved until you approve it."),
      body,
    );
  }

  pendingNode(p) {
    const v = pendingView(p);
    const decide = (decision) =>
      this.act(`pending:${p.id}`, "Could not decide", () => this.api.decideMemoryPending(p.id, decision), {
        done: decision === "approve" ? "Approved: the write is saved." : "Denied: nothing was saved.",
      });
    return el(
      "li",
      { class: "card" },
      el("h4", {}, v.title),
      v.oldText === null ? null : el("p", { class: "meta" }, "The entry that contains:"),
      v.oldText === null ? null : diffBlock(lineDiff(v.oldText, ""), "The entry that contains"),
      v.newText === null ? null : el("p", { class: "meta" }, v.oldText === null ? "Text:" : "New text:"),
      v.newText === null ? null : diffBlock(lineDiff("", v.newText), "New text"),
      el("p", { class: "meta" }, `proposed ${formatTime(p.created_at)}`, p.session_id ? " · " : "", sessionLink(p.session_id)),
      el(
        "div",
        { class: "actions" },
        button("Approve", () => decide("approve"), { class: "approve", "aria-label": `Approve: ${v.title}`, "data-focus-key": `approve:${p.id}` }),
        button("Deny", () => decide("deny"), { class: "danger", "aria-label": `Deny: ${v.title}`, "data-focus-key": `deny:${p.id}` }),
      ),
      this.errorNode(`pending:${p.id}`),
    );
  }

  historyPanel() {
    let body;
    if (this.loadErrors.changes) body = this.loadFailed("the history", this.loadErrors.changes, "retry:changes");
    else if (!this.changes) body = el("p", { class: "hint" }, "Loading…");
    else if (this.changes.length === 0) body = el("p", { class: "hint" }, "No changes yet.");
    else {
      const shown = this.changes.slice(0, this.historyShown);
      const more = this.changes.length - shown.length;
      body = [
        el("ol", { class: "cards" }, ...shown.map((c) => this.changeNode(c))),
        more > 0
          ? button(`Show ${Math.min(more, HISTORY_PAGE)} more`, () => {
              this.historyShown += HISTORY_PAGE;
              this.draw(`change-undo:${shown[shown.length - 1].id}`);
            }, { class: "secondary" })
          : null,
      ];
    }
    return el(
      "section",
      { class: "panel", "aria-labelledby": "memory-history" },
      el("h3", { id: "memory-history" }, "History"),
      el("p", { class: "hint" }, "Every change, newest first. Undo makes a new change; the history keeps this one."),
      ...[body].flat(),
    );
  }

  changeNode(c) {
    const d = describeChange(c);
    let undo;
    if (!this.stores) {
      undo = el("span", { class: "meta" }, "Undo needs the stores, which could not be read.");
    } else {
      const u = undoAction(c, this.stores);
      undo = u.kind
        ? [
            button("Undo", () => this.undo(c, u), {
              class: "secondary",
              "aria-label": `Undo: ${u.description}`,
              "data-focus-key": `change-undo:${c.id}`,
            }),
            el("span", { class: "meta" }, u.description),
          ]
        : el("span", { class: "meta", "data-focus-key": `change-undo:${c.id}`, tabindex: -1 }, `No undo: ${u.reason}`);
    }
    return el(
      "li",
      { class: "card", dataset: { action: c.action } },
      el("h4", {}, d.title),
      diffBlock(lineDiff(c.before ?? "", c.after ?? ""), d.title),
      el("p", { class: "meta" }, `${d.by} · ${formatTime(c.at)}`, c.session_id ? " · " : "", sessionLink(c.session_id)),
      el("div", { class: "actions" }, ...[undo].flat()),
      this.errorNode(`change:${c.id}`),
    );
  }

  // ---------- actions ----------

  startEdit(entry) {
    if (this.busy) return;
    this.editing = entry.id;
    this.errors.delete(`entry:${entry.id}`);
    this.draw(`edit-text:${entry.id}`);
  }

  cancelEdit(entry) {
    this.editing = null;
    this.drafts.delete(`edit:${entry.id}`);
    this.errors.delete(`entry:${entry.id}`);
    this.draw(`edit:${entry.id}`);
  }

  save(entry, value) {
    const text = value.trim();
    if (!text) {
      this.errors.set(`entry:${entry.id}`, "An entry cannot be empty: delete it instead.");
      this.draw(`edit-text:${entry.id}`);
      return;
    }
    if (text === entry.text) {
      this.cancelEdit(entry);
      return;
    }
    this.act(`entry:${entry.id}`, "Could not save", () => this.api.editMemory(entry.id, text), {
      done: "Entry saved.",
      after: () => {
        this.editing = null;
        this.drafts.delete(`edit:${entry.id}`);
      },
      focus: `edit:${entry.id}`,
    });
  }

  remove(store, entry) {
    this.act(`entry:${entry.id}`, "Could not delete", () => this.api.deleteMemory(entry.id), {
      done: "Entry deleted. The history below can undo it.",
      focus: `add-text:${store.target}`,
    });
  }

  add(store, value) {
    const key = `add:${store.target}`;
    const text = value.trim();
    if (!text) {
      this.errors.set(key, "Write something to add first.");
      this.draw(`add-text:${store.target}`);
      return;
    }
    this.act(key, "Could not add", () => this.api.addMemory(store.target, text), {
      done: `Added to ${inTarget(store.target)}.`,
      after: () => this.drafts.delete(key),
      focus: `add-text:${store.target}`,
    });
  }

  undo(change, u) {
    const work = () => {
      if (u.kind === "delete") return this.api.deleteMemory(u.id);
      if (u.kind === "add") return this.api.addMemory(u.target, u.text);
      return this.api.editMemory(u.id, u.text);
    };
    this.act(`change:${change.id}`, "Could not undo", work, { done: "Undone." });
  }
}

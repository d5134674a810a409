// The Skills page (#/skills, #/skill/{name}, #/skills/new): the list of skills, one skill's
// SKILL.md in an editor (read-only for a skill installed as a folder), a new skill from a
// template, and the proposals the agent made, as readable changes, with Approve and Deny.
// Skills are shared and only the operator may change them: the first 403 of a write turns the
// page read-only for this sign-in and says so. What it shows comes from skills_state.js and
// skill_text.js; this file fetches, draws and acts.
import { ApiError } from "./api.js";
import { focusedKey, runAction, say } from "./actions.js";
import { describe } from "./page.js";
import { el, button, diffBlock, formatTime, preview, replaceKeepingFocus, sessionLink } from "./render.js";
import { skillHref, SKILLS_HREF, NEW_SKILL_HREF } from "./route.js";
import { skillTemplate, validateSkill } from "./skill_text.js";
import { SOURCE_LABEL, sortSkills, sortProposals, skillMeta, usesText, editable, proposalView, isDirty } from "./skills_state.js";

/** The API clients (one per sign-in) whose token was refused a skill write with 403. */
const readOnlyFor = new WeakSet();

/** The draft key of the new skill's editor (no skill name is empty). */
const NEW = "";

export class SkillsView {
  /** Draws into `root` (the page's body), reading and writing through `apiClient`. */
  constructor(apiClient, root) {
    this.kind = "skills";
    this.api = apiClient;
    this.root = root;
    this.closed = false;
    /** The route shown: `{name, create}` (route.js). */
    this.route = { name: null, create: false };
    this.skills = null;
    this.listError = null;
    this.proposals = null;
    this.proposalsError = null;
    /** The open skill: `{name, skill, error}` (`skill` null until read), or null. */
    this.detail = null;
    /** Editor text not saved yet, by skill name (NEW for the new skill). */
    this.drafts = new Map();
    /** Errors shown under what failed: `editor`, `proposal:<id>`. */
    this.errors = new Map();
    this.busy = false;
    this.status = el("p", { class: "visually-hidden", role: "status" });
  }

  /** Whether the server refused this sign-in a skill write (403): no edit controls then. */
  get readOnly() {
    return readOnlyFor.has(this.api);
  }

  close() {
    this.closed = true;
  }

  async open(route) {
    this.route = route;
    this.detail = route.name ? { name: route.name, skill: null, error: null } : null;
    this.draw();
    await Promise.all([this.loadList(), this.loadProposals(), this.loadDetail()]);
  }

  /** Another route of this page: the list stays, the open skill changes. */
  async show(route) {
    const same = route.name === this.route.name && route.create === this.route.create;
    this.route = route;
    if (same) return;
    this.errors.delete("editor");
    this.detail = route.name ? { name: route.name, skill: null, error: null } : null;
    this.draw("detail-title");
    await this.loadDetail("detail-title");
  }

  async loadList(focusKey = null) {
    try {
      this.skills = sortSkills((await this.api.skills()).skills);
      this.listError = null;
    } catch (e) {
      this.listError = e;
    }
    this.draw(focusKey);
  }

  async loadProposals(focusKey = null) {
    try {
      this.proposals = sortProposals((await this.api.skillProposals()).proposals);
      this.proposalsError = null;
    } catch (e) {
      if (e instanceof ApiError && e.status === 403) readOnlyFor.add(this.api);
      this.proposalsError = e;
    }
    this.draw(focusKey);
  }

  async loadDetail(focusKey = null) {
    const d = this.detail;
    if (!d) return;
    try {
      const skill = await this.api.skill(d.name);
      if (this.detail !== d) return;
      d.skill = skill;
      d.error = null;
    } catch (e) {
      if (this.detail !== d) return;
      d.error = e;
    }
    this.draw(focusKey);
  }

  /** Reads the list, the proposals and the open skill again. */
  async reload(focusKey = null) {
    if (this.detail) this.detail = { name: this.detail.name, skill: this.detail.skill, error: null };
    await Promise.all([this.loadList(focusKey), this.loadProposals(focusKey), this.loadDetail(focusKey)]);
  }

  say(text) {
    say(this.status, text);
  }

  /**
   * Runs one action (`work`, a request), with the page's buttons disabled meanwhile; then reads
   * everything again (unless `after` moved to another route, which reads what it shows). A
   * failure is shown under what failed (`key`); a 403 makes the page read-only.
   */
  act(key, what, work, { done = "", after = null, focus = null } = {}) {
    const focusKey = focus || focusedKey(this.root);
    const handled = (e) => {
      if (!(e instanceof ApiError && e.status === 403)) return false;
      readOnlyFor.add(this.api);
      this.draw("read-only");
      return true;
    };
    return runAction(this, key, work, { done, next: after, focusKey, explain: (e) => explain(e, what), handled });
  }

  errorNode(key) {
    const message = this.errors.get(key);
    return el("p", { class: "error", role: "alert", hidden: !message }, message || "");
  }

  // ---------- drawing ----------

  draw(focusKey = null) {
    if (this.closed) return;
    const nodes = [
      el(
        "p",
        { class: "hint" },
        "Skills are instructions the agent can open when a task fits one: a SKILL.md with a name and a description " +
          "(what the agent reads to decide), then the steps. They are shared by everyone; only the operator changes them.",
      ),
      this.status,
    ];
    if (this.readOnly) {
      nodes.push(
        el(
          "p",
          { class: "notice", role: "status", tabindex: -1, "data-focus-key": "read-only" },
          "You can read the skills, but only the operator can change them or decide proposals: " +
            "the server refused this token a change (403 forbidden).",
        ),
      );
    }
    nodes.push(
      this.proposalsPanel(),
      el("div", { class: "skills-layout" }, this.listPanel(), this.detailPanel()),
    );
    replaceKeepingFocus(this.root, nodes, focusKey);
  }

  listPanel() {
    let body;
    if (this.listError) body = this.loadFailed("the skills", this.listError);
    else if (!this.skills) body = el("p", { class: "hint" }, "Loading…");
    else if (this.skills.length === 0) body = el("p", { class: "hint" }, "No skills yet.");
    else {
      body = el(
        "ul",
        { class: "skill-list" },
        ...this.skills.map((s) =>
          el(
            "li",
            {},
            el(
              "a",
              {
                href: skillHref(s.name),
                class: "skill-link",
                "aria-current": this.route.name === s.name ? "page" : null,
                "data-focus-key": `skill:${s.name}`,
              },
              el("span", { class: "skill-name" }, s.name),
              el("span", { class: "skill-desc" }, preview(s.description || "", 160)),
              el("span", { class: "meta" }, skillMeta(s, formatTime)),
            ),
          ),
        ),
      );
    }
    return el(
      "section",
      { class: "panel skill-list-panel", "aria-labelledby": "skills-list" },
      el(
        "div",
        { class: "panel-head" },
        el("h3", { id: "skills-list" }, "Skills", this.skills ? ` (${this.skills.length})` : ""),
        this.readOnly
          ? null
          : button("New skill", () => (location.hash = NEW_SKILL_HREF), { "data-focus-key": "new-skill" }),
      ),
      body,
    );
  }

  loadFailed(what, error) {
    return el(
      "div",
      { class: "load-failed" },
      el("p", { class: "error", role: "alert" }, `Could not read ${what}: ${describe(error)}`),
      button("Try again", () => this.act("retry", "Could not read", async () => {}), { class: "secondary", "data-focus-key": `retry:${what}` }),
    );
  }

  detailPanel() {
    const panel = (...children) =>
      el("section", { class: "panel skill-detail", "aria-labelledby": "detail-title" }, ...children);
    const title = (text) => el("h3", { id: "detail-title", tabindex: -1, "data-focus-key": "detail-title" }, text);
    if (this.route.create) {
      if (this.readOnly) return panel(title("New skill"), el("p", {}, "Only the operator can create skills."));
      return panel(
        title("New skill"),
        el("p", { class: "hint" }, "Fill in the name and the description in the front matter, then the steps below it."),
        this.editor(null, skillTemplate()),
      );
    }
    const d = this.detail;
    if (!d) return el("section", { class: "panel skill-detail placeholder" }, el("p", { class: "hint" }, "Pick a skill to read it or change it."));
    if (d.error && !d.skill) {
      const gone = d.error instanceof ApiError && d.error.status === 404;
      return panel(
        title(d.name),
        el("p", { class: "error", role: "alert" }, gone ? `There is no skill named "${d.name}".` : `Could not read the skill: ${describe(d.error)}`),
        el("p", {}, el("a", { href: SKILLS_HREF }, "Back to the list")),
      );
    }
    if (!d.skill) return panel(title(d.name), el("p", { class: "hint" }, "Loading…"));
    const s = d.skill;
    const facts = [SOURCE_LABEL[s.source] ?? s.source, usesText(s.uses)];
    if (s.last_used_at && Number(s.uses) > 0) facts.push(`last used ${formatTime(s.last_used_at)}`);
    if (s.updated_at) facts.push(`updated ${formatTime(s.updated_at)}`);
    const files = Array.isArray(s.files) && s.files.length > 0
      ? [el("h4", {}, "Files beside it"), el("ul", { class: "skill-files" }, ...s.files.map((f) => el("li", {}, el("code", {}, f))))]
      : [];
    let body;
    if (!editable(s)) {
      body = [el("p", { class: "notice" }, "Installed as a folder on the server: it can be read here, not changed."), this.source(s)];
    } else if (this.readOnly) {
      body = [this.source(s)];
    } else {
      body = [this.editor(s.name, s.content ?? "")];
    }
    return panel(
      title(s.name),
      s.description ? el("p", { class: "skill-about" }, s.description) : null,
      el("p", { class: "meta" }, facts.join(" · ")),
      ...body,
      ...files,
    );
  }

  /** A skill's SKILL.md, read-only. */
  source(s) {
    return el("pre", { class: "skill-source", tabindex: 0, "aria-label": `SKILL.md of ${s.name}` }, s.content ?? "");
  }

  /** The editor of skill `name` (null: a new one) whose saved text is `saved`. */
  editor(name, saved) {
    const key = name ?? NEW;
    const names = (this.skills || []).map((s) => s.name);
    const area = el("textarea", {
      id: "skill-content",
      class: "mono",
      rows: 22,
      spellcheck: "false",
      autocapitalize: "off",
      "aria-describedby": "skill-check",
      "data-focus-key": "skill-content",
    });
    area.value = this.drafts.get(key) ?? saved;
    const check = el("p", { id: "skill-check", class: "check" });
    const dirty = el("span", { class: "meta" });
    const revert = button("Revert", () => {
      this.drafts.delete(key);
      this.errors.delete("editor");
      this.draw("skill-content");
    }, { class: "secondary", "data-focus-key": "revert" });
    const update = () => {
      const v = validateSkill(area.value, { name, existing: names });
      check.textContent = v.ok ? `Name: ${v.name} · description: ${preview(v.description, 140)}` : v.error;
      check.classList.toggle("bad", !v.ok);
      const changed = isDirty(saved, area.value);
      dirty.textContent = changed && name !== null ? "unsaved changes" : "";
      revert.hidden = !changed;
    };
    update();
    area.addEventListener("input", () => {
      this.drafts.set(key, area.value);
      update();
    });
    const form = el(
      "form",
      { class: "skill-editor" },
      el("label", { for: "skill-content" }, "SKILL.md"),
      area,
      check,
      el(
        "div",
        { class: "actions" },
        el("button", { type: "submit", "data-focus-key": "save-skill" }, name === null ? "Create" : "Save"),
        revert,
        name === null
          ? el("a", { href: SKILLS_HREF, class: "button-link secondary" }, "Cancel")
          : button("Delete", () => this.remove(name), { class: "danger", "data-focus-key": "delete-skill" }),
        dirty,
        el("span", { class: "hint" }, "Ctrl+S saves"),
      ),
      this.errorNode("editor"),
    );
    area.addEventListener("keydown", (ev) => {
      if ((ev.ctrlKey || ev.metaKey) && (ev.key === "s" || ev.key === "Enter")) {
        ev.preventDefault();
        form.requestSubmit();
      }
    });
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      this.save(name, area.value);
    });
    return form;
  }

  proposalsPanel() {
    let body;
    if (this.proposalsError) body = this.loadFailed("the proposals", this.proposalsError);
    else if (!this.proposals) body = el("p", { class: "hint" }, "Loading…");
    else if (this.proposals.length === 0) body = el("p", { class: "hint" }, "No proposals are waiting.");
    else body = el("ol", { class: "cards" }, ...this.proposals.map((p) => this.proposalNode(p)));
    return el(
      "section",
      { class: "panel", "aria-labelledby": "skills-proposals" },
      el("h3", { id: "skills-proposals" }, "Proposed by the agent", this.proposals && this.proposals.length ? ` (${this.proposals.length})` : ""),
      el("p", { class: "hint" }, "Skills the agent proposed to create, change or delete. Nothing changes until the operator approves."),
      body,
    );
  }

  proposalNode(p) {
    const v = proposalView(p);
    const decide = (decision) =>
      this.act(`proposal:${p.id}`, "Could not decide", () => this.api.decideSkillProposal(p.id, decision), {
        done: decision === "approve" ? "Approved." : "Denied.",
      });
    const blocks = v.blocks.flatMap((b) => [el("p", { class: "meta" }, `${b.label}:`), diffBlock(b.lines, `${v.title}: ${b.label}`)]);
    return el(
      "li",
      { class: "card", dataset: { action: p.action } },
      el("h4", {}, v.title),
      v.description ? el("p", { class: "skill-about" }, v.description) : null,
      ...blocks,
      el("p", { class: "meta" }, `proposed ${formatTime(p.created_at)}`, p.session_id ? " · " : "", sessionLink(p.session_id)),
      this.readOnly
        ? null
        : el(
            "div",
            { class: "actions" },
            button("Approve", () => decide("approve"), { class: "approve", "aria-label": `Approve: ${v.title}`, "data-focus-key": `approve:${p.id}` }),
            button("Deny", () => decide("deny"), { class: "danger", "aria-label": `Deny: ${v.title}`, "data-focus-key": `deny:${p.id}` }),
          ),
      this.errorNode(`proposal:${p.id}`),
    );
  }

  // ---------- actions ----------

  save(name, text) {
    const names = (this.skills || []).map((s) => s.name);
    const v = validateSkill(text, { name, existing: names });
    if (!v.ok) {
      this.errors.set("editor", v.error);
      this.draw("skill-content");
      return;
    }
    const key = name ?? NEW;
    this.act("editor", "Could not save", () => this.api.putSkill(v.name, text), {
      done: name === null ? `Created the skill "${v.name}".` : "Saved.",
      after: (answer) => {
        this.drafts.delete(key);
        if (name !== null) {
          // Shown at once; the skill is read again just after.
          if (this.detail && this.detail.skill) this.detail.skill = { ...this.detail.skill, ...(answer || {}), content: text };
          return false;
        }
        // The new skill's own address: route() opens it; the list is read again for it.
        location.hash = skillHref(v.name);
        this.loadList();
        return true;
      },
      focus: name === null ? "detail-title" : "save-skill",
    });
  }

  remove(name) {
    if (!window.confirm(`Delete the skill "${name}"? This cannot be undone.`)) return;
    this.act("editor", "Could not delete", () => this.api.deleteSkill(name), {
      done: `Deleted the skill "${name}".`,
      after: () => {
        this.drafts.delete(name);
        location.hash = SKILLS_HREF;
        this.loadList("new-skill");
        return true;
      },
    });
  }
}

/** Why a skill request failed, in words. */
function explain(e, what) {
  if (e instanceof ApiError) {
    if (e.code === "dir_skill") return "This skill is installed as a folder on the server: it can be read here, not changed.";
    if (e.code === "invalid_skill") return `The server refused this SKILL.md: ${e.message}`;
    if (e.status === 409) return "This was decided already; the page now shows the proposals still waiting.";
    if (e.status === 404) return "It is not there any more; the page now shows what there is.";
  }
  return `${what}: ${describe(e)}`;
}

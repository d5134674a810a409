// The turnkey web UI: sign-in, the session list and routing, all through the public /v1 API.
// One open session's chat is session_view.js, the Memory, Skills and Models pages
// memory_view.js, skills_view.js and models_view.js; the routes are route.js; the page's fixed elements are page.js.
import { Api, ApiError } from "./api.js";
import { ui, showError, describe } from "./page.js";
import { el, formatTime } from "./render.js";
import { parseRoute } from "./route.js";
import { SessionView } from "./session_view.js";
import { MemoryView } from "./memory_view.js";
import { SkillsView } from "./skills_view.js";
import { ModelsView } from "./models_view.js";
import { PendingFiles } from "./attach.js";

const TOKEN_KEY = "turnkey.token";

let api = null;
/** The open session, or null. */
let view = null;
/** The files picked for the next message of the open session. */
let pending = null;
/** The open Memory, Skills or Models page (`kind` "memory", "skills" or "models"), or null. */
let page = null;

// ---------- sign-in ----------

function signedOut(message = "") {
  localStorage.removeItem(TOKEN_KEY);
  if (view) view.close();
  view = null;
  closePage();
  api = null;
  if (pending) pending.clear();
  pending = null;
  ui.app.hidden = true;
  ui.signin.hidden = false;
  showError(ui.signinError, message);
  ui.token.value = "";
  ui.token.focus();
}

function unauthorized() {
  signedOut("Your token is no longer accepted (401 unauthorized). Sign in again.");
}

async function signIn(token) {
  const candidate = new Api(token);
  await candidate.listSessions(1);
  localStorage.setItem(TOKEN_KEY, token);
  api = new Api(token, unauthorized);
  pending = new PendingFiles(api, ui.pendingFiles, (m) => showError(ui.chatError, m));
  ui.signin.hidden = true;
  ui.app.hidden = false;
  showError(ui.signinError, "");
  await refreshSessions();
  await route();
}

ui.signinForm.addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const token = ui.token.value.trim();
  if (!token) return;
  showError(ui.signinError, "");
  try {
    await signIn(token);
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) {
      showError(
        ui.signinError,
        "That token was not accepted (401 unauthorized). Use the operator token that " +
          "turnkey serve printed (kept in data/operator.token) or an API token.",
      );
    } else {
      showError(ui.signinError, `Could not sign in: ${describe(e)}`);
    }
  }
});

ui.signOut.addEventListener("click", () => signedOut());

// The search box lists the sessions whose title or transcript holds what is typed.
let searchTimer = null;
ui.sessionSearch.addEventListener("input", () => {
  clearTimeout(searchTimer);
  searchTimer = setTimeout(refreshSessions, 250);
});

// Rename: the title becomes a text field until Enter (saves) or Escape (keeps it).
ui.rename.addEventListener("click", () => {
  if (!view) return;
  const field = el("input", { class: "rename-field", value: ui.title.textContent, "aria-label": "Session title" });
  const id = view.id;
  let finished = false;
  const done = async (save) => {
    // Once: taking the field out of the page blurs it, which would end the edit again.
    if (finished) return;
    finished = true;
    field.replaceWith(ui.title);
    ui.rename.hidden = false;
    const title = field.value.trim();
    if (!save || !title || title === ui.title.textContent) return;
    try {
      await api.renameSession(id, title);
      if (view && view.id === id) ui.title.textContent = title;
      await refreshSessions();
    } catch (e) {
      showError(ui.chatError, `Not renamed: ${describe(e)}`);
    }
  };
  field.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter") done(true);
    if (ev.key === "Escape") done(false);
  });
  field.addEventListener("blur", () => done(true));
  ui.title.replaceWith(field);
  ui.rename.hidden = true;
  field.focus();
  field.select();
});

// Delete: asked once; the session, its transcript and its files go (DELETE /v1/sessions/{id}).
ui.deleteSession.addEventListener("click", async () => {
  if (!view) return;
  const id = view.id;
  const name = ui.title.textContent || "this session";
  if (!window.confirm(`Delete "${name}" with its whole transcript and files? This cannot be undone.`)) return;
  try {
    await api.deleteSession(id);
    location.hash = "#/";
    await refreshSessions();
  } catch (e) {
    showError(ui.chatError, `Not deleted: ${describe(e)}`);
  }
});

// ---------- sessions ----------

async function refreshSessions() {
  if (!api) return;
  let list;
  try {
    list = (await api.listSessions(50, ui.sessionSearch.value.trim())).sessions;
  } catch (e) {
    showError(ui.chatError, `Could not list sessions: ${describe(e)}`);
    ui.chatError.dataset.source = "sessions";
    return;
  }
  // A failure to list, shown earlier, is over.
  if (ui.chatError.dataset.source === "sessions") showError(ui.chatError, "");
  const current = view ? view.id : null;
  if (list.length === 0 && ui.sessionSearch.value.trim()) {
    ui.sessions.replaceChildren(el("li", { class: "session-none" }, "No session matches."));
    return;
  }
  ui.sessions.replaceChildren(
    ...list.map((s) => {
      const link = el(
        "a",
        { href: `#/s/${s.id}`, class: "session-link", "aria-current": s.id === current ? "page" : null },
        el("span", { class: "session-title" }, s.title || "Untitled session"),
        el(
          "span",
          { class: "session-meta" },
          `${s.platform === "subagent" ? "sub-agent · " : ""}${s.state === "running" ? "running · " : ""}${formatTime(s.created_at)}`,
        ),
      );
      link.addEventListener("click", hideSidebar);
      return el("li", {}, link);
    }),
  );
}

let refreshTimer = null;
/** Refreshes the session list once within the next second, however often it is asked. */
function refreshSessionsSoon() {
  if (refreshTimer) return;
  refreshTimer = setTimeout(() => {
    refreshTimer = null;
    refreshSessions();
  }, 1000);
}

ui.newSession.addEventListener("click", async () => {
  // On a narrow screen the new session's chat is what is wanted, not the list over it.
  hideSidebar();
  try {
    const s = await api.createSession();
    location.hash = `#/s/${s.id}`;
    await refreshSessions();
    ui.input.focus();
  } catch (e) {
    showError(ui.chatError, `Could not create a session: ${describe(e)}`);
  }
});

// On a narrow screen the sidebar is behind a button: "Sessions" in the chat, "Menu" on a page.
for (const toggle of [ui.toggleSessions, ui.togglePages]) {
  toggle.addEventListener("click", () => {
    const open = ui.app.classList.toggle("show-sessions");
    ui.toggleSessions.setAttribute("aria-expanded", String(open));
    ui.togglePages.setAttribute("aria-expanded", String(open));
  });
}

function hideSidebar() {
  ui.app.classList.remove("show-sessions");
  ui.toggleSessions.setAttribute("aria-expanded", "false");
  ui.togglePages.setAttribute("aria-expanded", "false");
}

for (const link of [ui.navMemory, ui.navSkills, ui.navModels]) link.addEventListener("click", hideSidebar);

function closePage() {
  if (page) page.close();
  page = null;
  ui.page.hidden = true;
  ui.chat.hidden = false;
  ui.pageBody.replaceChildren();
  showError(ui.pageError, "");
}

const PAGE_TITLE = { memory: "Memory", skills: "Skills", models: "Models" };
const PAGES = { memory: MemoryView, skills: SkillsView, models: ModelsView };

/** Marks the page link of `current` ("memory", "skills", "models" or none) as the open page. */
function markNav(current) {
  ui.navMemory.setAttribute("aria-current", current === "memory" ? "page" : "false");
  ui.navSkills.setAttribute("aria-current", current === "skills" ? "page" : "false");
  ui.navModels.setAttribute("aria-current", current === "models" ? "page" : "false");
}

/** Shows the Memory, Skills or Models page for route `r` (route.js) in place of the chat. */
async function openPage(r) {
  if (view) {
    view.close();
    view = null;
    refreshSessions();
  }
  markNav(r.page);
  if (page && page.kind === r.page) {
    await page.show(r);
    return;
  }
  closePage();
  ui.chat.hidden = true;
  ui.page.hidden = false;
  ui.pageTitle.textContent = PAGE_TITLE[r.page];
  document.title = `${PAGE_TITLE[r.page]} · turnkey`;
  ui.pageTitle.focus({ preventScroll: true });
  page = new PAGES[r.page](api, ui.pageBody);
  try {
    await page.open(r);
  } catch (e) {
    if (page) showError(ui.pageError, `Could not open the page: ${describe(e)}`);
  }
}

async function route() {
  if (!api) return;
  const r = parseRoute(location.hash);
  if (r.page !== "session") {
    await openPage(r);
    return;
  }
  markNav(null);
  if (page) {
    closePage();
    document.title = "turnkey";
  }
  const id = r.id;
  if (view && view.id === id) return;
  if (view) view.close();
  view = null;
  showError(ui.chatError, "");
  ui.transcript.replaceChildren();
  ui.banners.replaceChildren();
  if (pending) pending.clear();
  ui.empty.hidden = Boolean(id);
  ui.composer.hidden = !id;
  ui.rename.hidden = !id;
  ui.deleteSession.hidden = !id;
  ui.interrupt.disabled = true;
  ui.title.textContent = id ? "Loading…" : "No session open";
  ui.state.textContent = "";
  ui.usage.textContent = "";
  if (!id) return;
  view = new SessionView(api, id, refreshSessionsSoon);
  try {
    await view.open();
  } catch (e) {
    if (view) showError(ui.chatError, `Could not open the session: ${describe(e)}`);
  }
  await refreshSessions();
}

window.addEventListener("hashchange", route);

ui.composer.addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const text = ui.input.value.trim();
  if (!view || !pending) return;
  if (pending.busy()) {
    showError(ui.chatError, "A file is still uploading; send when it is ready.");
    return;
  }
  const files = pending.refs();
  if (!text && files.length === 0) return;
  showError(ui.chatError, "");
  ui.input.value = "";
  pending.clear();
  const sent = await view.send(text, files);
  if (!sent && !ui.input.value) ui.input.value = text;
});

// Files for the next message: the Attach button, a drop on the chat, a paste of files.
ui.attach.addEventListener("click", () => ui.fileInput.click());
ui.fileInput.addEventListener("change", () => {
  if (pending) pending.add(ui.fileInput.files);
  ui.fileInput.value = "";
});
ui.chat.addEventListener("dragover", (ev) => {
  if (!view || !ev.dataTransfer || !Array.from(ev.dataTransfer.types).includes("Files")) return;
  ev.preventDefault();
  ui.chat.classList.add("dropping");
});
ui.chat.addEventListener("dragleave", () => ui.chat.classList.remove("dropping"));
ui.chat.addEventListener("drop", (ev) => {
  ui.chat.classList.remove("dropping");
  if (!view || !pending || !ev.dataTransfer || ev.dataTransfer.files.length === 0) return;
  ev.preventDefault();
  pending.add(ev.dataTransfer.files);
});
ui.input.addEventListener("paste", (ev) => {
  const files = ev.clipboardData ? ev.clipboardData.files : null;
  if (!pending || !files || files.length === 0) return;
  ev.preventDefault();
  pending.add(files);
});

ui.input.addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
    ev.preventDefault();
    ui.composer.requestSubmit();
  }
});

ui.interrupt.addEventListener("click", async () => {
  if (!view) return;
  ui.interrupt.disabled = true;
  try {
    await api.interrupt(view.id);
  } catch (e) {
    showError(ui.chatError, `Could not interrupt: ${describe(e)}`);
    ui.interrupt.disabled = view.state.status.state !== "running";
  }
});

// ---------- start ----------

const saved = localStorage.getItem(TOKEN_KEY);
if (saved) {
  signIn(saved).catch((e) => {
    if (e instanceof ApiError && e.status === 401) {
      signedOut("Your saved token is no longer accepted (401 unauthorized). Sign in again.");
    } else {
      // Keep the token: the server may only be restarting.
      ui.signin.hidden = false;
      showError(ui.signinError, `Could not reach the server: ${describe(e)}`);
      ui.token.value = saved;
    }
  });
} else {
  signedOut();
}

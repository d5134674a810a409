// The page's fixed elements and how errors are shown under them: shared by app.js (sign-in,
// the session list, routing), session_view.js (one open session) and the Memory and Skills
// pages (memory_view.js, skills_view.js).
import { ApiError } from "./api.js";

const $ = (id) => document.getElementById(id);
export const ui = {
  signin: $("signin"),
  signinForm: $("signin-form"),
  token: $("token"),
  signinError: $("signin-error"),
  app: $("app"),
  sidebar: $("sidebar"),
  sessions: $("sessions"),
  sessionSearch: $("session-search"),
  rename: $("rename"),
  deleteSession: $("delete"),
  newSession: $("new-session"),
  signOut: $("sign-out"),
  toggleSessions: $("toggle-sessions"),
  title: $("session-title"),
  state: $("state"),
  usage: $("usage"),
  model: $("model"),
  interrupt: $("interrupt"),
  banners: $("banners"),
  work: $("work"),
  transcript: $("transcript"),
  empty: $("empty"),
  composer: $("composer"),
  input: $("input"),
  send: $("send"),
  attach: $("attach"),
  fileInput: $("file-input"),
  pendingFiles: $("pending-files"),
  chatError: $("chat-error"),
  chat: $("chat"),
  navMemory: $("nav-memory"),
  navSkills: $("nav-skills"),
  navModels: $("nav-models"),
  page: $("page"),
  pageTitle: $("page-title"),
  pageError: $("page-error"),
  pageBody: $("page-body"),
  togglePages: $("toggle-pages"),
};

export function showError(node, message) {
  node.textContent = message;
  node.hidden = !message;
  delete node.dataset.source;
}

export function describe(e) {
  if (e instanceof ApiError) return e.status ? `${e.message} (${e.code})` : e.message;
  return String(e && e.message ? e.message : e);
}

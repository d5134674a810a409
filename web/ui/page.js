// The page's fixed elements and how errors are shown under them: shared by app.js (sign-in,
// the session list, routing) and session_view.js (one open session).
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
  newSession: $("new-session"),
  signOut: $("sign-out"),
  toggleSessions: $("toggle-sessions"),
  title: $("session-title"),
  state: $("state"),
  usage: $("usage"),
  interrupt: $("interrupt"),
  banners: $("banners"),
  transcript: $("transcript"),
  empty: $("empty"),
  composer: $("composer"),
  input: $("input"),
  send: $("send"),
  chatError: $("chat-error"),
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

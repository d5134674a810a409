// The UI's client of the public API (docs/api.md): every call is a plain /v1 request with
// `Authorization: Bearer`, and every failure becomes an ApiError with the API's stable code.

/** A failed call: `status` 0 means the request never got an answer (network error). */
export class ApiError extends Error {
  constructor(status, code, message, retryAfter = null) {
    super(message);
    this.status = status;
    this.code = code;
    this.retryAfter = retryAfter;
  }
}

/** A random UUID v4; `crypto.randomUUID` exists only in secure contexts, getRandomValues everywhere. */
export function newKey() {
  if (globalThis.crypto && typeof crypto.randomUUID === "function") {
    return crypto.randomUUID();
  }
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const SUBMIT_ATTEMPTS = 4;

export class Api {
  /**
   * @param {string} token the bearer token
   * @param {() => void} onUnauthorized called on any 401 (the token is no longer valid)
   */
  constructor(token, onUnauthorized = () => {}) {
    this.token = token;
    this.onUnauthorized = onUnauthorized;
  }

  headers(extra = {}) {
    return { Authorization: `Bearer ${this.token}`, ...extra };
  }

  /** One request; resolves to the JSON body (null when there is none), rejects with ApiError. */
  async request(method, path, { body, raw, headers = {}, signal } = {}) {
    const init = { method, headers: this.headers(headers), signal, cache: "no-store" };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    } else if (raw !== undefined) {
      init.headers["Content-Type"] = raw.type || "application/octet-stream";
      init.body = raw;
    }
    let res;
    try {
      res = await fetch(path, init);
    } catch (e) {
      if (e && e.name === "AbortError") throw e;
      throw new ApiError(0, "network_error", "the server could not be reached");
    }
    const text = await res.text().catch(() => "");
    let json = null;
    if (text) {
      try {
        json = JSON.parse(text);
      } catch {
        json = null;
      }
    }
    if (!res.ok) {
      const err = (json && json.error) || {};
      const retry = Number(res.headers.get("Retry-After"));
      const error = new ApiError(
        res.status,
        err.code || `http_${res.status}`,
        err.message || `${method} ${path} answered ${res.status}`,
        Number.isFinite(retry) && retry > 0 ? retry : null,
      );
      if (res.status === 401) this.onUnauthorized(error);
      throw error;
    }
    return json;
  }

  get(path, opts) {
    return this.request("GET", path, opts);
  }

  post(path, body, opts = {}) {
    return this.request("POST", path, { ...opts, body });
  }

  /** The caller's sessions, newest first; with `q`, those whose title or transcript holds it. */
  listSessions(limit = 50, q = "") {
    const search = q ? `&q=${encodeURIComponent(q)}` : "";
    return this.get(`/v1/sessions?limit=${limit}${search}`);
  }

  deleteSession(id) {
    return this.request("DELETE", `/v1/sessions/${encodeURIComponent(id)}`);
  }

  createSession(title) {
    return this.post("/v1/sessions", title ? { title } : {});
  }

  session(id) {
    return this.get(`/v1/sessions/${encodeURIComponent(id)}`);
  }

  renameSession(id, title) {
    return this.request("PATCH", `/v1/sessions/${encodeURIComponent(id)}`, { body: { title } });
  }

  /**
   * The models a session can run on (`GET /v1/models`), in the server's order: `{id, provider}`.
   * The `direct/` ids answer without a session, so a session cannot switch to them.
   */
  async models() {
    return (await this.get("/v1/models")).data
      .filter((m) => !m.id.startsWith("direct/"))
      .map((m) => ({ id: m.id, provider: m.owned_by }));
  }

  /** Every provider in fallback order, keys masked (the operator; 403 for others). */
  providers() {
    return this.get("/v1/providers");
  }

  /** Connects a provider after the server's live check (201), or 422 `provider_check_failed`. */
  connectProvider(body) {
    return this.post("/v1/providers", body);
  }

  removeProvider(name) {
    return this.request("DELETE", `/v1/providers/${encodeURIComponent(name)}`);
  }

  /** The session's next turns run on `model` (`null`: the first provider's). */
  setModel(id, model) {
    return this.request("PATCH", `/v1/sessions/${encodeURIComponent(id)}`, { body: { model } });
  }

  /** Stores a file (a `File` or `Blob`) as one of the caller's: `{file_id, name, content_type, bytes}`. */
  uploadFile(file) {
    const name = encodeURIComponent(file.name || "");
    return this.request("POST", `/v1/files?name=${name}`, { raw: file });
  }

  /** An object URL of one of the caller's files (read with the token; the caller revokes it). */
  async fileUrl(fileId) {
    const res = await fetch(`/v1/files/${encodeURIComponent(fileId)}`, {
      headers: this.headers(),
      cache: "no-store",
    });
    if (!res.ok) throw new ApiError(res.status, `http_${res.status}`, `the file answered ${res.status}`);
    return URL.createObjectURL(await res.blob());
  }

  messages(id) {
    return this.get(`/v1/sessions/${encodeURIComponent(id)}/messages`);
  }

  eventsPage(id, since, limit = 500) {
    return this.get(`/v1/sessions/${encodeURIComponent(id)}/events?since=${since}&limit=${limit}`);
  }

  /**
   * Submits `text` under one Idempotency-Key for every attempt: an attempt whose answer was
   * lost (network error) or that met a stopping server (503 with Retry-After) is sent again
   * with the same key, so the server admits the input once whatever happened.
   */
  async submit(id, text, attachments = [], key = newKey()) {
    const path = `/v1/sessions/${encodeURIComponent(id)}/submissions`;
    const body = attachments.length ? { attachments } : {};
    if (text || !attachments.length) body.text = text;
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.post(path, body, { headers: { "Idempotency-Key": key } });
      } catch (e) {
        const again = e instanceof ApiError && (e.status === 0 || (e.status === 503 && e.retryAfter));
        if (!again || attempt >= SUBMIT_ATTEMPTS) throw e;
        await sleep(e.retryAfter ? Math.min(e.retryAfter, 10) * 1000 : 500 * 2 ** attempt);
      }
    }
  }

  interrupt(id) {
    return this.post(`/v1/sessions/${encodeURIComponent(id)}/interrupt`, { reason: "interrupted from the web UI" });
  }

  decideApproval(id, approvalId, decision) {
    return this.post(
      `/v1/sessions/${encodeURIComponent(id)}/approvals/${encodeURIComponent(approvalId)}`,
      { decision },
    );
  }

  decideToolRun(id, callId, decision) {
    return this.post(
      `/v1/sessions/${encodeURIComponent(id)}/tool_runs/${encodeURIComponent(callId)}`,
      { decision },
    );
  }

  /** `{subagents: [...]}`: the sub-agents the session started, oldest first. */
  subagents(id) {
    return this.get(`/v1/sessions/${encodeURIComponent(id)}/subagents`);
  }

  /** `{processes: [...]}`: the background processes the session started. */
  processes(id) {
    return this.get(`/v1/sessions/${encodeURIComponent(id)}/processes`);
  }

  admission(admissionId) {
    return this.get(`/v1/admissions/${encodeURIComponent(admissionId)}`);
  }

  retryAdmission(admissionId) {
    return this.post(`/v1/admissions/${encodeURIComponent(admissionId)}/retry`);
  }

  // ---------- memory: the caller's own two stores (docs/api.md, "Memory") ----------

  /** `{memory: {entries, chars, limit}, profile: {…}}`. */
  memory() {
    return this.get("/v1/memory");
  }

  /** Adds an entry to `target` (`memory` or `profile`); a refused text is 422 with its code. */
  addMemory(target, text) {
    return this.post("/v1/memory", { target, text });
  }

  editMemory(id, text) {
    return this.request("PATCH", `/v1/memory/${encodeURIComponent(id)}`, { body: { text } });
  }

  deleteMemory(id) {
    return this.request("DELETE", `/v1/memory/${encodeURIComponent(id)}`);
  }

  /** `{changes: [...]}`, newest first. */
  memoryChanges() {
    return this.get("/v1/memory/changes");
  }

  /** `{pending: [...]}`: writes the background review proposed, waiting for a person. */
  memoryPending() {
    return this.get("/v1/memory/pending");
  }

  /** `decision` is `approve` or `deny`; 409 when it was decided already. */
  decideMemoryPending(id, decision) {
    return this.post(`/v1/memory/pending/${encodeURIComponent(id)}`, { decision });
  }

  // ---------- skills: shared by everyone, changed by the operator only (403 for others) ----------

  /** `{skills: [{name, description, source, updated_at, uses, last_used_at}]}`. */
  skills() {
    return this.get("/v1/skills");
  }

  /** One skill with its `content` (the SKILL.md) and `files` (paths beside it). */
  skill(name) {
    return this.get(`/v1/skills/${encodeURIComponent(name)}`);
  }

  /** Creates or replaces the skill `name` with the SKILL.md `content`. */
  putSkill(name, content) {
    return this.request("PUT", `/v1/skills/${encodeURIComponent(name)}`, { body: { content } });
  }

  deleteSkill(name) {
    return this.request("DELETE", `/v1/skills/${encodeURIComponent(name)}`);
  }

  /** `{proposals: [...]}`: the pending ones. */
  skillProposals() {
    return this.get("/v1/skills/proposals");
  }

  /** `decision` is `approve` or `deny`; 409 when it was decided already. */
  decideSkillProposal(id, decision) {
    return this.post(`/v1/skills/proposals/${encodeURIComponent(id)}`, { decision });
  }
}

// The page's hash routes, as data: which page an address shows. Pure (no DOM), so the routes are
// unit-tested under Node; app.js follows `hashchange` and opens what `parseRoute` answers.
//
//   #/s/{session id}   one session's chat (no hash, or any other: no session open)
//   #/memory           the caller's memory: both stores, waiting review writes, the history
//   #/skills           the skills and their pending proposals
//   #/skill/{name}     one skill: its SKILL.md, editable unless it is a folder
//   #/skills/new       the editor, with a new SKILL.md to fill in
//   #/models           the model providers, and the operator's "Connect a model" form

const SESSION = /^#\/s\/([0-9a-fA-F-]{36})$/;
const SKILL = /^#\/skill\/([^/?#]+)$/;

/**
 * What `hash` shows: `{page: "session", id}` (`id` null when no session is open),
 * `{page: "memory"}`, `{page: "models"}` or `{page: "skills", name, create}` (`name` the open
 * skill or null).
 */
export function parseRoute(hash) {
  const h = String(hash ?? "");
  const s = SESSION.exec(h);
  if (s) return { page: "session", id: s[1] };
  if (h === "#/memory") return { page: "memory" };
  if (h === "#/models") return { page: "models" };
  if (h === "#/skills") return { page: "skills", name: null, create: false };
  if (h === "#/skills/new") return { page: "skills", name: null, create: true };
  const k = SKILL.exec(h);
  if (k) {
    let name = null;
    try {
      name = decodeURIComponent(k[1]);
    } catch {
      name = null;
    }
    if (name) return { page: "skills", name, create: false };
  }
  return { page: "session", id: null };
}

/** The address of skill `name`. */
export function skillHref(name) {
  return `#/skill/${encodeURIComponent(name)}`;
}

export const MEMORY_HREF = "#/memory";
export const MODELS_HREF = "#/models";
export const SKILLS_HREF = "#/skills";
export const NEW_SKILL_HREF = "#/skills/new";

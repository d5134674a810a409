// The Skills page as data: the list in order with what each row says, the pending proposals as
// readable changes (a line diff of a patch's old and new text), and what "the editor has
// unsaved changes" means. Pure: no DOM, no fetch; unit-tested in test/skills.test.mjs.
import { lineDiff } from "./diff.js";

/** Where a skill comes from (`source`). */
export const SOURCE_LABEL = {
  dir: "folder on the server (read-only here)",
  api: "added through the API",
};

/** Skills by name, case-insensitively, then exactly (so `a` and `A` keep one order). */
export function sortSkills(skills) {
  return [...(skills || [])].sort((a, b) => {
    const x = String(a.name).toLowerCase();
    const y = String(b.name).toLowerCase();
    if (x !== y) return x < y ? -1 : 1;
    return a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
  });
}

/** "never used", "used once", "used 12 times". */
export function usesText(uses) {
  const n = Math.max(0, Math.floor(Number(uses) || 0));
  if (n === 0) return "never used";
  if (n === 1) return "used once";
  return `used ${n} times`;
}

/**
 * A row of the list's second line: source, uses and when last used, e.g. "folder · used 3
 * times · last used 12/1/2026, 10:00:00". `formatTime` turns an RFC 3339 time into words.
 */
export function skillMeta(skill, formatTime) {
  const parts = [skill.source === "dir" ? "folder" : skill.source === "api" ? "API" : String(skill.source ?? "")];
  parts.push(usesText(skill.uses));
  if (skill.last_used_at && Number(skill.uses) > 0) parts.push(`last used ${formatTime(skill.last_used_at)}`);
  return parts.filter(Boolean).join(" · ");
}

/** Whether the page may offer to change or delete `skill`: not one installed as a folder. */
export function editable(skill) {
  return Boolean(skill) && skill.source !== "dir";
}

/**
 * A proposal as the page shows it: `{title, description, blocks}`, each block `{label, lines}`
 * with lines as lineDiff answers them: a new skill's SKILL.md all added, a patch its old text
 * against its new one, a deletion the SKILL.md it removes (when the proposal carries it).
 */
export function proposalView(p) {
  const name = `"${p.name}"`;
  const description = typeof p.description === "string" && p.description !== "" ? p.description : null;
  switch (p.action) {
    case "create":
      return {
        title: `Create the skill ${name}`,
        description,
        blocks: typeof p.content === "string" ? [{ label: "SKILL.md", lines: lineDiff("", p.content) }] : [],
      };
    case "patch":
      return {
        title: `Change the skill ${name}`,
        description,
        blocks: [{ label: "Old text → new text", lines: lineDiff(p.old ?? "", p.new ?? "") }],
      };
    case "delete":
      return {
        title: `Delete the skill ${name}`,
        description,
        blocks: typeof p.content === "string" ? [{ label: "SKILL.md", lines: lineDiff(p.content, "") }] : [],
      };
    default:
      return { title: `${p.action} the skill ${name}`, description, blocks: [] };
  }
}

/** Proposals oldest first: the order they were made in. */
export function sortProposals(proposals) {
  const when = (iso) => {
    const t = Date.parse(iso);
    return Number.isNaN(t) ? 0 : t;
  };
  return [...(proposals || [])].sort((a, b) => when(a.created_at) - when(b.created_at));
}

/** Whether the editor's text differs from what was loaded (line endings aside). */
export function isDirty(saved, draft) {
  const norm = (s) => String(s ?? "").replace(/\r\n?/g, "\n");
  return norm(saved) !== norm(draft);
}

// A skill's SKILL.md as the editor needs it: the YAML front matter between two `---` lines
// (`name` and `description` are what turnkey reads; other keys are kept as they are), then the
// Markdown body. Parses the small part of YAML front matter uses (one-line plain, single- or
// double-quoted values, `|` and `>` blocks, indented continuation lines), builds a SKILL.md
// whose values read back the same, and checks a text before it is sent with PUT, so a mistake
// is shown beside the editor instead of as the server's 400. Pure; tested in test/skills.test.mjs.

/**
 * Names the editor accepts: a letter or digit, then letters, digits, `-`, `_` or `.`, at most
 * 64 in all, so the name is one path segment. The server has the last word (400 `invalid_skill`).
 */
export const NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

const FENCE = /^---[ \t]*$/;
const END = /^(?:---|\.\.\.)[ \t]*$/;
const KEY = /^([A-Za-z_][A-Za-z0-9_.-]*)[ \t]*:(?:[ \t]+(.*))?$/;

/** A value that is an indented block under its key (a nested map or list), not text. */
export const NESTED = Object.freeze({ nested: true });

class YamlError extends Error {}

/**
 * `{ok: true, fields, name, description, body}` for a SKILL.md (fields: key → string, null for
 * an empty value, NESTED for an indented block), or `{ok: false, error}` saying what is wrong
 * and on which line.
 */
export function parseSkill(text) {
  const lines = String(text ?? "")
    .replace(/^\uFEFF/, "")
    .split(/\r\n|\n|\r/);
  if (!FENCE.test(lines[0])) {
    return { ok: false, error: 'A SKILL.md starts with its front matter: a first line "---", then name: and description:, then "---".' };
  }
  const end = lines.findIndex((l, i) => i > 0 && END.test(l));
  if (end < 0) return { ok: false, error: 'The front matter has no closing "---" line.' };
  let fields;
  try {
    fields = parseMapping(lines.slice(1, end), 2);
  } catch (e) {
    if (e instanceof YamlError) return { ok: false, error: e.message };
    throw e;
  }
  const str = (v) => (typeof v === "string" ? v : null);
  return {
    ok: true,
    fields,
    name: str(fields.name),
    description: str(fields.description),
    body: lines.slice(end + 1).join("\n"),
  };
}

/** The top-level `key: value` pairs of front matter `lines`, the first of them line `first`. */
function parseMapping(lines, first) {
  const fields = {};
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    if (line.trim() === "" || /^[ \t]*#/.test(line)) continue;
    const at = `Front matter, line ${first + i}`;
    if (/^[ \t]/.test(line)) throw new YamlError(`${at}: an indented line with no key above it.`);
    const m = KEY.exec(line);
    if (!m) throw new YamlError(`${at}: expected "key: value", found "${clip(line)}".`);
    const key = m[1];
    if (Object.hasOwn(fields, key)) throw new YamlError(`${at}: "${key}" is given twice.`);
    let j = i + 1;
    while (j < lines.length && (lines[j].trim() === "" || /^[ \t]/.test(lines[j]))) j++;
    // Blank lines before the next key belong to no value.
    let k = j;
    while (k > i + 1 && lines[k - 1].trim() === "") k--;
    fields[key] = scalar(m[2] ?? "", lines.slice(i + 1, k), `${at} ("${key}")`);
    i = j - 1;
  }
  return fields;
}

function clip(s, max = 40) {
  return s.length > max ? `${s.slice(0, max)}…` : s;
}

/** The value that starts as `raw` after its key, continued by the indented lines `more`. */
function scalar(raw, more, at) {
  const head = raw.trim();
  if (head === "" || head.startsWith("#")) return more.length > 0 ? NESTED : null;
  const block = /^([|>])([+-]?)[1-9]?([+-]?)[ \t]*(?:#.*)?$/.exec(head);
  if (block) return blockScalar(block[1], block[2] || block[3], more);
  if (head.startsWith('"')) return doubleQuoted(joinFlow(head, more), at);
  if (head.startsWith("'")) return singleQuoted(joinFlow(head, more), at);
  if (head.startsWith("[") || head.startsWith("{")) return joinFlow(head, more);
  return plain(head, more, at);
}

/** Continuation lines of a flow value, folded as YAML does: a line break is a space, a blank line a break. */
function joinFlow(head, more) {
  let out = head;
  let blank = 0;
  for (const l of more) {
    if (l.trim() === "") {
      blank++;
      continue;
    }
    out += blank > 0 ? "\n".repeat(blank) : " ";
    out += l.trim();
    blank = 0;
  }
  return out;
}

function plain(head, more, at) {
  if (/^[@`%&*!|>,]/.test(head) || /^[-?:](?:\s|$)/.test(head)) {
    throw new YamlError(`${at}: a value starting with "${head[0]}" must be in quotes.`);
  }
  const text = joinFlow(stripComment(head), more.map(stripComment)).trim();
  if (/:(?:\s|$)/.test(text)) {
    throw new YamlError(`${at}: a value with ": " in it must be in quotes (description: "…").`);
  }
  return text;
}

/** A plain value's line without its ` # comment`. */
function stripComment(line) {
  const m = /(^|[ \t])#/.exec(line);
  return m ? line.slice(0, m.index) : line;
}

function doubleQuoted(s, at) {
  const ESC = { 0: "\0", a: "\x07", b: "\b", t: "\t", "\t": "\t", n: "\n", v: "\v", f: "\f", r: "\r", e: "\x1b", " ": " ", '"': '"', "/": "/", "\\": "\\", N: "\x85", _: "\xa0", L: "\u2028", P: "\u2029" };
  const HEX = { x: 2, u: 4, U: 8 };
  let out = "";
  for (let i = 1; i < s.length; i++) {
    const c = s[i];
    if (c === '"') return rest(out, s.slice(i + 1), at);
    if (c !== "\\") {
      out += c;
      continue;
    }
    const e = s[++i];
    if (e in HEX) {
      const hex = s.slice(i + 1, i + 1 + HEX[e]);
      if (!/^[0-9A-Fa-f]+$/.test(hex) || hex.length !== HEX[e]) throw new YamlError(`${at}: a broken \\${e} escape.`);
      out += String.fromCodePoint(parseInt(hex, 16));
      i += HEX[e];
    } else if (e !== undefined && Object.hasOwn(ESC, e)) {
      out += ESC[e];
    } else {
      throw new YamlError(`${at}: an unknown escape "\\${e ?? ""}" in quotes.`);
    }
  }
  throw new YamlError(`${at}: the quotes are not closed.`);
}

function singleQuoted(s, at) {
  let out = "";
  for (let i = 1; i < s.length; i++) {
    if (s[i] !== "'") {
      out += s[i];
    } else if (s[i + 1] === "'") {
      out += "'";
      i++;
    } else {
      return rest(out, s.slice(i + 1), at);
    }
  }
  throw new YamlError(`${at}: the quotes are not closed.`);
}

/** After closing quotes only a comment may follow. */
function rest(value, after, at) {
  if (after.trim() !== "" && !/^[ \t]+#/.test(after)) {
    throw new YamlError(`${at}: unexpected text after the closing quote.`);
  }
  return value;
}

/**
 * A `|` (lines kept) or `>` (lines folded: one line break is a space, a blank line a break, a
 * more indented line kept on its own) block. `chomp` `-` drops the final line break; the
 * default and `+` keep one (blank lines at the end of the front matter are not kept).
 */
function blockScalar(style, chomp, more) {
  const indents = more.filter((l) => l.trim() !== "").map((l) => /^[ \t]*/.exec(l)[0].length);
  if (indents.length === 0) return "";
  const cut = Math.min(...indents);
  const lines = more.map((l) => (l.trim() === "" ? "" : l.slice(cut)));
  let text;
  if (style === "|") {
    text = lines.join("\n");
  } else {
    const indented = (l) => /^[ \t]/.test(l);
    text = "";
    let breaks = 0;
    let prev = null;
    for (const l of lines) {
      if (l === "") {
        breaks++;
        continue;
      }
      if (prev === null) text += "\n".repeat(breaks);
      else if (breaks === 0 && !indented(l) && !indented(prev)) text += " ";
      else text += "\n".repeat(breaks + (indented(l) || indented(prev) ? 1 : 0));
      text += l;
      prev = l;
      breaks = 0;
    }
  }
  text = text.replace(/\n+$/, "");
  return chomp === "-" ? text : `${text}\n`;
}

const PLAIN_UNSAFE_START = /^[-?:,[\]{}#&*!|>'"%@`\s]/;
const LOOKS_TYPED = /^(?:true|false|yes|no|on|off|null|~|[-+]?(?:\d[\d_]*)?\.?\d+(?:[eE][-+]?\d+)?|0x[0-9a-fA-F]+|0o[0-7]+|[-+]?\.(?:inf|nan)|\d{4}-\d\d-\d\d(?:[Tt ].*)?)$/i;

/** `value` as a one-line YAML value that reads back as exactly this text: plain when it can be, else double-quoted. */
export function yamlScalar(value) {
  const s = String(value);
  const plainSafe =
    s !== "" &&
    s === s.trim() &&
    !PLAIN_UNSAFE_START.test(s) &&
    !/[\p{Cc}\u0085\u2028\u2029\ufeff]/u.test(s) &&
    !/:(?:\s|$)/.test(s) &&
    !/\s#/.test(s) &&
    !LOOKS_TYPED.test(s);
  // A JSON string is a YAML double-quoted value: JSON's escapes are all YAML escapes too.
  return plainSafe ? s : JSON.stringify(s);
}

/** A SKILL.md with front matter `name` and `description`, then `body`. */
export function buildSkill({ name, description, body = "" }) {
  const text = String(body).replace(/^(?:[ \t]*\r?\n)+/, "").replace(/\s+$/, "");
  return `---\nname: ${yamlScalar(name)}\ndescription: ${yamlScalar(description)}\n---\n\n${text}\n`;
}

/** What the "New skill" button puts in the editor. */
export function skillTemplate(name = "new-skill") {
  return buildSkill({
    name,
    description: "What this skill does and when to use it, in a sentence or two: the agent reads this to decide.",
    body: [
      "# Title of the skill",
      "",
      "## When to use",
      "",
      "- The situations this skill is for.",
      "",
      "## Steps",
      "",
      "1. The first step.",
      "2. The next step.",
      "",
      "## Pitfalls",
      "",
      "- What to watch out for.",
    ].join("\n"),
  });
}

/**
 * Whether `text` may be sent as skill `name` (an existing skill's name, which cannot change
 * here) or, with `name` null, as a new skill whose name is none of `existing`. Answers
 * `{ok: true, name, description}` (the name to PUT it under) or `{ok: false, error}`.
 */
export function validateSkill(text, { name = null, existing = [] } = {}) {
  const p = parseSkill(text);
  if (!p.ok) return p;
  if (p.name === null || p.name.trim() === "") {
    return { ok: false, error: 'The front matter has no name: add a line "name: my-skill".' };
  }
  if (!NAME_PATTERN.test(p.name)) {
    return {
      ok: false,
      error: `"${clip(p.name)}" cannot be a skill's name: use letters, digits, "-", "_" or "." (at most 64), starting with a letter or digit.`,
    };
  }
  if (name !== null && p.name !== name) {
    return {
      ok: false,
      error: `The name must stay "${name}" (the front matter says "${p.name}"). To rename a skill, create a new one and delete this one.`,
    };
  }
  if (name === null && existing.includes(p.name)) {
    return { ok: false, error: `A skill named "${p.name}" exists already: open it to change it, or pick another name.` };
  }
  if (p.description === null || p.description.trim() === "") {
    return {
      ok: false,
      error: 'The front matter has no description: add a line "description: …" saying what the skill does and when to use it.',
    };
  }
  return { ok: true, name: p.name, description: p.description.trim() };
}

// Syntax highlighting of code blocks, bundled (nothing loaded from elsewhere): a small scanner
// that finds comments, strings, numbers and keywords of common languages. It only splits the
// text into spans whose text is set with textContent, so highlighting can never turn model
// output into markup. An unknown language is shown plain.

const KEYWORDS = {
  rust: "as async await break const continue crate dyn else enum extern false fn for if impl in let loop match mod move mut pub ref return self Self static struct super trait true type unsafe use where while",
  python: "and as assert async await break class continue def del elif else except False finally for from global if import in is lambda None nonlocal not or pass raise return True try while with yield",
  js: "async await break case catch class const continue default delete do else export extends false finally for from function if import in instanceof let new null of return static super switch this throw true try typeof undefined var void while yield",
  go: "break case chan const continue default defer else fallthrough false for func go goto if import interface map nil package range return select struct switch true type var",
  c: "auto break case char const continue default do double else enum extern false float for goto if inline int long nullptr register return short signed sizeof static struct switch true typedef union unsigned void volatile while class namespace public private protected template this new delete using",
  java: "abstract boolean break byte case catch char class continue default do double else enum extends false final finally float for if implements import instanceof int interface long new null package private protected public return short static super switch this throw throws true try void while",
  sh: "case do done elif else esac export fi for function if in local return then until while",
  sql: "and as by create delete desc distinct drop from group having in index insert into is join left limit not null on or order primary key select set table update values where with",
  toml: "true false",
  json: "true false null",
  yaml: "true false null yes no",
};

/** The language names people write after ``` for each keyword set. */
const ALIASES = {
  rs: "rust", rust: "rust", py: "python", python: "python", js: "js", javascript: "js", ts: "js",
  typescript: "js", jsx: "js", tsx: "js", mjs: "js", go: "go", golang: "go", c: "c", h: "c",
  cpp: "c", "c++": "c", cc: "c", hpp: "c", java: "java", kotlin: "java", sh: "sh", bash: "sh",
  shell: "sh", zsh: "sh", console: "sh", sql: "sql", toml: "toml", json: "json", yaml: "yaml", yml: "yaml",
};

/** Which comment starts a line's rest, by language. */
const LINE_COMMENT = { python: "#", sh: "#", toml: "#", yaml: "#", sql: "--" };

/**
 * `text` split into `{kind, text}` pieces: kind is `com`, `str`, `num`, `kw` or `""` (plain).
 * Joined, the pieces are exactly `text`. `null` for a language it does not know.
 */
export function tokens(lang, text) {
  const name = ALIASES[(lang || "").toLowerCase()];
  if (!name) return null;
  const words = new Set(KEYWORDS[name].split(" "));
  const ci = name === "sql";
  const line = LINE_COMMENT[name] || "//";
  const block = ["python", "sh", "toml", "yaml", "sql"].includes(name) ? null : ["/*", "*/"];
  const out = [];
  const push = (kind, t) => {
    if (!t) return;
    const last = out[out.length - 1];
    if (last && last.kind === kind) last.text += t;
    else out.push({ kind, text: t });
  };
  let i = 0;
  while (i < text.length) {
    const rest = text.slice(i);
    if (rest.startsWith(line)) {
      const end = text.indexOf("\n", i);
      const stop = end < 0 ? text.length : end;
      push("com", text.slice(i, stop));
      i = stop;
      continue;
    }
    if (block && rest.startsWith(block[0])) {
      const end = text.indexOf(block[1], i + 2);
      const stop = end < 0 ? text.length : end + 2;
      push("com", text.slice(i, stop));
      i = stop;
      continue;
    }
    const c = text[i];
    if (c === '"' || c === "'" || (c === "`" && name === "js")) {
      // A Rust lifetime ('a) is not a string.
      if (c === "'" && name === "rust" && /^'[A-Za-z_]\w*(?!')/.test(rest) && !/^'.'/.test(rest)) {
        push("", c);
        i += 1;
        continue;
      }
      let j = i + 1;
      while (j < text.length && text[j] !== c && !(text[j] === "\n" && c !== "`")) {
        j += text[j] === "\\" ? 2 : 1;
      }
      const stop = Math.min(j + 1, text.length);
      push("str", text.slice(i, stop));
      i = stop;
      continue;
    }
    const num = /^(0x[0-9a-fA-F_]+|\d[\d_]*(\.\d[\d_]*)?([eE][+-]?\d+)?)/.exec(rest);
    if (num && !/[\w$]/.test(text[i - 1] || "")) {
      push("num", num[0]);
      i += num[0].length;
      continue;
    }
    const word = /^[A-Za-z_$][\w$]*/.exec(rest);
    if (word) {
      push(words.has(ci ? word[0].toLowerCase() : word[0]) ? "kw" : "", word[0]);
      i += word[0].length;
      continue;
    }
    push("", c);
    i += 1;
  }
  return out;
}

/** Replaces the text of `code` with highlighted spans, when its language is known. */
export function highlight(code, lang) {
  const pieces = tokens(lang, code.textContent);
  if (!pieces) return;
  code.replaceChildren(
    ...pieces.map((p) => {
      if (!p.kind) return document.createTextNode(p.text);
      const span = document.createElement("span");
      span.className = `tk-${p.kind}`;
      span.textContent = p.text;
      return span;
    }),
  );
}

// A small Markdown renderer that builds DOM nodes with createElement and textContent only: model
// text never passes through an HTML parser, so it cannot add elements, attributes or script.
// Links are kept only for http(s) and mailto URLs and open with rel="noopener noreferrer".
// Covered: paragraphs with line breaks, #-headings, fenced code, lists, quotes, rules,
// inline code, **strong**, *emphasis*, [text](url) and bare http(s) URLs. A fence's language
// is highlighted by highlight.js (spans with textContent, the same guarantee).
import { highlight } from "./highlight.js";

const SAFE_PROTOCOLS = new Set(["http:", "https:", "mailto:"]);

/** The URL when it is an absolute http(s) or mailto URL, else null. */
export function safeHref(raw) {
  let url;
  try {
    url = new URL(raw.trim());
  } catch {
    return null;
  }
  return SAFE_PROTOCOLS.has(url.protocol) ? url.href : null;
}

function link(href, children) {
  const a = document.createElement("a");
  a.href = href;
  a.rel = "noopener noreferrer";
  a.target = "_blank";
  a.append(...children);
  return a;
}

// Inline tokens, earliest match wins: code span, link, bare URL, strong, emphasis.
const INLINE =
  /(`+)([^`][\s\S]*?)\1|\[([^\]\n]+)\]\(([^()\s]*(?:\([^()\s]*\)[^()\s]*)*)\)|(https?:\/\/[^\s<>()\]]*[^\s<>()\].,;:!?'"])|\*\*(?=\S)([\s\S]*?\S)\*\*|(?<![\w*])\*(?=\S)([^*]*?\S)\*(?![\w*])|(?<!\w)_(?=\S)([^_]*?\S)_(?!\w)/;

/** Appends the inline content of `text` to `parent`. */
export function renderInline(text, parent) {
  let rest = text;
  while (rest.length > 0) {
    const m = INLINE.exec(rest);
    if (!m) {
      parent.append(document.createTextNode(rest));
      return;
    }
    if (m.index > 0) parent.append(document.createTextNode(rest.slice(0, m.index)));
    rest = rest.slice(m.index + m[0].length);
    if (m[1] !== undefined) {
      const code = document.createElement("code");
      code.textContent = m[2];
      parent.append(code);
    } else if (m[3] !== undefined) {
      const href = safeHref(m[4]);
      const label = document.createDocumentFragment();
      renderInline(m[3], label);
      if (href) {
        parent.append(link(href, [label]));
      } else {
        // An unsafe or relative target: the label as text, the target not followed.
        parent.append(label);
      }
    } else if (m[5] !== undefined) {
      const href = safeHref(m[5]);
      parent.append(href ? link(href, [document.createTextNode(m[5])]) : document.createTextNode(m[5]));
    } else {
      const tag = m[6] !== undefined ? "strong" : "em";
      const el = document.createElement(tag);
      renderInline(m[6] ?? m[7] ?? m[8], el);
      parent.append(el);
    }
  }
}

/** Appends a paragraph's lines with <br> between them. */
function paragraph(lines) {
  const p = document.createElement("p");
  lines.forEach((line, i) => {
    if (i > 0) p.append(document.createElement("br"));
    renderInline(line, p);
  });
  return p;
}

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([\w+#.-]*)/;
const HEADING = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const RULE = /^ {0,3}([-*_])(\s*\1){2,}\s*$/;
const BULLET = /^ {0,3}[-*+]\s+(.*)$/;
const ORDERED = /^ {0,3}(\d{1,9})[.)]\s+(.*)$/;
const QUOTE = /^ {0,3}>\s?(.*)$/;

/** Renders `text` as Markdown into a DocumentFragment. */
export function renderMarkdown(text) {
  const out = document.createDocumentFragment();
  const lines = String(text).replace(/\r\n?/g, "\n").split("\n");
  let i = 0;
  let para = [];
  const flush = () => {
    if (para.length > 0) out.append(paragraph(para));
    para = [];
  };
  while (i < lines.length) {
    const line = lines[i];
    let m;
    if ((m = FENCE.exec(line))) {
      flush();
      const fence = m[1];
      const body = [];
      i++;
      while (i < lines.length && !lines[i].trimStart().startsWith(fence)) body.push(lines[i++]);
      i++; // the closing fence (or the end of an answer still streaming)
      const pre = document.createElement("pre");
      const code = document.createElement("code");
      if (m[2]) code.dataset.lang = m[2];
      code.textContent = body.join("\n");
      if (m[2]) highlight(code, m[2]);
      pre.append(code);
      out.append(pre);
    } else if ((m = HEADING.exec(line))) {
      flush();
      const h = document.createElement(`h${Math.min(m[1].length + 2, 6)}`);
      renderInline(m[2], h);
      out.append(h);
      i++;
    } else if (RULE.test(line)) {
      flush();
      out.append(document.createElement("hr"));
      i++;
    } else if (BULLET.test(line) || ORDERED.test(line)) {
      flush();
      const ordered = !BULLET.test(line);
      const list = document.createElement(ordered ? "ol" : "ul");
      if (ordered) {
        const start = Number(ORDERED.exec(line)[1]);
        if (start !== 1) list.start = start;
      }
      const pattern = ordered ? ORDERED : BULLET;
      while (i < lines.length && (m = pattern.exec(lines[i]))) {
        const li = document.createElement("li");
        renderInline(ordered ? m[2] : m[1], li);
        // Indented lines that follow belong to the item.
        i++;
        while (i < lines.length && /^\s{2,}\S/.test(lines[i]) && !pattern.test(lines[i])) {
          li.append(document.createElement("br"));
          renderInline(lines[i].trim(), li);
          i++;
        }
        list.append(li);
      }
      out.append(list);
    } else if (QUOTE.test(line)) {
      flush();
      const quoted = [];
      while (i < lines.length && (m = QUOTE.exec(lines[i]))) {
        quoted.push(m[1]);
        i++;
      }
      const q = document.createElement("blockquote");
      q.append(renderMarkdown(quoted.join("\n")));
      out.append(q);
    } else if (line.trim() === "") {
      flush();
      i++;
    } else {
      para.push(line);
      i++;
    }
  }
  flush();
  return out;
}

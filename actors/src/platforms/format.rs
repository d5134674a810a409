//! Markdown, as models write it, to what each platform renders (SPEC R1.3): Telegram's HTML
//! parse mode and Slack's mrkdwn. Only the common subset is understood: fenced code blocks
//! (with a language), headings, bullet and numbered lists, quotes, inline code, bold, italic,
//! strikethrough and links. Everything else is text, escaped, so model output can never
//! inject markup: Telegram refuses a message whose HTML does not parse, and Slack would turn
//! `<!channel>` into a mention.
//!
//! Inline formatting never crosses a line, so any split of a text at line boundaries (outside
//! code fences) formats into pieces that are each well formed (see `split.rs`).

/// A piece of a line.
#[derive(Clone, Debug, PartialEq)]
enum Inline {
    Text(String),
    Code(String),
    Bold(Vec<Inline>),
    Italic(Vec<Inline>),
    Strike(Vec<Inline>),
    Link { text: Vec<Inline>, url: String },
}

/// A line outside code fences.
#[derive(Clone, Debug, PartialEq)]
enum Line {
    Blank,
    Heading(Vec<Inline>),
    /// Indentation (in spaces) and the item.
    Bullet(usize, Vec<Inline>),
    /// Indentation, the number as written (`3.`), the item.
    Numbered(usize, String, Vec<Inline>),
    Quote(Vec<Inline>),
    Plain(Vec<Inline>),
}

#[derive(Clone, Debug, PartialEq)]
enum Block {
    Line(Line),
    /// A fenced code block; `closed` is false when the text ended inside it.
    Fence {
        lang: String,
        code: String,
    },
}

/// A fence opener: "```" or "~~~" (three or more), then an optional language.
pub(crate) fn fence_open(line: &str) -> Option<(String, String)> {
    let t = line.trim_start();
    let ch = t.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let n = t.chars().take_while(|c| *c == ch).count();
    if n < 3 {
        return None;
    }
    let info = t[n..].trim();
    if ch == '`' && info.contains('`') {
        return None;
    }
    let marker: String = std::iter::repeat_n(ch, n).collect();
    let lang = info.split_whitespace().next().unwrap_or("").to_owned();
    Some((marker, lang))
}

/// Whether `line` closes a fence opened with `marker`.
pub(crate) fn fence_close(line: &str, marker: &str) -> bool {
    let t = line.trim();
    let ch = marker.chars().next().unwrap_or('`');
    t.len() >= marker.len() && t.chars().all(|c| c == ch)
}

fn blocks(md: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut lines = md.lines();
    while let Some(line) = lines.next() {
        if let Some((marker, lang)) = fence_open(line) {
            let mut code = Vec::new();
            for l in lines.by_ref() {
                if fence_close(l, &marker) {
                    break;
                }
                code.push(l);
            }
            out.push(Block::Fence {
                lang,
                code: code.join("\n"),
            });
        } else {
            out.push(Block::Line(parse_line(line)));
        }
    }
    out
}

fn parse_line(line: &str) -> Line {
    if line.trim().is_empty() {
        return Line::Blank;
    }
    let indent = line.len() - line.trim_start().len();
    let t = line.trim_start();
    let hashes = t.chars().take_while(|c| *c == '#').count();
    if (1..=6).contains(&hashes) && t[hashes..].starts_with(' ') {
        return Line::Heading(inline(t[hashes..].trim()));
    }
    for bullet in ["- ", "* ", "+ "] {
        if let Some(rest) = t.strip_prefix(bullet) {
            return Line::Bullet(indent, inline(rest));
        }
    }
    let digits = t.chars().take_while(char::is_ascii_digit).count();
    if (1..=9).contains(&digits) {
        let after = &t[digits..];
        if let Some(rest) = after
            .strip_prefix(". ")
            .or_else(|| after.strip_prefix(") "))
        {
            return Line::Numbered(indent, t[..digits + 1].to_owned(), inline(rest));
        }
    }
    if let Some(rest) = t.strip_prefix('>') {
        return Line::Quote(inline(rest.strip_prefix(' ').unwrap_or(rest)));
    }
    Line::Plain(inline(line))
}

/// Inline Markdown of one line. A delimiter without its closer on the line is text.
fn inline(s: &str) -> Vec<Inline> {
    let chars: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let mut text = String::new();
    let mut i = 0;
    while i < chars.len() {
        if let Some((node, next)) = inline_at(&chars, i) {
            if !text.is_empty() {
                out.push(Inline::Text(std::mem::take(&mut text)));
            }
            out.push(node);
            i = next;
        } else {
            text.push(chars[i]);
            i += 1;
        }
    }
    if !text.is_empty() {
        out.push(Inline::Text(text));
    }
    out
}

/// The formatted span starting at `i`, and the index after it.
fn inline_at(c: &[char], i: usize) -> Option<(Inline, usize)> {
    let rest = &c[i..];
    match c[i] {
        '`' => {
            let ticks = rest.iter().take_while(|ch| **ch == '`').count();
            let body = i + ticks;
            let close = find_run(c, body, '`', ticks)?;
            let code: String = c[body..close].iter().collect();
            let code = if code.starts_with(' ') && code.ends_with(' ') && code.trim() != "" {
                code[1..code.len() - 1].to_owned()
            } else {
                code
            };
            (!code.is_empty()).then_some((Inline::Code(code), close + ticks))
        }
        '[' => {
            let close = matching(c, i, '[', ']')?;
            if c.get(close + 1) != Some(&'(') {
                return None;
            }
            let end = matching(c, close + 1, '(', ')')?;
            let url: String = c[close + 2..end].iter().collect();
            let url = url.trim().to_owned();
            let safe = url.starts_with("http://")
                || url.starts_with("https://")
                || url.starts_with("mailto:")
                || url.starts_with("tg://");
            if !safe || url.chars().any(char::is_whitespace) || close == i + 1 {
                return None;
            }
            let text: String = c[i + 1..close].iter().collect();
            Some((
                Inline::Link {
                    text: inline(&text),
                    url,
                },
                end + 1,
            ))
        }
        '*' | '_' | '~' => {
            let ch = c[i];
            let run = rest.iter().take_while(|x| **x == ch).count();
            let (width, strong) = match (ch, run) {
                ('~', n) if n >= 2 => (2, true),
                ('~', _) => return None,
                (_, n) if n >= 2 => (2, true),
                _ => (1, false),
            };
            // An opener is followed by a non-space; `_` only opens at a word's start.
            let body = i + width;
            if c.get(body).is_none_or(|x| x.is_whitespace()) {
                return None;
            }
            if ch == '_' && i > 0 && c[i - 1].is_alphanumeric() {
                return None;
            }
            let close = find_closer(c, body, ch, width)?;
            let inner: String = c[body..close].iter().collect();
            let inner = inline(&inner);
            let node = match (ch, strong) {
                ('~', _) => Inline::Strike(inner),
                (_, true) => Inline::Bold(inner),
                (_, false) => Inline::Italic(inner),
            };
            Some((node, close + width))
        }
        _ => None,
    }
}

/// The index of the next run of exactly `n` `ch` from `from`.
fn find_run(c: &[char], from: usize, ch: char, n: usize) -> Option<usize> {
    let mut j = from;
    while j < c.len() {
        if c[j] == ch {
            let run = c[j..].iter().take_while(|x| **x == ch).count();
            if run == n {
                return Some(j);
            }
            j += run;
        } else {
            j += 1;
        }
    }
    None
}

/// The closer of an emphasis opened with `width` × `ch` whose body starts at `from`: preceded
/// by a non-space, not inside inline code; `_` must end a word.
fn find_closer(c: &[char], from: usize, ch: char, width: usize) -> Option<usize> {
    let mut j = from;
    while j < c.len() {
        if c[j] == '`' {
            let ticks = c[j..].iter().take_while(|x| **x == '`').count();
            match find_run(c, j + ticks, '`', ticks) {
                Some(end) => {
                    j = end + ticks;
                    continue;
                }
                None => return None,
            }
        }
        if c[j] == ch {
            let run = c[j..].iter().take_while(|x| **x == ch).count();
            let fits = if width == 2 { run >= 2 } else { run == 1 };
            let after_word = j > from && !c[j - 1].is_whitespace();
            let word_end = ch != '_' || c.get(j + width).is_none_or(|x| !x.is_alphanumeric());
            if fits && after_word && word_end {
                return Some(j);
            }
            j += run;
            continue;
        }
        j += 1;
    }
    None
}

/// The index of the bracket closing the one at `open`, on the same line.
fn matching(c: &[char], open: usize, l: char, r: char) -> Option<usize> {
    let mut depth = 0;
    for (j, ch) in c.iter().enumerate().skip(open) {
        if *ch == l {
            depth += 1;
        } else if *ch == r {
            depth -= 1;
            if depth == 0 {
                return Some(j);
            }
        }
    }
    None
}

/// Escapes `&`, `<` and `>`, and `"` too when `quote`.
fn escape(s: &str, quote: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' if quote => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out
}

/// Escapes text for Telegram HTML (and attribute values: `"` too).
pub fn html_escape(s: &str) -> String {
    escape(s, true)
}

/// Escapes text for Slack: `&`, `<` and `>` are control characters there.
pub fn slack_escape(s: &str) -> String {
    escape(s, false)
}

/// What differs between the platforms' markup; the line structure (blank lines, list
/// indentation and markers, line joins) is shared by [`render`].
trait Dialect {
    fn inline(nodes: &[Inline], out: &mut String);
    fn fence(lang: &str, code: &str) -> String;
    fn heading(nodes: &[Inline], out: &mut String);
    fn quote(nodes: &[Inline], out: &mut String);
}

fn render<D: Dialect>(md: &str) -> String {
    let mut lines: Vec<String> = Vec::new();
    for b in blocks(md) {
        match b {
            Block::Fence { lang, code } => lines.push(D::fence(&lang, &code)),
            Block::Line(line) => {
                let mut s = String::new();
                match line {
                    Line::Blank => {}
                    Line::Heading(i) => D::heading(&i, &mut s),
                    Line::Bullet(indent, i) => {
                        s.push_str(&" ".repeat(indent));
                        s.push_str("• ");
                        D::inline(&i, &mut s);
                    }
                    Line::Numbered(indent, n, i) => {
                        s.push_str(&" ".repeat(indent));
                        s.push_str(&n);
                        s.push(' ');
                        D::inline(&i, &mut s);
                    }
                    Line::Quote(i) => D::quote(&i, &mut s),
                    Line::Plain(i) => D::inline(&i, &mut s),
                }
                lines.push(s);
            }
        }
    }
    lines.join("\n")
}

fn html_inline(nodes: &[Inline], out: &mut String) {
    for n in nodes {
        match n {
            Inline::Text(t) => out.push_str(&html_escape(t)),
            Inline::Code(t) => {
                out.push_str("<code>");
                out.push_str(&html_escape(t));
                out.push_str("</code>");
            }
            Inline::Bold(inner) => wrap_html("b", inner, out),
            Inline::Italic(inner) => wrap_html("i", inner, out),
            Inline::Strike(inner) => wrap_html("s", inner, out),
            Inline::Link { text, url } => {
                out.push_str("<a href=\"");
                out.push_str(&html_escape(url));
                out.push_str("\">");
                html_inline(text, out);
                out.push_str("</a>");
            }
        }
    }
}

fn wrap_html(tag: &str, inner: &[Inline], out: &mut String) {
    out.push('<');
    out.push_str(tag);
    out.push('>');
    html_inline(inner, out);
    out.push_str("</");
    out.push_str(tag);
    out.push('>');
}

struct TelegramHtml;

impl Dialect for TelegramHtml {
    fn inline(nodes: &[Inline], out: &mut String) {
        html_inline(nodes, out);
    }

    fn fence(lang: &str, code: &str) -> String {
        let class = if lang.is_empty() {
            String::new()
        } else {
            format!(" class=\"language-{}\"", html_escape(lang))
        };
        format!("<pre><code{class}>{}</code></pre>", html_escape(code))
    }

    fn heading(nodes: &[Inline], out: &mut String) {
        wrap_html("b", nodes, out);
    }

    fn quote(nodes: &[Inline], out: &mut String) {
        out.push_str("<blockquote>");
        html_inline(nodes, out);
        out.push_str("</blockquote>");
    }
}

/// Markdown to Telegram's HTML parse mode.
pub fn telegram_html(md: &str) -> String {
    render::<TelegramHtml>(md)
}

fn slack_inline(nodes: &[Inline], out: &mut String) {
    for n in nodes {
        match n {
            Inline::Text(t) => out.push_str(&slack_escape(t)),
            Inline::Code(t) => {
                out.push('`');
                out.push_str(&slack_escape(t));
                out.push('`');
            }
            Inline::Bold(inner) => wrap_slack('*', inner, out),
            Inline::Italic(inner) => wrap_slack('_', inner, out),
            Inline::Strike(inner) => wrap_slack('~', inner, out),
            Inline::Link { text, url } => {
                let mut label = String::new();
                slack_inline(text, &mut label);
                // `|` and `>` end the label or the link.
                let label = label.replace('|', "¦");
                out.push('<');
                out.push_str(&slack_escape(url).replace('|', "%7C"));
                out.push('|');
                out.push_str(&label);
                out.push('>');
            }
        }
    }
}

fn wrap_slack(mark: char, inner: &[Inline], out: &mut String) {
    out.push(mark);
    slack_inline(inner, out);
    out.push(mark);
}

struct SlackMrkdwn;

impl Dialect for SlackMrkdwn {
    fn inline(nodes: &[Inline], out: &mut String) {
        slack_inline(nodes, out);
    }

    /// Slack shows a language after the fence as code text: it is left out.
    fn fence(_lang: &str, code: &str) -> String {
        format!("```\n{}\n```", slack_escape(code))
    }

    fn heading(nodes: &[Inline], out: &mut String) {
        wrap_slack('*', nodes, out);
    }

    fn quote(nodes: &[Inline], out: &mut String) {
        out.push_str("&gt; ");
        slack_inline(nodes, out);
    }
}

/// Markdown to Slack's mrkdwn.
pub fn slack_mrkdwn(md: &str) -> String {
    render::<SlackMrkdwn>(md)
}

/// What a chat shows of Telegram HTML made by `telegram_html`: the text without its tags,
/// entities decoded.
pub fn html_visible(html: &str) -> String {
    let mut out = String::with_capacity(html.len());
    let mut rest = html;
    while let Some(i) = rest.find(['<', '&']) {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        let (end, decoded) = if rest.starts_with('<') {
            (rest.find('>').map_or(rest.len(), |e| e + 1), "")
        } else {
            let end = rest.find(';').map_or(rest.len(), |e| e + 1);
            let decoded = match &rest[..end] {
                "&amp;" => "&",
                "&lt;" => "<",
                "&gt;" => ">",
                "&quot;" => "\"",
                other => other,
            };
            (end, decoded)
        };
        out.push_str(decoded);
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// What a Slack chat shows of mrkdwn made by `slack_mrkdwn`, near enough to compare drafts:
/// the fence lines dropped, entities decoded.
pub fn slack_visible(mrkdwn: &str) -> String {
    mrkdwn
        .lines()
        .filter(|l| *l != "```")
        .collect::<Vec<_>>()
        .join("\n")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// Length as Telegram counts it: UTF-16 code units.
pub fn utf16_len(s: &str) -> usize {
    s.encode_utf16().count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r1_3_telegram_escapes_and_formats() {
        assert_eq!(
            telegram_html("a < b && c > d"),
            "a &lt; b &amp;&amp; c &gt; d"
        );
        assert_eq!(
            telegram_html("**bold** and *it* and _it2_ and ~~gone~~"),
            "<b>bold</b> and <i>it</i> and <i>it2</i> and <s>gone</s>"
        );
        assert_eq!(
            telegram_html("run `a<b>` now"),
            "run <code>a&lt;b&gt;</code> now"
        );
        assert_eq!(
            telegram_html("see [the docs](https://x.dev/a?b=1&c=\"2\")"),
            "see <a href=\"https://x.dev/a?b=1&amp;c=&quot;2&quot;\">the docs</a>"
        );
        assert_eq!(
            telegram_html("```rust\nfn f() -> Vec<u8> { a && b }\n```"),
            "<pre><code class=\"language-rust\">fn f() -&gt; Vec&lt;u8&gt; { a &amp;&amp; b }</code></pre>"
        );
        assert_eq!(telegram_html("```\nx\n```"), "<pre><code>x</code></pre>");
        assert_eq!(
            telegram_html("# Title\n- one\n2. two"),
            "<b>Title</b>\n• one\n2. two"
        );
    }

    #[test]
    fn r1_3_markdown_without_closers_stays_text() {
        assert_eq!(telegram_html("a * b * c"), "a * b * c");
        assert_eq!(telegram_html("snake_case_name"), "snake_case_name");
        assert_eq!(telegram_html("2 * 3 = 6 and **x"), "2 * 3 = 6 and **x");
        assert_eq!(telegram_html("`unclosed"), "`unclosed");
        assert_eq!(
            telegram_html("[x](javascript:alert(1))"),
            "[x](javascript:alert(1))"
        );
        // A fence the text never closes still renders as code.
        assert_eq!(
            telegram_html("```py\nprint(1)"),
            "<pre><code class=\"language-py\">print(1)</code></pre>"
        );
    }

    #[test]
    fn r1_3_slack_mrkdwn() {
        assert_eq!(
            slack_mrkdwn("a < b & <!channel>"),
            "a &lt; b &amp; &lt;!channel&gt;"
        );
        assert_eq!(
            slack_mrkdwn("**bold** *it* ~~gone~~ `x<y`"),
            "*bold* _it_ ~gone~ `x&lt;y`"
        );
        assert_eq!(
            slack_mrkdwn("[docs](https://x.dev/a)"),
            "<https://x.dev/a|docs>"
        );
        assert_eq!(
            slack_mrkdwn("```rust\nlet a = b > c;\n```"),
            "```\nlet a = b &gt; c;\n```"
        );
        assert_eq!(slack_mrkdwn("## Head\n* item"), "*Head*\n• item");
    }
}

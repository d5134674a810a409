//! Markdown, as models write it, to what each platform renders (SPEC R1.3): Telegram's HTML
//! parse mode and Slack's mrkdwn. pulldown-cmark parses it (CommonMark and `~~strikethrough~~`);
//! this file walks its events into each platform's markup. Only the common subset becomes
//! markup: code blocks (with a language), headings, bullet and numbered lists, quotes, inline
//! code, bold, italic, strikethrough and links to web, mail and Telegram addresses. Everything
//! else, raw HTML included, is text, escaped, so model output can never inject markup:
//! Telegram refuses a message whose HTML does not parse, and Slack would turn `<!channel>` into
//! a mention.
//!
//! Every call parses a document of its own, whose events are balanced, so any split of a text at
//! line boundaries outside code fences (`split.rs`, which finds fences with `fence_open` and
//! `fence_close`) formats into pieces that are each well formed: formatting cut in two by a
//! split shows its marks as text.
use pulldown_cmark::{CodeBlockKind, Event, LinkType, Options, Parser, Tag, TagEnd};
use std::marker::PhantomData;
use std::ops::Range;

/// Escapes `&`, `<` and `>`, and `"` too when `quote`.
fn escape(s: &str, quote: bool) -> String {
    let s = s
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    match quote {
        true => s.replace('"', "&quot;"),
        false => s,
    }
}

/// Escapes text for Telegram HTML (and attribute values: `"` too).
pub fn html_escape(s: &str) -> String {
    escape(s, true)
}

/// Escapes text for Slack: `&`, `<` and `>` are control characters there.
pub fn slack_escape(s: &str) -> String {
    escape(s, false)
}

/// The inline styles that become markup: an index into [`Dialect::MARKS`].
#[derive(Clone, Copy, Debug, PartialEq)]
enum Style {
    Bold,
    Italic,
    Strike,
}

/// What differs between the platforms' markup; the walk over the events and the line structure
/// (blank lines, list markers and indentation) are shared by [`Walk`].
trait Dialect {
    const ESCAPE: fn(&str) -> String;
    /// The marks that open and close each [`Style`], in its order.
    const MARKS: [(&'static str, &'static str); 3];
    /// Whether marks hold only within a line, so open styles are closed at a line's end and
    /// opened again on the next.
    const MARKS_PER_LINE: bool;
    /// What opens a quote, closes it, and starts each further line of it.
    const QUOTE: [&'static str; 3];
    fn code(code: &str) -> String;
    /// A link to `url` (checked by [`safe_url`]) showing `label` (already rendered).
    fn link(url: &str, label: &str) -> String;
    fn fence(lang: &str, code: &str) -> String;
}

/// What an open container puts at the start of each further line.
enum Prefix {
    Quote,
    /// A list item's indentation: its marker's width.
    Indent(usize),
}

/// Links that become markup: others would let a chat's link run a script or open a local file.
fn safe_url(url: &str) -> bool {
    ["http://", "https://", "mailto:", "tg://"]
        .iter()
        .any(|scheme| url.starts_with(scheme))
        && !url.contains(char::is_whitespace)
}

/// The number of an ordered list's item starting at `at`, as written (`3.`, `3)`: CommonMark
/// would count on from the first); `None` for a bullet item.
fn written_number(src: &str, at: usize) -> Option<&str> {
    let t = src.get(at..)?.trim_start();
    let digits = t.chars().take_while(char::is_ascii_digit).count();
    let number = t.get(..digits + 1)?;
    (digits > 0 && (number.ends_with('.') || number.ends_with(')'))).then_some(number)
}

/// The leading whitespace of the line starting at or containing byte `at`.
fn line_indent(src: &str, at: usize) -> usize {
    let start = src[..at].rfind('\n').map_or(0, |i| i + 1);
    let line = &src[start..];
    line.len() - line.trim_start_matches([' ', '\t']).len()
}

/// Whether the line before the one containing byte `at` is blank (in a quote: `>` alone).
fn blank_line_before(src: &str, at: usize) -> bool {
    let blank = |l: &str| {
        l.trim_matches(|c: char| c == '>' || c.is_whitespace())
            .is_empty()
    };
    src[..at].rsplit('\n').nth(1).is_some_and(blank)
}

/// Skips the events up to the end of the element just started.
fn skip_element<'a>(events: &mut impl Iterator<Item = (Event<'a>, Range<usize>)>) {
    let mut depth = 1;
    for (event, _) in events {
        depth += match event {
            Event::Start(_) => 1,
            Event::End(_) if depth == 1 => return,
            Event::End(_) => -1,
            _ => 0,
        };
    }
}

/// The state of a walk over one document's events.
#[derive(Default)]
struct Walk<'s, D> {
    src: &'s str,
    out: String,
    prefixes: Vec<Prefix>,
    styles: Vec<Style>,
    /// The open links, innermost last: the URL and what was written before the label, or
    /// `None` for one inside another (Telegram does not nest links: it shows as its label).
    links: Vec<Option<(String, String)>>,
    /// A code block's language (`None` for raw HTML) and text, collected to its end.
    block: Option<(Option<String>, String)>,
    /// Something was written since the document, a quote or an item began: the next block
    /// starts a line (else it goes on the line of that quote or item).
    written: bool,
    dialect: PhantomData<D>,
}

impl<'s, D: Dialect + Default> Walk<'s, D> {
    fn render(src: &'s str) -> String {
        let options = Options::ENABLE_STRIKETHROUGH | Options::ENABLE_SUBSCRIPT;
        let mut events = Parser::new_ext(src, options).into_offset_iter();
        let mut w = Walk::<D> {
            src,
            ..Walk::default()
        };
        while let Some((event, range)) = events.next() {
            match event {
                Event::Start(tag) => w.start(tag, range, &mut events),
                Event::End(tag) => w.end(tag),
                Event::Text(t) | Event::Html(t) => match &mut w.block {
                    Some((_, text)) => text.push_str(&t),
                    None => w.text(&t),
                },
                // Raw HTML is never passed on: it shows as written.
                Event::InlineHtml(t) => w.text(&t),
                Event::Code(t) => w.push(&D::code(&t)),
                // A line break stays one, indented no deeper than the line was written (a
                // lazy continuation line is not).
                Event::SoftBreak | Event::HardBreak => {
                    w.newline(false, line_indent(src, range.end));
                }
                Event::Rule => {
                    w.block_start(range.start);
                    w.text(src[range].trim());
                }
                _ => {}
            }
        }
        w.out
    }

    fn start<'a>(
        &mut self,
        tag: Tag<'a>,
        range: Range<usize>,
        events: &mut impl Iterator<Item = (Event<'a>, Range<usize>)>,
    ) {
        match tag {
            Tag::Paragraph => self.block_start(range.start),
            Tag::Heading { .. } => {
                self.block_start(range.start);
                self.open(Style::Bold);
            }
            Tag::BlockQuote(_) => {
                self.block_start(range.start);
                self.out.push_str(D::QUOTE[0]);
                self.prefixes.push(Prefix::Quote);
                self.written = false;
            }
            Tag::CodeBlock(kind) => {
                self.block_start(range.start);
                let lang = match kind {
                    CodeBlockKind::Fenced(info) => info.split_whitespace().next().map(Into::into),
                    CodeBlockKind::Indented => None,
                };
                self.block = Some((Some(lang.unwrap_or_default()), String::new()));
            }
            Tag::HtmlBlock => {
                self.block_start(range.start);
                self.block = Some((None, String::new()));
            }
            Tag::Item => {
                self.block_start(range.start);
                let marker = written_number(self.src, range.start).unwrap_or("•");
                self.out.push_str(marker);
                self.out.push(' ');
                self.prefixes
                    .push(Prefix::Indent(marker.chars().count() + 1));
                self.written = false;
            }
            Tag::Emphasis => self.open(Style::Italic),
            Tag::Strong => self.open(Style::Bold),
            Tag::Strikethrough => self.open(Style::Strike),
            // Enabled only so that `~one~` stays text, as `~` in "~5 min" is meant.
            Tag::Subscript => self.text("~"),
            Tag::Link {
                link_type,
                dest_url,
                ..
            } => self.link(link_type, &dest_url, range, events),
            Tag::Image {
                link_type,
                dest_url,
                ..
            } => self.link(link_type, &dest_url, range, events),
            _ => {}
        }
    }

    /// A link or image: a link when its URL is safe, else its Markdown as text.
    fn link<'a>(
        &mut self,
        link_type: LinkType,
        url: &str,
        range: Range<usize>,
        events: &mut impl Iterator<Item = (Event<'a>, Range<usize>)>,
    ) {
        let url = match link_type {
            LinkType::Email => format!("mailto:{url}"),
            _ => url.to_owned(),
        };
        if !safe_url(&url) {
            skip_element(events);
            self.text(&self.src[range]);
        } else if self.links.is_empty() {
            self.links.push(Some((url, std::mem::take(&mut self.out))));
        } else {
            self.links.push(None);
        }
    }

    fn end(&mut self, tag: TagEnd) {
        match tag {
            TagEnd::Heading(_) | TagEnd::Strong | TagEnd::Emphasis | TagEnd::Strikethrough => {
                if let Some(style) = self.styles.pop() {
                    self.push(D::MARKS[style as usize].1);
                }
            }
            TagEnd::Subscript => self.text("~"),
            TagEnd::BlockQuote(_) => {
                self.prefixes.pop();
                self.push(D::QUOTE[1]);
            }
            TagEnd::Item => {
                self.prefixes.pop();
                self.written = true;
            }
            TagEnd::CodeBlock | TagEnd::HtmlBlock => match self.block.take() {
                Some((Some(lang), code)) => {
                    let code = code.strip_suffix('\n').unwrap_or(&code);
                    self.push(&D::fence(&lang, code));
                }
                Some((None, html)) => self.text(html.trim_end_matches('\n')),
                None => {}
            },
            TagEnd::Link | TagEnd::Image => {
                if let Some(Some((url, before))) = self.links.pop() {
                    let label = std::mem::replace(&mut self.out, before);
                    let label = match label.is_empty() {
                        true => (D::ESCAPE)(&url),
                        false => label,
                    };
                    self.push(&D::link(&url, &label));
                }
            }
            _ => {}
        }
    }

    fn push(&mut self, s: &str) {
        self.out.push_str(s);
        self.written = true;
    }

    /// Text, escaped; its line breaks stay line breaks.
    fn text(&mut self, s: &str) {
        for (i, line) in s.split('\n').enumerate() {
            if i > 0 {
                self.newline(false, line_indent(line, 0));
            }
            self.push(&(D::ESCAPE)(line));
        }
    }

    fn open(&mut self, style: Style) {
        self.styles.push(style);
        self.push(D::MARKS[style as usize].0);
    }

    /// A block begins on a line of its own, after a blank line when it was written after one.
    fn block_start(&mut self, at: usize) {
        if std::mem::replace(&mut self.written, true) {
            self.newline(blank_line_before(self.src, at), usize::MAX);
        }
    }

    /// Starts a line inside the open containers, with at most `indent` of their indentation.
    fn newline(&mut self, blank: bool, mut indent: usize) {
        let styles: &[Style] = if D::MARKS_PER_LINE { &self.styles } else { &[] };
        let mut prefix = String::new();
        for p in &self.prefixes {
            match p {
                Prefix::Quote => prefix.push_str(D::QUOTE[2]),
                Prefix::Indent(n) => {
                    let n = (*n).min(indent);
                    indent -= n;
                    prefix.extend(std::iter::repeat_n(' ', n));
                }
            }
        }
        for style in styles.iter().rev() {
            self.out.push_str(D::MARKS[*style as usize].1);
        }
        if blank {
            self.out.push('\n');
            self.out.push_str(prefix.trim_end());
        }
        self.out.push('\n');
        self.out.push_str(&prefix);
        for style in styles {
            self.out.push_str(D::MARKS[*style as usize].0);
        }
    }
}

#[derive(Default)]
struct TelegramHtml;

impl Dialect for TelegramHtml {
    const ESCAPE: fn(&str) -> String = html_escape;
    const MARKS: [(&'static str, &'static str); 3] =
        [("<b>", "</b>"), ("<i>", "</i>"), ("<s>", "</s>")];
    const MARKS_PER_LINE: bool = false;
    const QUOTE: [&'static str; 3] = ["<blockquote>", "</blockquote>", ""];

    fn code(code: &str) -> String {
        format!("<code>{}</code>", html_escape(code))
    }

    fn link(url: &str, label: &str) -> String {
        format!("<a href=\"{}\">{label}</a>", html_escape(url))
    }

    fn fence(lang: &str, code: &str) -> String {
        let class = if lang.is_empty() {
            String::new()
        } else {
            format!(" class=\"language-{}\"", html_escape(lang))
        };
        format!("<pre><code{class}>{}</code></pre>", html_escape(code))
    }
}

/// Markdown to Telegram's HTML parse mode.
pub fn telegram_html(md: &str) -> String {
    Walk::<TelegramHtml>::render(md)
}

#[derive(Default)]
struct SlackMrkdwn;

impl Dialect for SlackMrkdwn {
    const ESCAPE: fn(&str) -> String = slack_escape;
    const MARKS: [(&'static str, &'static str); 3] = [("*", "*"), ("_", "_"), ("~", "~")];
    const MARKS_PER_LINE: bool = true;
    const QUOTE: [&'static str; 3] = ["&gt; ", "", "&gt; "];

    fn code(code: &str) -> String {
        format!("`{}`", slack_escape(code))
    }

    /// `|` and `>` would end the label or the link (`>` in the label is escaped already).
    fn link(url: &str, label: &str) -> String {
        let url = slack_escape(url).replace('|', "%7C");
        format!("<{url}|{}>", label.replace('|', "¦"))
    }

    /// Slack shows a language after the fence as code text: it is left out.
    fn fence(_lang: &str, code: &str) -> String {
        format!("```\n{}\n```", slack_escape(code))
    }
}

/// Markdown to Slack's mrkdwn.
pub fn slack_mrkdwn(md: &str) -> String {
    Walk::<SlackMrkdwn>::render(md)
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

    /// Markdown, `=>`, Telegram HTML; `\n` is a line break.
    const COMMONMARK: &str = r#"
***both*** **a _b_** => <i><b>both</b></i> <b>a <i>b</i></b>
[w](https://w.org/R_(x)) [a [b]](tg://c) => <a href="https://w.org/R_(x)">w</a> <a href="tg://c">a [b]</a>
\*not it\* 2\_000 \`x\` &amp; => *not it* 2_000 `x` &amp;
**bold\nacross** lines => <b>bold\nacross</b> lines
- a\n  - b\n3) c\n3) d => • a\n  • b\n3) c\n3) d
> a *b\n> c*\nlazy => <blockquote>a <i>b\nc</i>\nlazy</blockquote>
<b>x</b> <!--y--> => &lt;b&gt;x&lt;/b&gt; &lt;!--y--&gt;
<div>\n**x**\n</div> => &lt;div&gt;\n**x**\n&lt;/div&gt;
<https://x.dev> ![i](https://x.dev/i.png) => <a href="https://x.dev">https://x.dev</a> <a href="https://x.dev/i.png">i</a>
![x](file:///etc) ~5 min, ~10~ => ![x](file:///etc) ~5 min, ~10~
"#;

    #[test]
    fn r1_3_commonmark_that_the_line_parser_missed() {
        for case in COMMONMARK.trim().lines() {
            let case = case.replace(r"\n", "\n");
            let (md, html) = case.split_once(" => ").unwrap_or_default();
            assert_eq!(telegram_html(md), html, "{md:?}");
        }
        assert_eq!(slack_mrkdwn("> **a\n> b**"), "&gt; *a*\n&gt; *b*");
    }

    /// Tags in Telegram HTML are Telegram's, nested and closed.
    fn tags_balanced(html: &str) -> bool {
        let mut open: Vec<&str> = Vec::new();
        for part in html.split('<').skip(1) {
            let name = part.split([' ', '>']).next().unwrap_or("");
            let ok = part.contains('>')
                && match name.strip_prefix('/') {
                    Some(name) => open.pop() == Some(name),
                    None => ["b", "i", "s", "a", "code", "pre", "blockquote"].contains(&name),
                };
            if !ok {
                return false;
            } else if !name.starts_with('/') {
                open.push(name);
            }
        }
        open.is_empty()
    }

    #[test]
    fn r1_3_any_split_at_line_boundaries_formats_into_well_formed_pieces() {
        let sample = "# Plan\n\nSome **bold that\nspans lines** and _it\nalics_ here.\n\n\
                      - one **b\n  c**\n- two\n  1. nested `x<y`\n\n> quote *with\n> a break*\n\
                      > - and a list\n\n```rust\nlet a = b < c;\nlet d = **e;\n```\n\
                      after ~~strike\nthrough~~ [link\ntext](https://x.dev?a=1&b=2) end";
        let lines: Vec<&str> = sample.lines().collect();
        let mut seed = 7u64;
        for _ in 0..300 {
            // A pseudo-random set of cuts, about one line in four.
            let mut cuts = vec![0];
            for i in 1..lines.len() {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                if seed >> 62 == 0 {
                    cuts.push(i);
                }
            }
            cuts.push(lines.len());
            for w in cuts.windows(2) {
                let html = telegram_html(&lines[w[0]..w[1]].join("\n"));
                assert!(tags_balanced(&html), "{cuts:?}: {html}");
            }
        }
        // And the splitter's own cuts, which close and reopen fences.
        for limit in 10..120 {
            for piece in super::super::split::split(sample, limit, &|p| p.len()) {
                let html = telegram_html(&piece);
                assert!(tags_balanced(&html), "{limit}: {html}");
            }
        }
    }
}

//! Splitting a long answer at the platforms' limits (SPEC R13.5): Telegram 4096 characters per
//! message after formatting, Slack 3000 per section block. The text is split as Markdown, before
//! formatting, so each piece is a document of its own: cuts fall on paragraph boundaries (a blank
//! line, or either side of a code fence) when that leaves a piece at least half full, else on
//! a line boundary, and only a single line longer than the limit is cut inside (at a space when
//! there is one). A cut is never left inside a code fence: the fence is closed at the end of
//! the piece and opened again, with its language, at the start of the next.
//!
//! Pieces are a pure function of the text, so a send that resumes after a restart (the outbox
//! row's `chunks_sent`) finds the same pieces.
use super::format::{slack_mrkdwn, telegram_html, utf16_len};

/// A fence opener: "```" or "~~~" (three or more), then an optional language. Cuts keep clear of
/// fences found line by line this way (CommonMark's rule, less its limit on indentation);
/// `drafts.rs` finds them the same way.
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

/// Telegram's limit on a message's text, in UTF-16 code units.
pub const TELEGRAM_LIMIT: usize = 4096;
/// Slack's limit on a section block's text, in characters.
pub const SLACK_SECTION_LIMIT: usize = 3000;

/// The Markdown pieces of `md` for Telegram: each fits 4096 UTF-16 units both as HTML and as
/// it is (the plain-text fallback sends the Markdown when Telegram refuses the HTML).
pub fn telegram(md: &str) -> Vec<String> {
    split(md, TELEGRAM_LIMIT, &|piece| {
        utf16_len(&telegram_html(piece)).max(utf16_len(piece))
    })
}

/// The Markdown pieces of `md` for Slack: each fits one section block as mrkdwn.
pub fn slack(md: &str) -> Vec<String> {
    split(md, SLACK_SECTION_LIMIT, &|piece| {
        slack_mrkdwn(piece).chars().count()
    })
}

/// A fence open before a line: its marker (to close it) and its opening line (to reopen it).
#[derive(Clone, Debug, PartialEq)]
struct Open {
    marker: String,
    opener: String,
}

/// Splits `md` into pieces whose `measure` is at most `limit`. Every piece is non-empty.
pub fn split(md: &str, limit: usize, measure: &dyn Fn(&str) -> usize) -> Vec<String> {
    let lines: Vec<&str> = md.lines().collect();
    // `before[i]`: the fence open before line i; `before[lines.len()]`: open at the end.
    let mut before: Vec<Option<Open>> = Vec::with_capacity(lines.len() + 1);
    let mut state: Option<Open> = None;
    for l in &lines {
        before.push(state.clone());
        state = match state {
            None => fence_open(l).map(|(marker, lang)| Open {
                opener: format!("{marker}{lang}"),
                marker,
            }),
            Some(open) if fence_close(l, &open.marker) => None,
            open => open,
        };
    }
    before.push(state);
    let doc = Doc {
        lines: &lines,
        before: &before,
    };

    let mut pieces = Vec::new();
    let mut push = |s: String| {
        if !s.trim().is_empty() {
            pieces.push(s.trim_end().to_owned());
        }
    };
    let mut start = doc.skip_blank(0);
    let mut end = start;
    while end < lines.len() {
        if measure(&doc.render(start, end + 1)) <= limit {
            end += 1;
            continue;
        }
        if end == start {
            // One line is too long on its own: cut inside it.
            let (head, tail) = doc.wrap(start);
            for part in cut_line(lines[start], limit, &|p| {
                measure(&format!("{head}{p}{tail}"))
            }) {
                push(format!("{head}{part}{tail}"));
            }
            start = doc.skip_blank(start + 1);
            end = start;
            continue;
        }
        let mut cut = doc
            .paragraph_cut(start, end)
            .filter(|c| measure(&doc.render(start, *c)) * 2 >= limit)
            .unwrap_or(end);
        // Never open the next piece on the closing line of a fence (an empty code block):
        // the piece before closes it the same way.
        if doc.closes_fence(cut) && measure(&doc.render(start, cut + 1)) <= limit {
            cut += 1;
        }
        push(doc.render(start, cut));
        start = doc.skip_blank(cut);
        end = start;
    }
    if start < lines.len() {
        push(doc.render(start, lines.len()));
    }
    pieces
}

struct Doc<'a> {
    lines: &'a [&'a str],
    before: &'a [Option<Open>],
}

impl Doc<'_> {
    /// Lines `start..end` as a document: a fence open at `start` is reopened, one open at
    /// `end` is closed.
    fn render(&self, start: usize, end: usize) -> String {
        let (head, tail) = (self.head(start), self.tail(end));
        format!("{head}{}{tail}", self.lines[start..end].join("\n"))
    }

    fn head(&self, start: usize) -> String {
        match &self.before[start] {
            Some(open) => format!("{}\n", open.opener),
            None => String::new(),
        }
    }

    fn tail(&self, end: usize) -> String {
        match &self.before[end] {
            Some(open) => format!("\n{}", open.marker),
            None => String::new(),
        }
    }

    /// What a piece made of line `i` alone needs around it.
    fn wrap(&self, i: usize) -> (String, String) {
        let head = self.head(i);
        // A fence opened by this very line stays open after it.
        let tail = match (&self.before[i], &self.before[i + 1]) {
            (_, Some(open)) => format!("\n{}", open.marker),
            _ => String::new(),
        };
        (head, tail)
    }

    /// The first line at or after `i` that is not blank outside a fence.
    fn skip_blank(&self, mut i: usize) -> usize {
        while i < self.lines.len() && self.before[i].is_none() && self.lines[i].trim().is_empty() {
            i += 1;
        }
        i
    }

    /// Whether line `i` closes the fence open before it.
    fn closes_fence(&self, i: usize) -> bool {
        i < self.lines.len() && self.before[i].is_some() && self.before[i + 1].is_none()
    }

    /// The last paragraph boundary in `start+1..=end`: outside a fence, after a blank line,
    /// after a fence closed, or before a fence opens.
    fn paragraph_cut(&self, start: usize, end: usize) -> Option<usize> {
        (start + 1..=end).rev().find(|&c| {
            if self.before[c].is_some() {
                return false;
            }
            let prev_blank = self.lines[c - 1].trim().is_empty();
            let prev_closed = self.before[c - 1].is_some();
            let opens = c < self.lines.len() && fence_open(self.lines[c]).is_some();
            prev_blank || prev_closed || opens
        })
    }
}

/// Cuts one line into parts that each measure at most `limit`: at the last space that fits,
/// else at the last character that fits.
fn cut_line(line: &str, limit: usize, measure: &dyn Fn(&str) -> usize) -> Vec<String> {
    let mut parts = Vec::new();
    let mut rest = line;
    while !rest.is_empty() {
        if measure(rest) <= limit {
            parts.push(rest.to_owned());
            break;
        }
        // The longest prefix (in characters) that fits: binary search over char boundaries.
        let bounds: Vec<usize> = rest
            .char_indices()
            .map(|(i, _)| i)
            .skip(1)
            .chain([rest.len()])
            .collect();
        let (mut lo, mut hi) = (0usize, bounds.len());
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            if measure(&rest[..bounds[mid - 1]]) <= limit {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        // Always make progress: one character even if it alone does not fit.
        let fit = bounds[lo.max(1) - 1];
        let at = match rest[..fit].rfind(' ') {
            Some(space) if space > 0 && fit < rest.len() => space,
            _ => fit,
        };
        parts.push(rest[..at].to_owned());
        rest = rest[at..].trim_start_matches(' ');
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fences in a Markdown piece: every opener has its closer.
    fn fences_balanced(md: &str) -> bool {
        let mut open: Option<String> = None;
        for l in md.lines() {
            open = match open {
                None => fence_open(l).map(|(m, _)| m),
                Some(m) if fence_close(l, &m) => None,
                o => o,
            };
        }
        open.is_none()
    }

    /// Tags in Telegram HTML are nested and closed.
    fn tags_balanced(html: &str) -> bool {
        let mut stack: Vec<String> = Vec::new();
        let mut rest = html;
        while let Some(i) = rest.find('<') {
            let Some(j) = rest[i..].find('>') else {
                return false;
            };
            let tag = &rest[i + 1..i + j];
            if let Some(name) = tag.strip_prefix('/') {
                if stack.pop().as_deref() != Some(name) {
                    return false;
                }
            } else {
                stack.push(tag.split_whitespace().next().unwrap_or("").to_owned());
            }
            rest = &rest[i + j + 1..];
        }
        stack.is_empty()
    }

    fn answer_6000() -> String {
        let para = "Here is how the parser works, step by step, with the details that matter \
                    when you run it on real input: a < b & c > d. "
            .repeat(4);
        let code = (0..40)
            .map(|i| format!("    let value_{i} = compute(&input[{i}..]) << 2; // step {i}"))
            .collect::<Vec<_>>()
            .join("\n");
        let text = format!(
            "# Overview\n\n{para}\n\n```rust\n{code}\n```\n\n{para}\n\n```python\n{code}\n```\n\n{para}"
        );
        assert!(
            (5500..=6500).contains(&text.chars().count()),
            "{}",
            text.len()
        );
        text
    }

    #[test]
    fn r13_5_six_thousand_characters_are_two_telegram_messages_with_intact_fences() {
        let text = answer_6000();
        let pieces = telegram(&text);
        assert_eq!(pieces.len(), 2, "{pieces:#?}");
        for p in &pieces {
            assert!(fences_balanced(p), "unbalanced fence in {p}");
            let html = telegram_html(p);
            assert!(utf16_len(&html) <= TELEGRAM_LIMIT);
            assert!(tags_balanced(&html), "unbalanced tags in {html}");
            assert_eq!(
                html.matches("<pre>").count(),
                html.matches("</pre>").count()
            );
        }
        // Nothing lost: the pieces hold every line of code.
        let joined = pieces.join("\n");
        for i in 0..40 {
            assert_eq!(
                joined.matches(&format!("value_{i} ")).count(),
                2,
                "line {i}"
            );
        }
    }

    #[test]
    fn r13_5_a_fence_longer_than_a_message_is_closed_and_reopened_with_its_language() {
        let code = (0..400)
            .map(|i| format!("print({i}) # a line of python that is long enough"))
            .collect::<Vec<_>>()
            .join("\n");
        let text = format!("Intro.\n\n```python\n{code}\n```\n\nDone.");
        let pieces = telegram(&text);
        assert!(pieces.len() >= 5, "{}", pieces.len());
        for p in &pieces {
            assert!(fences_balanced(p), "{p}");
            assert!(utf16_len(&telegram_html(p)) <= TELEGRAM_LIMIT);
        }
        for p in &pieces[1..pieces.len() - 1] {
            assert!(p.starts_with("```python\n"), "{}", &p[..40]);
        }
        let lines: usize = pieces
            .iter()
            .map(|p| p.lines().filter(|l| l.starts_with("print(")).count())
            .sum();
        assert_eq!(lines, 400);
    }

    #[test]
    fn r13_5_split_prefers_paragraphs_and_keeps_short_text_whole() {
        assert_eq!(telegram("hello"), vec!["hello".to_owned()]);
        let a = "a".repeat(2500);
        let b = "b".repeat(2500);
        let pieces = telegram(&format!("{a}\n\n{b}"));
        assert_eq!(pieces, vec![a, b]);
    }

    #[test]
    fn r13_5_a_line_without_breaks_is_cut_at_spaces_then_anywhere() {
        let words = "word ".repeat(2000);
        let pieces = telegram(&words);
        assert!(pieces.len() >= 3);
        for p in &pieces {
            assert!(utf16_len(&telegram_html(p)) <= TELEGRAM_LIMIT);
            assert!(!p.contains("wo rd"));
        }
        let blob = "x".repeat(10_000);
        let pieces = telegram(&blob);
        assert_eq!(pieces.iter().map(String::len).sum::<usize>(), 10_000);
        // Escaping grows the HTML: 3000 '&' are 15000 characters of `&amp;`.
        let amps = "&".repeat(3000);
        for p in telegram(&amps) {
            assert!(utf16_len(&telegram_html(&p)) <= TELEGRAM_LIMIT);
        }
    }

    #[test]
    fn r13_5_slack_sections_hold_3000_characters() {
        let text = format!("{}\n\n```\n{}\n```", "p ".repeat(2000), "c\n".repeat(2000));
        let pieces = slack(&text);
        assert!(pieces.len() >= 3);
        for p in &pieces {
            assert!(slack_mrkdwn(p).chars().count() <= SLACK_SECTION_LIMIT);
            assert!(fences_balanced(p));
        }
    }
}

//! What a streamed draft shows (SPEC R11.1): the part of the text being written that no later
//! text can change once formatted (`stable_markdown`), rendered for the chat's platform with
//! the "still writing" marker, or the raw text for the generic webhook.
use super::format::{self, utf16_len};
use super::split::{self, fence_close, fence_open};
use super::ChatTarget;

/// The last line of every draft: the answer is not complete yet.
pub const MARKER: &str = "✍️ still writing…";

pub(super) enum Rendered {
    /// Nothing stable to show yet.
    Nothing,
    /// It no longer fits one message.
    TooLong,
    Body {
        /// What is sent (with the marker).
        body: String,
        /// What the chat shows of it, without the marker: only ever grows.
        visible: String,
        /// The Markdown shown.
        markdown: String,
    },
}

impl Rendered {
    pub(super) fn body(&self) -> Option<&str> {
        match self {
            Self::Body { body, .. } => Some(body),
            _ => None,
        }
    }
}

/// The draft of `text`. Once a message was sent (`sent`), a draft whose text was dropped (an
/// interim text at a tool round) shows the marker alone until new text comes.
pub(super) fn render(chat: &ChatTarget, text: &str, sent: bool) -> Rendered {
    if let ChatTarget::Webhook { .. } = chat {
        // Raw text only ever appends: the receiver gets all of it.
        return if text.trim().is_empty() {
            Rendered::Nothing
        } else {
            Rendered::Body {
                body: text.to_owned(),
                visible: text.to_owned(),
                markdown: text.to_owned(),
            }
        };
    }
    let stable = stable_markdown(text);
    if stable.trim().is_empty() {
        return match sent {
            true => Rendered::Body {
                body: MARKER.to_owned(),
                visible: String::new(),
                markdown: String::new(),
            },
            false => Rendered::Nothing,
        };
    }
    match chat {
        ChatTarget::Telegram { .. } => {
            let html = format::telegram_html(&stable);
            let body = format!("{html}\n\n{MARKER}");
            if utf16_len(&body) > split::TELEGRAM_LIMIT {
                return Rendered::TooLong;
            }
            Rendered::Body {
                visible: format::html_visible(&html),
                body,
                markdown: stable,
            }
        }
        _ => {
            let mrkdwn = format::slack_mrkdwn(&stable);
            let body = format!("{mrkdwn}\n\n{MARKER}");
            if body.chars().count() > split::SLACK_SECTION_LIMIT {
                return Rendered::TooLong;
            }
            Rendered::Body {
                visible: format::slack_visible(&mrkdwn),
                body,
                markdown: stable,
            }
        }
    }
}

/// The part of a text being streamed that no later text can change once formatted: every
/// complete line, and of the line being written the part before anything that could still
/// turn into formatting (a `*`, `_`, `` ` ``, `[` or `~`) or change as it goes on (a `\`
/// escape, an `&` entity, a `<` autolink or tag), or nothing while its first word
/// could still make it a heading, list item, quote or fence.
pub fn stable_markdown(text: &str) -> String {
    let (complete, partial) = match text.rfind('\n') {
        Some(i) => (&text[..i], &text[i + 1..]),
        None => ("", text),
    };
    let mut fence: Option<String> = None;
    for l in complete.lines() {
        fence = match fence {
            None => fence_open(l).map(|(m, _)| m),
            Some(m) if fence_close(l, &m) => None,
            f => f,
        };
    }
    let shown = if fence.is_some() {
        // Code is shown as it comes, except what may be the closing fence.
        if partial.trim_start().starts_with(['`', '~']) {
            ""
        } else {
            partial
        }
    } else {
        stable_partial(partial)
    };
    match (
        complete.is_empty() && !text.contains('\n'),
        shown.is_empty(),
    ) {
        (true, _) => shown.to_owned(),
        (false, true) => complete.to_owned(),
        (false, false) => format!("{complete}\n{shown}"),
    }
}

fn stable_partial(line: &str) -> &str {
    let body = line.trim_start();
    let indent = line.len() - body.len();
    if body.is_empty() {
        return "";
    }
    let first = body.chars().next().unwrap_or(' ');
    let marker_start = first.is_ascii_digit() || "#-+*>`~".contains(first);
    let Some(space) = body.find(char::is_whitespace) else {
        // The first word decides what the line is: wait for it unless it is plain.
        return if marker_start {
            ""
        } else {
            cut_inline(line, indent)
        };
    };
    let token = &body[..space];
    let is_marker = matches!(token, "-" | "+" | "*")
        || (token.chars().all(|c| c == '#') && token.len() <= 6)
        || (token.len() > 1
            && token[..token.len() - 1].chars().all(|c| c.is_ascii_digit())
            && (token.ends_with('.') || token.ends_with(')')));
    if first == '`' || first == '~' {
        // May be a fence opener or inline code: wait for the whole line.
        return "";
    }
    let content_at = if is_marker {
        indent + space + 1
    } else if token.starts_with('>') {
        indent + 1
    } else {
        indent
    };
    cut_inline(line, content_at.min(line.len()))
}

/// `line` up to the first character at or after `from` that may open inline formatting.
fn cut_inline(line: &str, from: usize) -> &str {
    match line[from..].find(['*', '_', '`', '[', '~', '\\', '&', '<']) {
        Some(i) => &line[..from + i],
        None => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every prefix of `text` (at char boundaries) must render to a visible text that the
    /// next prefix's visible text, and the final text's, extend.
    fn assert_only_appends(text: &str) {
        let mut last = String::new();
        let mut cut = 0;
        for (i, _) in text.char_indices().chain([(text.len(), ' ')]) {
            let stable = stable_markdown(&text[..i]);
            let visible = format::html_visible(&format::telegram_html(&stable));
            assert!(
                visible.starts_with(&last),
                "prefix {i}: {last:?} is not a prefix of {visible:?} ({stable:?})"
            );
            last = visible;
            cut = i;
        }
        assert_eq!(cut, text.len());
        let fin = format::html_visible(&format::telegram_html(text));
        assert!(fin.starts_with(&last), "{last:?} vs final {fin:?}");
    }

    #[test]
    fn r11_1_drafts_only_ever_append() {
        assert_only_appends("Hello **bold** and _it_ with `code` and [a link](https://x.dev).");
        assert_only_appends(
            "# Title\n\n- one **b**\n- two\n12. twelve\n> quote *i*\n\nSome text < & >\n\n\
             ```rust\nfn main() {\n    println!(\"*\");\n}\n```\nafter ~~x~~ done",
        );
        assert_only_appends("a * b * c and 3 * 4 = 12\n#hashtag x\n-5 degrees\n1 apple");
        assert_only_appends(r"escaped \*x\* &amp; <https://x.dev> <b>tag</b> and **bold");
    }

    #[test]
    fn r11_1_the_line_being_written_is_shown_up_to_its_formatting() {
        assert_eq!(stable_markdown("Hello wor"), "Hello wor");
        assert_eq!(stable_markdown("Hello **wor"), "Hello ");
        assert_eq!(stable_markdown("line one\n- ite"), "line one\n- ite");
        assert_eq!(stable_markdown("line one\n-"), "line one");
        assert_eq!(
            stable_markdown("```py\nprint(1)\npri"),
            "```py\nprint(1)\npri"
        );
        assert_eq!(stable_markdown("```py\nprint(1)\n``"), "```py\nprint(1)");
    }
}

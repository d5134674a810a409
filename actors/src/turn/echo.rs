//! What a follow-up call's reply shows (SPEC R7.2, R8.5, R10.2): turnkey's own words are never
//! part of an answer. A model asked to continue a cut-off answer, or nudged after an empty or
//! repeated one, sometimes says the request back first: a leading echo of the instruction, the
//! whole of it or its first sentences, is dropped. A server that continues a prefill may send
//! the prefilled text back before the new text: that copy is dropped too. And a continuation
//! joins the text before it at a word boundary: one space between two words, never two.
//! Each is done the same way to the stream (before any of it reaches a client) and to the
//! text the call returns.
use std::borrow::Cow;
use std::sync::Mutex;

/// A follow-up call: what its reply may open by repeating, and the text it carries on.
#[derive(Clone, Debug)]
pub struct Follow {
    /// Not part of the answer when the reply opens with it.
    echo: String,
    /// `echo` is the prefilled answer (dropped only whole, keeping the spacing after it)
    /// rather than an instruction (whose leading sentences are dropped one by one).
    prefilled: bool,
    /// The last character of the answer this reply continues; `None` for a new answer.
    after: Option<char>,
}

impl Follow {
    /// A call that ends with turnkey's `instruction` and starts a new answer.
    pub fn instruction(instruction: &str) -> Self {
        Self {
            echo: instruction.to_owned(),
            prefilled: false,
            after: None,
        }
    }

    /// A call that ends with `instruction` and continues the answer `before`.
    pub fn continuing(instruction: &str, before: &str) -> Self {
        Self {
            after: before.chars().last(),
            ..Self::instruction(instruction)
        }
    }

    /// A call that sends `before` as the start of the answer for the model to carry on.
    pub fn prefilled(before: &str) -> Self {
        Self {
            echo: before.trim_end().to_owned(),
            prefilled: true,
            after: before.chars().last(),
        }
    }

    /// What of the reply `text` joins the answer: without a leading echo, at a word boundary.
    pub fn take<'a>(&self, text: &'a str) -> Cow<'a, str> {
        join(self.after, self.kept(text), self.prefilled)
    }

    /// `text` without a leading echo.
    fn kept<'a>(&self, text: &'a str) -> &'a str {
        if self.prefilled {
            text.strip_prefix(self.echo.as_str()).unwrap_or(text)
        } else {
            strip(text, &self.echo)
        }
    }

    /// Whether `held`, the start of a reply, may still turn out to open with the echo, or is
    /// nothing but an echo and whitespace so far (the join waits for the first word).
    fn undecided(&self, held: &str) -> bool {
        let start = if self.prefilled {
            held
        } else {
            held.trim_start()
        };
        self.echo.starts_with(start) || self.kept(held).trim().is_empty()
    }
}

/// `text` without a leading echo of `instruction`: the whole instruction, or its first
/// sentences (each a whole one); leading whitespace, and the whitespace after the echo, go
/// with it. `text` itself when it does not open with one.
pub fn strip<'a>(text: &'a str, instruction: &str) -> &'a str {
    let start = text.trim_start();
    match echoed(start, instruction) {
        0 => text,
        n => start[n..].trim_start(),
    }
}

/// How many leading bytes of `start` repeat `instruction`: all of it, or its first whole
/// sentences followed by whitespace or the end. 0 when it does not open with one.
fn echoed(start: &str, instruction: &str) -> usize {
    if start.starts_with(instruction) {
        return instruction.len();
    }
    let common = start
        .char_indices()
        .zip(instruction.chars())
        .take_while(|((_, a), b)| a == b)
        .last()
        .map_or(0, |((i, c), _)| i + c.len_utf8());
    // The end of the last whole sentence of the instruction within the common part.
    let sentence = instruction[..common]
        .char_indices()
        .rev()
        .find(|(i, c)| {
            matches!(c, '.' | '!' | '?')
                && instruction[i + 1..]
                    .chars()
                    .next()
                    .is_none_or(char::is_whitespace)
        })
        .map(|(i, _)| i + 1);
    match sentence {
        Some(end) if start[end..].chars().next().is_none_or(char::is_whitespace) => end,
        _ => 0,
    }
}

/// `next` as it joins text that ended with `after`: a continuation that opens with
/// whitespace after whitespace loses its own; after a prefill the model's text carries its
/// spacing; a new message after an instruction starts with a word, which gets the space it
/// needs after a word or a sentence's end ("impressed" + "The" is "impressed The").
fn join(after: Option<char>, next: &str, prefilled: bool) -> Cow<'_, str> {
    let Some(last) = after else {
        return Cow::Borrowed(next);
    };
    if last.is_whitespace() {
        return Cow::Borrowed(next.trim_start());
    }
    let needs_space = !prefilled
        && (last.is_alphanumeric() || matches!(last, '.' | ',' | ';' | ':' | '!' | '?' | ')'))
        && next
            .chars()
            .next()
            .is_some_and(|c| c.is_alphanumeric() || matches!(c, '(' | '"' | '*' | '`'));
    if needs_space {
        Cow::Owned(format!(" {next}"))
    } else {
        Cow::Borrowed(next)
    }
}

/// A stream filter for one call: holds streamed text back while it could still be the start
/// of an echo (or is only whitespace), then passes on what [`Follow::take`] keeps of it, and
/// everything after unchanged.
pub struct EchoFilter<'a> {
    follow: Option<&'a Follow>,
    state: Mutex<Pending>,
}

#[derive(Default)]
struct Pending {
    held: String,
    decided: bool,
}

impl<'a> EchoFilter<'a> {
    /// A filter for a call that is `follow`; `None` passes everything at once.
    pub fn new(follow: Option<&'a Follow>) -> Self {
        Self {
            follow,
            state: Mutex::new(Pending::default()),
        }
    }

    /// What of `fragment` may go to clients now (possibly nothing yet).
    pub fn pass(&self, fragment: &str) -> Option<String> {
        let Some(follow) = self.follow else {
            return Some(fragment.to_owned()).filter(|t| !t.is_empty());
        };
        let Ok(mut p) = self.state.lock() else {
            return Some(fragment.to_owned());
        };
        if p.decided {
            return Some(fragment.to_owned()).filter(|t| !t.is_empty());
        }
        p.held.push_str(fragment);
        if follow.undecided(&p.held) {
            return None;
        }
        p.decided = true;
        let held = std::mem::take(&mut p.held);
        Some(follow.take(&held).into_owned()).filter(|t| !t.is_empty())
    }

    /// The stream ended: what of the text still held back the answer keeps.
    pub fn finish(&self) -> Option<String> {
        let mut p = self.state.lock().ok()?;
        let held = std::mem::take(&mut p.held);
        let decided = std::mem::replace(&mut p.decided, true);
        let follow = self.follow.filter(|_| !decided)?;
        Some(follow.take(&held).into_owned()).filter(|t| !t.is_empty())
    }
}

#[cfg(test)]
#[path = "echo_tests.rs"]
mod tests;

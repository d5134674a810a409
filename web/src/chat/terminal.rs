//! The terminal side of `turnkey chat`: lines typed on stdin (read on a thread of their own,
//! since a blocking read cannot be cancelled) and the screen, which knows whether the cursor
//! is at the start of a line so that whole lines never run into streamed text.
use super::render::Out;
use std::io::{self, BufRead, Write};
use tokio::sync::mpsc;

/// What the person typed.
#[derive(Debug, PartialEq, Eq)]
pub enum Input {
    /// One line, without its line end.
    Line(String),
    /// Stdin ended (Ctrl-D at the start of a line, or the end of piped input).
    Eof,
}

/// Reads stdin line by line on its own thread until it ends or the receiver is dropped. Bytes
/// that are not UTF-8 are replaced, not refused.
pub fn spawn_stdin() -> io::Result<mpsc::Receiver<Input>> {
    let (tx, rx) = mpsc::channel(64);
    std::thread::Builder::new()
        .name("chat-stdin".into())
        .spawn(move || {
            let stdin = io::stdin();
            let mut stdin = stdin.lock();
            let mut buf = Vec::new();
            loop {
                buf.clear();
                let input = match stdin.read_until(b'\n', &mut buf) {
                    Ok(0) => Input::Eof,
                    Ok(_) => {
                        while matches!(buf.last(), Some(b'\n' | b'\r')) {
                            buf.pop();
                        }
                        Input::Line(String::from_utf8_lossy(&buf).into_owned())
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    // An unreadable stdin ends the input like Ctrl-D does.
                    Err(_) => Input::Eof,
                };
                let last = input == Input::Eof;
                if tx.blocking_send(input).is_err() || last {
                    return;
                }
            }
        })?;
    Ok(rx)
}

/// Output with a notion of lines: streamed text continues the current line, every other line
/// starts on a fresh one, and a prompt stays on the line the person types on.
pub struct Screen<W: Write> {
    out: W,
    at_line_start: bool,
    prompt_visible: bool,
}

impl<W: Write> Screen<W> {
    pub fn new(out: W) -> Self {
        Self {
            out,
            at_line_start: true,
            prompt_visible: false,
        }
    }

    pub fn put(&mut self, piece: &Out) -> io::Result<()> {
        match piece {
            Out::Inline(text) => self.inline(text),
            Out::Line(text) => self.line(text),
        }
    }

    /// Text that continues the current line (it may contain newlines itself).
    pub fn inline(&mut self, text: &str) -> io::Result<()> {
        let text = printable(text);
        if text.is_empty() {
            return Ok(());
        }
        if self.prompt_visible {
            self.newline()?;
        }
        self.out.write_all(text.as_bytes())?;
        self.at_line_start = text.ends_with('\n');
        self.prompt_visible = false;
        self.out.flush()
    }

    /// A whole line of its own.
    pub fn line(&mut self, text: &str) -> io::Result<()> {
        if !self.at_line_start {
            self.newline()?;
        }
        writeln!(self.out, "{}", printable(text))?;
        self.at_line_start = true;
        self.prompt_visible = false;
        self.out.flush()
    }

    /// A prompt or question, left open for the answer.
    pub fn prompt(&mut self, text: &str) -> io::Result<()> {
        if !self.at_line_start {
            self.newline()?;
        }
        self.out.write_all(printable(text).as_bytes())?;
        self.at_line_start = false;
        self.prompt_visible = true;
        self.out.flush()
    }

    pub fn prompt_visible(&self) -> bool {
        self.prompt_visible
    }

    /// The person pressed Enter: the terminal moved the cursor to a new line by itself.
    pub fn typed(&mut self) {
        self.at_line_start = true;
        self.prompt_visible = false;
    }

    /// Leaves the cursor at the start of a line, for whatever runs after us in the terminal.
    pub fn finish(&mut self) -> io::Result<()> {
        if !self.at_line_start {
            self.newline()?;
        }
        self.out.flush()
    }

    fn newline(&mut self) -> io::Result<()> {
        self.out.write_all(b"\n")?;
        self.at_line_start = true;
        self.prompt_visible = false;
        Ok(())
    }

    #[cfg(test)]
    pub fn into_inner(self) -> W {
        self.out
    }
}

/// What the server sent, without the control characters a terminal would act on (escape
/// sequences, carriage returns, backspaces): a model's or a tool's text must not be able to
/// move the cursor, rewrite lines or retitle the window. Newlines and tabs stay.
fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    let keep = |c: char| c == '\n' || c == '\t' || !c.is_control();
    if text.chars().all(keep) {
        return std::borrow::Cow::Borrowed(text);
    }
    std::borrow::Cow::Owned(text.chars().filter(|&c| keep(c)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r1_2_control_characters_from_the_server_never_reach_the_terminal() -> io::Result<()> {
        let mut s = Screen::new(Vec::new());
        s.inline("a\u{1b}]0;pwned\u{7}b\rc\u{8}\td\n")?;
        s.line("[tool] x\u{1b}[2J\u{9b}y")?;
        let out = String::from_utf8(s.into_inner()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(out, "a]0;pwnedbc\td\n[tool] x[2Jy\n");
        Ok(())
    }

    #[test]
    fn r1_2_lines_never_run_into_streamed_text_or_the_prompt() -> io::Result<()> {
        let mut s = Screen::new(Vec::new());
        s.prompt("you> ")?;
        s.inline("Hel")?;
        s.inline("lo")?;
        s.line("[completed]")?;
        s.prompt("you> ")?;
        s.finish()?;
        let out = String::from_utf8(s.into_inner()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(out, "you> \nHello\n[completed]\nyou> \n");
        Ok(())
    }

    #[test]
    fn r1_2_after_enter_the_answer_starts_on_the_next_line_without_a_blank_one() {
        let mut s = Screen::new(Vec::new());
        s.prompt("you> ").unwrap_or_else(|e| panic!("{e}"));
        s.typed();
        s.inline("answer").unwrap_or_else(|e| panic!("{e}"));
        let out = String::from_utf8(s.into_inner()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(out, "you> answer");
    }
}

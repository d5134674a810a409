//! turnkey's own instruction echoed back (SPEC R7.2, R8.5): a model asked to continue a cut-off
//! answer sometimes repeats the request first. That echo is not the model's answer: it is
//! dropped from the text the call returns and, before it reaches a client, from the stream.
use std::sync::Mutex;

/// `text` without a leading echo of `instruction` (leading whitespace and the whitespace after
/// the echo go with it); `text` itself when it does not start with the instruction.
pub fn strip<'a>(text: &'a str, instruction: &str) -> &'a str {
    match text.trim_start().strip_prefix(instruction) {
        Some(rest) => rest.trim_start(),
        None => text,
    }
}

/// A stream filter for one call: holds streamed text back while it could still be the start of
/// an echo of `instruction`, drops a whole echo, and passes everything else on unchanged.
pub struct EchoFilter<'a> {
    instruction: Option<&'a str>,
    state: Mutex<Pending>,
}

#[derive(Default)]
struct Pending {
    held: String,
    decided: bool,
}

impl<'a> EchoFilter<'a> {
    /// A filter dropping an echo of `instruction`; `None` passes everything at once.
    pub fn new(instruction: Option<&'a str>) -> Self {
        Self {
            instruction,
            state: Mutex::new(Pending::default()),
        }
    }

    /// What of `fragment` may go to clients now (possibly nothing yet).
    pub fn pass(&self, fragment: &str) -> Option<String> {
        let Some(instruction) = self.instruction else {
            return Some(fragment.to_owned()).filter(|t| !t.is_empty());
        };
        let Ok(mut p) = self.state.lock() else {
            return Some(fragment.to_owned());
        };
        if p.decided {
            return Some(fragment.to_owned()).filter(|t| !t.is_empty());
        }
        p.held.push_str(fragment);
        let start = p.held.trim_start();
        if let Some(rest) = start.strip_prefix(instruction) {
            let rest = rest.trim_start();
            if rest.is_empty() {
                // The echo is whole; what follows may still open with whitespace.
                return None;
            }
            let rest = rest.to_owned();
            p.decided = true;
            p.held.clear();
            return Some(rest);
        }
        if start.is_empty() || instruction.starts_with(start) {
            return None;
        }
        p.decided = true;
        Some(std::mem::take(&mut p.held))
    }

    /// The stream ended: text still held back that turned out not to be a whole echo.
    pub fn finish(&self) -> Option<String> {
        let mut p = self.state.lock().ok()?;
        let held = std::mem::take(&mut p.held);
        p.decided = true;
        let instruction = self.instruction?;
        Some(strip(&held, instruction).to_owned()).filter(|t| !t.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ASK: &str = "Continue exactly where it stopped.";

    fn through(filter: &EchoFilter<'_>, fragments: &[&str]) -> String {
        let mut out: String = fragments.iter().filter_map(|f| filter.pass(f)).collect();
        out.extend(filter.finish());
        out
    }

    #[test]
    fn a_leading_echo_is_stripped_and_other_text_kept() {
        assert_eq!(
            strip("Continue exactly where it stopped.\n\nand so on", ASK),
            "and so on"
        );
        assert_eq!(strip("  Continue exactly where it stopped.", ASK), "");
        assert_eq!(strip("and so on", ASK), "and so on");
        assert_eq!(
            strip(" and so on", ASK),
            " and so on",
            "whitespace of real text stays"
        );
        assert_eq!(
            strip("I will Continue exactly where it stopped.", ASK),
            "I will Continue exactly where it stopped."
        );
    }

    #[test]
    fn an_echo_split_over_fragments_never_reaches_the_stream() {
        let f = EchoFilter::new(Some(ASK));
        assert_eq!(f.pass("Continue exa"), None);
        assert_eq!(f.pass("ctly where it stopped."), None);
        assert_eq!(f.pass("\n\n"), None);
        assert_eq!(f.pass("and so on"), Some("and so on".into()));
        assert_eq!(f.pass(", more"), Some(", more".into()));
        assert_eq!(f.finish(), None);
    }

    #[test]
    fn text_that_only_starts_like_the_echo_is_passed_whole() {
        let f = EchoFilter::new(Some(ASK));
        assert_eq!(f.pass("Cont"), None);
        assert_eq!(f.pass("inents drift."), Some("Continents drift.".into()));
        assert_eq!(
            through(&EchoFilter::new(Some(ASK)), &[" and", " so on"]),
            " and so on"
        );
        assert_eq!(
            through(&EchoFilter::new(Some(ASK)), &["Continue"]),
            "Continue",
            "a stream that ends inside a possible echo keeps it"
        );
        assert_eq!(
            through(
                &EchoFilter::new(Some(ASK)),
                &["Continue exactly where it stopped."]
            ),
            ""
        );
    }

    #[test]
    fn without_an_instruction_everything_passes() {
        let f = EchoFilter::new(None);
        assert_eq!(
            f.pass("Continue exactly where it stopped."),
            Some(ASK.into())
        );
        assert_eq!(f.finish(), None);
    }
}

//! Tests of `echo`: echoes dropped, whole or by sentences, from text and stream alike; a
//! prefill sent back dropped; parts joined at word boundaries.
use super::*;

const ASK: &str = "Continue exactly where it stopped.";
const CONTINUE: &str = "Your previous response was cut off by the output limit. Continue \
     exactly where it stopped, without repeating anything already written.";

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
fn r7_2_an_echo_of_the_instructions_first_sentences_is_stripped_too() {
    assert_eq!(
        strip(
            "Your previous response was cut off by the output limit.\n\nThe rest.",
            CONTINUE
        ),
        "The rest."
    );
    assert_eq!(
        strip(
            "Your previous response was cut off by the output limit.",
            CONTINUE
        ),
        "",
        "a reply that only repeats a sentence of it is no answer"
    );
    assert_eq!(
        strip("Your previous response was short.", CONTINUE),
        "Your previous response was short.",
        "only whole sentences of the instruction are an echo"
    );
    assert_eq!(strip("Your previous", CONTINUE), "Your previous");
}

#[test]
fn an_echo_split_over_fragments_never_reaches_the_stream() {
    let ask = Follow::instruction(ASK);
    let f = EchoFilter::new(Some(&ask));
    assert_eq!(f.pass("Continue exa"), None);
    assert_eq!(f.pass("ctly where it stopped."), None);
    assert_eq!(f.pass("\n\n"), None);
    assert_eq!(f.pass("and so on"), Some("and so on".into()));
    assert_eq!(f.pass(", more"), Some(", more".into()));
    assert_eq!(f.finish(), None);
}

#[test]
fn text_that_only_starts_like_the_echo_is_passed_whole() {
    let ask = Follow::instruction(ASK);
    let f = EchoFilter::new(Some(&ask));
    assert_eq!(f.pass("Cont"), None);
    assert_eq!(f.pass("inents drift."), Some("Continents drift.".into()));
    assert_eq!(
        through(&EchoFilter::new(Some(&ask)), &[" and", " so on"]),
        " and so on"
    );
    assert_eq!(
        through(&EchoFilter::new(Some(&ask)), &["Continue"]),
        "Continue",
        "a stream that ends inside a possible echo keeps it"
    );
    assert_eq!(
        through(
            &EchoFilter::new(Some(&ask)),
            &["Continue exactly where it stopped."]
        ),
        ""
    );
}

#[test]
fn without_a_follow_up_everything_passes() {
    let f = EchoFilter::new(None);
    assert_eq!(
        f.pass("Continue exactly where it stopped."),
        Some(ASK.into())
    );
    assert_eq!(f.finish(), None);
}

#[test]
fn r10_2_a_continuation_after_an_instruction_joins_at_a_word_boundary() {
    let cases = [
        ("I was impressed", "The end.", "I was impressed The end."),
        ("It ended.", "Then more.", "It ended. Then more."),
        ("It ended. ", "Then more.", "It ended. Then more."),
        ("a list:\n", "\n- one", "a list:\n- one"),
        ("almost", ", but not", "almost, but not"),
        ("a (note", "here)", "a (note here)"),
    ];
    for (before, reply, joined) in cases {
        let follow = Follow::continuing(CONTINUE, before);
        assert_eq!(format!("{before}{}", follow.take(reply)), joined);
        // The stream shows the same, in any fragments.
        let (a, b) = reply.split_at(reply.len() / 2);
        let streamed = through(&EchoFilter::new(Some(&follow)), &[a, b]);
        assert_eq!(format!("{before}{streamed}"), joined, "{reply:?}");
        let echoed = format!("{CONTINUE}\n\n{reply}");
        let streamed = through(
            &EchoFilter::new(Some(&follow)),
            &[&echoed[..30], &echoed[30..]],
        );
        assert_eq!(
            format!("{before}{streamed}"),
            joined,
            "echoed first: {reply:?}"
        );
    }
}

#[test]
fn r10_2_a_prefilled_continuation_keeps_its_spacing_and_loses_a_copy_of_the_prefill() {
    let before = "Once upon a time, ";
    let follow = Follow::prefilled(before);
    // The server continues after the prefill as sent ("Once upon a time,").
    assert_eq!(follow.take(" there was a fox."), "there was a fox.");
    let follow_word = Follow::prefilled("The quick bro");
    assert_eq!(follow_word.take("wn fox"), "wn fox", "inside a word");
    // A server that answers with the prefill and the new text (llama.cpp, not streamed).
    assert_eq!(
        follow.take("Once upon a time, there was a fox."),
        "there was a fox."
    );
    let streamed = through(
        &EchoFilter::new(Some(&follow)),
        &["Once upon", " a time,", " there", " was a fox."],
    );
    assert_eq!(
        format!("{before}{streamed}"),
        "Once upon a time, there was a fox."
    );
    let streamed = through(&EchoFilter::new(Some(&follow)), &[" ", " there was"]);
    assert_eq!(format!("{before}{streamed}"), "Once upon a time, there was");
    assert_eq!(
        through(&EchoFilter::new(Some(&follow)), &["Once upon a time,"]),
        ""
    );
}

//! Following a session's events: `GET /v1/sessions/{id}/events?since=SEQ` as Server-Sent
//! Events, read from reqwest's streaming body by a small frame parser, handed on in seq order
//! exactly once. A dropped stream is reopened with backoff from the last seq handed on, so a
//! reconnect repaints nothing that was shown and skips nothing that was not.
use super::api::{describe, CallError, Client};
use rand::Rng;
use serde::Deserialize;
use serde_json::Value;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// The server sends a keepalive comment after 15 s without events; three missed ones mean the
/// connection is dead even if no error says so (a peer that vanished without closing).
const IDLE_LIMIT: Duration = Duration::from_secs(45);
const BACKOFF_FIRST: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// How long a stream must have stayed open for the backoff to start again from the first step.
const HEALTHY_AFTER: Duration = Duration::from_secs(10);
/// How long the follower keeps trying while the server does not answer before it gives up.
pub const GIVE_UP_AFTER: Duration = Duration::from_secs(300);
/// A frame larger than this is not an event of this API; the stream is reopened.
const MAX_FRAME_BYTES: usize = 8 * 1024 * 1024;

/// One event as the API sends it (docs/api.md "Events"); `kind` stays a string so that kinds
/// of later versions pass through.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct ChatEvent {
    pub seq: i64,
    pub kind: String,
    #[serde(default)]
    pub turn_id: Option<String>,
    #[serde(default)]
    pub admission_id: Option<String>,
    #[serde(default)]
    pub data: Value,
}

/// What the follower tells the conversation.
#[derive(Debug)]
pub enum Feed {
    /// The next event, never one already handed on.
    Event(ChatEvent),
    /// The stream broke (or could not be opened); the follower is reconnecting.
    Lost(String),
    /// The stream is open again after a `Lost`.
    Back,
    /// Something the person should see that is not an event (a frame that could not be read).
    Notice(String),
    /// The follower stopped for good: the token was refused, the session is gone, or the server
    /// stayed unreachable for `GIVE_UP_AFTER`.
    Fatal(String),
}

/// One SSE frame: the `id`, `event` and (joined) `data` fields up to a blank line.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Frame {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: String,
}

/// Splits a byte stream into frames; chunks may end anywhere, also inside a UTF-8 character.
/// Lines end in `\n` or `\r\n`; comments (`: keepalive`) and unknown fields are skipped.
#[derive(Debug, Default)]
pub struct Parser {
    buf: Vec<u8>,
    frame: Frame,
    /// A field of the frame being read was seen (a blank line then ends a frame).
    has_field: bool,
    /// A `data` line of it was seen (the next one is joined with a newline).
    has_data: bool,
}

impl Parser {
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<Frame>, String> {
        self.buf.extend_from_slice(chunk);
        let mut frames = Vec::new();
        while let Some(end) = self.buf.iter().position(|&b| b == b'\n') {
            let mut line: Vec<u8> = self.buf.drain(..=end).collect();
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            if let Some(frame) = self.line(&String::from_utf8_lossy(&line)) {
                frames.push(frame);
            }
        }
        if self.buf.len() + self.frame.data.len() > MAX_FRAME_BYTES {
            return Err(format!("an event frame over {MAX_FRAME_BYTES} bytes"));
        }
        Ok(frames)
    }

    fn line(&mut self, line: &str) -> Option<Frame> {
        if line.is_empty() {
            let done = std::mem::take(&mut self.frame);
            self.has_data = false;
            return std::mem::take(&mut self.has_field).then_some(done);
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "data" => {
                if self.has_data {
                    self.frame.data.push('\n');
                }
                self.frame.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.frame.event = Some(value.to_owned()),
            "id" => self.frame.id = Some(value.to_owned()),
            _ => return None,
        }
        self.has_field = true;
        None
    }
}

/// The receiving side went away: the conversation ended.
struct Closed;

/// Follows `session` from `since` until the conversation drops its receiver or the follower
/// gives up (then it sends `Feed::Fatal`).
pub async fn follow(client: Client, session: String, since: i64, tx: mpsc::Sender<Feed>) {
    let mut last = since;
    let mut delay = BACKOFF_FIRST;
    let mut failing_since: Option<Instant> = None;
    let mut lost = false;
    loop {
        let why = match client.open_events(&session, last).await {
            Ok(resp) => {
                if lost && tx.send(Feed::Back).await.is_err() {
                    return;
                }
                lost = false;
                // The server answers: giving up is for a server that does not.
                failing_since = None;
                let opened = Instant::now();
                let before = last;
                let why = match pump(resp, &mut last, &tx).await {
                    Ok(why) => why,
                    Err(Closed) => return,
                };
                // Only a stream that carried events or lasted restarts the backoff: one that a
                // stopping server ends at once must not be reopened four times a second.
                if last > before || opened.elapsed() >= HEALTHY_AFTER {
                    delay = BACKOFF_FIRST;
                }
                why
            }
            Err(
                e @ CallError::Status {
                    status: 401 | 403 | 404,
                    ..
                },
            ) => {
                // Fatal send: the receiver may be gone already, which ends us too.
                drop(tx.send(Feed::Fatal(refusal(&e))).await);
                return;
            }
            Err(e) => e.to_string(),
        };
        let first_failure = *failing_since.get_or_insert_with(Instant::now);
        if first_failure.elapsed() >= GIVE_UP_AFTER {
            drop(
                tx.send(Feed::Fatal(format!(
                    "lost the event stream for {} s: {why}",
                    GIVE_UP_AFTER.as_secs()
                )))
                .await,
            );
            return;
        }
        if !lost {
            lost = true;
            if tx.send(Feed::Lost(why)).await.is_err() {
                return;
            }
        }
        tokio::time::sleep(jitter(delay)).await;
        delay = (delay * 2).min(BACKOFF_MAX);
    }
}

fn refusal(e: &CallError) -> String {
    match e.status() {
        Some(401) => format!("the server refused the token while following events ({e})"),
        Some(404) => format!("the session is gone or not yours ({e})"),
        _ => format!("cannot follow the session's events ({e})"),
    }
}

/// Between three quarters and five quarters of `d`, so clients cut off together do not all
/// come back in the same instant.
fn jitter(d: Duration) -> Duration {
    d.mul_f64(rand::thread_rng().gen_range(0.75..1.25))
}

/// Reads one open stream to its end; returns why it ended. Events at or below `last` (already
/// handed on) are skipped.
async fn pump(
    mut resp: reqwest::Response,
    last: &mut i64,
    tx: &mpsc::Sender<Feed>,
) -> Result<String, Closed> {
    let mut parser = Parser::default();
    loop {
        let chunk = match tokio::time::timeout(IDLE_LIMIT, resp.chunk()).await {
            Err(_) => return Ok(format!("nothing heard for {} s", IDLE_LIMIT.as_secs())),
            Ok(Err(e)) => {
                return Ok(format!(
                    "the connection broke ({})",
                    describe(&e.without_url())
                ))
            }
            Ok(Ok(None)) => return Ok("the server closed the stream".to_owned()),
            Ok(Ok(Some(chunk))) => chunk,
        };
        let frames = match parser.push(&chunk) {
            Ok(frames) => frames,
            Err(why) => return Ok(why),
        };
        for frame in frames {
            if frame.data.is_empty() {
                continue;
            }
            match serde_json::from_str::<ChatEvent>(&frame.data) {
                Ok(ev) if ev.seq <= *last => {}
                Ok(ev) => {
                    *last = ev.seq;
                    tx.send(Feed::Event(ev)).await.map_err(|_| Closed)?;
                }
                Err(e) => {
                    // Skipping is all a client can do with a frame it cannot read; say so.
                    if let Some(seq) = frame.id.as_deref().and_then(|id| id.parse::<i64>().ok()) {
                        *last = (*last).max(seq);
                    }
                    let what = frame.event.unwrap_or_else(|| "event".to_owned());
                    tx.send(Feed::Notice(format!("skipped an unreadable {what}: {e}")))
                        .await
                        .map_err(|_| Closed)?;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(chunks: &[&[u8]]) -> Vec<Frame> {
        let mut p = Parser::default();
        chunks
            .iter()
            .flat_map(|c| p.push(c).unwrap_or_else(|e| panic!("{e}")))
            .collect()
    }

    #[test]
    fn r1_2_frames_split_anywhere_are_joined() {
        let whole: &[u8] =
            b": keepalive\n\nid: 7\nevent: message.delta\ndata: {\"seq\":7,\"t\":\"h\xc3\xa9\"}\n\n";
        let expected = vec![Frame {
            id: Some("7".into()),
            event: Some("message.delta".into()),
            data: "{\"seq\":7,\"t\":\"h\u{e9}\"}".into(),
        }];
        assert_eq!(frames(&[whole]), expected);
        for cut in 1..whole.len() {
            let (a, b) = whole.split_at(cut);
            assert_eq!(frames(&[a, b]), expected, "cut at {cut}");
        }
    }

    #[test]
    fn r1_2_crlf_multiline_data_and_comments() {
        let got = frames(&[b"data: a\r\ndata: b\r\n\r\n: ping\n\nid:3\ndata:\ndata:x\n\n"]);
        assert_eq!(
            got,
            vec![
                Frame {
                    id: None,
                    event: None,
                    data: "a\nb".into()
                },
                Frame {
                    id: Some("3".into()),
                    event: None,
                    data: "\nx".into()
                },
            ]
        );
    }

    #[test]
    fn r1_2_an_endless_line_is_refused() {
        let mut p = Parser::default();
        let big = vec![b'a'; MAX_FRAME_BYTES + 1];
        assert!(p.push(&big).is_err());
    }

    #[test]
    fn r1_2_events_keep_unknown_kinds() {
        let ev: ChatEvent = serde_json::from_str(
            r#"{"session_id":"s","seq":4,"kind":"session.rotated","created_at":"t","data":{}}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ev.kind, "session.rotated");
        assert_eq!(ev.admission_id, None);
    }
}

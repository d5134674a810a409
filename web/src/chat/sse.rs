//! Following a session's events: `GET /v1/sessions/{id}/events?since=SEQ` as Server-Sent
//! Events, read from reqwest's streaming body with `eventsource-stream` (the parser the
//! providers use too), handed on in seq order exactly once. A dropped stream is reopened with backoff from the last seq handed on, so a
//! reconnect repaints nothing that was shown and skips nothing that was not.
use super::api::{lost_words, CallError, Client};
use bytes::Bytes;
use eventsource_stream::{EventStreamError, Eventsource};
use futures::{Stream, StreamExt};
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

/// Why the byte stream under the event parser ended.
#[derive(Debug)]
struct Ended(String);

/// The body's chunks, ending with why: nothing heard for `IDLE_LIMIT` (the server's keepalive
/// comments count: the parser would swallow them), a broken connection, or more than
/// `MAX_FRAME_BYTES` without a blank line (no event of this API is that large).
fn chunks(resp: reqwest::Response) -> impl Stream<Item = Result<Bytes, Ended>> {
    futures::stream::unfold(Some((resp, 0usize)), |state| async move {
        let (mut resp, mut open) = state?;
        let end = |why: String| Some((Err(Ended(why)), None));
        match tokio::time::timeout(IDLE_LIMIT, resp.chunk()).await {
            Err(_) => end(format!("nothing heard for {} s", IDLE_LIMIT.as_secs())),
            Ok(Err(e)) => end(lost_words(&e).to_owned()),
            Ok(Ok(None)) => end("the server closed the connection".to_owned()),
            Ok(Ok(Some(chunk))) => match still_open(open, &chunk) {
                Ok(n) => {
                    open = n;
                    Some((Ok(chunk), Some((resp, open))))
                }
                Err(why) => end(why),
            },
        }
    })
}

/// The bytes of a frame still open after `chunk` (`open` before it): none once a blank line in
/// the chunk ends one; an error past `MAX_FRAME_BYTES`.
fn still_open(open: usize, chunk: &[u8]) -> Result<usize, String> {
    let ends_frame =
        chunk.windows(2).any(|w| w == b"\n\n") || chunk.windows(4).any(|w| w == b"\r\n\r\n");
    let open = if ends_frame { 0 } else { open + chunk.len() };
    match open > MAX_FRAME_BYTES {
        true => Err(format!("an event frame over {MAX_FRAME_BYTES} bytes")),
        false => Ok(open),
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
    resp: reqwest::Response,
    last: &mut i64,
    tx: &mpsc::Sender<Feed>,
) -> Result<String, Closed> {
    let events = chunks(resp).eventsource();
    futures::pin_mut!(events);
    loop {
        let frame = match events.next().await {
            None => return Ok("the server closed the connection".to_owned()),
            Some(Err(EventStreamError::Transport(Ended(why)))) => return Ok(why),
            Some(Err(EventStreamError::Utf8(e))) => return Ok(format!("not UTF-8: {e}")),
            Some(Err(EventStreamError::Parser(e))) => return Ok(format!("not SSE: {e}")),
            Some(Ok(frame)) => frame,
        };
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
                if let Ok(seq) = frame.id.parse::<i64>() {
                    *last = (*last).max(seq);
                }
                tx.send(Feed::Notice(format!(
                    "skipped an unreadable {}: {e}",
                    frame.event
                )))
                .await
                .map_err(|_| Closed)?;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The events of `chunks` as (id, event, data), read the way `pump` reads a body.
    async fn frames(chunks: &[&[u8]]) -> Vec<(String, String, String)> {
        let body: Vec<Result<Vec<u8>, std::convert::Infallible>> =
            chunks.iter().map(|c| Ok(c.to_vec())).collect();
        futures::stream::iter(body)
            .eventsource()
            .map(|e| {
                let e = e.unwrap_or_else(|e| panic!("{e}"));
                (e.id, e.event, e.data)
            })
            .collect()
            .await
    }

    fn frame(id: &str, event: &str, data: &str) -> (String, String, String) {
        (id.into(), event.into(), data.into())
    }

    #[tokio::test]
    async fn r1_2_frames_split_anywhere_are_joined() {
        let whole: &[u8] =
            b": keepalive\n\nid: 7\nevent: message.delta\ndata: {\"seq\":7,\"t\":\"h\xc3\xa9\"}\n\n";
        let expected = vec![frame("7", "message.delta", "{\"seq\":7,\"t\":\"h\u{e9}\"}")];
        assert_eq!(frames(&[whole]).await, expected);
        for cut in 1..whole.len() {
            let (a, b) = whole.split_at(cut);
            assert_eq!(frames(&[a, b]).await, expected, "cut at {cut}");
        }
    }

    #[tokio::test]
    async fn r1_2_crlf_multiline_data_and_comments() {
        let got = frames(&[b"data: a\r\ndata: b\r\n\r\n: ping\n\nid:3\ndata:\ndata:x\n\n"]).await;
        assert_eq!(
            got,
            vec![frame("", "message", "a\nb"), frame("3", "message", "\nx")]
        );
    }

    #[test]
    fn r1_2_an_endless_line_is_refused() {
        let big = vec![b'a'; MAX_FRAME_BYTES + 1];
        assert!(still_open(0, &big).is_err());
        assert!(still_open(MAX_FRAME_BYTES, b"x").is_err());
        assert_eq!(still_open(MAX_FRAME_BYTES, b"}\n\n"), Ok(0));
        assert_eq!(still_open(10, b"data: x"), Ok(17));
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

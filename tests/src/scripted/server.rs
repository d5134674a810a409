//! The scripted provider's HTTP side: the actix server on its own thread, request dispatch
//! and recording, and the task that writes each reply (timed SSE frames, hangs, errors).
use crate::scripted::{InFlight, RecordedRequest, Reply, Shared, Step};
use crate::scripted_wire::{self as wire, Usage, Wire};
use actix_web::{dev::ServerHandle, web, App, HttpRequest, HttpResponse, HttpServer};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

/// Longest a `Hang` reply stays silent when nobody releases it; keeps every test bounded.
const MAX_HANG: Duration = Duration::from_secs(300);

pub(crate) type Started = Result<(std::net::SocketAddr, ServerHandle), String>;

pub(crate) fn serve(shared: Arc<Shared>, port: u16, started: std::sync::mpsc::Sender<Started>) {
    let system = actix_rt::System::new();
    system.block_on(async move {
        let data = web::Data::from(shared);
        let server = HttpServer::new(move || {
            App::new()
                .app_data(data.clone())
                .app_data(web::PayloadConfig::new(64 << 20))
                .default_service(web::to(dispatch))
        })
        .on_connect(remember_peer)
        // Stream chunks leave at once; Nagle would add ~40 ms per turn to every measurement.
        .tcp_nodelay(true)
        .workers(2)
        .disable_signals()
        .shutdown_timeout(1)
        .bind(("127.0.0.1", port));
        let server = match server {
            Ok(s) => s,
            Err(e) => {
                // The receiver waits for exactly this message; if it is gone there is no one to tell.
                drop(started.send(Err(e.to_string())));
                return;
            }
        };
        let addr = server.addrs()[0];
        let running = server.run();
        if started.send(Ok((addr, running.handle()))).is_err() {
            return;
        }
        if let Err(e) = running.await {
            eprintln!("scripted provider stopped with an error: {e}");
        }
    });
}

/// A second handle on a connection's socket, to notice a client that went away while a reply
/// is silent (actix only notices on the next write).
#[derive(Clone)]
struct PeerSocket(Arc<std::net::TcpStream>);

impl PeerSocket {
    fn closed(&self) -> bool {
        let mut probe = [0u8; 1];
        match self.0.peek(&mut probe) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
        }
    }
}

fn remember_peer(conn: &dyn std::any::Any, ext: &mut actix_web::dev::Extensions) {
    use std::os::fd::AsFd;
    let Some(tcp) = conn.downcast_ref::<actix_web::rt::net::TcpStream>() else {
        return;
    };
    let Ok(fd) = tcp.as_fd().try_clone_to_owned() else {
        return;
    };
    let socket = std::net::TcpStream::from(fd);
    if socket.set_nonblocking(true).is_ok() {
        ext.insert(PeerSocket(Arc::new(socket)));
    }
}

async fn dispatch(req: HttpRequest, body: web::Bytes, shared: web::Data<Shared>) -> HttpResponse {
    let path = req.path().to_string();
    let (only_v1, answer) = {
        let script = shared.lock();
        let answer = script
            .answers
            .iter()
            .find(|(p, _)| *p == path)
            .map(|(_, b)| b.clone());
        (script.only_under_v1, answer)
    };
    if let Some(body) = answer {
        shared.lock().other_requests.push(path.clone());
        return HttpResponse::Ok().json(body);
    }
    if only_v1 && !path.starts_with("/v1/") {
        shared.lock().other_requests.push(path.clone());
        return HttpResponse::NotFound().body("404 page not found");
    }
    let wire = if path.ends_with("/chat/completions") {
        Wire::OpenAi
    } else if path.ends_with("/messages") {
        Wire::Anthropic
    } else {
        shared.lock().other_requests.push(path.clone());
        if path.ends_with("/audio/transcriptions") {
            let mut script = shared.lock();
            script
                .transcriptions
                .push(String::from_utf8_lossy(&body).into_owned());
            let text = script
                .transcript
                .clone()
                .unwrap_or_else(|| "scripted transcript".into());
            return HttpResponse::Ok().json(json!({ "text": text }));
        }
        return if path.ends_with("/models") {
            HttpResponse::Ok().json(json!({"object": "list", "data": [
                {"id": "scripted-model", "object": "model", "created": 0, "owned_by": "scripted"}
            ]}))
        } else {
            HttpResponse::NotFound().json(json!({"error": {"message": "no such path",
                "type": "not_found", "code": "not_found"}}))
        };
    };
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let last_user_text = wire::last_user_text(&body);
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let include_usage = body
        .pointer("/stream_options/include_usage")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let after_tool = wire::ends_with_tool_result(&body);
    let reply = shared.next_reply(&last_user_text, after_tool);
    let headers = req
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
        .collect();
    let index = {
        let mut script = shared.lock();
        let (body, headers) = if script.forget_bodies {
            (Value::Null, Vec::new())
        } else {
            (body.clone(), headers)
        };
        script.records.push(RecordedRequest {
            path,
            wire,
            body,
            headers,
            last_user_text,
            stream,
            reply: reply.kind(),
            received_at: Instant::now(),
            finished_at: None,
            delivered_text: String::new(),
        });
        script.records.len() - 1
    };
    let flight = InFlight {
        shared: shared.clone().into_inner(),
        index,
    };
    let answer = Answer {
        wire,
        stream,
        include_usage,
        body,
        flight,
        peer: req.conn_data::<PeerSocket>().cloned(),
    };
    answer.respond(reply).await
}

/// One request being answered.
struct Answer {
    wire: Wire,
    stream: bool,
    include_usage: bool,
    body: Value,
    flight: InFlight,
    peer: Option<PeerSocket>,
}

impl Answer {
    async fn respond(self, reply: Reply) -> HttpResponse {
        match reply {
            Reply::Text {
                chunks,
                chunk_delay,
            } => {
                if self.stream {
                    self.stream_text(chunks, chunk_delay)
                } else {
                    let text = chunks.concat();
                    tokio::time::sleep(chunk_delay * chunks.len() as u32).await;
                    let usage = Usage::estimate(&self.body, &text);
                    self.flight.finish();
                    HttpResponse::Ok().json(wire::full_body(self.wire, Some(&text), &[], usage))
                }
            }
            Reply::ToolCalls(calls) => self.tool_calls(None, calls),
            Reply::TextThenToolCalls(text, calls) => self.tool_calls(Some(text), calls),
            Reply::Error {
                status,
                body,
                retry_after,
            } => {
                let code = actix_web::http::StatusCode::from_u16(status)
                    .unwrap_or(actix_web::http::StatusCode::INTERNAL_SERVER_ERROR);
                let mut builder = HttpResponse::build(code);
                if let Some(secs) = retry_after {
                    builder.insert_header(("Retry-After", secs.to_string()));
                }
                self.flight.finish();
                builder.json(body)
            }
            Reply::Overflow => {
                self.flight.finish();
                HttpResponse::BadRequest().json(wire::overflow_body(self.wire))
            }
            Reply::Malformed(bytes) => {
                self.flight.finish();
                let content_type = if self.stream {
                    "text/event-stream"
                } else {
                    "application/json"
                };
                HttpResponse::Ok().content_type(content_type).body(bytes)
            }
            Reply::Hang => self.hang(),
            // `Shared::next_reply`, which knows the request, makes it a `Text` first.
            Reply::EchoThen(then) => {
                let usage = Usage::estimate(&self.body, &then);
                self.flight.finish();
                HttpResponse::Ok().json(wire::full_body(self.wire, Some(&then), &[], usage))
            }
            Reply::Steps(steps) => self.steps(steps),
        }
    }

    fn tool_calls(self, text: Option<String>, calls: Vec<wire::Call>) -> HttpResponse {
        let said = text.clone().unwrap_or_default() + &json!(calls).to_string();
        let usage = Usage::estimate(&self.body, &said);
        if !self.stream {
            self.flight.finish();
            return HttpResponse::Ok().json(wire::full_body(
                self.wire,
                text.as_deref(),
                &calls,
                usage,
            ));
        }
        let mut frames = wire::stream_head(self.wire, usage);
        if let Some(text) = &text {
            frames.extend(wire::text_block_start(self.wire));
            frames.push(wire::text_delta(self.wire, text));
            frames.extend(wire::text_block_stop(self.wire));
        }
        frames.extend(wire::tool_call_frames(
            self.wire,
            &calls,
            usize::from(text.is_some()),
        ));
        frames.extend(wire::stream_tail(
            self.wire,
            true,
            self.include_usage,
            usage,
        ));
        let timed = frames.into_iter().map(|f| (Duration::ZERO, f)).collect();
        sse(timed, self.flight)
    }

    fn stream_text(self, chunks: Vec<String>, delay: Duration) -> HttpResponse {
        let text = chunks.concat();
        let usage = Usage::estimate(&self.body, &text);
        let immediate = |frames: Vec<String>| frames.into_iter().map(|f| (Duration::ZERO, f));
        let mut timed: Vec<(Duration, String)> = Vec::new();
        timed.extend(immediate(wire::stream_head(self.wire, usage)));
        timed.extend(immediate(wire::text_block_start(self.wire)));
        timed.extend(
            chunks
                .iter()
                .map(|c| (delay, wire::text_delta(self.wire, c))),
        );
        timed.extend(immediate(wire::text_block_stop(self.wire)));
        timed.extend(immediate(wire::stream_tail(
            self.wire,
            false,
            self.include_usage,
            usage,
        )));
        sse(timed, self.flight)
    }

    /// The content type of an answer sent piece by piece: SSE when streaming was asked.
    fn content_type(&self) -> &'static str {
        if self.stream {
            "text/event-stream"
        } else {
            "application/json"
        }
    }

    /// Headers now, then nothing until released (then a short normal answer) or the client leaves.
    fn hang(self) -> HttpResponse {
        let (tx, rx) = mpsc::channel::<Result<web::Bytes, std::io::Error>>(16);
        let mut released = self.flight.shared.hang_release.subscribe();
        let content_type = self.content_type();
        tokio::spawn(async move {
            let flight = self.flight;
            if !gate(&mut released, &tx, self.peer.as_ref()).await {
                return; // the client is gone; dropping `flight` records the end
            }
            let text = "released";
            let usage = Usage::estimate(&self.body, text);
            let frames = if self.stream {
                let mut f = wire::stream_head(self.wire, usage);
                f.extend(wire::text_block_start(self.wire));
                f.push(wire::text_delta(self.wire, text));
                f.extend(wire::text_block_stop(self.wire));
                f.extend(wire::stream_tail(
                    self.wire,
                    false,
                    self.include_usage,
                    usage,
                ));
                f
            } else {
                vec![wire::full_body(self.wire, Some(text), &[], usage).to_string()]
            };
            send_frames(
                &tx,
                frames.into_iter().map(|f| (Duration::ZERO, f)),
                &flight,
            )
            .await;
        });
        HttpResponse::Ok()
            .content_type(content_type)
            .streaming(tokio_stream::wrappers::ReceiverStream::new(rx))
    }

    /// Text in steps: the head now, each chunk after its delay, silence at each gate until the
    /// next release (or the client leaves), then the normal end. A non-streamed request gets
    /// the whole text once every gate has opened.
    fn steps(self, steps: Vec<Step>) -> HttpResponse {
        let (tx, rx) = mpsc::channel::<Result<web::Bytes, std::io::Error>>(16);
        let mut released = self.flight.shared.hang_release.subscribe();
        let content_type = self.content_type();
        tokio::spawn(async move {
            let flight = self.flight;
            let text: String = steps
                .iter()
                .filter_map(|s| match s {
                    Step::Text(t, _) => Some(t.as_str()),
                    Step::Gate | Step::Ping(_) => None,
                })
                .collect();
            let usage = Usage::estimate(&self.body, &text);
            if self.stream {
                let mut head = wire::stream_head(self.wire, usage);
                head.extend(wire::text_block_start(self.wire));
                for frame in head {
                    if tx.send(Ok(web::Bytes::from(frame))).await.is_err() {
                        return;
                    }
                }
            }
            for step in steps {
                match step {
                    Step::Gate => {
                        if !gate(&mut released, &tx, self.peer.as_ref()).await {
                            return;
                        }
                    }
                    Step::Ping(delay) => {
                        tokio::time::sleep(delay).await;
                        let comment = web::Bytes::from_static(b": keep-alive\n\n");
                        if self.stream && tx.send(Ok(comment)).await.is_err() {
                            return;
                        }
                    }
                    Step::Text(chunk, delay) => {
                        tokio::time::sleep(delay).await;
                        if self.stream {
                            let frame = wire::text_delta(self.wire, &chunk);
                            if tx.send(Ok(web::Bytes::from(frame))).await.is_err() {
                                return;
                            }
                            taken(&tx).await;
                            flight.delivered(&chunk);
                        }
                    }
                }
            }
            let tail = if self.stream {
                let mut f = wire::text_block_stop(self.wire);
                f.extend(wire::stream_tail(
                    self.wire,
                    false,
                    self.include_usage,
                    usage,
                ));
                f
            } else {
                vec![wire::full_body(self.wire, Some(&text), &[], usage).to_string()]
            };
            send_frames(&tx, tail.into_iter().map(|f| (Duration::ZERO, f)), &flight).await;
        });
        HttpResponse::Ok()
            .content_type(content_type)
            .streaming(tokio_stream::wrappers::ReceiverStream::new(rx))
    }
}

/// Silence until the next `release_hangs()` (or `MAX_HANG`): true then, false when the client
/// went away first.
async fn gate(
    released: &mut watch::Receiver<u64>,
    tx: &mpsc::Sender<Result<web::Bytes, std::io::Error>>,
    peer: Option<&PeerSocket>,
) -> bool {
    let deadline = tokio::time::Instant::now() + MAX_HANG;
    loop {
        tokio::select! {
            _ = released.changed() => return true,
            _ = tx.closed() => return false,
            _ = tokio::time::sleep_until(deadline) => return true,
            _ = tokio::time::sleep(Duration::from_millis(50)) => {
                if peer.is_some_and(PeerSocket::closed) {
                    return false;
                }
            }
        }
    }
}

/// Waits (bounded) until the HTTP server has taken every frame sent so far out of `tx`, so
/// that a test told a chunk was delivered can rely on it being on its way to the socket.
async fn taken(tx: &mpsc::Sender<Result<web::Bytes, std::io::Error>>) {
    for _ in 0..400 {
        if tx.capacity() == tx.max_capacity() || tx.is_closed() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A streaming 200 whose frames are produced by a task, each after its delay.
fn sse(frames: Vec<(Duration, String)>, flight: InFlight) -> HttpResponse {
    let (tx, rx) = mpsc::channel::<Result<web::Bytes, std::io::Error>>(16);
    tokio::spawn(async move {
        send_frames(&tx, frames.into_iter(), &flight).await;
    });
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("Cache-Control", "no-cache"))
        .streaming(tokio_stream::wrappers::ReceiverStream::new(rx))
}

/// Sends frames in order; the request counts as finished just before the last frame goes out,
/// so a client reacting to the end can never be seen overlapping this request.
async fn send_frames(
    tx: &mpsc::Sender<Result<web::Bytes, std::io::Error>>,
    frames: impl ExactSizeIterator<Item = (Duration, String)>,
    flight: &InFlight,
) {
    let last = frames.len().saturating_sub(1);
    for (i, (delay, frame)) in frames.enumerate() {
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        if i == last {
            flight.finish();
        }
        if tx.send(Ok(web::Bytes::from(frame))).await.is_err() {
            return; // the client went away; `flight` records the end when dropped
        }
    }
}

//! The fake's HTTP server: an actix system on its own thread that routes every request to the
//! platform the fake plays, answers scripted faults first, and records each call with what it
//! answered.
use super::{FakeCall, FakeKind, Fault, Outcome, Shared};
use actix_web::{dev::ServerHandle, web, App, HttpRequest, HttpResponse, HttpServer};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest a held request waits when nobody releases it; keeps every test bounded.
const MAX_HOLD: Duration = Duration::from_secs(120);

type Started = Result<(std::net::SocketAddr, ServerHandle), String>;

pub(super) fn serve(shared: Arc<Shared>, started: std::sync::mpsc::Sender<Started>) {
    let system = actix_rt::System::new();
    system.block_on(async move {
        let data = web::Data::from(shared);
        let server = HttpServer::new(move || {
            App::new()
                .app_data(data.clone())
                .app_data(web::PayloadConfig::new(8 << 20))
                .default_service(web::to(dispatch))
        })
        .workers(2)
        .disable_signals()
        .shutdown_timeout(1)
        .bind(("127.0.0.1", 0));
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
            eprintln!("fake platform stopped with an error: {e}");
        }
    });
}

/// A file download (Telegram `/file/bot<token>/<path>`, Slack `/files/<id>` with the bot token
/// as bearer), recorded as a call of method `file`; `None` for any other path.
fn download(req: &HttpRequest, shared: &Shared) -> Option<HttpResponse> {
    let path = req.path();
    let (authorized, id) = match shared.kind {
        FakeKind::Telegram => {
            let rest = path.strip_prefix("/file/bot")?;
            let (token, file_path) = rest.split_once('/')?;
            let id = file_path.rsplit('/').next().unwrap_or_default();
            (token == shared.secret, id.to_owned())
        }
        FakeKind::Slack => {
            let id = path.strip_prefix("/files/")?;
            let bearer = req
                .headers()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "));
            (bearer == Some(shared.secret.as_str()), id.to_owned())
        }
        FakeKind::Webhook => return None,
    };
    let mut state = shared.lock();
    let found = state.files.get(&id).cloned();
    let status = match (&found, authorized) {
        (_, false) => 401,
        (None, true) => 404,
        (Some(_), true) => 200,
    };
    state.calls.push(FakeCall {
        method: "file".into(),
        body: json!({ "id": id }),
        headers: Vec::new(),
        at: Instant::now(),
        status,
        ok: status == 200,
        message_id: None,
        error: None,
    });
    Some(match (found, status) {
        (Some(bytes), 200) => HttpResponse::Ok()
            .content_type("application/octet-stream")
            .body(bytes),
        _ => HttpResponse::build(
            actix_web::http::StatusCode::from_u16(status)
                .unwrap_or(actix_web::http::StatusCode::NOT_FOUND),
        )
        .finish(),
    })
}

async fn dispatch(req: HttpRequest, raw: web::Bytes, shared: web::Data<Shared>) -> HttpResponse {
    if let Some(served) = download(&req, &shared) {
        return served;
    }
    let path = req.path().to_owned();
    let method = match shared.kind {
        FakeKind::Telegram => path
            .strip_prefix("/bot")
            .and_then(|rest| rest.split_once('/'))
            .map(|(_, m)| m.to_owned()),
        FakeKind::Slack => path.strip_prefix("/api/").map(str::to_owned),
        FakeKind::Webhook => (path == "/reply").then(|| "reply".to_owned()),
    };
    let Some(method) = method else {
        return HttpResponse::NotFound().json(json!({"ok": false, "error": "no such path"}));
    };
    let body: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    let headers: Vec<(String, String)> = req
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_owned()))
        .collect();
    let (index, fault) = {
        let mut state = shared.lock();
        let fault = state.faults.get_mut(&method).and_then(VecDeque::pop_front);
        state.calls.push(FakeCall {
            method: method.clone(),
            body: body.clone(),
            headers,
            at: Instant::now(),
            status: 0,
            ok: false,
            message_id: None,
            error: None,
        });
        (state.calls.len() - 1, fault)
    };
    let outcome = match fault {
        Some(Fault::Hold) => {
            let mut rx = shared.release.subscribe();
            // Bounded: nobody releasing must not hang a test forever.
            if tokio::time::timeout(MAX_HOLD, rx.changed()).await.is_err() {
                eprintln!("fake platform: a held `{method}` call was never released");
            }
            answer(&shared, &req, &method, &raw, &body)
        }
        Some(Fault::RateLimit(secs)) => rate_limited(shared.kind, secs),
        Some(Fault::ParseError) => Outcome::telegram_error(
            400,
            "Bad Request: can't parse entities: Can't find end tag corresponding to start tag \
             \"b\""
                .into(),
        ),
        Some(Fault::Status(status, body)) => Outcome {
            status,
            error: Some(body.to_string()),
            body,
            retry_after: None,
            ok: false,
            message_id: None,
        },
        None => answer(&shared, &req, &method, &raw, &body),
    };
    {
        let mut state = shared.lock();
        if let Some(call) = state.calls.get_mut(index) {
            call.status = outcome.status;
            call.ok = outcome.ok;
            call.message_id = outcome.message_id.clone();
            call.error = outcome.error.clone();
        }
    }
    let status = actix_web::http::StatusCode::from_u16(outcome.status)
        .unwrap_or(actix_web::http::StatusCode::INTERNAL_SERVER_ERROR);
    let mut builder = HttpResponse::build(status);
    if let Some(secs) = outcome.retry_after {
        builder.insert_header(("Retry-After", secs.to_string()));
    }
    builder.json(outcome.body)
}

fn rate_limited(kind: FakeKind, secs: u64) -> Outcome {
    let body = match kind {
        FakeKind::Telegram => json!({
            "ok": false, "error_code": 429,
            "description": format!("Too Many Requests: retry after {secs}"),
            "parameters": {"retry_after": secs},
        }),
        FakeKind::Slack => json!({"ok": false, "error": "ratelimited"}),
        FakeKind::Webhook => json!({"error": "rate limited"}),
    };
    Outcome {
        status: 429,
        body,
        retry_after: Some(secs),
        ok: false,
        message_id: None,
        error: Some("rate limited".into()),
    }
}

fn answer(shared: &Shared, req: &HttpRequest, method: &str, raw: &[u8], body: &Value) -> Outcome {
    match shared.kind {
        FakeKind::Telegram => super::telegram::answer(shared, req, method, body),
        FakeKind::Slack => super::slack::answer(shared, req, method, body),
        FakeKind::Webhook => super::webhook::answer(shared, req, raw, body),
    }
}

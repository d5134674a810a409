//! A response made from its turn's durable events. The same events, read in seq order, always
//! give the same stream events with the same `sequence_number`s, so a stream read again after
//! `starting_after=N` (a dropped connection, a restart, another replica) continues with no
//! delta repeated or missing, and `GET /v1/responses/{id}` is the end of the same replay.
//!
//! Items: text the model streamed opens a `message` item, `message.complete` closes it with the
//! answer; a tool the agent ran is an `mcp_call` item (its full output read from the
//! transcript); an approval the turn waits for is an `mcp_approval_request` item. A turn cut by
//! a crash and resumed by itself (SPEC R13.9) closes the cut text's item as `incomplete` and
//! answers again in a new item.
use super::wire::{self, ResponseObject};
use crate::routes::openai::turn::carried_by;
use serde_json::{json, Value};
use turnkey_storage::{AdmissionId, Event, EventKind, Store, StoreError, TurnId};

/// Builds one response from its events.
pub struct Replay {
    pub object: ResponseObject,
    /// The admission whose turn answers: the response's own, or the one whose turn carried it.
    admission: AdmissionId,
    turn: Option<TurnId>,
    /// The next `sequence_number`.
    next: u64,
    /// The open `message` item: its output index and the text streamed into it.
    open: Option<(usize, String)>,
    /// `mcp_call` items by call id: their output index.
    tools: Vec<(String, usize)>,
    ended: bool,
}

impl Replay {
    pub fn new(object: ResponseObject, admission: AdmissionId) -> Self {
        Self {
            object,
            admission,
            turn: None,
            next: 0,
            open: None,
            tools: Vec::new(),
            ended: false,
        }
    }

    /// The response has its final status.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// The `sequence_number` of the last event made so far.
    pub fn last_sequence(&self) -> Option<u64> {
        self.next.checked_sub(1)
    }

    /// The stream events `ev` adds (each with its `sequence_number`).
    pub async fn take(&mut self, ev: &Event, store: &Store) -> Result<Vec<Value>, StoreError> {
        let mut out = Vec::new();
        self.apply(ev, store, &mut out).await?;
        for e in &mut out {
            e["sequence_number"] = json!(self.next);
            self.next += 1;
        }
        Ok(out)
    }

    fn ours(&self, ev: &Event) -> bool {
        self.turn.is_some() && ev.turn_id == self.turn
    }

    fn own(&self, ev: &Event) -> bool {
        ev.admission_id == Some(self.admission)
    }

    async fn apply(
        &mut self,
        ev: &Event,
        store: &Store,
        out: &mut Vec<Value>,
    ) -> Result<(), StoreError> {
        if self.ended {
            return Ok(());
        }
        match ev.kind {
            EventKind::AdmissionQueued if self.own(ev) && self.next == 0 => {
                out.push(self.whole("response.created"));
            }
            EventKind::AdmissionCarried if self.own(ev) => {
                // Another admission's turn carries this input: its answer is ours.
                if let Some((carrier, turn)) = carried_by(ev) {
                    self.admission = carrier;
                    self.turn = Some(turn);
                    self.in_progress(out);
                }
            }
            EventKind::TurnStarted if self.own(ev) => {
                self.turn = ev.turn_id;
                self.in_progress(out);
            }
            EventKind::AdmissionCancelled if self.own(ev) => {
                self.close_open("incomplete", out);
                self.object.status = "cancelled";
                self.finish("response.failed", out);
            }
            EventKind::MessageDelta if self.ours(ev) => {
                if let Some(t) = ev.data["text"].as_str().filter(|t| !t.is_empty()) {
                    self.delta(t, out);
                }
            }
            EventKind::ToolStarted if self.ours(ev) => {
                self.close_open("completed", out);
                let call_id = text(&ev.data, "call_id");
                let args = arguments(&ev.data["args"]);
                self.tool_item(&call_id, &text(&ev.data, "name"), &args, out);
            }
            EventKind::ToolCompleted if self.ours(ev) => {
                self.close_open("completed", out);
                self.tool_done(ev, store, out).await?;
            }
            EventKind::ApprovalRequested if self.ours(ev) => {
                self.close_open("completed", out);
                let item = wire::approval_request(
                    &text(&ev.data, "approval_id"),
                    &text(&ev.data, "name"),
                    &arguments(&ev.data["args"]),
                );
                self.add_done(item, out);
            }
            EventKind::TurnResumed if self.ours(ev) => {
                // The cut attempt's text is superseded: its item ends incomplete and the
                // resumed attempt answers in a new one.
                self.close_open("incomplete", out);
            }
            EventKind::MessageComplete if self.ours(ev) => {
                if let Some(t) = ev.data["text"].as_str() {
                    self.answer(t, out);
                }
            }
            EventKind::TurnFinished if self.ours(ev) => self.turn_finished(&ev.data, out),
            EventKind::TurnUnknown if self.own(ev) || self.ours(ev) => {
                self.close_open("incomplete", out);
                self.object.status = "failed";
                self.object.error = Some(json!({
                    "code": ev.data["reason"].as_str().unwrap_or("unknown"),
                    "message": ev.data["failure_message"].as_str().unwrap_or(
                        "the process running this response stopped; it may be resumed or \
                         retried (POST /v1/admissions/{id}/retry)"),
                }));
                self.finish("response.failed", out);
            }
            _ => {}
        }
        Ok(())
    }

    /// The event `kind` carrying the whole response as it is now.
    fn whole(&self, kind: &str) -> Value {
        json!({"type": kind, "response": self.object})
    }

    fn in_progress(&mut self, out: &mut Vec<Value>) {
        if self.object.status == "queued" {
            self.object.status = "in_progress";
            out.push(self.whole("response.in_progress"));
        }
    }

    fn item_id(&self, index: usize) -> String {
        format!(
            "msg_{}_{index}",
            self.admission.to_string().replace('-', "")
        )
    }

    fn delta(&mut self, t: &str, out: &mut Vec<Value>) {
        let index = match &mut self.open {
            Some((index, text)) => {
                text.push_str(t);
                *index
            }
            None => {
                let index = self.object.output.len();
                let id = self.item_id(index);
                let item = wire::message_item(&id, "in_progress", None);
                self.object.output.push(item.clone());
                out.push(json!({"type": "response.output_item.added", "output_index": index, "item": item}));
                out.push(json!({"type": "response.content_part.added", "item_id": id,
                    "output_index": index, "content_index": 0, "part": wire::output_text("")}));
                self.open = Some((index, t.to_owned()));
                index
            }
        };
        out.push(
            json!({"type": "response.output_text.delta", "item_id": self.item_id(index),
            "output_index": index, "content_index": 0, "delta": t, "logprobs": []}),
        );
    }

    /// Closes the open message item with the text streamed into it.
    fn close_open(&mut self, status: &str, out: &mut Vec<Value>) {
        if let Some((index, text)) = self.open.take() {
            self.close(index, &text, status, out);
        }
    }

    fn close(&mut self, index: usize, text: &str, status: &str, out: &mut Vec<Value>) {
        let id = self.item_id(index);
        let item = wire::message_item(&id, status, Some(text));
        self.object.output[index] = item.clone();
        out.push(json!({"type": "response.output_text.done", "item_id": id,
            "output_index": index, "content_index": 0, "text": text, "logprobs": []}));
        out.push(json!({"type": "response.content_part.done", "item_id": id,
            "output_index": index, "content_index": 0, "part": wire::output_text(text)}));
        out.push(json!({"type": "response.output_item.done", "output_index": index, "item": item}));
    }

    /// The answer (`message.complete`): it closes the open item, or makes one when no delta
    /// came (a provider that does not stream). What was streamed and the answer agree; the
    /// answer is what the item keeps.
    fn answer(&mut self, answer: &str, out: &mut Vec<Value>) {
        let index = match self.open.take() {
            Some((index, streamed)) => {
                if let Some(rest) = answer
                    .strip_prefix(streamed.as_str())
                    .filter(|r| !r.is_empty())
                {
                    self.open = Some((index, streamed));
                    self.delta(rest, out);
                    self.open = None;
                }
                index
            }
            None => {
                self.delta(answer, out);
                self.open.take().map_or(0, |(i, _)| i)
            }
        };
        self.close(index, answer, "completed", out);
    }

    fn add_done(&mut self, item: Value, out: &mut Vec<Value>) -> usize {
        let index = self.object.output.len();
        self.object.output.push(item.clone());
        out.push(
            json!({"type": "response.output_item.added", "output_index": index, "item": item}),
        );
        out.push(json!({"type": "response.output_item.done", "output_index": index, "item": item}));
        index
    }

    fn tool_item(&mut self, call_id: &str, name: &str, args: &str, out: &mut Vec<Value>) {
        let index = self.object.output.len();
        let item = wire::mcp_call(call_id, name, args, "in_progress", None, None);
        self.object.output.push(item.clone());
        out.push(
            json!({"type": "response.output_item.added", "output_index": index, "item": item}),
        );
        out.push(
            json!({"type": "response.mcp_call.in_progress", "item_id": item["id"],
            "output_index": index}),
        );
        self.tools.push((call_id.to_owned(), index));
    }

    async fn tool_done(
        &mut self,
        ev: &Event,
        store: &Store,
        out: &mut Vec<Value>,
    ) -> Result<(), StoreError> {
        let call_id = text(&ev.data, "call_id");
        let name = text(&ev.data, "name");
        let turn = self.turn.unwrap_or_default();
        let run = store.get_tool_run(turn, &call_id).await?;
        let args = run.as_ref().map_or_else(String::new, |r| r.args.clone());
        if !self.tools.iter().any(|(c, _)| *c == call_id) {
            self.tool_item(&call_id, &name, &args, out);
        }
        let index = self
            .tools
            .iter()
            .find(|(c, _)| *c == call_id)
            .map_or(0, |(_, i)| *i);
        let result = store.tool_result(ev.session_id, turn, &call_id).await?;
        let status = text(&ev.data, "status");
        let (item, kind) = if status == "ok" {
            let item = wire::mcp_call(&call_id, &name, &args, "completed", result.as_deref(), None);
            (item, "response.mcp_call.completed")
        } else {
            let error = result.unwrap_or_else(|| text(&ev.data, "preview"));
            let item = wire::mcp_call(&call_id, &name, &args, "failed", None, Some(&error));
            (item, "response.mcp_call.failed")
        };
        self.object.output[index] = item.clone();
        out.push(json!({"type": kind, "item_id": item["id"], "output_index": index}));
        out.push(json!({"type": "response.output_item.done", "output_index": index, "item": item}));
        Ok(())
    }

    fn turn_finished(&mut self, d: &Value, out: &mut Vec<Value>) {
        self.close_open("incomplete", out);
        let u = &d["usage"];
        let n = |k: &str| u[k].as_u64().unwrap_or(0);
        self.object.usage = Some(wire::usage(
            n("input_tokens"),
            n("output_tokens"),
            n("cache_read_tokens"),
        ));
        let result = d["result"].as_str().unwrap_or("failed");
        let truncated = d["stop_reason"].as_str() == Some("truncated");
        let kind = match result {
            "completed" if truncated && self.object.max_output_tokens.is_some() => {
                self.object.status = "incomplete";
                self.object.incomplete_details = Some(json!({"reason": "max_output_tokens"}));
                "response.incomplete"
            }
            "completed" => {
                self.object.status = "completed";
                "response.completed"
            }
            "interrupted" => {
                self.object.status = "cancelled";
                "response.failed"
            }
            _ => {
                self.object.status = "failed";
                self.object.error = Some(json!({
                    "code": d["failure_reason"].as_str().unwrap_or("failed"),
                    "message": d["failure_message"].as_str().unwrap_or("the turn failed"),
                }));
                "response.failed"
            }
        };
        self.finish(kind, out);
    }

    fn finish(&mut self, kind: &str, out: &mut Vec<Value>) {
        self.ended = true;
        out.push(self.whole(kind));
    }
}

fn text(v: &Value, key: &str) -> String {
    v[key].as_str().unwrap_or_default().to_owned()
}

/// Tool arguments as OpenAI sends them: a JSON string.
fn arguments(args: &Value) -> String {
    match args {
        Value::String(s) => s.clone(),
        Value::Null => "{}".into(),
        other => other.to_string(),
    }
}

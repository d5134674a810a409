//! A user row's attachments on the wire (SPEC R2.2, R8.1; only the wire copy changes, the
//! transcript keeps the references): an image is an image part for a provider that sees
//! images and a note naming it otherwise; a text file within `tools.inline_text_bytes` is
//! shown whole after the note naming its workspace path (issue 38); any other file is named
//! by its path. The bytes are read from the store (immutable rows, so the wire copy is the same
//! on every call and the prompt cache holds) once a turn, into the turn's context.
use super::context::TurnContext;
use crate::attachments::text::{self, Shown};
use crate::deps::Models;
use std::collections::HashMap;
use turnkey_providers::ChatMessage;
use turnkey_storage::{Message, MessageRole};

/// The most images one request shows the model: the latest; earlier ones are named.
pub const MAX_IMAGES_PER_REQUEST: usize = 8;

/// `msg` (the wire copy of user row `m`) with `m`'s attachments: image parts or notes.
pub fn with_attachments(
    mut msg: ChatMessage,
    m: &Message,
    ctx: &TurnContext,
    vision: bool,
) -> ChatMessage {
    let Some(list) = m.attachments.as_ref().and_then(|a| a.as_array()) else {
        return msg;
    };
    let mut notes = Vec::new();
    for a in list {
        let name = a["name"].as_str().unwrap_or("file");
        let content_type = a["content_type"]
            .as_str()
            .unwrap_or("application/octet-stream");
        let bytes = a["bytes"].as_u64().unwrap_or(0);
        let kb = bytes.div_ceil(1024);
        if crate::attachments::is_image(content_type) {
            let shown = a["file_id"].as_str().and_then(|id| ctx.images.get(id));
            match shown {
                Some(image) if vision => msg.images.push(image.clone()),
                _ if vision => notes.push(format!("[image attached earlier: {name}]")),
                _ => notes.push(format!(
                    "[image attached: {name} ({content_type}, {kb} KB); this model cannot see images]"
                )),
            }
        } else {
            let path = a["path"].as_str().unwrap_or(name);
            let read = a["file_id"].as_str().and_then(|id| ctx.texts.read.get(id));
            let over = ctx.texts.bound.is_some_and(|b| bytes > b);
            let shown = match read {
                Some(t) => Shown::Text(t),
                None if text::is_text_type(content_type) && over => Shown::TooLong,
                None => Shown::Named,
            };
            notes.push(text::note(name, content_type, bytes, path, shown));
        }
    }
    if !notes.is_empty() {
        let text = msg.content.take().unwrap_or_default();
        let notes = notes.join("\n");
        msg.content = Some(if text.trim().is_empty() {
            notes
        } else {
            format!("{text}\n\n{notes}")
        });
    }
    msg
}

/// Reads what the live rows' attachments show the model, once a turn: the text of every text
/// file within `tools.inline_text_bytes` into `ctx.texts`, and, for a provider that sees images
/// (`vision`), the bytes of the latest images (at most [`MAX_IMAGES_PER_REQUEST`]) into
/// `ctx.images`. A read that fails leaves the file to be named instead.
pub async fn load(models: Models<'_>, ctx: &mut TurnContext, vision: bool) {
    let bound = u64::try_from(models.config.tools.inline_text_bytes).unwrap_or(u64::MAX);
    load_texts(models, ctx, bound).await;
    if vision {
        load_images(models, ctx).await;
    }
}

async fn load_texts(models: Models<'_>, ctx: &mut TurnContext, bound: u64) {
    ctx.texts.bound = Some(bound);
    let wanted: Vec<String> = ctx
        .live_rows()
        .iter()
        .filter(|m| m.role == MessageRole::User)
        .filter_map(|m| m.attachments.as_ref().and_then(|a| a.as_array()))
        .flatten()
        .filter(|a| a["content_type"].as_str().is_some_and(text::is_text_type))
        .filter(|a| a["bytes"].as_u64().is_some_and(|b| b <= bound))
        .filter_map(|a| a["file_id"].as_str().map(str::to_owned))
        .collect();
    ctx.texts.read.retain(|id, _| wanted.contains(id));
    let missing: Vec<String> = wanted
        .into_iter()
        .filter(|id| !ctx.texts.read.contains_key(id))
        .collect();
    if missing.is_empty() {
        return;
    }
    match models.store.file_bytes(&missing).await {
        Ok(found) => {
            for (id, bytes) in found {
                // Not text after all (a type sniffed long ago, bytes that are not plain):
                // named, never shown.
                if let Some(t) = text::readable(&bytes) {
                    ctx.texts.read.insert(id, t.to_owned());
                }
            }
        }
        Err(e) => {
            tracing::warn!(turn = %ctx.turn_id, error = %e, "attached text files not read; they are named instead")
        }
    }
}

async fn load_images(models: Models<'_>, ctx: &mut TurnContext) {
    // (file id, its type as sniffed when it was stored), newest first.
    let wanted: HashMap<String, String> = ctx
        .live_rows()
        .iter()
        .rev()
        .filter(|m| m.role == MessageRole::User)
        .filter_map(|m| m.attachments.as_ref().and_then(|a| a.as_array()))
        .flat_map(|l| l.iter().rev())
        .filter_map(|a| Some((a["file_id"].as_str()?, a["content_type"].as_str()?)))
        .filter(|(_, t)| crate::attachments::is_image(t))
        .take(MAX_IMAGES_PER_REQUEST)
        .map(|(id, t)| (id.to_owned(), t.to_owned()))
        .collect();
    let missing: Vec<String> = wanted
        .keys()
        .filter(|id| !ctx.images.contains_key(*id))
        .cloned()
        .collect();
    if missing.is_empty() {
        ctx.images.retain(|id, _| wanted.contains_key(id));
        return;
    }
    match models.store.file_bytes(&missing).await {
        Ok(found) => {
            use base64::Engine;
            for (id, bytes) in found {
                let Some(media_type) = wanted.get(&id) else {
                    continue;
                };
                let fitted = crate::attachments::fit::fit_file(&id, bytes, media_type).await;
                if fitted.bytes.is_empty() {
                    continue;
                }
                let base64 = base64::engine::general_purpose::STANDARD.encode(&fitted.bytes);
                let media_type = fitted.media_type.clone();
                ctx.images
                    .insert(id, turnkey_providers::Image { media_type, base64 });
            }
        }
        Err(e) => {
            tracing::warn!(turn = %ctx.turn_id, error = %e, "attached images not read; they are named instead")
        }
    }
    ctx.images.retain(|id, _| wanted.contains_key(id));
}

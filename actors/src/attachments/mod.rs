//! Attachments (SPEC R2.2, R8.1; API.md "Attachments"). At admission a submission's
//! `attachments` — `{file_id}` of an uploaded file, or `{url: "data:…;base64,…"}` inline — are
//! normalized into references to `files` rows (`{file_id, name, content_type, bytes}`): an
//! inline file is stored first (bounded by `max_upload_bytes`, its type sniffed from its
//! bytes), someone else's `file_id` is refused, and a file that is not an image is also saved
//! into the principal's workspace (`uploads/`) so that tools can read it (`path`). The
//! admission and its user row keep the references, never the bytes.
//!
//! On the wire (`turn::attached`), a user row's images become image parts for a provider that
//! sees images, and a note naming the file for one that does not; a text file within
//! `tools.inline_text_bytes` is shown whole after the note naming its workspace path (`text`);
//! other files are named by their path. Only the wire copy changes: the transcript keeps the
//! attachment. An image too large for providers is scaled down for the wire (`fit`).
pub mod fit;
pub mod text;

use crate::config::RuntimeConfig;
use crate::error::GatewayError;
use base64::Engine;
use serde_json::{json, Value};
use std::path::Path;
use turnkey_storage::{Store, StoredFile};

/// Where a principal's attached files are saved, inside their workspace.
pub const UPLOADS_DIR: &str = "uploads";

/// What `bytes` are, from their first bytes (never from the client): an image, audio, a
/// document or archive `infer` knows, UTF-8 text, or `application/octet-stream`.
pub fn sniff(bytes: &[u8]) -> &'static str {
    if let Some(kind) = infer::get(bytes) {
        return kind.mime_type();
    }
    if std::str::from_utf8(bytes).is_ok() {
        return "text/plain";
    }
    "application/octet-stream"
}

/// Whether a provider's image part can carry this type.
pub fn is_image(content_type: &str) -> bool {
    matches!(
        content_type,
        "image/png" | "image/jpeg" | "image/gif" | "image/webp"
    )
}

/// A file name fit to show and to save: its last path component, without control
/// characters, at most 120 characters; `fallback` when nothing is left.
pub fn clean_name(name: &str, fallback: &str) -> String {
    let last = name.rsplit(['/', '\\']).next().unwrap_or_default();
    let cleaned: String = last.chars().filter(|c| !c.is_control()).take(120).collect();
    let cleaned = cleaned.trim().trim_start_matches('.').trim().to_owned();
    if cleaned.is_empty() {
        fallback.to_owned()
    } else {
        cleaned
    }
}

/// A name for a file that came without one, from its type.
pub fn default_name(content_type: &str) -> String {
    let ext = match content_type {
        "image/png" => "png",
        "image/jpeg" => "jpg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        "application/pdf" => "pdf",
        "text/plain" => "txt",
        _ => "bin",
    };
    format!("attachment.{ext}")
}

/// 413 `too_large` for a file of `len` bytes over `max`.
pub fn too_large(what: &str, len: usize, max: usize) -> GatewayError {
    GatewayError::TooLarge(format!(
        "{what} is {len} bytes; the limit is {max} (server.max_upload_bytes)"
    ))
}

fn invalid(i: usize, message: impl std::fmt::Display) -> GatewayError {
    GatewayError::InvalidInput {
        code: "invalid_attachment",
        message: format!("attachments[{i}]: {message}"),
    }
}

/// The bytes and declared type of a `data:` URL (base64 only).
pub(crate) fn decode_data_url(url: &str, i: usize) -> Result<Vec<u8>, GatewayError> {
    let rest = url.strip_prefix("data:").ok_or_else(|| {
        invalid(
            i,
            "`url` must be a data: URL (upload other files to /v1/files)",
        )
    })?;
    let (meta, data) = rest
        .split_once(',')
        .ok_or_else(|| invalid(i, "a data: URL needs a comma before its data"))?;
    if !meta.ends_with(";base64") {
        return Err(invalid(
            i,
            "a data: URL must be base64 (`data:<type>;base64,<data>`)",
        ));
    }
    base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|e| invalid(i, format!("the data: URL is not valid base64 ({e})")))
}

/// Normalizes `list` (a submission's `attachments`) for `principal` into file references,
/// storing inline files and saving non-images into `principal`'s workspace. Refuses an
/// unknown or foreign `file_id` (400 `unknown_file`), a malformed entry (400
/// `invalid_attachment`) and an inline file over the limit (413 `too_large`).
pub async fn normalize(
    store: &Store,
    config: &RuntimeConfig,
    workspace_root: &Path,
    principal: &str,
    list: &[Value],
) -> Result<Vec<Value>, GatewayError> {
    let max = config.files.max_upload_bytes;
    let mut files: Vec<StoredFile> = Vec::with_capacity(list.len());
    for (i, a) in list.iter().enumerate() {
        let name = a.get("name").and_then(Value::as_str);
        if let Some(id) = a.get("file_id").and_then(Value::as_str) {
            let found = store.files_of(principal, &[id.to_owned()]).await?;
            let file = found
                .into_iter()
                .next()
                .ok_or_else(|| GatewayError::InvalidInput {
                    code: "unknown_file",
                    message: format!("attachments[{i}]: there is no file {id} of yours"),
                })?;
            files.push(file);
        } else if let Some(url) = a.get("url").and_then(Value::as_str) {
            let bytes = decode_data_url(url, i)?;
            if bytes.len() > max {
                return Err(too_large(&format!("attachments[{i}]"), bytes.len(), max));
            }
            if bytes.is_empty() {
                return Err(invalid(i, "the file is empty"));
            }
            let content_type = sniff(&bytes);
            let name = clean_name(name.unwrap_or_default(), &default_name(content_type));
            files.push(
                store
                    .put_file(principal, &name, content_type, &bytes)
                    .await?,
            );
        } else {
            return Err(invalid(
                i,
                "give `file_id` (an uploaded file) or `url` (a data: URL)",
            ));
        }
    }
    let mut out = Vec::with_capacity(files.len());
    for f in files {
        let mut r = json!({
            "file_id": f.id,
            "name": f.name,
            "content_type": f.content_type,
            "bytes": f.bytes,
        });
        if !is_image(&f.content_type) {
            r["path"] =
                json!(save_into_workspace(store, config, workspace_root, principal, &f).await?);
        }
        out.push(r);
    }
    Ok(out)
}

/// Writes `f` into `principal`'s workspace as `uploads/<first 8 of its digest>-<name>` (once);
/// answers that path, relative to the workspace.
async fn save_into_workspace(
    store: &Store,
    config: &RuntimeConfig,
    root: &Path,
    principal: &str,
    f: &StoredFile,
) -> Result<String, GatewayError> {
    let (workspace, _) = config.tools.workspace_of(root, principal);
    let digest: String = f.sha256.chars().take(8).collect();
    let rel = format!("{UPLOADS_DIR}/{digest}-{}", clean_name(&f.name, "file"));
    let path = workspace.join(&rel);
    if tokio::fs::try_exists(&path).await.unwrap_or(false) {
        return Ok(rel);
    }
    let Some((_, bytes)) = store.file_with_data(principal, &f.id).await? else {
        return Err(GatewayError::NotFound(format!("file {}", f.id)));
    };
    let io = |e: std::io::Error| GatewayError::Io(format!("saving {rel}: {e}"));
    tokio::fs::create_dir_all(workspace.join(UPLOADS_DIR))
        .await
        .map_err(io)?;
    // Written aside and renamed: a reader never sees half a file.
    let partial = workspace.join(format!("{rel}.partial"));
    tokio::fs::write(&partial, &bytes).await.map_err(io)?;
    tokio::fs::rename(&partial, &path).await.map_err(io)?;
    Ok(rel)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r2_2_types_are_sniffed_from_the_bytes() {
        assert_eq!(sniff(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"), "image/png");
        assert_eq!(sniff(b"\xff\xd8\xff\xe0\0\x10JFIF"), "image/jpeg");
        assert_eq!(sniff(b"%PDF-1.7\n"), "application/pdf");
        assert_eq!(sniff("plain words, é".as_bytes()), "text/plain");
        assert_eq!(sniff(b"\xff\xfe\x00\x01\xc3"), "application/octet-stream");
    }

    #[test]
    fn r2_2_names_lose_their_path_and_control_characters() {
        assert_eq!(clean_name("../../etc/passwd", "x"), "passwd");
        assert_eq!(clean_name("C:\\Users\\a\\photo.png", "x"), "photo.png");
        assert_eq!(clean_name("a\u{0}b\nc.txt", "x"), "abc.txt");
        assert_eq!(clean_name("..", "x"), "x");
        assert_eq!(clean_name(".hidden", "x"), "hidden");
        assert_eq!(clean_name("", "attachment.png"), "attachment.png");
    }

    #[test]
    fn r2_2_data_urls_must_be_base64() {
        assert_eq!(
            decode_data_url("data:text/plain;base64,aGk=", 0).unwrap(),
            b"hi"
        );
        for bad in [
            "http://x/y.png",
            "data:text/plain,hi",
            "data:;base64",
            "data:;base64,%%%",
        ] {
            assert_eq!(
                decode_data_url(bad, 0).unwrap_err().code(),
                "invalid_attachment",
                "{bad}"
            );
        }
    }
}

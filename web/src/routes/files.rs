//! Files (SPEC R2.2; API.md "Attachments"): `POST /v1/files` stores a file for the caller —
//! the raw body (its name from `?name=`) or a multipart form's `file` field (its filename, unless
//! `?name=`) — and answers its reference; `GET /v1/files/{id}`
//! serves one of the caller's files. The type is sniffed from the bytes, not taken from the
//! client; a body over `server.max_upload_bytes` is 413 `too_large` and nothing is stored.
//! Files live in the database, so every replica serves every file.
use crate::auth::AuthPrincipal;
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;
use actix_multipart::Multipart;
use actix_web::http::header;
use actix_web::{get, post};
use actix_web::{web, HttpRequest, HttpResponse};
use futures::StreamExt;
use serde::Deserialize;
use turnkey_actors::attachments::{clean_name, default_name, sniff, too_large};
use turnkey_storage::StoredFile;
use utoipa::{IntoParams, ToSchema};

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct UploadQuery {
    /// The file's name (its last path component is kept). Default: from its type.
    pub name: Option<String>,
}

/// A stored file.
#[derive(Debug, serde::Serialize, ToSchema)]
pub struct FileView {
    pub file_id: String,
    pub name: String,
    /// Sniffed from the bytes.
    pub content_type: String,
    pub bytes: i64,
    /// Hex SHA-256 of the bytes.
    pub sha256: String,
}

impl From<StoredFile> for FileView {
    fn from(f: StoredFile) -> Self {
        Self {
            file_id: f.id,
            name: f.name,
            content_type: f.content_type,
            bytes: f.bytes,
            sha256: f.sha256,
        }
    }
}

/// Stores the request body as one of the caller's files (the same bytes twice are one file).
#[utoipa::path(
    operation_id = "upload_file",
    tag = "files",
    params(UploadQuery),
    request_body(content = Vec<u8>, description = "The file's bytes as the body, or a `multipart/form-data` form whose field `file` holds them (its filename names the file unless `?name=` does)", content_type = "application/octet-stream"),
    responses(
        (status = 201, description = "Stored", body = FileView),
        (status = 400, description = "`empty_input`; `invalid_body`: a malformed multipart form, or one without a `file` field", body = ErrorBody),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 403, description = "`read_only`", body = ErrorBody),
        (status = 413, description = "`too_large`: over `server.max_upload_bytes`; nothing stored", body = ErrorBody),
        (status = 503, description = "`store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[post("/v1/files")]
pub async fn upload(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    query: web::Query<UploadQuery>,
    req: HttpRequest,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let max = state.gateway.config().files.max_upload_bytes;
    let multipart = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.to_ascii_lowercase().starts_with("multipart/form-data"));
    let (bytes, sent_name) = if multipart {
        file_field(Multipart::new(req.headers(), body), max).await?
    } else {
        (bounded(body, max).await?, None)
    };
    if bytes.is_empty() {
        return Err(ApiError::bad_request("empty_input", "the file is empty"));
    }
    let content_type = sniff(&bytes);
    let name = clean_name(
        query
            .name
            .as_deref()
            .or(sent_name.as_deref())
            .unwrap_or_default(),
        &default_name(content_type),
    );
    let file = state
        .gateway
        .store()
        .put_file(&who.0.id, &name, content_type, &bytes)
        .await?;
    Ok(HttpResponse::Created().json(FileView::from(file)))
}

/// The whole raw body, at most `max` bytes (413 `too_large` past it, read no further).
async fn bounded(
    mut body: impl futures::Stream<Item = Result<web::Bytes, impl std::fmt::Display>> + Unpin,
    max: usize,
) -> Result<web::BytesMut, ApiError> {
    let mut bytes = web::BytesMut::new();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| ApiError::bad_request("invalid_body", e.to_string()))?;
        if bytes.len() + chunk.len() > max {
            return Err(too_large("the file", bytes.len() + chunk.len(), max).into());
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// The multipart form's field `file` (its bytes, at most `max`, and its filename); the other
/// fields are read past. No `file` field: 400 `invalid_body`.
async fn file_field(
    mut form: Multipart,
    max: usize,
) -> Result<(web::BytesMut, Option<String>), ApiError> {
    let bad = |e: actix_multipart::MultipartError| {
        ApiError::bad_request(
            "invalid_body",
            format!("the multipart body is malformed: {e}"),
        )
    };
    let mut found = None;
    while let Some(field) = form.next().await {
        let mut field = field.map_err(bad)?;
        let is_file = field.name() == Some("file");
        if is_file && found.is_none() {
            let name = field
                .content_disposition()
                .and_then(|d| d.get_filename())
                .map(str::to_owned);
            found = Some((bounded(&mut field, max).await?, name));
        } else {
            // Another field is read and dropped, never kept.
            while let Some(chunk) = field.next().await {
                chunk.map_err(bad)?;
            }
        }
    }
    found.ok_or_else(|| {
        ApiError::bad_request("invalid_body", "the multipart body has no field named file")
    })
}

/// One of the caller's files, with the sniffed type; anyone else's is not found.
#[utoipa::path(
    operation_id = "get_file",
    tag = "files",
    params(("file_id" = String, Path, description = "The file's id")),
    responses(
        (status = 200, description = "The file's bytes", content_type = "application/octet-stream"),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 503, description = "`store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[get("/v1/files/{file_id}")]
pub async fn get(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let Some((file, data)) = state.gateway.store().file_with_data(&who.0.id, &id).await? else {
        return Err(ApiError::not_found("file"));
    };
    // Served as an attachment, never rendered in the API's origin: a sniffed HTML or SVG
    // upload cannot run script there.
    let disposition = header::ContentDisposition {
        disposition: header::DispositionType::Attachment,
        parameters: vec![header::DispositionParam::Filename(file.name.clone())],
    };
    Ok(HttpResponse::Ok()
        .content_type(file.content_type.as_str())
        .insert_header(disposition)
        .insert_header(("X-Content-Type-Options", "nosniff"))
        .insert_header(("Cache-Control", "private, max-age=86400, immutable"))
        .body(data))
}

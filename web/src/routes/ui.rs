//! The web UI: `GET /` and `GET /ui/{file}`, files embedded in the binary at compile time from
//! `web/ui/` (nothing from a CDN, so it works offline). The UI is a client of the public `/v1`
//! API like any other; these routes only hand out its files. Each file carries a strong ETag
//! (its SHA-256) and `Cache-Control: no-cache`, so a browser revalidates and gets a 304 until
//! the binary changes. The security middleware gives these paths the UI's strict CSP.
//!
//! The files, no build step and no library: `api.js` (bearer token, error shape, submissions
//! retried under one `Idempotency-Key`), `events.js` (SSE over `fetch()`, reconnecting from
//! the last seq shown), `markdown.js` (Markdown to DOM nodes with `textContent`, never parsed
//! as HTML), `session_state.js` with `turn_state.js` (the pure model of an open session:
//! `applyEvent(state, event)` and the page's own transitions, no DOM, fetch or timer),
//! `session_view.js` and `render.js` (draw a state, comparing it with the last one drawn by
//! identity), `app.js` (sign-in, the session list, routing), and the same split for the Memory,
//! Skills, Models pages and the Work section (`*_state.js` pure, `*_view.js` fetch and draw). The
//! pure files are unit-tested under Node (`web/ui/test/`), from `.ci/run` and from `cargo test`.
use crate::error::{ApiError, ErrorBody};
use actix_web::get;
use actix_web::http::header::{self, EntityTag, Header as _, IfNoneMatch};
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::sync::LazyLock;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

/// One embedded file of the UI.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

macro_rules! asset {
    ($name:literal, $content_type:expr) => {
        Asset {
            name: $name,
            content_type: $content_type,
            body: include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/ui/", $name)),
        }
    };
}

const JS: &str = "text/javascript; charset=utf-8";

/// Every file the UI has; `index.html` is served at `/`. The unit tests in `ui/test/` are not
/// among them: they run under Node, not in the page.
const ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("style.css", "text/css; charset=utf-8"),
    asset!("icon.svg", "image/svg+xml"),
    asset!("app.js", JS),
    asset!("api.js", JS),
    asset!("attach.js", JS),
    asset!("actions.js", JS),
    asset!("events.js", JS),
    asset!("markdown.js", JS),
    asset!("highlight.js", JS),
    asset!("render.js", JS),
    asset!("page.js", JS),
    asset!("session_state.js", JS),
    asset!("turn_state.js", JS),
    asset!("session_view.js", JS),
    asset!("route.js", JS),
    asset!("diff.js", JS),
    asset!("memory_state.js", JS),
    asset!("memory_view.js", JS),
    asset!("skill_text.js", JS),
    asset!("skills_state.js", JS),
    asset!("skills_view.js", JS),
    asset!("models_state.js", JS),
    asset!("models_view.js", JS),
    asset!("work_state.js", JS),
    asset!("work_view.js", JS),
];

/// The ETag of each file, in the order of [`ASSETS`].
static ETAGS: LazyLock<Vec<EntityTag>> = LazyLock::new(|| {
    ASSETS
        .iter()
        .map(|a| EntityTag::new_strong(hex::encode(&Sha256::digest(a.body)[..16])))
        .collect()
});

fn serve(req: &HttpRequest, name: &str) -> Option<HttpResponse> {
    let i = ASSETS.iter().position(|a| a.name == name)?;
    let file = &ASSETS[i];
    let etag = ETAGS.get(i)?.clone();
    let fresh = match IfNoneMatch::parse(req) {
        Ok(IfNoneMatch::Any) => true,
        Ok(IfNoneMatch::Items(tags)) => tags.iter().any(|t| t.weak_eq(&etag)),
        Err(_) => false,
    };
    let mut res = if fresh {
        HttpResponse::NotModified()
    } else {
        HttpResponse::Ok()
    };
    res.insert_header(header::ETag(etag))
        .insert_header((header::CACHE_CONTROL, "no-cache"));
    Some(if fresh {
        res.finish()
    } else {
        res.content_type(file.content_type).body(file.body)
    })
}

/// The name of a file of the UI, for the document: the names of [`ASSETS`].
pub struct UiFileName;

impl PartialSchema for UiFileName {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .enum_values(Some(ASSETS.iter().map(|a| a.name)))
            .description(Some("A file of the web UI"))
            .into()
    }
}

impl ToSchema for UiFileName {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("UiFile")
    }
}

/// `GET /`: the UI's page.
#[utoipa::path(
    operation_id = "ui_page",
    tag = "ui",
    params(("If-None-Match" = Option<String>, Header, description = "An ETag from an earlier answer")),
    responses(
        (status = 200, description = "The web UI's page", body = String, content_type = "text/html; charset=utf-8",
            headers(("ETag" = String, description = "Strong; changes with the binary"), ("Cache-Control" = String, description = "`no-cache`"))),
        (status = 304, description = "Not modified: the `If-None-Match` tag is current"),
    ),
)]
#[get("/")]
pub async fn index(req: HttpRequest) -> HttpResponse {
    serve(&req, "index.html").unwrap_or_else(|| missing(&req))
}

/// `GET /ui/{file}`: one of the UI's files; any other name is 404 `not_found`.
#[utoipa::path(
    operation_id = "ui_file",
    tag = "ui",
    params(
        ("file" = UiFileName, Path, description = "The file's name"),
        ("If-None-Match" = Option<String>, Header, description = "An ETag from an earlier answer"),
    ),
    responses(
        (status = 200, description = "The file, with its own content type", content(
            (String = "text/javascript; charset=utf-8"),
            (String = "text/css; charset=utf-8"),
            (String = "text/html; charset=utf-8"),
            (String = "image/svg+xml"),
        ), headers(("ETag" = String, description = "Strong; changes with the binary"), ("Cache-Control" = String, description = "`no-cache`"))),
        (status = 304, description = "Not modified: the `If-None-Match` tag is current"),
        (status = 404, description = "`not_found`: no such file", body = ErrorBody),
    ),
)]
#[get("/ui/{file}")]
pub async fn asset(req: HttpRequest, file: web::Path<String>) -> HttpResponse {
    serve(&req, &file).unwrap_or_else(|| missing(&req))
}

fn missing(req: &HttpRequest) -> HttpResponse {
    use actix_web::ResponseError;
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("no UI file at {}", crate::error::truncated(req.path(), 128)),
    )
    .error_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_names_every_content_type_the_files_have() {
        let doc = serde_json::to_value(crate::openapi::document()).unwrap_or_default();
        let content = &doc["paths"]["/ui/{file}"]["get"]["responses"]["200"]["content"];
        let documented: std::collections::BTreeSet<&str> = content
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, _)| k.as_str())
            .collect();
        let served: std::collections::BTreeSet<&str> =
            ASSETS.iter().map(|a| a.content_type).collect();
        assert_eq!(documented, served);
    }

    #[test]
    fn every_asset_is_embedded_and_tagged() {
        assert_eq!(ETAGS.len(), ASSETS.len());
        for a in ASSETS {
            assert!(!a.body.is_empty(), "{} is empty", a.name);
        }
        let mut tags: Vec<_> = ETAGS.iter().map(|t| t.tag().to_owned()).collect();
        tags.sort();
        tags.dedup();
        assert_eq!(tags.len(), ASSETS.len(), "every file has its own tag");
    }

    #[test]
    fn every_file_of_the_ui_is_served_and_its_tests_are_not() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("ui");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        on_disk.sort();
        let mut served: Vec<String> = ASSETS.iter().map(|a| a.name.to_owned()).collect();
        served.sort();
        assert_eq!(served, on_disk, "web/ui/ and ASSETS list the same files");
        assert!(
            dir.join("test").is_dir(),
            "the UI's unit tests live in web/ui/test/"
        );
        assert!(ASSETS.iter().all(|a| !a.name.contains('/')));
    }

    #[test]
    fn the_ui_has_no_inline_script_or_style() {
        // The UI's CSP allows only its own files; an inline script or style would not run.
        let page = std::str::from_utf8(ASSETS[0].body).unwrap_or_default();
        for bad in [
            "<script>",
            "style=",
            "<style",
            "onclick=",
            "onload=",
            "javascript:",
        ] {
            assert!(!page.contains(bad), "index.html contains {bad:?}");
        }
        for a in ASSETS.iter().filter(|a| a.name.ends_with(".js")) {
            let text = std::str::from_utf8(a.body).unwrap_or_default();
            for bad in [
                "innerHTML",
                "outerHTML",
                "insertAdjacentHTML",
                "eval(",
                "document.write",
            ] {
                assert!(!text.contains(bad), "{} uses {bad}", a.name);
            }
        }
    }
}

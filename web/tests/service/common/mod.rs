//! Shared set-up for the web crate's tests: settings in a throw-away directory, and the app
//! either in-process (`actix_web::test`) or on a random loopback port.
#![allow(dead_code, clippy::expect_used)]
use actix_web::web;
use std::collections::HashMap;
use tempfile::TempDir;
use turnkey_web::configuration::{load_from, Overrides, Settings};
use turnkey_web::startup::prepare;
use turnkey_web::state::AppState;

pub const OPERATOR: &str = "tk_test_operator";
pub const MAX_BODY: usize = 4096;

pub fn env_for(dir: &TempDir) -> HashMap<String, String> {
    let root = dir.path().display().to_string();
    HashMap::from([
        (
            "TURNKEY__SERVER__DATA_DIR".to_string(),
            format!("{root}/data"),
        ),
        (
            "TURNKEY__TOOLS__WORKSPACE".to_string(),
            format!("{root}/ws"),
        ),
        (
            "TURNKEY__AUTH__OPERATOR_TOKEN".to_string(),
            OPERATOR.to_string(),
        ),
        (
            "TURNKEY__SERVER__MAX_BODY_BYTES".to_string(),
            MAX_BODY.to_string(),
        ),
        // A provider that refuses connections: these tests judge admission, not turns, and
        // with no provider at all a submission is refused (503 no_provider).
        (
            "OPENAI_BASE_URL".to_string(),
            "http://127.0.0.1:9/v1".to_string(),
        ),
    ])
}

pub fn settings(dir: &TempDir) -> Settings {
    std::fs::create_dir_all(dir.path().join("ws")).expect("workspace dir");
    load_from(&Overrides::default(), &env_for(dir), dir.path()).expect("test settings load")
}

pub async fn state(dir: &TempDir) -> web::Data<AppState> {
    let (state, _token) = prepare(&settings(dir)).await.expect("app state");
    web::Data::new(state)
}

/// The app in-process as `(service, state)`; the state lets a test reach the store.
#[macro_export]
macro_rules! test_app {
    ($dir:expr) => {{
        let state = $crate::common::state($dir).await;
        let app =
            actix_web::test::init_service(turnkey_web::startup::build_app(state.clone())).await;
        (app, state)
    }};
}

pub fn bearer(token: &str) -> (&'static str, String) {
    ("Authorization", format!("Bearer {token}"))
}

pub fn operator() -> (&'static str, String) {
    bearer(OPERATOR)
}

//! What `turnkey chat` was asked to do, checked before anything goes on the network: the
//! server's base URL, the session to resume, and the bearer token with where it came from.
use super::ChatError;
use std::fmt;
use std::path::{Path, PathBuf};
use uuid::Uuid;

/// The environment variable read when `--token` is not given.
pub const TOKEN_ENV: &str = "TURNKEY_TOKEN";
/// The file read when neither `--token` nor `TURNKEY_TOKEN` gives a token: the operator token a
/// local `turnkey serve` keeps under its default `server.data_dir`.
pub const TOKEN_FILE: &str = "data/operator.token";

/// Where the token came from, so that a refusal can say which one to fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenSource {
    Flag,
    Env,
    File(PathBuf),
}

impl fmt::Display for TokenSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Flag => f.write_str("--token"),
            Self::Env => write!(f, "${TOKEN_ENV}"),
            Self::File(path) => write!(f, "{}", path.display()),
        }
    }
}

/// The checked options of one `turnkey chat` run.
#[derive(Clone, Debug)]
pub struct Options {
    /// `http(s)://host[:port][/prefix]` without a trailing slash.
    pub base_url: String,
    pub session: Option<Uuid>,
    pub token: String,
    pub token_source: TokenSource,
}

impl Options {
    /// Checks the flags and finds the token: `--token`, else `$TURNKEY_TOKEN` (when not empty),
    /// else `./data/operator.token` (when readable). Every mistake is a usage error (exit 2).
    pub fn resolve(
        url: &str,
        session: Option<&str>,
        token_flag: Option<&str>,
        token_env: Option<String>,
        token_file: &Path,
    ) -> Result<Self, ChatError> {
        let base_url = base_url(url)?;
        let session = session.map(session_id).transpose()?;
        let (token, token_source) = token(token_flag, token_env, token_file)?;
        Ok(Self {
            base_url,
            session,
            token,
            token_source,
        })
    }
}

fn base_url(raw: &str) -> Result<String, ChatError> {
    let bad = |why: &str| ChatError::Usage(format!("--url: {raw:?} {why}"));
    let url = reqwest::Url::parse(raw.trim()).map_err(|e| bad(&format!("is not a URL ({e})")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad("must start with http:// or https://"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(bad("must not have a query or a fragment"));
    }
    Ok(url.as_str().trim_end_matches('/').to_owned())
}

fn session_id(raw: &str) -> Result<Uuid, ChatError> {
    Uuid::parse_str(raw.trim()).map_err(|_| {
        ChatError::Usage(format!(
            "--session: {raw:?} is not a session id (a UUID such as 0190b5c2-…)"
        ))
    })
}

fn token(
    flag: Option<&str>,
    env: Option<String>,
    file: &Path,
) -> Result<(String, TokenSource), ChatError> {
    if let Some(flag) = flag {
        return usable(flag.trim(), "--token").map(|t| (t, TokenSource::Flag));
    }
    if let Some(env) = env.filter(|v| !v.trim().is_empty()) {
        return usable(env.trim(), TOKEN_ENV).map(|t| (t, TokenSource::Env));
    }
    match std::fs::read_to_string(file) {
        Ok(content) if !content.trim().is_empty() => {
            usable(content.trim(), &file.display().to_string())
                .map(|t| (t, TokenSource::File(file.to_path_buf())))
        }
        _ => Err(ChatError::Usage(format!(
            "no token: pass --token TOKEN, set {TOKEN_ENV}, or run where {} is readable \
             (the operator token of a local `turnkey serve`)",
            file.display()
        ))),
    }
}

/// A token must fit in an `Authorization` header: visible ASCII only.
fn usable(token: &str, from: &str) -> Result<String, ChatError> {
    if token.is_empty() {
        return Err(ChatError::Usage(format!("{from}: the token is empty")));
    }
    if !token.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        return Err(ChatError::Usage(format!(
            "{from}: a token is visible ASCII without spaces"
        )));
    }
    Ok(token.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn missing_file() -> PathBuf {
        PathBuf::from("/nonexistent/turnkey-chat-test/operator.token")
    }

    fn resolve(url: &str, session: Option<&str>) -> Result<Options, ChatError> {
        Options::resolve(url, session, Some("tk_x"), None, &missing_file())
    }

    #[test]
    fn r1_2_the_flag_wins_over_the_environment_and_the_file() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let file = dir.path().join("operator.token");
        std::fs::write(&file, "tk_file\n").unwrap_or_else(|e| panic!("{e}"));
        let got = |flag: Option<&str>, env: Option<&str>| {
            token(flag, env.map(str::to_owned), &file).unwrap_or_else(|e| panic!("{e}"))
        };
        assert_eq!(
            got(Some("tk_flag"), Some("tk_env")),
            ("tk_flag".into(), TokenSource::Flag)
        );
        assert_eq!(
            got(None, Some("tk_env")),
            ("tk_env".into(), TokenSource::Env)
        );
        assert_eq!(
            got(None, Some("  ")),
            ("tk_file".into(), TokenSource::File(file.clone()))
        );
        assert_eq!(got(None, None), ("tk_file".into(), TokenSource::File(file)));
    }

    #[test]
    fn r1_2_no_token_anywhere_is_a_usage_error_naming_the_three_sources() {
        let err = token(None, None, &missing_file()).err();
        let Some(ChatError::Usage(msg)) = err else {
            panic!("expected a usage error, got {err:?}");
        };
        assert!(msg.contains("--token") && msg.contains(TOKEN_ENV), "{msg}");
        assert!(msg.contains("operator.token"), "{msg}");
        assert!(matches!(
            token(Some("has space"), None, &missing_file()),
            Err(ChatError::Usage(_))
        ));
        assert!(matches!(
            token(Some(""), None, &missing_file()),
            Err(ChatError::Usage(_))
        ));
    }

    #[test]
    fn r1_2_urls_and_session_ids_are_checked() {
        let ok = resolve("http://127.0.0.1:8080/", None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ok.base_url, "http://127.0.0.1:8080");
        let prefixed =
            resolve("https://example.test/turnkey/", None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(prefixed.base_url, "https://example.test/turnkey");
        for bad in ["127.0.0.1:8080", "ftp://host", "http://h/?a=b", "not a url"] {
            assert!(
                matches!(resolve(bad, None), Err(ChatError::Usage(_))),
                "{bad}"
            );
        }
        let id = "0190b5c2-7d4e-7cc0-8a1e-3f1f2b3c4d5e";
        let ok = resolve("http://h", Some(id)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ok.session.map(|u| u.to_string()).as_deref(), Some(id));
        assert!(matches!(
            resolve("http://h", Some("abc")),
            Err(ChatError::Usage(_))
        ));
    }
}

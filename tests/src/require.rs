//! Whether a test that cannot run here may skip. On a developer's machine a missing part
//! (PostgreSQL, Chromium, the local model, a free port) skips with a one-line reason; where
//! the suite must prove every feature — CI, or a `TURNKEY_REQUIRE_*` flag — it fails instead.

/// `TURNKEY_REQUIRE_<PART>=1`: the tests of that part fail rather than skip without it.
pub fn flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v == "1")
}

/// Running under CI (`CI` set to anything but `false` or `0`) or with any
/// `TURNKEY_REQUIRE_*` flag: a test must not skip for a reason of the machine.
pub fn any_required() -> bool {
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
    ci || std::env::vars().any(|(k, v)| k.starts_with("TURNKEY_REQUIRE_") && v == "1")
}

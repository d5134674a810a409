//! The store's tests: every fact of `Store` against a fresh SQLite file and, where PostgreSQL
//! is reachable, a fresh PostgreSQL database (`on_both!`). One test binary, one module per
//! family of facts; run one with `cargo test --workspace --test facts writer::`. The tests that
//! read process-wide counters or traces (`group_commit`, `query_plans`) keep a binary each.
#![allow(clippy::expect_used, clippy::unwrap_used)]

#[macro_use]
#[path = "../common/mod.rs"]
mod common;

mod compression;
mod files;
mod inputs;
mod memory;
mod migrate;
mod notify;
mod outbox;
mod platforms;
mod providers;
mod quotas;
mod schedules;
mod session_keys;
mod skills_reviews;
mod store;
mod tool_runs;
mod unknown;
mod work;
mod writer;

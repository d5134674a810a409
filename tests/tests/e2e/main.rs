//! The end-to-end suite: every file here drives the real `turnkey` binary (and, where a test
//! says so, PostgreSQL, Chromium, the local model or MCP servers) through its public doors.
//! One test binary, one module per area, named after the SPEC ids it covers: the suite links
//! actix-web, sea-orm, reqwest, fantoccini and tungstenite once instead of once per file.
//! Run one area with `cargo test --workspace --test e2e r3_1_display::`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod api_edges;
mod chaos;
mod harness_selftest;
mod openapi_document;
mod pg_selftest;
mod r10_2_cut_off_answer;
mod r10_4_pricing;
mod r10_4_review;
mod r11_1_drafts;
mod r11_1_websocket;
mod r11_2_sse_keepalive;
mod r11_replay;
mod r12_busy_policy_crash;
mod r12_failure_matrix;
mod r13_4_busy_policy;
mod r13_5_outbox;
mod r13_6_replicas;
mod r13_7_sandbox;
mod r13_8_delete_session;
mod r13_8_limits;
mod r13_8_redaction;
mod r13_8_security;
mod r13_8_tokens;
mod r13_8_workspaces;
mod r13_9_auto_resume;
mod r13_safe_resume;
mod r1_1_openai_endpoint;
mod r1_1_security_headers;
mod r1_1_web_ui;
mod r1_1_web_ui_memory_skills;
mod r1_1_web_ui_work;
mod r1_2_chat_cli;
mod r1_3_webhooks;
mod r1_4_chat_commands;
mod r1_5_real_model_delegation;
mod r1_5_schedules;
mod r1_5_work;
mod r2_2_input_limits;
mod r2_4_graceful_shutdown;
mod r2_4_unknown_turns;
mod r2_admission;
mod r3_1_display;
mod r4_3_paused_process;
mod r4_two_processes;
mod r5_2_memory;
mod r5_2_real_model_memory;
mod r5_2_skills_and_memory_api;
mod r5_r10_turn_lifecycle;
mod r6_4_rotation;
mod r6_compression;
mod r6_compression_fallback;
mod r6_real_model_compression;
mod r7_stops;
mod r8_2_r10_2_stream_recovery;
mod r8_fallback;
mod r9_mcp_tools;
mod r9_real_model_tool_call;
mod r9_tool_round;
mod scripted_provider;
mod telemetry_otlp;
mod turn_metrics;

//! Configuration layering (DESIGN.md "Configuration"): defaults → file → conventional
//! variables → `TURNKEY__SECTION__KEY` → flags, and invalid values named by their key.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may fail loudly
use std::collections::HashMap;
use std::path::PathBuf;
use tempfile::TempDir;
use turnkey_providers::Secret;
use turnkey_web::configuration::{load_from, InvalidConfig, Overrides, Settings};

fn dir_with_file(toml: Option<&str>) -> TempDir {
    let d = tempfile::tempdir().expect("tempdir");
    if let Some(t) = toml {
        std::fs::write(d.path().join("turnkey.toml"), t).expect("write turnkey.toml");
    }
    d
}

fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn load(d: &TempDir, pairs: &[(&str, &str)]) -> Result<Settings, InvalidConfig> {
    load_from(&Overrides::default(), &env(pairs), d.path())
}

fn ok(d: &TempDir, pairs: &[(&str, &str)]) -> Settings {
    match load(d, pairs) {
        Ok(s) => s,
        Err(e) => panic!("settings should load: {e}"),
    }
}

fn err(d: &TempDir, pairs: &[(&str, &str)]) -> InvalidConfig {
    match load(d, pairs) {
        Ok(s) => panic!("settings should not load: {s:?}"),
        Err(e) => e,
    }
}

#[test]
fn defaults_match_api_md() {
    let d = dir_with_file(None);
    let s = ok(&d, &[]);
    assert_eq!(s.server.bind, "127.0.0.1:8080");
    assert_eq!(s.server.data_dir, PathBuf::from("./data"));
    assert_eq!(s.server.max_body_bytes, 1024 * 1024);
    assert_eq!(s.database.url, "sqlite://./data/turnkey.db?mode=rwc");
    assert_eq!(s.auth.operator_token, None);
    assert!(s.runtime.providers.is_empty());
    assert_eq!(s.runtime.lease.ttl_s, 300);
    assert_eq!(s.runtime.agent.max_iterations, 90);
}

#[test]
fn the_database_defaults_to_a_file_in_data_dir() {
    let d = dir_with_file(Some("[server]\ndata_dir = \"/var/lib/turnkey/\"\n"));
    let s = ok(&d, &[]);
    assert_eq!(
        s.database.url,
        "sqlite:///var/lib/turnkey/turnkey.db?mode=rwc"
    );
}

#[test]
fn r4_1_lease_timings_come_from_the_file_and_env_wins() {
    let d = dir_with_file(Some("[lease]\nttl_s = 100\nrefresh_s = 20\nwait_s = 50\n"));
    let s = ok(&d, &[]);
    assert_eq!(
        (
            s.runtime.lease.ttl_s,
            s.runtime.lease.refresh_s,
            s.runtime.lease.wait_s
        ),
        (100, 20, 50)
    );
    let s = ok(
        &d,
        &[
            ("TURNKEY__LEASE__TTL_S", "10"),
            ("TURNKEY__LEASE__REFRESH_S", "3"),
        ],
    );
    assert_eq!(
        (
            s.runtime.lease.ttl_s,
            s.runtime.lease.refresh_s,
            s.runtime.lease.wait_s
        ),
        (10, 3, 50)
    );
}

#[test]
fn r4_3_the_watchdog_is_lease_watchdog_s_and_its_older_name_still_works() {
    let watchdog = |toml: Option<&str>, pairs: &[(&str, &str)]| {
        ok(&dir_with_file(toml), pairs).runtime().watchdog_s()
    };
    assert_eq!(watchdog(None, &[]), 0, "off by default");
    assert_eq!(watchdog(Some("[lease]\nwatchdog_s = 30\n"), &[]), 30);
    assert_eq!(
        watchdog(None, &[("TURNKEY__LEASE__WATCHDOG_S", "7")]),
        7,
        "from the environment too"
    );
    // The older key alone still arms it.
    assert_eq!(
        watchdog(Some("[agent]\nliveness_timeout_s = 45\n"), &[]),
        45
    );
    // Both set: the smaller wins, whichever key holds it; 0 in one leaves the other.
    let both = |new: u64, older: u64| {
        format!("[lease]\nwatchdog_s = {new}\n[agent]\nliveness_timeout_s = {older}\n")
    };
    assert_eq!(watchdog(Some(&both(30, 20)), &[]), 20);
    assert_eq!(watchdog(Some(&both(30, 90)), &[]), 30);
    assert_eq!(watchdog(Some(&both(0, 90)), &[]), 90);
    assert_eq!(watchdog(Some(&both(30, 0)), &[]), 30);
    let e = err(&dir_with_file(Some("[lease]\nwatchdog_s = -1\n")), &[]);
    assert_eq!(e.key, "lease.watchdog_s", "{e}");
}

#[test]
fn flags_win_over_env_and_env_over_conventional_variables() {
    let d = dir_with_file(Some("[server]\nbind = \"0.0.0.0:1\"\n"));
    let pairs = [
        ("TURNKEY__SERVER__BIND", "127.0.0.1:2"),
        ("DATABASE_URL", "sqlite://conventional.db"),
    ];
    let s = ok(&d, &pairs);
    assert_eq!(s.server.bind, "127.0.0.1:2");
    assert_eq!(s.database.url, "sqlite://conventional.db");

    let s = ok(
        &d,
        &[
            ("DATABASE_URL", "sqlite://a.db"),
            ("TURNKEY__DATABASE__URL", "sqlite://b.db"),
        ],
    );
    assert_eq!(s.database.url, "sqlite://b.db");

    let flags = Overrides {
        bind: Some("127.0.0.1:0".into()),
        database_url: Some("sqlite://flag.db".into()),
        ..Overrides::default()
    };
    let s = load_from(&flags, &env(&pairs), d.path()).expect("settings");
    assert_eq!(s.server.bind, "127.0.0.1:0");
    assert_eq!(s.database.url, "sqlite://flag.db");
}

#[test]
fn an_explicit_config_file_replaces_the_working_directory_one() {
    let d = dir_with_file(Some("[server]\nbind = \"127.0.0.1:1\"\n"));
    let other = d.path().join("other.toml");
    std::fs::write(&other, "[server]\nbind = \"127.0.0.1:3\"\n").expect("write");
    let flags = Overrides {
        config_file: Some(other),
        ..Overrides::default()
    };
    let s = load_from(&flags, &HashMap::new(), d.path()).expect("settings");
    assert_eq!(s.server.bind, "127.0.0.1:3");

    let missing = Overrides {
        config_file: Some(d.path().join("missing.toml")),
        ..Overrides::default()
    };
    let e = load_from(&missing, &HashMap::new(), d.path()).expect_err("missing file");
    assert_eq!(e.key, "--config");
}

#[test]
fn a_value_of_the_wrong_type_names_its_key() {
    let d = dir_with_file(None);
    let e = err(&d, &[("TURNKEY__LEASE__TTL_S", "soon")]);
    assert_eq!(e.key, "lease.ttl_s", "{e}");
    assert!(
        e.to_string().starts_with("invalid config: lease.ttl_s: "),
        "{e}"
    );

    let d = dir_with_file(Some("[agent]\nbusy_policy = \"sometimes\"\n"));
    let e = err(&d, &[]);
    assert_eq!(e.key, "agent.busy_policy", "{e}");
}

#[test]
fn a_value_that_fails_validation_names_its_key() {
    let d = dir_with_file(None);
    let e = err(&d, &[("TURNKEY__LEASE__TTL_S", "0")]);
    assert_eq!(e.key, "lease.ttl_s", "{e}");
    let e = err(&d, &[("TURNKEY__DATABASE__URL", "mysql://x")]);
    assert_eq!(e.key, "database.url", "{e}");
    let e = err(&d, &[("TURNKEY__SERVER__MAX_BODY_BYTES", "0")]);
    assert_eq!(e.key, "server.max_body_bytes", "{e}");
}

#[test]
fn unknown_keys_are_refused() {
    let d = dir_with_file(Some("[server]\nbindd = \"127.0.0.1:1\"\n"));
    let e = err(&d, &[]);
    assert_eq!(e.key, "server.bindd", "{e}");
    assert!(
        e.reason.contains("bind, data_dir"),
        "the known keys are listed: {e}"
    );
    let d = dir_with_file(None);
    let e = err(&d, &[("TURNKEY__NOPE__X", "1")]);
    assert_eq!(e.key, "nope", "{e}");
}

#[test]
fn tools_enabled_is_a_comma_list_in_the_environment() {
    let d = dir_with_file(None);
    let s = ok(&d, &[("TURNKEY__TOOLS__ENABLED", "read_file, terminal")]);
    assert_eq!(s.runtime.tools.enabled, vec!["read_file", "terminal"]);
}

#[test]
fn string_values_stay_strings() {
    let d = dir_with_file(None);
    let s = ok(&d, &[("TURNKEY__AUTH__OPERATOR_TOKEN", "1e5")]);
    assert_eq!(
        s.auth.operator_token.as_ref().map(Secret::expose),
        Some("1e5")
    );
}

#[test]
fn openai_variables_synthesize_a_provider_when_none_is_configured() {
    let d = dir_with_file(None);
    let s = ok(
        &d,
        &[
            ("OPENAI_API_KEY", "sk-x"),
            ("OPENAI_BASE_URL", "http://127.0.0.1:9/v1"),
        ],
    );
    assert_eq!(s.runtime.providers.len(), 1);
    let p = serde_json::to_value(&s.runtime.providers[0]).expect("provider json");
    assert_eq!(p["name"], "openai");
    assert_eq!(p["kind"], "openai");
    assert_eq!(p["base_url"], "http://127.0.0.1:9/v1");
    assert_eq!(p["model"], "gpt-4o-mini");
    assert_eq!(p["api_key_env"], "OPENAI_API_KEY");

    // Only the OPENAI_* variables make a provider: ANTHROPIC_* ones, often left in a shell
    // for other tools, make none (an anthropic provider is configured in [[providers]]).
    let s = ok(
        &d,
        &[("ANTHROPIC_API_KEY", "k"), ("ANTHROPIC_MODEL", "claude-x")],
    );
    assert!(s.runtime.providers.is_empty());
}

#[test]
fn an_anthropic_provider_is_accepted() {
    let d = dir_with_file(Some(
        "[[providers]]\nname = \"claude\"\nkind = \"anthropic\"\nbase_url = \"https://api.anthropic.com/v1\"\napi_key_env = \"ANTHROPIC_API_KEY\"\nmodel = \"claude-sonnet-4-5\"\ncontext_window = 200000\n",
    ));
    let s = ok(&d, &[]);
    assert_eq!(s.runtime.providers.len(), 1);
    let p = serde_json::to_value(&s.runtime.providers[0]).expect("provider json");
    assert_eq!(p["kind"], "anthropic");
    assert_eq!(p["api_key_env"], "ANTHROPIC_API_KEY");
}

#[test]
fn configured_providers_are_not_replaced_by_conventional_variables() {
    let d = dir_with_file(Some(
        "[[providers]]\nname = \"main\"\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:8/v1\"\nmodel = \"m\"\n",
    ));
    let s = ok(&d, &[("OPENAI_API_KEY", "sk-x")]);
    assert_eq!(s.runtime.providers.len(), 1);
    let p = serde_json::to_value(&s.runtime.providers[0]).expect("provider json");
    assert_eq!(p["name"], "main");
    assert_eq!(p["base_url"], "http://127.0.0.1:8/v1");
}

/// Loads `toml` as the working directory's turnkey.toml and returns the error it must cause.
fn refused(toml: &str) -> InvalidConfig {
    err(&dir_with_file(Some(toml)), &[])
}

#[test]
fn an_invalid_enum_lists_its_valid_values() {
    for (toml, key, valid) in [
        (
            "[agent]\nbusy_policy = \"sometimes\"\n",
            "agent.busy_policy",
            "queue, interrupt, steer",
        ),
        (
            "[tools]\napproval = \"maybe\"\n",
            "tools.approval",
            "off, dangerous, always",
        ),
        (
            "[compression]\nmode = \"zip\"\n",
            "compression.mode",
            "in_place, rotate",
        ),
        (
            "[[providers]]\nname = \"m\"\nkind = \"gemini\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"x\"\n",
            "providers[0].kind",
            "openai, anthropic",
        ),
    ] {
        let e = refused(toml);
        assert_eq!(e.key, key, "{e}");
        assert!(
            e.reason.starts_with(&format!("must be one of {valid}")),
            "{e}"
        );
        assert!(
            e.to_string()
                .starts_with(&format!("invalid config: {key}: must be one of {valid}")),
            "{e}"
        );
    }
}

#[test]
fn key_paths_are_dotted_inside_lists() {
    let provider = "[[providers]]\nname = \"m\"\nkind = \"openai\"\nmodel = \"x\"\n";
    let e = refused(&format!("{provider}base_url = [1]\n"));
    assert_eq!(e.key, "providers[0].base_url", "{e}");
    let e = refused(&format!(
        "{provider}base_url = \"http://127.0.0.1:9/v1\"\nnope = 1\n"
    ));
    assert_eq!(e.key, "providers[0].nope", "{e}");
    let e = refused(provider);
    assert_eq!(e.key, "providers[0].base_url", "{e}");
    assert!(e.reason.contains("missing"), "{e}");
}

#[test]
fn r8_5_max_output_tokens_loads_and_is_checked() {
    let provider = "[[providers]]\nname = \"m\"\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"x\"\ncontext_window = 8192\n";
    let s = ok(&dir_with_file(Some(provider)), &[]);
    assert_eq!(
        s.runtime.providers[0].max_output_tokens, None,
        "unset by default"
    );
    let s = ok(
        &dir_with_file(Some(&format!("{provider}max_output_tokens = 1024\n"))),
        &[],
    );
    assert_eq!(s.runtime.providers[0].max_output_tokens, Some(1024));
    for bad in ["0", "8192", "100000"] {
        let e = refused(&format!("{provider}max_output_tokens = {bad}\n"));
        assert_eq!(e.key, "providers[0].max_output_tokens", "{e}");
        assert!(e.reason.contains("less than context_window (8192)"), "{e}");
    }
}

#[test]
fn a_negative_number_is_reported_as_negative() {
    let d = dir_with_file(None);
    let e = err(&d, &[("TURNKEY__AGENT__MAX_ITERATIONS", "-3")]);
    assert_eq!(e.key, "agent.max_iterations", "{e}");
    assert_eq!(
        e.reason,
        "-3 is negative; expected a whole number >= 1 (from the environment)"
    );
    let e = refused("[lease]\nwait_s = -5\n");
    assert_eq!(e.key, "lease.wait_s", "{e}");
    assert!(
        e.reason
            .starts_with("-5 is negative; expected a whole number >= 0"),
        "{e}"
    );
}

#[test]
fn telemetry_is_off_by_default_and_takes_its_keys_from_file_and_environment() {
    let s = ok(&dir_with_file(None), &[]);
    assert!(!s.telemetry.enabled());
    assert_eq!(
        (s.telemetry.service_name.as_str(), s.telemetry.sample_ratio),
        ("turnkey", 1.0)
    );
    let d = dir_with_file(Some(
        "[telemetry]\notlp_endpoint = \"http://127.0.0.1:4318\"\nservice_name = \"tk-a\"\nsample_ratio = 0.25\n",
    ));
    let s = ok(&d, &[]);
    assert!(s.telemetry.enabled());
    assert_eq!(s.telemetry.traces_url(), "http://127.0.0.1:4318/v1/traces");
    assert_eq!(
        (s.telemetry.service_name.as_str(), s.telemetry.sample_ratio),
        ("tk-a", 0.25)
    );
    let s = ok(
        &dir_with_file(None),
        &[
            (
                "TURNKEY__TELEMETRY__OTLP_ENDPOINT",
                "https://otel.example.com/v1/traces",
            ),
            ("TURNKEY__TELEMETRY__SAMPLE_RATIO", "0.5"),
        ],
    );
    assert_eq!(
        s.telemetry.traces_url(),
        "https://otel.example.com/v1/traces"
    );
    assert_eq!(s.telemetry.sample_ratio, 0.5);
}

#[test]
fn telemetry_values_it_cannot_use_are_refused_by_key() {
    for (toml, key) in [
        (
            "otlp_endpoint = \"127.0.0.1:4318\"",
            "telemetry.otlp_endpoint",
        ),
        (
            "otlp_endpoint = \"grpc://collector:4317\"",
            "telemetry.otlp_endpoint",
        ),
        ("sample_ratio = 1.5", "telemetry.sample_ratio"),
        ("sample_ratio = -0.1", "telemetry.sample_ratio"),
        ("service_name = \" \"", "telemetry.service_name"),
        ("otlp_port = 4318", "telemetry.otlp_port"),
    ] {
        let e = refused(&format!("[telemetry]\n{toml}\n"));
        assert_eq!(e.key, key, "{toml}: {e}");
    }
}

#[test]
fn sections_this_build_serves_keep_accepting_their_keys() {
    let d = dir_with_file(Some(
        "[tools]\napproval = \"always\"\nmax_workers = 2\n[compression]\nmode = \"in_place\"\nthreshold = 0.7\ntimeout_s = 30\ncooldown_s = 0\n",
    ));
    let s = ok(&d, &[]);
    assert_eq!(s.runtime.tools.max_workers, 2);
    assert_eq!(s.runtime.compression.threshold, 0.7);
    assert_eq!(
        (
            s.runtime.compression.timeout_s,
            s.runtime.compression.cooldown_s
        ),
        (30, 0)
    );
}

#[test]
fn r6_2_per_model_overrides_load_and_are_checked() {
    let d = dir_with_file(Some(
        "[compression]\nmodels = { \"m-1\" = { threshold = 0.6, protect_last_n = 8 } }\n",
    ));
    let s = ok(&d, &[]);
    let m = s.runtime.compression.for_model("m-1");
    assert_eq!((m.threshold, m.protect_last_n), (0.6, 8));
    let e = refused("[compression.models.\"m-1\"]\nthreshold = 1.5\n");
    assert_eq!(e.key, "compression.models.\"m-1\".threshold", "{e}");
    let e = refused("[compression.models.\"m-1\"]\nthreshhold = 0.5\n");
    assert!(e.key.starts_with("compression"), "{e}");
}

#[test]
fn r6_4_rotate_mode_is_accepted_and_a_zero_timeout_is_not() {
    let d = dir_with_file(Some("[compression]\nmode = \"rotate\"\n"));
    let s = ok(&d, &[]);
    assert_eq!(
        s.runtime.compression.mode,
        turnkey_actors::config::CompressionMode::Rotate
    );
    let e = refused("[compression]\ntimeout_s = 0\n");
    assert_eq!(e.key, "compression.timeout_s", "{e}");
}

#[test]
fn unknown_keys_are_refused_in_every_section() {
    for section in [
        "server",
        "database",
        "auth",
        "agent",
        "tools",
        "lease",
        "compression",
    ] {
        let e = refused(&format!("[{section}]\nnope = 1\n"));
        assert_eq!(e.key, format!("{section}.nope"), "{e}");
        assert!(e.reason.contains("unknown key"), "{e}");
    }
}

#[test]
fn server_bind_must_be_host_and_port() {
    let d = dir_with_file(None);
    let with_bind = |bind: &str| {
        load_from(
            &Overrides {
                bind: Some(bind.into()),
                ..Overrides::default()
            },
            &HashMap::new(),
            d.path(),
        )
    };
    for good in ["127.0.0.1:0", "0.0.0.0:8080", "[::1]:8080", "localhost:80"] {
        assert!(with_bind(good).is_ok(), "{good}");
    }
    for bad in [
        "nonsense",
        "127.0.0.1",
        "127.0.0.1:99999",
        "127.0.0.1:http",
        ":8080",
        "local host:80",
        "[::1:80",
    ] {
        let e = with_bind(bad).expect_err(bad);
        assert_eq!(e.key, "server.bind", "{bad}: {e}");
        assert!(e.reason.contains("host:port"), "{bad}: {e}");
    }
}

/// The example file a user copies (deploy/turnkey.example.toml).
const EXAMPLE: &str = include_str!("../../../deploy/turnkey.example.toml");

/// A commented-out table header (`# [server]`, `# [[providers]]`) or `# key = value` line,
/// without its `#`; prose comments give `None`.
fn commented_setting(line: &str) -> Option<&str> {
    let rest = line.strip_prefix('#')?.trim_start();
    let head = rest.split('#').next().unwrap_or(rest).trim_end();
    let is_header = head.starts_with('[')
        && head.ends_with(']')
        && head
            .trim_matches(|c| c == '[' || c == ']')
            .chars()
            .all(|c| c.is_ascii_lowercase() || c == '_' || c == '.');
    // A bare key, or a quoted one (a model name in `[pricing]`).
    let is_key = rest.split_once(" = ").is_some_and(|(k, _)| {
        let bare = !k.is_empty() && k.chars().all(|c| c.is_ascii_lowercase() || c == '_');
        let quoted = k.len() > 2
            && k.starts_with('"')
            && k.ends_with('"')
            && !k[1..k.len() - 1].contains('"');
        bare || quoted
    });
    (is_header || is_key).then_some(rest)
}

/// The example with every commented-out setting switched on.
fn example_uncommented() -> String {
    EXAMPLE
        .lines()
        .map(|l| commented_setting(l).unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `section.key` for every setting the example shows, commented out or not.
fn example_keys() -> std::collections::BTreeSet<String> {
    let mut section = String::new();
    let mut keys = std::collections::BTreeSet::new();
    for line in example_uncommented().lines() {
        let line = line.trim();
        if line.starts_with('[') {
            section = line.trim_matches(|c| c == '[' || c == ']').to_owned();
        } else if let Some((key, _)) = line.split_once(" = ") {
            if !key.starts_with('#') {
                keys.insert(format!("{section}.{}", key.trim_matches('"')));
            }
        }
    }
    keys
}

#[test]
fn the_example_file_loads_and_shows_the_defaults() {
    let defaults = format!("{:?}", ok(&dir_with_file(None), &[]));
    let as_shipped = ok(&dir_with_file(Some(EXAMPLE)), &[]);
    assert_eq!(format!("{as_shipped:?}"), defaults);

    // Every value shown is the default, except those that have none.
    let mut on = ok(&dir_with_file(Some(&example_uncommented())), &[]);
    assert!(on.auth.operator_token.take().is_some());
    // The speech-to-text key and its variable have no default either.
    assert!(on.runtime.stt.api_key.take().is_some());
    assert!(on.runtime.stt.api_key_env.take().is_some());
    assert_eq!(
        on.runtime.providers.len(),
        1,
        "the example shows one provider"
    );
    let provider = serde_json::to_value(on.runtime.providers.remove(0)).expect("provider json");
    assert_eq!(
        std::mem::take(&mut on.runtime.provider_windows_set),
        [true],
        "the example's provider sets its context_window"
    );
    let mcp = std::mem::take(&mut on.runtime.tools.mcp);
    let schedules = std::mem::take(&mut on.runtime.schedules);
    assert_eq!(schedules.len(), 1, "the example shows one schedule");
    let required = serde_json::json!({
        "session_id": schedules[0].session_id,
        "cron": schedules[0].cron,
        "text": schedules[0].text,
    });
    let with_defaults: turnkey_actors::schedule::ScheduleConfig =
        serde_json::from_value(required).expect("session_id, cron and text make a schedule");
    assert_eq!(
        with_defaults, schedules[0],
        "a schedule key in the example does not show its default"
    );
    let pricing = std::mem::take(&mut on.runtime.pricing);
    assert_eq!(pricing.len(), 1, "the example shows one price");
    let models = std::mem::take(&mut on.runtime.compression.models);
    let platforms = std::mem::take(&mut on.runtime.platforms);
    let shown = [
        platforms.telegram.is_some(),
        platforms.slack.is_some(),
        platforms.webhook.is_some(),
    ];
    assert_eq!(shown, [true; 3], "the example shows every platform");
    assert_eq!(models.len(), 1, "the example shows one per-model override");
    assert_eq!(mcp.len(), 1, "the example shows one MCP server");
    assert_eq!(format!("{on:?}"), defaults);
    let required = serde_json::json!({"name": mcp[0].name, "command": mcp[0].command});
    let with_defaults: turnkey_tools::mcp::McpServerConfig =
        serde_json::from_value(required).expect("name and command make an MCP server");
    assert_eq!(
        with_defaults, mcp[0],
        "an MCP server key in the example does not show its default"
    );
    let mut required = serde_json::Map::new();
    for key in [
        "name",
        "kind",
        "base_url",
        "model",
        "api_key",
        "api_key_env",
        "max_output_tokens",
        // No fixed default: unset, it follows the model's name.
        "vision",
        // No fixed default: unset, it follows the base URL's host.
        "prefill",
    ] {
        required.insert(key.into(), provider[key].clone());
    }
    let with_defaults: turnkey_providers::ProviderConfig =
        serde_json::from_value(required.into()).expect("the required keys make a provider");
    assert_eq!(
        serde_json::to_value(with_defaults).expect("provider json"),
        provider,
        "a provider key in the example does not show its default"
    );
}

/// Every configuration key that holds a `Secret`.
const SECRET_KEYS: [&str; 8] = [
    "auth.operator_token",
    "stt.api_key",
    "providers.api_key",
    "platforms.telegram.bot_token",
    "platforms.telegram.secret_token",
    "platforms.slack.bot_token",
    "platforms.slack.signing_secret",
    "platforms.webhook.secret",
];

#[test]
fn the_example_file_shows_every_key_the_build_accepts() {
    let settings = serde_json::to_value(ok(&dir_with_file(None), &[])).expect("settings json");
    let shown_on = serde_json::to_value(ok(&dir_with_file(Some(&example_uncommented())), &[]))
        .expect("settings json");
    let mut accepted = std::collections::BTreeSet::new();
    for (section, table) in settings.as_object().expect("a table") {
        // A table of names the user chooses (`[pricing]`) is shown by one example entry.
        if table.as_object().is_some_and(|t| t.is_empty()) {
            let shown = shown_on[section].as_object().into_iter().flatten();
            accepted.extend(shown.map(|(k, _)| format!("{section}.{k}")));
        }
        for key in table.as_object().map(|t| t.keys()).into_iter().flatten() {
            // An array of tables (`[[tools.mcp]]`) is shown as one commented table: its keys
            // are those of the entry the example shows.
            // An optional table (`[platforms.telegram]`) is shown commented: its keys are
            // those of the table the example shows.
            let entry = shown_on[section][key][0].as_object().or_else(|| {
                table[key]
                    .is_null()
                    .then(|| shown_on[section][key].as_object())?
            });
            match entry {
                Some(entry) => {
                    accepted.extend(entry.keys().map(|k| format!("{section}.{key}.{k}")))
                }
                None => {
                    accepted.insert(format!("{section}.{key}"));
                }
            }
        }
    }
    let provider = ok(&dir_with_file(Some(&example_uncommented())), &[])
        .runtime
        .providers;
    let provider = serde_json::to_value(&provider[0]).expect("provider json");
    for key in provider.as_object().expect("a table").keys() {
        accepted.insert(format!("providers.{key}"));
    }
    let schedule = ok(&dir_with_file(Some(&example_uncommented())), &[])
        .runtime
        .schedules;
    let schedule = serde_json::to_value(&schedule[0]).expect("schedule json");
    for key in schedule.as_object().expect("a table").keys() {
        accepted.insert(format!("schedules.{key}"));
    }
    // Tokens, keys and signing secrets are never serialized (`Secret`), so the loop above
    // cannot see them; the example shows them, and loading it uncommented (unknown keys are
    // refused) proves the build takes them.
    accepted.extend(SECRET_KEYS.iter().map(|k| k.to_string()));
    let shown = example_keys();
    let missing: Vec<_> = accepted.difference(&shown).collect();
    assert!(missing.is_empty(), "not in the example: {missing:?}");
    let unknown: Vec<_> = shown.difference(&accepted).collect();
    assert!(unknown.is_empty(), "not accepted by the build: {unknown:?}");
}

#[test]
fn r9_mcp_servers_load_with_their_args_and_env() {
    let s = ok(
        &dir_with_file(Some(
            "[[tools.mcp]]\nname = \"time\"\ncommand = \"mcp-server-time\"\n\n\
             [[tools.mcp]]\nname = \"git-2\"\ncommand = \"/opt/mcp/bin/mcp-server-git\"\n\
             args = [\"--repository\", \"/srv/repo\"]\nenv = { GIT_AUTHOR_NAME = \"Tess\", tz = \"UTC\" }\n",
        )),
        &[],
    );
    let mcp = &s.runtime.tools.mcp;
    assert_eq!(mcp.len(), 2);
    assert_eq!((mcp[0].name.as_str(), mcp[0].args.len()), ("time", 0));
    assert!(mcp[0].env.is_empty());
    assert_eq!(mcp[1].args, ["--repository", "/srv/repo"]);
    // Variable names keep their case.
    let env: Vec<(&str, &str)> = mcp[1]
        .env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(env, [("GIT_AUTHOR_NAME", "Tess"), ("tz", "UTC")]);
}

#[test]
fn r9_invalid_mcp_servers_are_named_by_key() {
    for (toml, key) in [
        ("[[tools.mcp]]\nname = \"\"\ncommand = \"x\"\n", "tools.mcp[0].name"),
        (
            "[[tools.mcp]]\nname = \"a\"\ncommand = \"x\"\n[[tools.mcp]]\nname = \"my.server\"\ncommand = \"x\"\n",
            "tools.mcp[1].name",
        ),
        ("[[tools.mcp]]\nname = \"a\"\ncommand = \"\"\n", "tools.mcp[0].command"),
        (
            "[[tools.mcp]]\nname = \"a\"\ncommand = \"x\"\n[[tools.mcp]]\nname = \"a\"\ncommand = \"y\"\n",
            "tools.mcp[1].name",
        ),
    ] {
        let e = refused(toml);
        assert_eq!(e.key, key, "{toml}: {e}");
    }
    let e = refused("[[tools.mcp]]\nname = \"a\"\n");
    assert_eq!(e.key, "tools.mcp[0].command", "{e}");
    let e = refused("[[tools.mcp]]\nname = \"a\"\ncommand = \"x\"\ntimeout = 5\n");
    assert_eq!(e.key, "tools.mcp[0].timeout", "{e}");
    assert!(e.reason.contains("unknown key"), "{e}");
}

#[test]
fn r10_4_pricing_overrides_load_and_bad_prices_are_named() {
    let s = ok(
        &dir_with_file(Some(
            "[pricing]\n\"my-model\" = { input = 0.5, output = 1.5 }\n\"gpt-4o\" = { input = 2.0, output = 8.0, cache_read = 1.0 }\n",
        )),
        &[],
    );
    let pricing = s.runtime().pricing();
    let mine = pricing.price("my-model-q4").expect("priced");
    assert_eq!((mine.input, mine.output, mine.cache_read), (0.5, 1.5, 0.5));
    assert_eq!(
        pricing.price("gpt-4o-2024-08-06").map(|p| p.input),
        Some(2.0)
    );
    let e = refused("[pricing]\n\"m\" = { input = -1.0, output = 1.0 }\n");
    assert_eq!(e.key, "pricing.\"m\".input", "{e}");
    let e = refused("[pricing]\n\"m\" = { input = 1.0 }\n");
    assert!(e.key.starts_with("pricing"), "{e}");
}

#[test]
fn r1_1_cors_origins_load_from_the_file_and_the_environment() {
    let d = dir_with_file(None);
    assert!(
        ok(&d, &[]).server.cors_origins.is_empty(),
        "no CORS by default"
    );
    let d = dir_with_file(Some(
        "[server]\ncors_origins = [\"https://ui.example.com\", \"http://127.0.0.1:5173\"]\n",
    ));
    assert_eq!(
        ok(&d, &[]).server.cors_origins,
        vec!["https://ui.example.com", "http://127.0.0.1:5173"]
    );
    let s = ok(
        &d,
        &[(
            "TURNKEY__SERVER__CORS_ORIGINS",
            "https://a.example.com, http://[::1]:8080",
        )],
    );
    assert_eq!(
        s.server.cors_origins,
        vec!["https://a.example.com", "http://[::1]:8080"]
    );
    let s = ok(&d, &[("TURNKEY__SERVER__CORS_ORIGINS", "")]);
    assert!(
        s.server.cors_origins.is_empty(),
        "an empty variable clears the list"
    );
}

#[test]
fn r1_1_cors_origins_that_are_not_origins_are_named() {
    for (bad, hint) in [
        ("https://ui.example.com/", "no trailing slash"),
        ("https://ui.example.com/app", "no path"),
        ("https://UI.example.com", "lower-case"),
        ("https://ui.example.com:443", "default port"),
        ("*", "not an origin"),
        ("ui.example.com", "not an origin"),
        ("ftp://ui.example.com", "http or https"),
        ("null", "not an origin"),
    ] {
        let d = dir_with_file(Some(&format!(
            "[server]\ncors_origins = [\"https://fine.example.com\", \"{bad}\"]\n"
        )));
        let e = err(&d, &[]);
        assert_eq!(e.key, "server.cors_origins[1]", "{bad}: {e}");
        assert!(e.reason.contains(hint), "{bad}: {e}");
    }
}

#[test]
fn r1_5_schedules_load_with_their_default_and_bad_ones_are_named_by_key() {
    let session = "0190b5c2-7d4e-7cc0-8a1e-3f1f2b3c4d5e";
    let s = ok(
        &dir_with_file(Some(&format!(
            "[[schedules]]\nsession_id = \"{session}\"\ncron = \"0 8 * * *\"\ntext = \"hi\"\n\n\
             [[schedules]]\nsession_id = \"{session}\"\ncron = \"*/2 * * * * *\"\ntext = \"tick\"\nmissed = \"skip\"\n"
        ))),
        &[],
    );
    assert_eq!(s.runtime.schedules.len(), 2);
    assert_eq!(
        s.runtime.schedules[0].missed,
        turnkey_storage::MissedPolicy::RunOnce
    );
    assert_eq!(
        s.runtime.schedules[1].missed,
        turnkey_storage::MissedPolicy::Skip
    );
    assert_eq!(s.runtime().schedules, s.runtime.schedules);

    let table = |body: &str| format!("[[schedules]]\n{body}\n");
    for (body, key, says) in [
        (
            format!("session_id = \"{session}\"\ncron = \"0 8 * *\"\ntext = \"hi\""),
            "schedules[0].cron",
            "4 fields",
        ),
        (
            format!("session_id = \"{session}\"\ncron = \"0 25 * * *\"\ntext = \"hi\""),
            "schedules[0].cron",
            "not a cron expression",
        ),
        (
            "session_id = \"not-a-uuid\"\ncron = \"0 8 * * *\"\ntext = \"hi\"".to_owned(),
            "schedules[0].session_id",
            "not a session id",
        ),
        (
            format!("session_id = \"{session}\"\ncron = \"0 8 * * *\"\ntext = \"  \""),
            "schedules[0].text",
            "empty",
        ),
        (
            format!("session_id = \"{session}\"\ncron = \"0 8 * * *\"\ntext = \"hi\"\nmissed = \"twice\""),
            "schedules[0].missed",
            "must be one of run_once, skip",
        ),
        (
            format!("session_id = \"{session}\"\ncron = \"0 8 * * *\""),
            "schedules[0].text",
            "missing",
        ),
        (
            format!("session_id = \"{session}\"\ncron = \"0 8 * * *\"\ntext = \"hi\"\nevery = \"day\""),
            "schedules[0].every",
            "unknown key",
        ),
    ] {
        let e = refused(&table(&body));
        assert_eq!(e.key, key, "{body}: {e}");
        assert!(e.reason.contains(says), "{body}: {e}");
    }
    let twice = table(&format!(
        "session_id = \"{session}\"\ncron = \"0 8 * * *\"\ntext = \"hi\""
    ));
    let e = refused(&format!("{twice}\n{twice}"));
    assert_eq!(e.key, "schedules[1]", "{e}");
}

#[test]
fn r1_3_platform_tables_load_with_their_defaults_and_are_checked() {
    let d = dir_with_file(Some(
        "[platforms.telegram]\nbot_token = \"1:x\"\nsecret_token = \"s-1\"\nallowed_users = [\"42\"]\n\
         [platforms.webhook]\nsecret = \"k\"\nreply_url = \"http://127.0.0.1:9/r\"\n",
    ));
    let s = ok(&d, &[]);
    let t = s.runtime.platforms.telegram.expect("telegram on");
    assert_eq!(t.api_base, "https://api.telegram.org");
    assert_eq!(
        (t.stream, t.edit_interval_ms, t.resend_unknown),
        (false, 1000, false)
    );
    assert!(
        s.runtime.platforms.slack.is_none(),
        "a platform is off unless configured"
    );
    assert!(s.runtime.platforms.webhook.is_some());
    for (toml, key) in [
        ("[platforms.telegram]\nbot_token = \"1:x\"\nsecret_token = \"bad token!\"\n", "platforms.telegram.secret_token"),
        ("[platforms.telegram]\nsecret_token = \"s\"\n", "platforms.telegram.bot_token"),
        ("[platforms.slack]\nbot_token = \"x\"\n", "platforms.slack.signing_secret"),
        ("[platforms.slack]\nbot_token = \"x\"\nsigning_secret = \"s\"\napi_base = \"ftp://x\"\n", "platforms.slack.api_base"),
        ("[platforms.webhook]\nsecret = \"k\"\n", "platforms.webhook.reply_url"),
        ("[platforms.webhook]\nsecret = \"k\"\nreply_url = \"http://x\"\nedit_interval_ms = 10\n", "platforms.webhook.edit_interval_ms"),
        ("[platforms.telegram]\nbot_token = \"1:x\"\nsecret_token = \"s\"\nbogus = 1\n", "platforms.telegram.bogus"),
    ] {
        let e = refused(toml);
        assert_eq!(e.key, key, "{toml}: {e}");
    }
}

#[test]
fn secrets_in_the_configuration_never_print() {
    let toml = "[auth]\noperator_token = \"tk_op_SECRET1\"\n\
                [[providers]]\nname = \"p\"\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9\"\n\
                api_key = \"sk-SECRET2\"\nmodel = \"m\"\n\
                [platforms.telegram]\nbot_token = \"1:SECRET3\"\nsecret_token = \"SECRET4\"\n\
                [platforms.slack]\nbot_token = \"xoxb-SECRET5\"\nsigning_secret = \"SECRET6\"\n\
                [platforms.webhook]\nsecret = \"SECRET7\"\nreply_url = \"http://127.0.0.1:9/r\"\n";
    let s = ok(&dir_with_file(Some(toml)), &[]);
    let shown = format!(
        "{s:?}\n{}",
        serde_json::to_string(&s).expect("settings json")
    );
    assert!(!shown.contains("SECRET"), "{shown}");
    assert_eq!(
        s.auth.operator_token.as_ref().map(Secret::expose),
        Some("tk_op_SECRET1")
    );
    let telegram = s.runtime.platforms.telegram.as_ref().expect("telegram");
    assert_eq!(telegram.bot_token.expose(), "1:SECRET3");
}

//! The deployment files in deploy/ cannot rot: every manifest parses (YAML, the Dockerfile,
//! the systemd unit, nginx's config), every command line in them parses with turnkey's own CLI,
//! every configuration they give (files, ConfigMap, environment) loads through turnkey's own
//! configuration code, the probes' paths answer on the real app and their ports are the one
//! the server binds, and every supervisor waits at least the drain bound of the settings it
//! runs with before it kills the process (`startup::drain_bound`, SPEC R2.4).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may fail loudly

use clap::Parser;
use serde_yaml_ng::{Mapping, Value as Yaml};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tempfile::TempDir;
use turnkey_providers::Secret;
use turnkey_web::cli::{Cli, Command};
use turnkey_web::configuration::{load_from, Overrides, Settings};
use turnkey_web::startup::drain_bound;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn yaml(rel: &str) -> Yaml {
    let mut v: Yaml =
        serde_yaml_ng::from_str(&read(rel)).unwrap_or_else(|e| panic!("{rel} is not YAML: {e}"));
    v.apply_merge()
        .unwrap_or_else(|e| panic!("{rel}: merge keys: {e}"));
    v
}

/// `v[a][b]…`, failing with the path when a step is missing.
fn at<'a>(v: &'a Yaml, path: &[&str]) -> &'a Yaml {
    let mut cur = v;
    for (i, key) in path.iter().enumerate() {
        cur = match cur {
            Yaml::Mapping(m) => m.get(*key),
            Yaml::Sequence(s) => key.parse::<usize>().ok().and_then(|n| s.get(n)),
            _ => None,
        }
        .unwrap_or_else(|| panic!("missing {}", path[..=i].join(".")));
    }
    cur
}

fn str_at<'a>(v: &'a Yaml, path: &[&str]) -> &'a str {
    at(v, path)
        .as_str()
        .unwrap_or_else(|| panic!("{} is not a string", path.join(".")))
}

fn strings(v: &Yaml) -> Vec<String> {
    v.as_sequence()
        .expect("a list")
        .iter()
        .map(|s| s.as_str().expect("a string").to_owned())
        .collect()
}

/// Parses `turnkey ARGS…` with the real command line; answers the command.
fn turnkey_command(args: &[String], origin: &str) -> Command {
    let argv = std::iter::once("turnkey".to_string()).chain(args.iter().cloned());
    match Cli::try_parse_from(argv) {
        Ok(cli) => cli.command,
        Err(e) => panic!("{origin}: `turnkey {}` does not parse: {e}", args.join(" ")),
    }
}

/// The settings `turnkey serve` would run with: `config` as its --config file (a path on this
/// machine standing for the one in the manifest), `env` as its environment.
fn settings_of(
    command: &Command,
    config: Option<&Path>,
    env: &HashMap<String, String>,
    origin: &str,
) -> Settings {
    let cwd = TempDir::new().expect("tempdir");
    let (bind, database_url) = match command {
        Command::Serve(a) => (a.bind.clone(), a.database.clone()),
        Command::Migrate(a) | Command::Doctor(a) => (None, a.database.clone()),
        Command::Chat(_) => panic!("{origin}: chat is not a server"),
    };
    let overrides = Overrides {
        config_file: config.map(Path::to_path_buf),
        bind,
        database_url,
    };
    load_from(&overrides, env, cwd.path())
        .unwrap_or_else(|e| panic!("{origin}: turnkey refuses the configuration: {e}"))
}

/// The --config of a server or migrate command.
fn config_flag(command: &Command) -> Option<PathBuf> {
    match command {
        Command::Serve(a) => a.config.clone(),
        Command::Migrate(a) | Command::Doctor(a) => a.config.clone(),
        Command::Chat(_) => None,
    }
}

fn port_of(bind: &str) -> u16 {
    bind.rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or_else(|| panic!("{bind} has no port"))
}

/// `45s`, `1m30s`, `45` (seconds): compose and systemd durations.
fn seconds(s: &str) -> Duration {
    let s = s.trim();
    if let Ok(n) = s.parse::<u64>() {
        return Duration::from_secs(n);
    }
    let mut total = 0;
    let mut digits = String::new();
    for c in s.chars() {
        match c {
            '0'..='9' => digits.push(c),
            'm' | 's' | 'h' => {
                let n: u64 = digits.parse().unwrap_or_else(|_| panic!("duration {s:?}"));
                total += n * match c {
                    'h' => 3600,
                    'm' => 60,
                    _ => 1,
                };
                digits.clear();
            }
            _ => panic!("duration {s:?}"),
        }
    }
    assert!(digits.is_empty(), "duration {s:?}");
    Duration::from_secs(total)
}

// ---------------------------------------------------------------------------------------
// Dockerfile

struct Stage {
    from: String,
    /// Instructions with continuation lines joined: (INSTRUCTION, arguments).
    lines: Vec<(String, String)>,
}

fn dockerfile() -> Vec<Stage> {
    let text = read("deploy/Dockerfile");
    let mut joined = Vec::new();
    let mut cur = String::new();
    for line in text.lines() {
        let line = line.trim();
        if cur.is_empty() && (line.is_empty() || line.starts_with('#')) {
            continue;
        }
        if line.starts_with('#') {
            continue; // a comment inside a continued instruction
        }
        match line.strip_suffix('\\') {
            Some(part) => {
                cur.push_str(part);
                cur.push(' ');
            }
            None => {
                cur.push_str(line);
                joined.push(std::mem::take(&mut cur));
            }
        }
    }
    assert!(
        cur.is_empty(),
        "the Dockerfile ends inside a continued line"
    );
    let mut stages: Vec<Stage> = Vec::new();
    for l in joined {
        let (ins, args) = l.split_once(' ').unwrap_or((&l, ""));
        let ins = ins.to_ascii_uppercase();
        if ins == "FROM" {
            stages.push(Stage {
                from: args.trim().to_owned(),
                lines: Vec::new(),
            });
        } else {
            stages
                .last_mut()
                .expect("an instruction before FROM")
                .lines
                .push((ins, args.trim().to_owned()));
        }
    }
    stages
}

impl Stage {
    fn all(&self, ins: &str) -> Vec<&str> {
        self.lines
            .iter()
            .filter(|(i, _)| i == ins)
            .map(|(_, a)| a.as_str())
            .collect()
    }

    fn last(&self, ins: &str) -> &str {
        self.all(ins)
            .last()
            .copied()
            .unwrap_or_else(|| panic!("no {ins} in the stage FROM {}", self.from))
    }

    /// `ENV A=1 B=2` lines as a map.
    fn env(&self) -> HashMap<String, String> {
        self.all("ENV")
            .iter()
            .flat_map(|a| a.split_whitespace())
            .map(|kv| {
                let (k, v) = kv.split_once('=').expect("ENV KEY=VALUE");
                (k.to_owned(), v.trim_matches('"').to_owned())
            })
            .collect()
    }
}

fn json_array(args: &str, what: &str) -> Vec<String> {
    serde_json::from_str(args).unwrap_or_else(|e| panic!("{what} must be a JSON array: {e}"))
}

/// The runtime stage's numeric `USER uid:gid`.
fn image_uid() -> u32 {
    let stages = dockerfile();
    let runtime = stages.last().expect("a stage");
    let user = runtime.last("USER");
    user.split(':')
        .next()
        .and_then(|u| u.parse().ok())
        .unwrap_or_else(|| panic!("USER {user:?} should be numeric (runAsNonRoot needs it)"))
}

#[test]
fn the_dockerfile_builds_on_rust_and_runs_as_non_root_on_slim_debian() {
    let stages = dockerfile();
    assert_eq!(stages.len(), 2, "a builder and a runtime stage");
    let (builder, runtime) = (&stages[0], &stages[1]);
    assert!(
        builder.from.starts_with("rust:"),
        "builder: {}",
        builder.from
    );
    assert!(builder.from.ends_with(" AS builder"), "{}", builder.from);
    let image = runtime.from.split_whitespace().next().unwrap();
    assert!(
        image.starts_with("debian:") && image.ends_with("-slim"),
        "runtime: {image}"
    );
    // Same Debian release in both, so the binary finds the glibc it was linked with.
    let release = |from: &str| {
        from.split_whitespace()
            .next()
            .unwrap()
            .split(':')
            .nth(1)
            .unwrap()
            .rsplit('-')
            .find(|p| !p.chars().next().unwrap().is_ascii_digit() && *p != "slim")
            .map(str::to_owned)
    };
    assert_eq!(release(&builder.from), release(&runtime.from));
    assert!(
        builder
            .last("RUN")
            .contains("cargo build --release --locked"),
        "the builder builds the locked release"
    );
    assert!(
        runtime
            .all("COPY")
            .iter()
            .any(|c| c.contains("--from=builder")),
        "the runtime copies the binary from the builder"
    );

    // Non-root, numerically, after everything that needs root.
    let uid = image_uid();
    assert_ne!(uid, 0, "the image must not run as root");
    let user_at = runtime.lines.iter().position(|(i, _)| i == "USER").unwrap();
    let last_run = runtime.lines.iter().rposition(|(i, _)| i == "RUN").unwrap();
    assert!(last_run < user_at, "USER comes after the last RUN");

    // `serve --bind 0.0.0.0:PORT` only in the runtime stage, and nowhere else in the file.
    let entry = json_array(runtime.last("ENTRYPOINT"), "ENTRYPOINT");
    assert_eq!(entry, ["turnkey"]);
    let cmd = json_array(runtime.last("CMD"), "CMD");
    let command = turnkey_command(&cmd, "Dockerfile CMD");
    let Command::Serve(serve) = &command else {
        panic!("the image's CMD is not serve")
    };
    let bind = serve.bind.clone().expect("CMD gives --bind");
    assert!(bind.starts_with("0.0.0.0:"), "{bind}");
    assert!(
        builder.lines.iter().all(|(_, a)| !a.contains("0.0.0.0")),
        "the builder stage must not bind anything"
    );
    let port = port_of(&bind);
    assert_eq!(runtime.last("EXPOSE"), port.to_string());

    // The health check asks /healthz on the bound port.
    let check = runtime.last("HEALTHCHECK");
    assert!(
        check.contains(&format!("http://127.0.0.1:{port}/healthz")),
        "HEALTHCHECK: {check}"
    );
    assert_eq!(runtime.last("STOPSIGNAL"), "SIGTERM");

    // The image's environment is a configuration turnkey accepts, with its data in the
    // volume.
    let settings = settings_of(&command, None, &runtime.env(), "Dockerfile");
    let volume = json_array(runtime.last("VOLUME"), "VOLUME");
    assert!(
        volume
            .iter()
            .any(|v| settings.server.data_dir.starts_with(v)
                && settings.runtime.tools.workspace.starts_with(v)),
        "data_dir {:?} and workspace {:?} must be in the volume {volume:?}",
        settings.server.data_dir,
        settings.runtime.tools.workspace
    );
    assert_eq!(runtime.last("WORKDIR"), volume[0]);
}

#[test]
fn the_dockerignore_keeps_build_output_data_and_ci_venvs_out() {
    let ignore = read(".dockerignore");
    let entries: Vec<&str> = ignore
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    for needed in ["target/", "data/", ".ci/venv-*"] {
        assert!(entries.contains(&needed), ".dockerignore lacks {needed}");
    }
}

// ---------------------------------------------------------------------------------------
// docker compose

/// `${VAR}`, `${VAR:-default}` and `${VAR:?message}` as compose interpolates them, with
/// `vars` as the shell's environment.
fn interpolate(s: &str, vars: &HashMap<&str, &str>) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let end = rest[start..].find('}').expect("an unclosed ${") + start;
        let expr = &rest[start + 2..end];
        let (name, value) = if let Some((name, default)) = expr.split_once(":-") {
            (name, vars.get(name).copied().unwrap_or(default).to_owned())
        } else if let Some((name, message)) = expr.split_once(":?") {
            let v = vars.get(name).unwrap_or_else(|| {
                panic!("compose needs {name} ({message}); the test must set it")
            });
            (name, (*v).to_owned())
        } else {
            (expr, vars.get(expr).copied().unwrap_or_default().to_owned())
        };
        assert!(
            name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "{name}"
        );
        out.push_str(&value);
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

fn compose_env(service: &Yaml, vars: &HashMap<&str, &str>) -> HashMap<String, String> {
    let Some(env) = service.get("environment") else {
        return HashMap::new();
    };
    env.as_mapping()
        .expect("environment as a mapping")
        .iter()
        .map(|(k, v)| {
            let value = match v {
                Yaml::String(s) => interpolate(s, vars),
                Yaml::Number(n) => n.to_string(),
                other => panic!("environment value {other:?}"),
            };
            (k.as_str().expect("a name").to_owned(), value)
        })
        .collect()
}

/// `host:container[:ro]` volume entries of a service: container path to host path (relative
/// ones resolved against deploy/, as compose resolves them against the file's folder).
fn bind_mounts(service: &Yaml) -> BTreeMap<String, PathBuf> {
    strings(at(service, &["volumes"]))
        .into_iter()
        .filter_map(|v| {
            let mut parts = v.split(':');
            let (host, container) = (parts.next()?, parts.next()?);
            host.starts_with("./")
                .then(|| (container.to_owned(), repo().join("deploy").join(host)))
        })
        .collect()
}

fn depends_on(service: &Yaml) -> BTreeMap<String, String> {
    at(service, &["depends_on"])
        .as_mapping()
        .expect("depends_on with conditions")
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().unwrap().to_owned(),
                str_at(v, &["condition"]).to_owned(),
            )
        })
        .collect()
}

#[test]
fn compose_runs_migrate_once_then_two_replicas_on_postgres_behind_nginx() {
    let compose = yaml("deploy/docker-compose.yml");
    let services = at(&compose, &["services"]);
    let names: Vec<&str> = services
        .as_mapping()
        .unwrap()
        .keys()
        .map(|k| k.as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["postgres", "migrate", "turnkey-1", "turnkey-2", "proxy"]
    );
    let vars = HashMap::from([
        ("TURNKEY_OPERATOR_TOKEN", "tk_compose_test"),
        ("OPENAI_BASE_URL", "http://host.docker.internal:8000/v1"),
        ("OPENAI_MODEL", "local-model"),
    ]);

    // PostgreSQL reports health; migrate waits for it.
    let pg = at(services, &["postgres"]);
    assert!(str_at(pg, &["image"]).starts_with("postgres:"));
    assert!(strings(at(pg, &["healthcheck", "test"]))
        .join(" ")
        .contains("pg_isready"));
    let pg_env = compose_env(pg, &vars);

    let migrate = at(services, &["migrate"]);
    assert_eq!(
        depends_on(migrate),
        BTreeMap::from([("postgres".into(), "service_healthy".into())])
    );
    assert_eq!(str_at(migrate, &["restart"]), "no", "migrate is one-shot");
    let migrate_cmd = turnkey_command(&strings(at(migrate, &["command"])), "migrate");
    assert!(
        matches!(migrate_cmd, Command::Migrate(_)),
        "{migrate_cmd:?}"
    );

    // Both replicas: after migrate succeeded, the same config and database, a drain that
    // fits in stop_grace_period.
    let mut ports = Vec::new();
    let mut databases = Vec::new();
    for name in ["migrate", "turnkey-1", "turnkey-2"] {
        let service = at(services, &[name]);
        let command = turnkey_command(&strings(at(service, &["command"])), name);
        let config = config_flag(&command).expect("--config");
        let mounts = bind_mounts(service);
        let host = mounts
            .get(config.to_str().unwrap())
            .unwrap_or_else(|| panic!("{name}: --config {config:?} is not mounted"));
        let env = compose_env(service, &vars);
        let settings = settings_of(&command, Some(host), &env, name);
        assert!(
            settings.database.url.starts_with("postgres://"),
            "{name}: replicas share PostgreSQL, not {}",
            settings.database.url
        );
        // The database, user and password PostgreSQL is created with.
        let url = &settings.database.url;
        let expected = format!(
            "postgres://{}:{}@postgres:5432/{}",
            pg_env["POSTGRES_USER"], pg_env["POSTGRES_PASSWORD"], pg_env["POSTGRES_DB"]
        );
        assert_eq!(url, &expected, "{name}");
        databases.push(url.clone());
        if name == "migrate" {
            continue;
        }
        assert_eq!(
            depends_on(service),
            BTreeMap::from([("migrate".into(), "service_completed_successfully".into())]),
            "{name}"
        );
        assert!(matches!(command, Command::Serve(_)), "{name}: {command:?}");
        assert!(settings.server.bind.starts_with("0.0.0.0:"), "{name}");
        assert_eq!(
            settings.auth.operator_token.as_ref().map(Secret::expose),
            Some("tk_compose_test"),
            "{name}: the replicas share the operator token"
        );
        assert_eq!(
            settings.runtime.providers.len(),
            1,
            "{name}: OPENAI_* make a provider"
        );
        assert_eq!(str_at(service, &["stop_signal"]), "SIGTERM");
        let grace = seconds(str_at(service, &["stop_grace_period"]));
        let bound = drain_bound(&settings.server);
        assert!(
            grace >= bound,
            "{name}: stop_grace_period {grace:?} < drain bound {bound:?}"
        );
        ports.push(port_of(&settings.server.bind));
        // Each replica keeps its own data volume, and mounts the one shared workspace where
        // its settings put the tools' workspace.
        let volumes = strings(at(service, &["volumes"]));
        assert!(volumes
            .iter()
            .any(|v| v == &format!("{name}-data:/var/lib/turnkey")));
        let shared = format!("workspace:{}", settings.runtime.tools.workspace.display());
        assert!(
            volumes.contains(&shared),
            "{name}: {volumes:?} lacks {shared}"
        );
    }
    databases.dedup();
    assert_eq!(
        databases.len(),
        1,
        "migrate and the replicas use one database"
    );

    // nginx: after both replicas are healthy, routing to both on the port they bind.
    let proxy = at(services, &["proxy"]);
    assert!(str_at(proxy, &["image"]).starts_with("nginx:"));
    assert_eq!(
        depends_on(proxy),
        BTreeMap::from([
            ("turnkey-1".into(), "service_healthy".into()),
            ("turnkey-2".into(), "service_healthy".into()),
        ])
    );
    let mounts = bind_mounts(proxy);
    let conf = mounts
        .get("/etc/nginx/conf.d/default.conf")
        .expect("nginx.conf mounted");
    let conf = std::fs::read_to_string(conf).expect("nginx.conf");
    let upstream = conf
        .split("upstream turnkey {")
        .nth(1)
        .and_then(|rest| rest.split('}').next())
        .expect("an upstream turnkey block");
    assert!(conf.contains("proxy_pass http://turnkey;"));
    let upstreams: Vec<&str> = upstream
        .lines()
        .filter_map(|l| l.trim().strip_prefix("server "))
        .map(|l| l.split_whitespace().next().unwrap().trim_end_matches(';'))
        .collect();
    assert_eq!(
        upstreams,
        [
            format!("turnkey-1:{}", ports[0]),
            format!("turnkey-2:{}", ports[1])
        ]
    );
    nginx_passes_event_streams(&conf);
}

/// SSE through the proxy: no buffering, and idle streams kept open far longer than the
/// keep-alive comment interval.
fn nginx_passes_event_streams(conf: &str) {
    let directive = |name: &str| -> Vec<String> {
        conf.lines()
            .map(|l| l.split('#').next().unwrap().trim())
            .filter_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .map(|v| v.trim_end_matches(';').trim().to_owned())
            .collect()
    };
    let braces = conf.matches('{').count();
    assert_eq!(braces, conf.matches('}').count(), "nginx.conf braces");
    assert_eq!(directive("proxy_buffering"), ["off"]);
    assert_eq!(directive("proxy_http_version"), ["1.1"]);
    let keepalive = Duration::from_secs(Settings::default().server.sse_keepalive_s);
    for timeout in ["proxy_read_timeout", "proxy_send_timeout"] {
        let v = directive(timeout);
        assert_eq!(v.len(), 1, "{timeout}");
        assert!(
            seconds(&v[0]) >= keepalive * 4,
            "{timeout} {} would cut idle event streams",
            v[0]
        );
    }
    // WebSocket upgrade for /v1/ws.
    assert!(directive("proxy_set_header")
        .iter()
        .any(|h| h.starts_with("Upgrade ")));
}

// ---------------------------------------------------------------------------------------
// systemd

/// `[Section]` → key → values (a key may repeat, e.g. Environment=).
fn unit_file(text: &str) -> BTreeMap<String, BTreeMap<String, Vec<String>>> {
    let mut sections: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    let mut section = None;
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = Some(name.to_owned());
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("not key=value: {line}"));
        let section = section.clone().expect("a key before any [Section]");
        sections
            .entry(section)
            .or_default()
            .entry(k.trim().to_owned())
            .or_default()
            .push(v.trim().to_owned());
    }
    sections
}

#[test]
fn the_systemd_unit_runs_real_flags_hardened_and_waits_out_the_drain() {
    let unit = unit_file(&read("deploy/turnkey.service"));
    assert_eq!(
        unit.keys().collect::<Vec<_>>(),
        ["Install", "Service", "Unit"]
    );
    let service = &unit["Service"];
    let one = |k: &str| -> &str {
        let v = service
            .get(k)
            .unwrap_or_else(|| panic!("[Service] has no {k}="));
        assert_eq!(v.len(), 1, "{k}= more than once");
        &v[0]
    };
    let exec: Vec<String> = one("ExecStart")
        .split_whitespace()
        .map(String::from)
        .collect();
    assert!(
        exec[0].starts_with('/') && exec[0].ends_with("/turnkey"),
        "ExecStart needs an absolute path: {}",
        exec[0]
    );
    let command = turnkey_command(&exec[1..], "ExecStart");
    assert!(matches!(command, Command::Serve(_)), "{command:?}");
    // The config it names is the example file the README tells to install there.
    assert_eq!(
        config_flag(&command).as_deref(),
        Some(Path::new("/etc/turnkey/turnkey.toml"))
    );
    let env: HashMap<String, String> = service["Environment"]
        .iter()
        .map(|e| {
            let (k, v) = e.split_once('=').expect("Environment=KEY=VALUE");
            (k.to_owned(), v.to_owned())
        })
        .collect();
    let example = repo().join("deploy/turnkey.example.toml");
    let settings = settings_of(&command, Some(&example), &env, "turnkey.service");

    // Its state lives in the StateDirectory systemd creates and hands to the dynamic user.
    let state = Path::new("/var/lib").join(one("StateDirectory"));
    assert!(settings.server.data_dir.starts_with(&state), "data_dir");
    assert!(
        settings.runtime.tools.workspace.starts_with(&state),
        "workspace"
    );
    assert!(
        settings.database.url.contains(&*state.to_string_lossy()),
        "the default SQLite file is in the state directory: {}",
        settings.database.url
    );
    assert_eq!(Path::new(one("WorkingDirectory")), state);

    // Stop: SIGTERM to turnkey alone, and SIGKILL only after the drain bound.
    assert_eq!(one("KillSignal"), "SIGTERM");
    assert_eq!(one("KillMode"), "mixed");
    let timeout = seconds(one("TimeoutStopSec"));
    let bound = drain_bound(&settings.server);
    assert!(
        timeout >= bound,
        "TimeoutStopSec {timeout:?} < drain bound {bound:?}"
    );

    for (key, value) in [
        ("DynamicUser", "yes"),
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("PrivateDevices", "yes"),
        ("RestrictSUIDSGID", "yes"),
        ("CapabilityBoundingSet", ""),
    ] {
        assert_eq!(one(key), value, "{key}");
    }
    assert_eq!(unit["Install"]["WantedBy"], ["multi-user.target"]);
}

// ---------------------------------------------------------------------------------------
// Kubernetes

fn k8s() -> BTreeMap<String, Yaml> {
    let kustomization = yaml("deploy/k8s/kustomization.yaml");
    assert_eq!(str_at(&kustomization, &["kind"]), "Kustomization");
    strings(at(&kustomization, &["resources"]))
        .into_iter()
        .map(|file| {
            let doc = yaml(&format!("deploy/k8s/{file}"));
            (str_at(&doc, &["kind"]).to_owned(), doc)
        })
        .collect()
}

fn env_of(container: &Yaml, secrets: &HashMap<&str, &str>) -> HashMap<String, String> {
    let Some(list) = container.get("env") else {
        return HashMap::new();
    };
    list.as_sequence()
        .unwrap()
        .iter()
        .map(|e| {
            let name = str_at(e, &["name"]).to_owned();
            let value = match e.get("value") {
                Some(v) => v.as_str().expect("a string value").to_owned(),
                None => {
                    let key = str_at(e, &["valueFrom", "secretKeyRef", "key"]);
                    assert_eq!(str_at(e, &["valueFrom", "secretKeyRef", "name"]), "turnkey");
                    (*secrets
                        .get(key)
                        .unwrap_or_else(|| panic!("secret key {key} is not documented")))
                    .to_owned()
                }
            };
            (name, value)
        })
        .collect()
}

fn labels(v: &Yaml) -> &Mapping {
    v.as_mapping().expect("labels")
}

#[actix_web::test]
async fn the_kubernetes_manifests_probe_the_real_endpoints_and_outlast_the_drain() {
    let docs = k8s();
    assert_eq!(
        docs.keys().collect::<Vec<_>>(),
        [
            "ConfigMap",
            "Deployment",
            "PersistentVolumeClaim",
            "PodDisruptionBudget",
            "Service"
        ]
    );
    // The keys the kustomization's comment tells to put in the Secret.
    let secrets = HashMap::from([
        (
            "database-url",
            "postgres://turnkey:pw@postgres:5432/turnkey",
        ),
        ("operator-token", "tk_k8s_test"),
        ("openai-api-key", "sk-test"),
    ]);
    let readme = read("deploy/k8s/kustomization.yaml");
    for key in secrets.keys() {
        assert!(readme.contains(&format!("--from-literal={key}=")), "{key}");
    }

    let deployment = &docs["Deployment"];
    let pod = at(deployment, &["spec", "template", "spec"]);
    let container = at(pod, &["containers", "0"]);
    let args = strings(at(container, &["args"]));
    let command = turnkey_command(&args, "the Deployment");
    assert!(matches!(command, Command::Serve(_)), "{command:?}");

    // The tools' workspace is one ReadWriteMany claim every pod mounts.
    let claim = &docs["PersistentVolumeClaim"];
    assert_eq!(
        strings(at(claim, &["spec", "accessModes"])),
        ["ReadWriteMany"]
    );
    let shared = at(container, &["volumeMounts"])
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| str_at(m, &["mountPath"]) == "/var/lib/turnkey/workspace")
        .expect("the workspace is mounted");
    let volume = at(pod, &["volumes"])
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| str_at(v, &["name"]) == str_at(shared, &["name"]))
        .expect("the workspace volume");
    assert_eq!(
        str_at(volume, &["persistentVolumeClaim", "claimName"]),
        str_at(claim, &["metadata", "name"])
    );

    // --config is the ConfigMap's file, mounted where the args say.
    let config = config_flag(&command).expect("--config");
    let mount = at(container, &["volumeMounts"])
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| config.starts_with(str_at(m, &["mountPath"])))
        .expect("the config's folder is mounted");
    let volume = at(pod, &["volumes"])
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| str_at(v, &["name"]) == str_at(mount, &["name"]))
        .expect("the mount's volume");
    let configmap = &docs["ConfigMap"];
    assert_eq!(
        str_at(volume, &["configMap", "name"]),
        str_at(configmap, &["metadata", "name"])
    );
    let file = config.file_name().unwrap().to_str().unwrap();
    let dir = TempDir::new().unwrap();
    let local = dir.path().join(file);
    std::fs::write(&local, str_at(configmap, &["data", file])).unwrap();
    let env = env_of(container, &secrets);
    let settings = settings_of(&command, Some(&local), &env, "k8s");
    assert!(settings.database.url.starts_with("postgres://"));
    assert_eq!(
        settings.auth.operator_token.as_ref().map(Secret::expose),
        Some("tk_k8s_test")
    );
    assert_eq!(settings.runtime.providers.len(), 1);
    // The provider reads its key from the variable the Secret fills.
    let key_env = settings.runtime.providers[0]
        .api_key_env
        .clone()
        .expect("api_key_env");
    assert_eq!(env.get(&key_env).map(String::as_str), Some("sk-test"));
    let init = at(pod, &["initContainers", "0"]);
    let migrate = turnkey_command(&strings(at(init, &["args"])), "the init container");
    assert!(matches!(migrate, Command::Migrate(_)), "{migrate:?}");
    assert_eq!(config_flag(&migrate), Some(config.clone()));
    let migrate_env = env_of(init, &secrets);
    assert_eq!(
        migrate_env.get("DATABASE_URL"),
        Some(&settings.database.url)
    );

    // Probes: readiness on /readyz, liveness on /healthz, both on the port the server binds.
    let port = port_of(&settings.server.bind);
    assert!(settings.server.bind.starts_with("0.0.0.0:"));
    let named: Vec<(&str, i64)> = at(container, &["ports"])
        .as_sequence()
        .unwrap()
        .iter()
        .map(|p| {
            (
                str_at(p, &["name"]),
                at(p, &["containerPort"]).as_i64().unwrap(),
            )
        })
        .collect();
    let probe = |kind: &str| -> (String, i64) {
        let get = at(container, &[kind, "httpGet"]);
        let port = match at(get, &["port"]) {
            Yaml::String(name) => {
                named
                    .iter()
                    .find(|(n, _)| n == name)
                    .unwrap_or_else(|| panic!("{kind}: no port named {name}"))
                    .1
            }
            other => other.as_i64().unwrap(),
        };
        (str_at(get, &["path"]).to_owned(), port)
    };
    let (ready, ready_port) = probe("readinessProbe");
    let (live, live_port) = probe("livenessProbe");
    let (startup, startup_port) = probe("startupProbe");
    assert_eq!(ready, "/readyz");
    assert_eq!(live, "/healthz");
    assert_eq!(startup, "/healthz");
    for p in [ready_port, live_port, startup_port] {
        assert_eq!(
            p,
            i64::from(port),
            "a probe on another port than the server's"
        );
    }
    // The paths answer 200 on the real app.
    let tmp = TempDir::new().unwrap();
    let (app, _state) = test_app!(&tmp);
    for path in [&ready, &live] {
        let req = actix_web::test::TestRequest::get().uri(path).to_request();
        let res = actix_web::test::call_service(&app, req).await;
        assert_eq!(res.status(), 200, "{path}");
    }

    // Termination: the preStop pause and the whole drain fit in the grace period.
    let grace = Duration::from_secs(
        at(pod, &["terminationGracePeriodSeconds"])
            .as_u64()
            .unwrap(),
    );
    let pre_stop = strings(at(container, &["lifecycle", "preStop", "exec", "command"]));
    assert_eq!(pre_stop[0], "/bin/sleep");
    let pause = seconds(&pre_stop[1]);
    let bound = drain_bound(&settings.server);
    assert!(
        grace >= pause + bound,
        "terminationGracePeriodSeconds {grace:?} < preStop {pause:?} + drain bound {bound:?}"
    );

    // Non-root: the pod runs as the image's user, without privilege escalation.
    let security = at(pod, &["securityContext"]);
    assert_eq!(at(security, &["runAsNonRoot"]).as_bool(), Some(true));
    assert_eq!(
        at(security, &["runAsUser"]).as_u64(),
        Some(u64::from(image_uid()))
    );
    for c in [container, init] {
        let sc = at(c, &["securityContext"]);
        assert_eq!(at(sc, &["allowPrivilegeEscalation"]).as_bool(), Some(false));
        assert_eq!(at(sc, &["readOnlyRootFilesystem"]).as_bool(), Some(true));
    }
    // With a read-only root, data_dir and the workspace must be on a mounted volume.
    let mounted: Vec<&str> = at(container, &["volumeMounts"])
        .as_sequence()
        .unwrap()
        .iter()
        .map(|m| str_at(m, &["mountPath"]))
        .collect();
    for dir in [&settings.server.data_dir, &settings.runtime.tools.workspace] {
        assert!(
            mounted.iter().any(|m| dir.starts_with(m)),
            "{dir:?} is not on a volume"
        );
    }

    // Service, PodDisruptionBudget and Deployment select the pods the template labels.
    let pod_labels = labels(at(deployment, &["spec", "template", "metadata", "labels"]));
    let selects = |selector: &Yaml, what: &str| {
        for (k, v) in labels(selector) {
            assert_eq!(pod_labels.get(k), Some(v), "{what} selects {k:?}={v:?}");
        }
    };
    selects(
        at(deployment, &["spec", "selector", "matchLabels"]),
        "the Deployment",
    );
    let service = &docs["Service"];
    selects(at(service, &["spec", "selector"]), "the Service");
    assert_eq!(
        str_at(service, &["spec", "ports", "0", "targetPort"]),
        "http"
    );
    let pdb = &docs["PodDisruptionBudget"];
    selects(
        at(pdb, &["spec", "selector", "matchLabels"]),
        "the PodDisruptionBudget",
    );
    let replicas = at(deployment, &["spec", "replicas"]).as_i64().unwrap();
    let min = at(pdb, &["spec", "minAvailable"]).as_i64().unwrap();
    assert!(
        replicas >= 2 && min >= 1 && min < replicas,
        "{min} of {replicas}"
    );
}

// ---------------------------------------------------------------------------------------
// README

#[test]
fn the_readme_documents_every_deployment_file() {
    let readme = read("README.md");
    let deploy = readme
        .split("\n## Deploy")
        .nth(1)
        .expect("README has a Deploy section");
    let section = deploy.split("\n## ").next().unwrap();
    for file in [
        "deploy/Dockerfile",
        "deploy/docker-compose.yml",
        "deploy/nginx.conf",
        "deploy/turnkey.compose.toml",
        "deploy/turnkey.service",
        "deploy/k8s",
        "[telemetry]",
    ] {
        assert!(
            section.contains(file),
            "the Deploy section does not name {file}"
        );
    }
}

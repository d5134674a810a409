//! Shared set-up of the store tests: a fresh migrated SQLite file or PostgreSQL database per
//! test, the `on_both!` macro that runs one fact against both, and small builders.
#![allow(clippy::expect_used, clippy::unwrap_used, dead_code)]
use serde_json::json;
use turnkey_storage::*;

/// A fresh, migrated SQLite file.
pub async fn sqlite() -> Store {
    let dir = std::env::temp_dir().join(format!("tk-store-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let s = Store::connect(&format!("sqlite://{}/t.db?mode=rwc", dir.display()))
        .await
        .expect("connect");
    s.migrate().await.expect("migrate");
    s
}

/// A fresh, migrated PostgreSQL database on 127.0.0.1:5432, or `None` (with a one-line reason)
/// when the server is not there and `TURNKEY_REQUIRE_PG` is not set.
pub async fn postgres() -> Option<(Store, String)> {
    use sea_orm::ConnectionTrait;
    let admin = match Store::connect("postgres://postgres@127.0.0.1:5432/test").await {
        Ok(a) => a,
        Err(e) if std::env::var("TURNKEY_REQUIRE_PG").as_deref() != Ok("1") => {
            println!("skipping: PostgreSQL not reachable at 127.0.0.1:5432 ({e})");
            return None;
        }
        Err(e) => panic!("TURNKEY_REQUIRE_PG=1 but PostgreSQL is not reachable: {e}"),
    };
    let name = format!("tk_store_{}", uuid::Uuid::new_v4().simple());
    admin
        .connection()
        .execute_unprepared(&format!("CREATE DATABASE {name}"))
        .await
        .expect("create database");
    let s = Store::connect(&format!("postgres://postgres@127.0.0.1:5432/{name}"))
        .await
        .expect("connect");
    s.migrate().await.expect("migrate");
    Some((s, name))
}

/// Drops a database made by `postgres()`, so that runs leave no residue on the server.
pub async fn drop_postgres(name: &str) {
    use sea_orm::ConnectionTrait;
    let admin = Store::connect("postgres://postgres@127.0.0.1:5432/test")
        .await
        .expect("connect");
    admin
        .connection()
        .execute_unprepared(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await
        .expect("drop database");
}

/// Runs one fact against both backends: `name::sqlite` and `name::postgres`.
macro_rules! on_both {
    ($name:ident) => {
        mod $name {
            #[tokio::test]
            pub async fn sqlite() {
                super::$name($crate::common::sqlite().await).await;
            }
            #[tokio::test]
            pub async fn postgres() {
                if let Some((s, db)) = $crate::common::postgres().await {
                    super::$name(s.clone()).await;
                    s.connection().clone().close().await.expect("close");
                    $crate::common::drop_postgres(&db).await;
                }
            }
        }
    };
}

pub async fn session(s: &Store) -> SessionId {
    let id = SessionId::new();
    s.create_session(NewSession {
        id,
        owner: "operator".into(),
        platform: "api".into(),
        chat_key: None,
        title: None,
        model: None,
        system_message: None,
        system_prompt: "sys".into(),
        workspace_snapshot: None,
        seed: Vec::new(),
    })
    .await
    .expect("session");
    id
}

pub fn owner() -> Owner {
    Owner {
        instance: InstanceId::new(),
        pid: 1,
        host: "h".into(),
    }
}

pub fn new_adm(session: SessionId, req: &str, text: &str) -> NewAdmission {
    NewAdmission {
        session_id: session,
        request_id: req.into(),
        payload_digest: format!("d-{text}"),
        payload: json!({"text": text}),
        principal: "operator".into(),
        surface: "api".into(),
        retry_of: None,
        title: None,
    }
}

pub async fn lease(s: &Store, sid: SessionId, o: &Owner, ttl_ms: i64) -> Option<Fence> {
    s.try_acquire_lease(
        LeaseClaim {
            session: sid,
            owner: o.clone(),
            platform: "test",
            ttl_ms,
        },
        std::sync::Arc::new(|_: &Owner| false),
    )
    .await
    .expect("lease")
}

/// A `message.delta` of `turn` with text `d{i}`.
pub fn delta(sid: SessionId, turn: TurnId, i: usize) -> NewEvent {
    NewEvent {
        session_id: sid,
        kind: EventKind::MessageDelta,
        turn_id: Some(turn),
        admission_id: None,
        data: json!({ "text": format!("d{i}") }),
    }
}

pub fn died() -> UnknownCause {
    UnknownCause {
        reason: "owner_died".into(),
        message: "the process that ran this turn stopped".into(),
    }
}

/// Claims `sid`'s head for a fresh turn in the commit that takes the lease.
pub async fn take_and_claim(
    s: &Store,
    sid: SessionId,
    o: &Owner,
    ttl_ms: i64,
) -> (Fence, TurnId, Option<Claimed>) {
    let turn = TurnId::new();
    let user_row = std::sync::Arc::new(|a: &Admission| NewMessage {
        id: MessageId::new(),
        role: Some(MessageRole::User),
        content: Some(a.payload["text"].as_str().unwrap_or_default().to_owned()),
        turn_id: None,
        admission_id: Some(a.id),
        ..Default::default()
    });
    let claim = LeaseClaim {
        session: sid,
        owner: o.clone(),
        platform: "t",
        ttl_ms,
    };
    let how = ClaimAs { turn, user_row };
    let (fence, claimed) = s
        .try_acquire_lease_and_claim(claim, std::sync::Arc::new(|_: &Owner| false), Some(how))
        .await
        .expect("take")
        .expect("free");
    (fence, turn, claimed)
}

/// The assistant's answer `text` as a row of `turn`.
pub fn answer_row(turn: TurnId, text: &str) -> NewMessage {
    NewMessage {
        id: MessageId::new(),
        role: Some(MessageRole::Assistant),
        content: Some(text.into()),
        turn_id: Some(turn),
        ..Default::default()
    }
}

/// The end of a `turn` of `admission` that completed, with its rows and its calls' usage.
pub fn completed_end(
    admission: AdmissionId,
    turn: TurnId,
    messages: Vec<NewMessage>,
    usage: Vec<NewUsage>,
) -> TurnEnd {
    TurnEnd {
        reply: None,
        admission_id: admission,
        turn_id: turn,
        messages,
        close_tail: None,
        usage,
        outcome: json!({"result": "completed"}),
        events: vec![],
    }
}

/// How many migrations `Migrator::down` must undo to undo `name` (and every one after it).
#[allow(dead_code)]
pub fn migrations_through(name: &str) -> u32 {
    use migration::MigratorTrait;
    let names: Vec<String> = migration::Migrator::migrations()
        .iter()
        .map(|m| m.name().to_owned())
        .collect();
    let at = names
        .iter()
        .position(|n| n == name)
        .unwrap_or_else(|| panic!("no migration {name}"));
    u32::try_from(names.len() - at).expect("few migrations")
}

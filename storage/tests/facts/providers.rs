//! Providers connected at run time (issue 26), on SQLite and PostgreSQL: stored once per name
//! with their audit entry in the same commit, listed in the order they were connected, removed
//! once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use turnkey_storage::*;

fn provider(name: &str, sealed: Option<&str>) -> ConnectedProvider {
    ConnectedProvider {
        name: name.into(),
        kind: "openai".into(),
        base_url: "http://127.0.0.1:11434/v1".into(),
        model: "llama3.2".into(),
        api_key_sealed: sealed.map(str::to_owned),
        context_window: Some(32_000),
        vision: None,
        created_at: 0,
        created_by: "operator".into(),
    }
}

on_both!(r8_4_a_provider_is_connected_once_listed_in_order_and_removed_once);
async fn r8_4_a_provider_is_connected_once_listed_in_order_and_removed_once(s: Store) {
    assert!(s.connected_providers().await.unwrap().is_empty());
    let first = s
        .connect_provider(provider("local", Some("v1:sealed")))
        .await
        .unwrap()
        .expect("stored");
    assert!(first.created_at > 0);
    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    s.connect_provider(provider("hosted", None))
        .await
        .unwrap()
        .expect("stored");
    assert_eq!(
        s.connect_provider(provider("local", None)).await.unwrap(),
        None,
        "a name is taken once"
    );
    let listed = s.connected_providers().await.unwrap();
    let names: Vec<&str> = listed.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        ["local", "hosted"],
        "in the order they were connected"
    );
    assert_eq!(listed[0], first, "as stored, the sealed key untouched");
    assert!(s.remove_provider("local", "operator").await.unwrap());
    assert!(
        !s.remove_provider("local", "operator").await.unwrap(),
        "removed once"
    );
    assert!(!s.remove_provider("nothing", "operator").await.unwrap());
    let names: Vec<String> = s
        .connected_providers()
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(names, ["hosted"]);
    let audit = s.audit_entries(0, 100).await.unwrap();
    let actions: Vec<(&str, &str)> = audit
        .iter()
        .map(|e| (e.action.as_str(), e.target.as_str()))
        .collect();
    assert_eq!(
        actions,
        [
            ("provider.connected", "local"),
            ("provider.connected", "hosted"),
            ("provider.removed", "local")
        ],
        "each change audited once, a refused one not at all"
    );
}

//! Files in the store (issue 26), on SQLite and PostgreSQL: the pruner of uploads never
//! attached finds the files stored before a time, oldest first and bounded, and deletes those
//! no admission names.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use turnkey_storage::*;

on_both!(r2_2_old_unattached_uploads_are_found_and_deleted);
async fn r2_2_old_unattached_uploads_are_found_and_deleted(s: Store) {
    let a = s
        .put_file("alice", "a.txt", "text/plain", b"first")
        .await
        .unwrap();
    let b = s
        .put_file("bob", "b.txt", "text/plain", b"second")
        .await
        .unwrap();
    let cutoff = now_ms() + 1;
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let late = s
        .put_file("alice", "c.txt", "text/plain", b"third")
        .await
        .unwrap();
    let old = s.files_created_before(cutoff, 10).await.unwrap();
    let mut expected = vec![a.id.clone(), b.id.clone()];
    expected.sort();
    let mut got = old.clone();
    got.sort();
    assert_eq!(got, expected, "the two stored before the cutoff");
    assert_eq!(
        s.files_created_before(cutoff, 1).await.unwrap().len(),
        1,
        "bounded"
    );
    assert_eq!(s.delete_unreferenced_files(&old).await.unwrap(), 2);
    assert!(s.files_created_before(cutoff, 10).await.unwrap().is_empty());
    assert_eq!(
        s.files_created_before(now_ms() + 1, 10).await.unwrap(),
        [late.id],
        "the later one stays"
    );
}

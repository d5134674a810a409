//! Signs of life below the text: every chunk of bytes a provider's stream delivers (an SSE
//! keep-alive comment, a tool call's argument fragments, a reasoning block) shows the call is
//! alive, though none of it reaches the `DeltaSink`. A caller that watches a call's liveness
//! (the turn's watchdog, SPEC R4.3) runs the call inside [`on_bytes`].
use std::future::Future;
use std::sync::Arc;

/// What a call made inside [`on_bytes`] calls for each chunk of bytes its stream reads.
pub type BytesSeen = Arc<dyn Fn() + Send + Sync>;

tokio::task_local! {
    static ON_BYTES: BytesSeen;
}

/// Runs `call` (a `Provider::chat`) with `seen` called for every chunk of bytes its stream
/// reads. A task-local, so that the `Provider` trait and every client keep their signatures.
pub async fn on_bytes<F: Future>(seen: BytesSeen, call: F) -> F::Output {
    ON_BYTES.scope(seen, call).await
}

/// Called by the stream reader for each chunk; nothing outside [`on_bytes`].
pub(crate) fn bytes_arrived() {
    // Outside a scope there is no one watching.
    ON_BYTES.try_with(|seen| seen()).unwrap_or(());
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn r4_3_bytes_are_reported_inside_the_scope_only() {
        let count = Arc::new(AtomicUsize::new(0));
        let seen = count.clone();
        bytes_arrived();
        on_bytes(
            Arc::new(move || {
                seen.fetch_add(1, Ordering::Relaxed);
            }),
            async {
                bytes_arrived();
                tokio::task::yield_now().await;
                bytes_arrived();
            },
        )
        .await;
        bytes_arrived();
        assert_eq!(count.load(Ordering::Relaxed), 2);
    }
}

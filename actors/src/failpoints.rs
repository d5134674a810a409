//! Crash points for the failure-matrix tests (SPEC R12). With `FAILPOINTS=name=return` set,
//! reaching `kill_point!("name")` SIGKILLs this process: nothing after that point runs, exactly
//! as if the machine had died there.
//!
//! Points: `admission.after_commit`, `turn.after_claim`, `turn.after_resume` (the take-over
//! committed), `tool.after_planned` (calls recorded, none started), `tool.before_result` (a call
//! ran, its result not saved), `steer.after_carry`, `coalesce.after_commit`,
//! `compression.after_commit`, `outbox.before_send` (a platform message committed, nothing sent)
//! and `outbox.mid_send` (the platform took it, the row still says `sending`).

/// Reads the `FAILPOINTS` environment variable, once per process.
pub fn init() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let scenario = fail::FailScenario::setup();
        // The scenario must outlive the process: tearing it down would disable the points. It
        // holds a global lock for its whole life, so a second `setup` would wait forever, which
        // is why this runs only once (several gateways may start in one test process).
        std::mem::forget(scenario);
    });
}

/// Ends the process at once with SIGKILL: no destructors, no flushes, no shutdown hooks.
pub fn kill_self(point: &str) -> ! {
    eprintln!("failpoint {point}: SIGKILL");
    // If raising fails (it cannot for SIGKILL), abort is the next most abrupt end.
    let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    std::process::abort()
}

/// Kills the process here when the named failpoint is configured.
#[macro_export]
macro_rules! kill_point {
    ($name:literal) => {
        fail::fail_point!($name, |_| $crate::failpoints::kill_self($name))
    };
}

#[cfg(test)]
mod tests {
    #[test]
    fn init_twice_does_not_block() {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            super::init();
            super::init();
            tx.send(()).expect("send");
        });
        assert!(
            rx.recv_timeout(std::time::Duration::from_secs(5)).is_ok(),
            "a second init must not wait on the first scenario's lock"
        );
    }
}

//! Crash points for the failure-matrix tests (SPEC R12). With `FAILPOINTS=name=return` set,
//! reaching `kill_point!("name")` SIGKILLs this process: nothing after that point runs, exactly
//! as if the machine had died there.

/// Reads the `FAILPOINTS` environment variable once, at start-up.
pub fn init() {
    let scenario = fail::FailScenario::setup();
    // The scenario must outlive the process; tearing it down would disable the points.
    std::mem::forget(scenario);
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

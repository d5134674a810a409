//! The child's side: between fork and exec it sets its limits and `no_new_privs`, enters the
//! Landlock domain its parent prepared and installs the seccomp filter. Only system calls
//! happen here (no allocation, no lock): the parent is multi-threaded, and a forked child of
//! such a process may only do async-signal-safe work. The ruleset was built in the parent
//! and is passed as a file descriptor, as Go's `SysProcAttr` does for Landlock.
#![allow(unsafe_code)]

use super::Limits;
use nix::sys::resource::{getrlimit, setrlimit, RLIM_INFINITY};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

pub(super) fn install(
    cmd: &mut tokio::process::Command,
    ruleset: Option<OwnedFd>,
    filter: Option<Arc<seccompiler::BpfProgram>>,
    limits: Limits,
) {
    // The closure owns the ruleset: it stays open in the parent until the command is dropped,
    // and is closed in the child by exec (Landlock opens it close-on-exec).
    let confine = move || confine_self(ruleset.as_ref(), filter.as_deref(), limits);
    // SAFETY: `confine_self` only makes system calls (setrlimit, prctl, landlock_restrict_self,
    // seccomp) on values built before the fork; it neither allocates nor takes a lock, and
    // its errors are plain errno values.
    unsafe {
        cmd.pre_exec(confine);
    }
}

fn confine_self(
    ruleset: Option<&OwnedFd>,
    filter: Option<&seccompiler::BpfProgram>,
    limits: Limits,
) -> io::Result<()> {
    for (resource, value) in limits.pairs() {
        let Some(value) = value else { continue };
        let (_, hard) = getrlimit(resource).map_err(errno)?;
        // Never raise: a lower limit set around turnkey stays.
        if hard != RLIM_INFINITY && hard <= value {
            continue;
        }
        setrlimit(resource, value, value).map_err(errno)?;
    }
    nix::sys::prctl::set_no_new_privs().map_err(errno)?;
    if let Some(ruleset) = ruleset {
        // SAFETY: a plain system call on a descriptor this closure owns; flags 0.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_landlock_restrict_self,
                ruleset.as_raw_fd(),
                0 as libc::c_uint,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    if let Some(filter) = filter {
        seccompiler::apply_filter(filter).map_err(|e| match e {
            seccompiler::Error::Prctl(e) | seccompiler::Error::Seccomp(e) => e,
            _ => io::Error::from_raw_os_error(libc::EINVAL),
        })?;
    }
    Ok(())
}

fn errno(e: nix::errno::Errno) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

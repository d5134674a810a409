//! Resource limits a confined child sets on itself (`setrlimit`, inherited by everything it
//! starts): CPU seconds per process, the largest file it may write, and the processes its
//! user may have.
//!
//! `RLIMIT_NPROC` counts every process and thread of the child's real user, turnkey's own
//! included, and the kernel ignores it for root: it caps a fork bomb when turnkey runs as a
//! user of its own (deploy/ runs it as uid 10001), not when it runs as root; there, a
//! container's pids limit (`docker run --pids-limit`, the pod's pid limit) is what caps it.
use nix::sys::resource::Resource;

/// Limits of one kind of child; `None` leaves the inherited limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// `RLIMIT_CPU`: CPU seconds each process may use (SIGXCPU, then SIGKILL).
    pub cpu_s: Option<u64>,
    /// `RLIMIT_FSIZE`: the largest file a process may write (SIGXFSZ past it).
    pub file_bytes: Option<u64>,
    /// `RLIMIT_NPROC`: processes and threads of the real user, at most.
    pub processes: Option<u64>,
}

const GIB: u64 = 1024 * 1024 * 1024;
/// Generous: the owning user's own threads (the gateway's pool) count against it too.
const PROCESSES: u64 = 4096;

impl Limits {
    pub const NONE: Self = Self {
        cpu_s: None,
        file_bytes: None,
        processes: None,
    };

    /// A `terminal` command: it is killed after at most 600 s of wall time, so 900 CPU
    /// seconds per process only stops a runaway that keeps several cores busy.
    pub const COMMAND: Self = Self {
        cpu_s: Some(900),
        file_bytes: Some(4 * GIB),
        processes: Some(PROCESSES),
    };

    /// A background command: it may run for hours (a dev server, a long build).
    pub const BACKGROUND: Self = Self {
        cpu_s: Some(24 * 3600),
        file_bytes: Some(4 * GIB),
        processes: Some(PROCESSES),
    };

    /// An MCP server lives as long as the gateway: no CPU limit, which would end it after
    /// days of ordinary work.
    pub const SERVER: Self = Self {
        cpu_s: None,
        file_bytes: Some(4 * GIB),
        processes: Some(PROCESSES),
    };

    /// `(resource, value)` pairs to set.
    pub(super) fn pairs(&self) -> [(Resource, Option<u64>); 3] {
        [
            (Resource::RLIMIT_CPU, self.cpu_s),
            (Resource::RLIMIT_FSIZE, self.file_bytes),
            (Resource::RLIMIT_NPROC, self.processes),
        ]
    }
}

//! The OS sandbox (SPEC R13.7): what the kernel confines a child to, beyond the path checks of
//! `sandbox.rs`. A `terminal` command, a background command (its wrapper included) and an MCP
//! server run under Landlock (write only in their workspace, their own temp dir and a few
//! devices; read and execute the rest), with `no_new_privs`, resource limits, and — unless
//! `tools.sandbox_network` — no network: Landlock's TCP rules and a seccomp filter on `socket`.
//!
//! The kernel is probed once at start-up ([`Sandbox::new`]); each spawn then prepares its
//! ruleset and filter in the parent ([`Sandbox::prepare`]) and the child only makes the few
//! system calls that apply them, between fork and exec (`child.rs`).
//!
//! Why the parent builds and the child only applies: the gateway is multi-threaded, and a forked
//! child of such a process may only do async-signal-safe work (another thread may hold the
//! allocator's lock at the fork). The ruleset is a close-on-exec file descriptor; the filter is a
//! slice the kernel copies. A failure in the child fails the spawn with its errno, so a command
//! never runs less confined than the state says. Each child gets its own ruleset because its
//! writable directories differ (the workspace and a private `TMPDIR`). Landlock is inherited and
//! cannot be dropped, so whatever the command starts stays inside.
//!
//! Files: `probe.rs` (the kernel's Landlock ABI and seccomp support), `rules.rs` (one child's
//! ruleset), `seccomp.rs` (the BPF program), `limits.rs` (rlimits per kind of child), `child.rs`
//! (the only code that runs between fork and exec: system calls only, no allocation).
mod child;
#[cfg(test)]
mod isolation_tests;
mod limits;
mod probe;
mod rules;
mod seccomp;
#[cfg(test)]
mod tests;

pub use limits::Limits;
pub use probe::Kernel;

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `tools.sandbox`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxMode {
    /// Confine with what the kernel offers; where it offers nothing, warn and run unconfined.
    #[default]
    Auto,
    /// Confine, or refuse to start.
    Landlock,
    /// No confinement at all.
    Off,
}

impl SandboxMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Landlock => "landlock",
            Self::Off => "off",
        }
    }
}

/// What the sandbox does on this kernel: shown by `/readyz`, `/metrics` and `doctor`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SandboxState {
    pub mode: SandboxMode,
    /// Every child is confined by Landlock to its workspace and temp dir.
    pub enforced: bool,
    /// The kernel's Landlock ABI version; 0 when Landlock is missing or disabled.
    pub landlock_abi: u32,
    /// `tools.sandbox_network`: children may reach the network.
    pub network_allowed: bool,
    /// Network is refused to children (by either mechanism below).
    pub network_denied: bool,
    /// Landlock's TCP bind/connect rules are in force (ABI 4 and later).
    pub network_rules: bool,
    /// The seccomp filter refusing non-Unix sockets is in force.
    pub seccomp: bool,
    /// Why the sandbox is not (fully) in force, when it is not.
    pub reason: Option<String>,
}

impl SandboxState {
    /// Nothing in force yet: what `off` stays, and where `auto` and `landlock` start from.
    fn unconfined(mode: SandboxMode, network_allowed: bool, landlock_abi: u32) -> Self {
        Self {
            mode,
            enforced: false,
            landlock_abi,
            network_allowed,
            network_denied: false,
            network_rules: false,
            seccomp: false,
            reason: None,
        }
    }

    /// One line for `doctor` and the start-up log: what is confined, or why nothing is.
    pub fn summary(&self) -> String {
        if self.mode == SandboxMode::Off {
            return "off (tools.sandbox = \"off\"): commands and MCP servers run unconfined".into();
        }
        let mut parts = Vec::new();
        if self.enforced {
            parts.push(format!("landlock ABI {}", self.landlock_abi));
        } else {
            parts.push("NOT confined".to_owned());
        }
        parts.push(if self.network_allowed {
            "network allowed (tools.sandbox_network)".to_owned()
        } else if self.network_denied {
            let by = match (self.network_rules, self.seccomp) {
                (true, true) => "landlock TCP rules and seccomp",
                (true, false) => "landlock TCP rules",
                _ => "seccomp",
            };
            format!("network denied ({by})")
        } else {
            "network NOT denied".to_owned()
        });
        parts.push(
            if self.seccomp {
                "seccomp on"
            } else {
                "seccomp off"
            }
            .to_owned(),
        );
        let mut line = parts.join(", ");
        if let Some(reason) = &self.reason {
            line.push_str(": ");
            line.push_str(reason);
        }
        line
    }

    /// Whether everything the configuration asks for is in force.
    pub fn complete(&self) -> bool {
        self.mode == SandboxMode::Off
            || (self.enforced && (self.network_allowed || self.network_denied))
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("tools.sandbox = \"landlock\", but this kernel cannot confine commands: {reason}")]
pub struct Unconfinable {
    pub reason: String,
}

/// The sandbox every child of the tools is started in: the probed state and the seccomp
/// program, built once. Cheap to clone.
#[derive(Clone)]
pub struct Sandbox(Arc<Inner>);

struct Inner {
    state: SandboxState,
    kernel: Kernel,
    /// The socket filter, compiled once; `None` when the network is allowed or seccomp is
    /// missing.
    filter: Option<Arc<seccompiler::BpfProgram>>,
}

impl Default for Sandbox {
    fn default() -> Self {
        Self::off()
    }
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Sandbox").field(&self.0.state).finish()
    }
}

impl Sandbox {
    /// Probes the kernel and settles what `mode` means on it. `landlock` on a kernel that
    /// cannot confine (no Landlock; or the network must be denied and neither Landlock's TCP
    /// rules nor seccomp can) is an error: the gateway must not start pretending.
    pub fn new(mode: SandboxMode, network_allowed: bool) -> Result<Self, Unconfinable> {
        Self::with_kernel(mode, network_allowed, Kernel::probe())
    }

    /// No confinement (`tools.sandbox = "off"`, and tests of other things).
    pub fn off() -> Self {
        let state = SandboxState::unconfined(SandboxMode::Off, true, 0);
        Self::from_parts(state, Kernel::default(), None)
    }

    fn from_parts(
        state: SandboxState,
        kernel: Kernel,
        filter: Option<Arc<seccompiler::BpfProgram>>,
    ) -> Self {
        Self(Arc::new(Inner {
            state,
            kernel,
            filter,
        }))
    }

    fn with_kernel(
        mode: SandboxMode,
        network_allowed: bool,
        kernel: Kernel,
    ) -> Result<Self, Unconfinable> {
        let mut state = SandboxState::unconfined(mode, network_allowed, kernel.landlock_abi);
        if mode == SandboxMode::Off {
            return Ok(Self::from_parts(state, kernel, None));
        }
        let mut filter = None;
        let mut missing = Vec::new();
        state.enforced = kernel.landlock_abi >= 1;
        if !state.enforced {
            missing.push(kernel.landlock_missing.clone());
        }
        if !network_allowed {
            state.network_rules = kernel.landlock_abi >= rules::NET_ABI;
            match (kernel.seccomp_filter, seccomp::socket_filter()) {
                (true, Ok(program)) => {
                    state.seccomp = true;
                    filter = Some(Arc::new(program));
                }
                (true, Err(e)) => missing.push(format!("seccomp filter: {e}")),
                (false, _) => missing.push(kernel.seccomp_missing.clone()),
            }
            state.network_denied = state.network_rules || state.seccomp;
            if !state.network_denied {
                missing.push("the network cannot be denied".into());
            }
        }
        if !missing.is_empty() {
            state.reason = Some(missing.join("; "));
        }
        if mode == SandboxMode::Landlock && !state.complete() {
            return Err(Unconfinable {
                reason: state.reason.unwrap_or_default(),
            });
        }
        Ok(Self::from_parts(state, kernel, filter))
    }

    pub fn state(&self) -> &SandboxState {
        &self.0.state
    }

    /// The kernel facts the state was settled from.
    pub fn kernel(&self) -> &Kernel {
        &self.0.kernel
    }

    pub fn is_off(&self) -> bool {
        self.0.state.mode == SandboxMode::Off
    }

    /// Builds, in the parent, what a child needs to confine itself: its Landlock ruleset
    /// (writable: `grant.writable`, the devices, and nothing else), the socket filter and the
    /// limits. An error means the child must not be started: it would run less confined
    /// than the state says.
    pub(crate) fn prepare(&self, grant: &Grant<'_>) -> Result<Prepared, String> {
        if self.is_off() {
            return Ok(Prepared::none());
        }
        let state = &self.0.state;
        let ruleset = if state.enforced {
            let ruleset = rules::ruleset(grant.writable, !state.network_allowed, grant.hidden)
                .map_err(|e| format!("cannot prepare the Landlock sandbox: {e}"))?;
            Some(ruleset)
        } else {
            None
        };
        Ok(Prepared {
            confine: true,
            ruleset,
            filter: self.0.filter.clone(),
            limits: grant.limits,
        })
    }
}

impl Sandbox {
    /// Confines the child of `cmd` to `workspace` and a new temp dir of its own (its
    /// `TMPDIR`), with `limits`. The temp dir is returned for the caller to keep while the
    /// child runs; dropped, it is removed. Off: nothing changes and there is no temp dir.
    pub(crate) fn confine(
        &self,
        cmd: &mut tokio::process::Command,
        workspace: &Path,
        hidden: Option<&Path>,
        limits: Limits,
    ) -> Result<Option<PrivateTmp>, String> {
        if self.is_off() {
            return Ok(None);
        }
        let tmp = PrivateTmp::new()
            .map_err(|e| format!("cannot create a private temp dir for the sandbox: {e}"))?;
        let tmp_path = tmp.path();
        let prepared = self.prepare(&Grant {
            writable: &[workspace, &tmp_path],
            hidden,
            limits,
        })?;
        cmd.env("TMPDIR", &tmp_path);
        prepared.apply_to(cmd);
        Ok(Some(tmp))
    }
}

/// What one child may do beyond reading: the directories it may write, and its limits.
pub(crate) struct Grant<'a> {
    pub writable: &'a [&'a Path],
    /// A tree nothing beneath which is readable but `writable` (the workspace root when
    /// principals are isolated: other principals' workspaces).
    pub hidden: Option<&'a Path>,
    pub limits: Limits,
}

/// The ruleset, filter and limits one child applies to itself (see `child.rs`).
pub(crate) struct Prepared {
    confine: bool,
    ruleset: Option<std::os::fd::OwnedFd>,
    filter: Option<Arc<seccompiler::BpfProgram>>,
    limits: Limits,
}

impl Prepared {
    fn none() -> Self {
        Self {
            confine: false,
            ruleset: None,
            filter: None,
            limits: Limits::NONE,
        }
    }

    /// Makes the child of `cmd` confine itself between fork and exec. A failure there fails
    /// the spawn: the command never runs less confined than prepared.
    pub(crate) fn apply_to(self, cmd: &mut tokio::process::Command) {
        if self.confine {
            child::install(cmd, self.ruleset, self.filter, self.limits);
        }
    }
}

/// A temp dir of a child's own (its `TMPDIR`), removed when dropped.
pub(crate) struct PrivateTmp(tempfile::TempDir);

impl PrivateTmp {
    /// A new directory (mode 0700) under the system temp dir.
    pub(crate) fn new() -> std::io::Result<Self> {
        use std::os::unix::fs::PermissionsExt;
        tempfile::Builder::new()
            .prefix("turnkey-tmp-")
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()
            .map(Self)
    }

    /// Its canonical path: Landlock rules and `TMPDIR` name the real directory.
    pub(crate) fn path(&self) -> PathBuf {
        std::fs::canonicalize(self.0.path()).unwrap_or_else(|_| self.0.path().to_path_buf())
    }
}

//! This process's identity as a turn owner, and the liveness check for other owners on the same
//! host: a lease or admission whose holder's pid is gone can be reclaimed at once instead of
//! after its TTL.
use turnkey_storage::{InstanceId, Owner};

#[derive(Clone, Debug)]
pub struct Instance {
    pub owner: Owner,
}

impl Instance {
    pub fn current() -> Self {
        Self {
            owner: Owner {
                instance: InstanceId::new(),
                pid: i64::from(std::process::id()),
                host: host_token(),
            },
        }
    }

    pub fn id(&self) -> InstanceId {
        self.owner.instance
    }

    /// True only when `other` is provably gone: it ran on this host (same PID namespace) and
    /// its pid no longer names a live process, or names this very process under another
    /// instance id (the pid was reused by us). Owners on other hosts are judged by lease TTL.
    pub fn is_dead(&self, other: &Owner) -> bool {
        if other.instance == self.owner.instance || other.host != self.owner.host {
            return false;
        }
        other.pid == self.owner.pid || !pid_alive(other.pid)
    }
}

/// Host name plus the PID-namespace inode: two containers on one host do not share pids.
fn host_token() -> String {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "unknown-host".into());
    let ns = std::fs::read_link("/proc/self/ns/pid")
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!("{host}/{ns}")
}

/// A zombie (killed but not yet reaped) counts as dead: it will never write again.
fn pid_alive(pid: i64) -> bool {
    let Ok(pid32) = i32::try_from(pid) else {
        return false;
    };
    match std::fs::read_to_string(format!("/proc/{pid32}/stat")) {
        Ok(stat) => {
            // The state letter follows the parenthesised command name, which may hold spaces.
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next());
            !matches!(state, Some("Z") | Some("X") | None)
        }
        Err(_) => {
            use nix::sys::signal::kill;
            use nix::unistd::Pid;
            !matches!(
                kill(Pid::from_raw(pid32), None),
                Err(nix::errno::Errno::ESRCH)
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r4_4_own_process_under_other_instance_is_dead() {
        let me = Instance::current();
        let mut other = me.owner.clone();
        other.instance = InstanceId::new();
        assert!(me.is_dead(&other));
    }

    #[test]
    fn r4_4_self_is_never_dead() {
        let me = Instance::current();
        assert!(!me.is_dead(&me.owner));
    }

    #[test]
    fn r4_4_live_pid_on_same_host_is_alive() {
        let me = Instance::current();
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("spawn sleep");
        let other = Owner {
            instance: InstanceId::new(),
            pid: i64::from(child.id()),
            host: me.owner.host.clone(),
        };
        assert!(!me.is_dead(&other));
        child.kill().expect("kill");
        child.wait().expect("wait");
        assert!(me.is_dead(&other), "a reaped pid is dead");
    }

    #[test]
    fn r4_4_other_host_is_judged_by_ttl_not_pid() {
        let me = Instance::current();
        let other = Owner {
            instance: InstanceId::new(),
            pid: 999_999_999,
            host: "elsewhere/pid:[1]".into(),
        };
        assert!(!me.is_dead(&other));
    }
}

//! The Landlock ruleset of one child, built in the parent: read and execute everywhere; write,
//! create, remove and rename only beneath the granted directories; read and write a few
//! character devices; with the network denied, no TCP bind or connect and no abstract Unix
//! socket outside the sandbox; never a signal to a process outside it.
use landlock::{
    Access, AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, Scope, ABI,
};
use std::fmt::Display;
use std::os::fd::OwnedFd;
use std::path::Path;

/// The newest access rights asked for. On an older kernel the crate leaves out what it lacks
/// (best effort); the start-up probe has already refused a kernel without Landlock when
/// `tools.sandbox = "landlock"`.
const TARGET: ABI = ABI::V6;
/// The first ABI with TCP rules.
pub(super) const NET_ABI: u32 = 4;
/// Devices a shell command writes to (`>/dev/null`) or reads random bytes from.
const DEVICES: [&str; 4] = ["/dev/null", "/dev/zero", "/dev/full", "/dev/urandom"];

fn text(e: impl Display) -> String {
    e.to_string()
}

/// The ruleset's file descriptor, ready for `landlock_restrict_self` in the child. With
/// `hidden` (the workspace root, when principals are isolated) nothing beneath it is readable
/// but the `writable` directories: another principal's files stay out of reach.
pub(super) fn ruleset(
    writable: &[&Path],
    deny_network: bool,
    hidden: Option<&Path>,
) -> Result<OwnedFd, String> {
    let all = AccessFs::from_all(TARGET);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)
        .map_err(text)?
        .scope(Scope::Signal)
        .map_err(text)?;
    if deny_network {
        // Handled and never allowed: every TCP bind and connect is refused.
        ruleset = ruleset
            .handle_access(AccessNet::from_all(TARGET))
            .map_err(text)?
            .scope(Scope::AbstractUnixSocket)
            .map_err(text)?;
    }
    let mut created = ruleset.create().map_err(text)?;
    match hidden {
        None => {
            let read =
                PathBeneath::new(PathFd::new("/").map_err(text)?, AccessFs::from_read(TARGET));
            created = created.add_rule(read).map_err(text)?;
        }
        Some(hidden) => {
            for path in readable_around(hidden)? {
                let is_dir = path.is_dir();
                let Ok(fd) = PathFd::new(&path) else {
                    // Gone since it was listed: nothing to grant.
                    continue;
                };
                let access = if is_dir {
                    AccessFs::from_read(TARGET)
                } else {
                    AccessFs::ReadFile | AccessFs::Execute
                };
                created = created
                    .add_rule(PathBeneath::new(fd, access))
                    .map_err(text)?;
            }
        }
    }
    for device in DEVICES {
        if Path::new(device).exists() {
            let fd = PathFd::new(device).map_err(text)?;
            created = created
                .add_rule(PathBeneath::new(fd, AccessFs::from_file(TARGET)))
                .map_err(text)?;
        }
    }
    for dir in writable {
        let fd = PathFd::new(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        created = created.add_rule(PathBeneath::new(fd, all)).map_err(text)?;
    }
    let fd: Option<OwnedFd> = created.into();
    fd.ok_or_else(|| "this kernel does not support Landlock".to_owned())
}

/// Everything readable when `hidden` must not be: every entry of `/` and of each directory on
/// the way down to `hidden`, except the one that leads to it. (Landlock grants by path
/// beneath; there is no "all but", so the rest is named entry by entry.)
pub(super) fn readable_around(hidden: &Path) -> Result<Vec<std::path::PathBuf>, String> {
    if !hidden.is_absolute() {
        return Err(format!("{} is not an absolute path", hidden.display()));
    }
    let mut out = Vec::new();
    let mut at = std::path::PathBuf::from("/");
    for part in hidden.components().skip(1) {
        let next = at.join(part);
        let entries = std::fs::read_dir(&at).map_err(|e| format!("{}: {e}", at.display()))?;
        for entry in entries {
            let path = entry.map_err(|e| format!("{}: {e}", at.display()))?.path();
            if path != next {
                out.push(path);
            }
        }
        at = next;
    }
    Ok(out)
}

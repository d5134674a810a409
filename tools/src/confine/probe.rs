//! What the running kernel can confine with: the Landlock ABI version (0: missing or
//! disabled at boot) and whether seccomp filters can be installed. Asked once at start-up.
#![allow(unsafe_code)]

/// The kernel's answers, with the reason when a mechanism is missing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Kernel {
    pub landlock_abi: u32,
    pub landlock_missing: String,
    pub seccomp_filter: bool,
    pub seccomp_missing: String,
}

impl Kernel {
    pub fn probe() -> Self {
        let (landlock_abi, landlock_missing) = match landlock_abi() {
            Ok(abi) => (abi, String::new()),
            Err(why) => (0, why),
        };
        let (seccomp_filter, seccomp_missing) = match seccomp_filter() {
            Ok(()) => (true, String::new()),
            Err(why) => (false, why),
        };
        Self {
            landlock_abi,
            landlock_missing,
            seccomp_filter,
            seccomp_missing,
        }
    }
}

/// `landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)`: the ABI version.
fn landlock_abi() -> Result<u32, String> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attribute, size 0 and the VERSION flag the call reads and writes no
    // memory; it only answers a number or an error.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if abi >= 1 {
        return u32::try_from(abi).map_err(|_| format!("Landlock answered ABI {abi}"));
    }
    let e = std::io::Error::last_os_error();
    Err(match e.raw_os_error() {
        Some(libc::ENOSYS) => "Landlock is not in this kernel (Linux 5.13 or later with \
                               CONFIG_SECURITY_LANDLOCK)"
            .into(),
        Some(libc::EOPNOTSUPP) => "Landlock is built in but not enabled at boot (add \
                                   landlock to the lsm= kernel parameter)"
            .into(),
        Some(libc::EPERM) => "a seccomp profile around turnkey (e.g. a container's) refuses \
                              the Landlock system calls"
            .into(),
        _ => format!("Landlock cannot be probed: {e}"),
    })
}

/// `seccomp(SECCOMP_GET_ACTION_AVAIL, SECCOMP_RET_ERRNO)`: filters can be installed and the
/// errno action exists (Linux 4.14 and later).
fn seccomp_filter() -> Result<(), String> {
    const SECCOMP_GET_ACTION_AVAIL: libc::c_uint = 2;
    let action: u32 = libc::SECCOMP_RET_ERRNO;
    // SAFETY: the kernel reads one u32 from the pointer, which points at a live local.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            SECCOMP_GET_ACTION_AVAIL,
            0u32,
            &action as *const u32,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    Err(match e.raw_os_error() {
        Some(libc::ENOSYS) | Some(libc::EINVAL) => {
            "seccomp filters are not in this kernel (CONFIG_SECCOMP_FILTER)".into()
        }
        _ => format!("seccomp cannot be probed: {e}"),
    })
}

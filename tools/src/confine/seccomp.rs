//! The seccomp filter of a child without network: `socket` and `socketpair` of any family but
//! `AF_UNIX` fail with `EACCES` (UDP, raw and netlink sockets, IPv6 and the rest), and so does
//! `io_uring_setup` (io_uring can open sockets without the `socket` system call).
use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};
use std::collections::BTreeMap;

pub(super) fn socket_filter() -> Result<BpfProgram, String> {
    let text = |e: seccompiler::BackendError| e.to_string();
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(text)?;
    let not_unix = SeccompRule::new(vec![SeccompCondition::new(
        0,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::Ne,
        libc::AF_UNIX as u64,
    )
    .map_err(text)?])
    .map_err(text)?;
    let rules = BTreeMap::from([
        (libc::SYS_socket, vec![not_unix.clone()]),
        (libc::SYS_socketpair, vec![not_unix]),
        // An empty list matches the call whatever its arguments.
        (libc::SYS_io_uring_setup, vec![]),
    ]);
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EACCES as u32),
        arch,
    )
    .map_err(text)?;
    let program: BpfProgram = filter.try_into().map_err(text)?;
    Ok(with_x32_refused(arch, program))
}

/// On x86_64 the x32 system calls carry the x86_64 audit arch with bit 30 set in their
/// number, so a rule on `socket` (41) does not see x32's `socket` (0x40000000 | 41). Every
/// x32 call is refused first. The jumps of the compiled program are relative and forward,
/// so instructions put in front of it leave them right.
fn with_x32_refused(arch: TargetArch, program: BpfProgram) -> BpfProgram {
    if arch != TargetArch::x86_64 {
        return program;
    }
    const BPF_LD_W_ABS: u16 = 0x20;
    const BPF_JGE_K: u16 = 0x35;
    const BPF_RET_K: u16 = 0x06;
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    let refuse = libc::SECCOMP_RET_ERRNO | libc::EACCES as u32;
    let mut guarded = vec![
        // seccomp_data.nr is at offset 0.
        sock_filter {
            code: BPF_LD_W_ABS,
            jt: 0,
            jf: 0,
            k: 0,
        },
        sock_filter {
            code: BPF_JGE_K,
            jt: 0,
            jf: 1,
            k: X32_SYSCALL_BIT,
        },
        sock_filter {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: refuse,
        },
    ];
    guarded.extend(program);
    guarded
}

"""The seccomp filter every sandboxed command runs under, as a classic-BPF program for ``bwrap --seccomp FD``.

bwrap installs it after setting the sandbox up, right before it executes the command, so its own mounts are not
affected. The sandbox already drops every capability and forbids new user namespaces; the filter closes what is
left to an unprivileged process that it never needs: reading or steering other processes (``ptrace``,
``process_vm_readv``), the kernel's rarely used attack surface (``bpf``, ``userfaultfd``, ``keyctl``, io_uring,
module and kexec calls) and anything that rebuilds the mount or namespace layout. A refused call returns EPERM,
so a program that probes for a feature carries on without it; a syscall from another ABI (i386 through
``int 0x80``, x32) kills the process, since the numbers checked here would not mean the same calls.

``perf_event_open`` stays allowed: Nsight Compute profiles inside the sandbox (through LD_PRELOAD injection and the
driver's own ioctls, not ptrace) and CUDA's tools may read performance counters. ``personality`` is limited to the
values Docker's default profile allows (a query, the Linux personalities), which CUDA containers run under.
"""

from __future__ import annotations

import errno
import struct

# <linux/audit.h>, <linux/seccomp.h>, <linux/filter.h>
AUDIT_ARCH_X86_64 = 0xC000003E
AUDIT_ARCH_AARCH64 = 0xC00000B7
_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_RET_ALLOW = 0x7FFF0000
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06
# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6] (little-endian: low word first)
_NR, _ARCH, _ARG0_LOW = 0, 4, 16
_X32_SYSCALL_BIT = 0x40000000
# clone()'s namespace flags (CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET); CLONE_NEWTIME
# (0x80) is the exit signal's bits in clone()'s flags and exists only for clone3 and unshare, refused anyway.
_CLONE_NAMESPACES = 0x7E020000
# Docker's default profile allows these personality() arguments: PER_LINUX, PER_LINUX32, UNAME26 and the
# combination, and 0xffffffff (a query).
_PERSONALITIES = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)

REFUSED = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kexec_load",
    "kexec_file_load",
    "bpf",
    "userfaultfd",
    "keyctl",
    "add_key",
    "request_key",
    "init_module",
    "finit_module",
    "delete_module",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "unshare",
    "setns",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "open_by_handle_at",
    "name_to_handle_at",
    "swapon",
    "swapoff",
    "reboot",
    "acct",
    "iopl",
    "ioperm",
    "lookup_dcookie",
    "quotactl",
    "quotactl_fd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
)

# Numbers from <asm/unistd_64.h> (x86_64) and <asm-generic/unistd.h> (aarch64); aarch64 has no iopl/ioperm.
_X86_64 = {
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "kexec_load": 246, "kexec_file_load": 320,
    "bpf": 321, "userfaultfd": 323, "keyctl": 250, "add_key": 248, "request_key": 249, "init_module": 175,
    "finit_module": 313, "delete_module": 176, "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161,
    "unshare": 272, "setns": 308, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
    "fsmount": 432, "fspick": 433, "mount_setattr": 442, "open_by_handle_at": 304, "name_to_handle_at": 303,
    "swapon": 167, "swapoff": 168, "reboot": 169, "acct": 163, "iopl": 172, "ioperm": 173, "lookup_dcookie": 212,
    "quotactl": 179, "quotactl_fd": 443, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "clone": 56, "clone3": 435, "personality": 135,
}  # fmt: skip
_AARCH64 = {
    "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "kexec_load": 104, "kexec_file_load": 294,
    "bpf": 280, "userfaultfd": 282, "keyctl": 219, "add_key": 217, "request_key": 218, "init_module": 105,
    "finit_module": 273, "delete_module": 106, "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51,
    "unshare": 97, "setns": 268, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
    "fsmount": 432, "fspick": 433, "mount_setattr": 442, "open_by_handle_at": 265, "name_to_handle_at": 264,
    "swapon": 224, "swapoff": 225, "reboot": 142, "acct": 89, "lookup_dcookie": 18,
    "quotactl": 60, "quotactl_fd": 443, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "clone": 220, "clone3": 435, "personality": 92,
}  # fmt: skip


class _Program:
    """A tiny assembler: instructions may jump to labels defined later; offsets are resolved in ``code``."""

    def __init__(self) -> None:
        self.insns: list[tuple[int, int | str, int | str, int]] = []
        self.labels: dict[str, int] = {}

    def label(self, name: str) -> None:
        self.labels[name] = len(self.insns)

    def load(self, offset: int) -> None:
        self.insns.append((_LD_W_ABS, 0, 0, offset))

    def jump(self, op: int, k: int, true: int | str = 0, false: int | str = 0) -> None:
        self.insns.append((op, true, false, k))

    def ret(self, value: int) -> None:
        self.insns.append((_RET_K, 0, 0, value))

    def code(self) -> bytes:
        out = bytearray()
        for pc, (op, jt, jf, k) in enumerate(self.insns):
            offsets = [self.labels[j] - pc - 1 if isinstance(j, str) else j for j in (jt, jf)]
            if not all(0 <= o <= 255 for o in offsets):
                raise ValueError(f"seccomp jump out of range at instruction {pc}")
            out += struct.pack("=HBBI", op, offsets[0], offsets[1], k)
        return bytes(out)


def _arch_block(p: _Program, arch: str, numbers: dict[str, int]) -> None:
    """Jumps go forward only, so each block carries its own return instructions."""
    p.label(arch)
    p.load(_NR)
    if arch == "x86_64":
        p.jump(_JGE_K, _X32_SYSCALL_BIT, f"{arch}_kill")
    for name in REFUSED:
        if name in numbers:
            p.jump(_JEQ_K, numbers[name], f"{arch}_eperm")
    # glibc falls back to clone() when clone3 is missing; clone3's flags sit in memory no filter can read.
    p.jump(_JEQ_K, numbers["clone3"], f"{arch}_enosys")
    p.jump(_JEQ_K, numbers["clone"], f"{arch}_clone")
    p.jump(_JEQ_K, numbers["personality"], f"{arch}_personality")
    p.ret(_RET_ALLOW)
    p.label(f"{arch}_clone")
    p.load(_ARG0_LOW)
    p.jump(_JSET_K, _CLONE_NAMESPACES, f"{arch}_eperm")
    p.ret(_RET_ALLOW)
    p.label(f"{arch}_personality")
    p.load(_ARG0_LOW)
    for value in _PERSONALITIES:
        p.jump(_JEQ_K, value, f"{arch}_allow")
    p.label(f"{arch}_eperm")
    p.ret(_RET_ERRNO | errno.EPERM)
    p.label(f"{arch}_enosys")
    p.ret(_RET_ERRNO | errno.ENOSYS)
    p.label(f"{arch}_allow")
    p.ret(_RET_ALLOW)
    p.label(f"{arch}_kill")
    p.ret(_RET_KILL_PROCESS)


def filter_program() -> bytes:
    """The compiled filter (``struct sock_filter`` array), for both supported architectures."""
    p = _Program()
    p.load(_ARCH)
    p.jump(_JEQ_K, AUDIT_ARCH_X86_64, "x86_64")
    p.jump(_JEQ_K, AUDIT_ARCH_AARCH64, "aarch64")
    p.ret(_RET_KILL_PROCESS)
    _arch_block(p, "x86_64", _X86_64)
    _arch_block(p, "aarch64", _AARCH64)
    return p.code()

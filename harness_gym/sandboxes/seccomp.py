"""A seccomp filter that stops any sandboxed process from inspecting or changing another one.

The agent's code, and any workspace program a grader runs, is hostile; a process that can attach
to the grader (``ptrace``), read or write its memory (``process_vm_readv``/``writev``), steal its
file descriptors (``pidfd_getfd``), sample it (``perf_event_open``) or stall it mid-read
(``userfaultfd``) could forge the grader's verdict. These calls fail with EPERM.

The filter is classic BPF written out here (no libseccomp): it checks the architecture first, so a
32-bit or x32 entry point cannot reach the same call under another number, and allows every other
call. :func:`bpf_program` is what bubblewrap reads from ``--seccomp FD``; :func:`docker_profile`
is the same policy as a Docker seccomp profile (JSON), which also refuses new user namespaces
(Docker's default profile does; a custom profile replaces it).
"""

from __future__ import annotations

import functools
import json
import struct
from typing import Any

# syscalls that let one process inspect or modify another one
DENIED = ("ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "perf_event_open", "userfaultfd",
          "process_madvise")  # fmt: skip

# AUDIT_ARCH_* values and each architecture's numbers of the denied calls
SYSCALL_NUMBERS: dict[int, dict[str, int]] = {
    0xC000003E: {  # x86_64
        "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "pidfd_getfd": 438,
        "perf_event_open": 298, "userfaultfd": 323, "process_madvise": 440,
    },
    0x40000003: {  # i386 (also int 0x80 from a 64-bit process)
        "ptrace": 26, "process_vm_readv": 347, "process_vm_writev": 348, "pidfd_getfd": 438,
        "perf_event_open": 336, "userfaultfd": 374, "process_madvise": 440,
    },
    0xC00000B7: {  # aarch64
        "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "pidfd_getfd": 438,
        "perf_event_open": 241, "userfaultfd": 282, "process_madvise": 440,
    },
    0x40000028: {  # arm (32-bit EABI, also compat on aarch64)
        "ptrace": 26, "process_vm_readv": 376, "process_vm_writev": 377, "pidfd_getfd": 438,
        "perf_event_open": 364, "userfaultfd": 388, "process_madvise": 440,
    },
}  # fmt: skip
X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000  # x32 calls arrive as AUDIT_ARCH_X86_64 with this bit set: all refused

EPERM = 1
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_RET_K = 0x06  # BPF_RET | BPF_K
_NR_OFFSET, _ARCH_OFFSET = 0, 4  # in struct seccomp_data


def _instruction(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def _arch_block(arch: int, numbers: dict[str, int]) -> list[bytes]:
    """Load the call number; deny the listed ones (and x32), allow the rest."""
    checks = sorted(set(numbers[name] for name in DENIED))
    extra = 1 if arch == X86_64 else 0
    block = [_instruction(_LD_W_ABS, _NR_OFFSET)]
    if extra:  # jump to the deny at the end when nr >= X32 bit
        block.append(_instruction(_JGE_K, X32_SYSCALL_BIT, jt=len(checks) + 1, jf=0))
    for index, number in enumerate(checks):
        block.append(_instruction(_JEQ_K, number, jt=len(checks) - index, jf=0))
    block += [_instruction(_RET_K, RET_ALLOW), _instruction(_RET_K, RET_ERRNO | EPERM)]
    return block


@functools.cache
def bpf_program() -> bytes:
    """The filter as an array of ``struct sock_filter`` in native byte order (what ``--seccomp`` reads).

    Layout: load arch; one ``jeq`` per known architecture to its block; an unknown architecture gets
    EPERM for every call.
    """
    blocks = [(arch, _arch_block(arch, numbers)) for arch, numbers in SYSCALL_NUMBERS.items()]
    head = [_instruction(_LD_W_ABS, _ARCH_OFFSET)]
    dispatch_len = len(blocks) + 1  # the jeqs and the unknown-arch return
    offset = 0  # from the end of the dispatch to the start of each block
    dispatch = []
    for index, (arch, block) in enumerate(blocks):
        remaining_jeqs = len(blocks) - index - 1
        dispatch.append(_instruction(_JEQ_K, arch, jt=remaining_jeqs + 1 + offset, jf=0))
        offset += len(block)
    program = head + dispatch + [_instruction(_RET_K, RET_ERRNO | EPERM)]
    assert len(program) == 1 + dispatch_len
    for _, block in blocks:
        program += block
    if len(program) > 4096:  # BPF_MAXINSNS
        raise ValueError("seccomp program too long")
    return b"".join(program)


@functools.cache
def docker_profile() -> str:
    """The policy as a Docker seccomp profile (the JSON text ``security_opt=["seccomp=..."]`` takes)."""
    new_user_ns = 0x10000000  # CLONE_NEWUSER
    rules: list[dict[str, Any]] = [
        {"names": list(DENIED), "action": "SCMP_ACT_ERRNO", "errnoRet": EPERM},
        # no new user namespaces (they would hand the container's root capabilities back)
        {"names": ["unshare"], "action": "SCMP_ACT_ERRNO", "errnoRet": EPERM,
         "args": [{"index": 0, "value": new_user_ns, "valueTwo": new_user_ns, "op": "SCMP_CMP_MASKED_EQ"}]},
        {"names": ["clone"], "action": "SCMP_ACT_ERRNO", "errnoRet": EPERM,
         "args": [{"index": 0, "value": new_user_ns, "valueTwo": new_user_ns, "op": "SCMP_CMP_MASKED_EQ"}]},
        # clone3 passes its flags in memory a filter cannot read: ENOSYS makes libc fall back to clone
        {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38},
    ]  # fmt: skip
    profile = {
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32", "SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"],
        "syscalls": rules,
    }
    return json.dumps(profile)

"""Installed as ``sitecustomize`` for every Python process of a grading sandbox (GRADER_INIT_DIR).

It makes the process non-dumpable (``PR_SET_DUMPABLE 0``) before the grader's own code runs, so
that a workspace program the grader starts can neither read nor write the grader's memory
through ``/proc/PID/mem`` nor open its file descriptors through ``/proc/PID/fd`` (the kernel's
ptrace access check refuses a non-dumpable target to a process without CAP_SYS_PTRACE; the
sandbox's seccomp filter refuses ``ptrace`` itself). A child that ``exec``s is dumpable again;
the grader it protects is this process. Standard library only; silent when ``ctypes`` or libc
cannot be loaded (the seccomp filter still holds).
"""

try:
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
except Exception:  # an interpreter without ctypes: nothing more to do here
    pass

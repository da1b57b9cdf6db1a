# expect: wrong_output exception
import ctypes
import os


def main_solution(x):
    # Signals a kill(2) filter did not look at: queued signals and pidfds, to the worker.
    libc = ctypes.CDLL(None, use_errno=True)
    info = (ctypes.c_int * 32)()
    for pid in (os.getppid(), 1, 2):
        libc.syscall(129, pid, 9, ctypes.addressof(info))  # rt_sigqueueinfo (x86-64)
        libc.syscall(297, pid, pid, 9, ctypes.addressof(info))  # rt_tgsigqueueinfo
        fd = libc.syscall(434, pid, 0)  # pidfd_open
        if fd >= 0:
            libc.syscall(424, fd, 9, None, 0)  # pidfd_send_signal
    return x

"""``userns`` (not root): a user namespace mapping the account's uid to its root, created first.

The only way an ordinary account gets the other namespaces. Its children keep the account's uid
outside and drop every capability (``capset``: effective, permitted, inheritable; no exec can regain
them). Meets the need ``uid`` where :mod:`.uid_drop` (root) cannot.
"""

from __future__ import annotations

import os

from .base import CLONE_NEWUSER, Jail, Mechanism
from .uid_drop import RISK


def enter(jail: Jail) -> bool:
    """Stage one, first: without root, a user namespace whose root is the account."""
    if os.geteuid() == 0:
        return False
    outer_uid, outer_gid = os.geteuid(), os.getegid()
    if not jail.unshare_ns(CLONE_NEWUSER):
        return False
    try:
        for name, text in (("setgroups", "deny"), ("uid_map", f"0 {outer_uid} 1"), ("gid_map", f"0 {outer_gid} 1")):
            with open(f"/proc/self/{name}", "w") as fh:
                fh.write(text)
    except OSError:
        return False
    return True


def setup(jail: Jail) -> bool:
    """The serving worker: prepare the capability drop each child makes (ctypes is loaded here, once)."""
    if "userns" not in jail.entered:
        return False
    import ctypes  # the worker's own, loaded once (Jail.lib)

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    header = Header(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (ctypes.c_uint32 * 6)()
    capset = jail.lib().capset
    capset.argtypes = (ctypes.c_void_p, ctypes.c_void_p)
    jail.capset = (capset, ctypes.addressof(header), ctypes.addressof(data))
    jail.keep(header, data)
    return True


def child(jail: Jail, pid: int, cpu_s: int) -> bool:
    """A child, before model code: drop every capability (it is the root of the namespace)."""
    if jail.capset is None:
        return True
    capset, header, data = jail.capset
    return capset(header, data) == 0


MECHANISM = Mechanism("userns", "uid", RISK, steps=(enter, setup, child))

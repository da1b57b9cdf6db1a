"""``worktmpfs``: the work area is a tmpfs of its own (``noexec,nosuid,nodev,noatime``, byte and
inode caps), replaced whenever a request changed anything in it.

Each request works in ``/work/r``, which stays from one request to the next while no request changes
anything: after each, :meth:`WorkArea.clear` compares the area's root and ``r`` (inode, mode, owner,
times including the change time, which no call can set back, entries, attributes) with what it left;
any difference and the tmpfs is unmounted (``MNT_DETACH``) and a fresh one mounted. So nothing
written survives a request, the tmpfs's inode counter carries nothing, and cleanup cannot fail.
Without it (no mount namespace or chroot) each request gets a directory on the machine's disk,
removed by a walk (:func:`rmtree`).
"""

from __future__ import annotations

import os

from .base import MNT_DETACH, MS_NOATIME, MS_NODEV, MS_NOEXEC, MS_NOSUID, Jail, Mechanism

RISK = ("the work directory is on the machine's disk, executable, with no inode cap; what a response leaves is "
        "removed by a walk, not by unmounting")
_FLAGS = MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_NOATIME


def setup(jail: Jail) -> bool:
    """The serving worker, inside its chroot: probe that a tmpfs mounts and unmounts, then make the
    work area (a tmpfs where that works, a directory on disk otherwise)."""
    limits = jail.limits
    mounted = False
    if jail.report.get("chroot"):
        options = f"size={limits['work_bytes']},nr_inodes={limits['work_inodes']},mode=0700".encode()
        mounted = jail.mount(b"tmpfs", b"/work", b"tmpfs", _FLAGS, options) and \
            jail.lib().umount2(b"/work", MNT_DETACH) == 0
    jail.report["work_bytes"] = limits["work_bytes"]
    jail.report["work_inodes"] = limits["work_inodes"] if mounted else 0
    jail.area = WorkArea(jail, mounted)
    return mounted


def _xattrs(path: str) -> list:
    try:
        return os.listxattr(path, follow_symlinks=False)
    except OSError:  # no extended attributes on this file system
        return []


class WorkArea:
    """The per-request working directory: ``/work/r`` on a tmpfs, or ``<root>/work/<serial>`` on disk."""

    def __init__(self, jail: Jail, tmpfs: bool) -> None:
        self.uid = jail.child_uid
        self.tmpfs = tmpfs
        self.root = "/work" if jail.report.get("chroot") else os.path.join(jail.root_dir, "work")
        self.jail = jail if tmpfs else None
        self.on_disk = not jail.report.get("mountns")  # (else it goes with the mount namespace)
        self.options = (f"size={jail.limits['work_bytes']},nr_inodes={jail.limits['work_inodes']},mode=0711,"
                        "uid=0,gid=0").encode()
        self.serial = 0
        self.remounts = 0
        self.state: tuple = ()
        if tmpfs:
            self._mount()
        else:
            os.makedirs(self.root, mode=0o711, exist_ok=True)

    def _mount(self) -> None:
        """A fresh work tmpfs with the request directory ``r`` in it. ``r`` stays from one request
        to the next while no request changes anything (see :meth:`clear`): its inode number, and the
        tmpfs's inode counter, are then the same for every request."""
        if self.jail is None or not self.jail.mount(b"tmpfs", b"/work", b"tmpfs", _FLAGS, self.options):
            raise SystemExit("cannot mount the work area")  # the scorer replaces this worker
        os.mkdir("/work/r", 0o700)
        if self.uid is not None:
            os.chown("/work/r", self.uid, self.uid)
        # Fixed times (mounted noatime): any change a request makes (an entry made or removed, a
        # mode, times, an owner, an attribute) shows in the change time, which no call can set back.
        for path in ("/work/r", "/work"):
            os.utime(path, ns=(0, 0))
        self.state = self._state()

    @staticmethod
    def _state() -> tuple:
        out = []
        for path in ("/work", "/work/r"):
            st = os.stat(path, follow_symlinks=False)
            out.append((st.st_ino, st.st_mode, st.st_nlink, st.st_atime_ns, st.st_mtime_ns, st.st_ctime_ns, st.st_uid,
                        st.st_gid))
        return tuple(out)

    def next(self) -> str:
        """The working directory of the next request."""
        if self.tmpfs:
            return "/work/r"
        self.serial += 1
        workdir = os.path.join(self.root, str(self.serial))
        os.mkdir(workdir, 0o700)
        if self.uid is not None:
            os.chown(workdir, self.uid, self.uid)
        return workdir

    def clear(self, workdir: str) -> None:
        """After a request, every process of it dead: the area as it was before."""
        if self.tmpfs:
            # The area is as the worker left it when neither its root nor the request's directory
            # changed at all (change times included: making and removing a file moves them, and the
            # tmpfs's inode counter, which the next request would see); otherwise the tmpfs is
            # unmounted (lazily: it goes with its last reference, which cannot fail on what the
            # program made) and a fresh one mounted. Unmounting costs ~2-3 ms of wall clock here
            # (the kernel waits for a grace period), so only then.
            try:
                clean = (self._state() == self.state and os.listdir("/work") == ["r"]
                         and not os.listdir("/work/r") and not _xattrs("/work") and not _xattrs("/work/r"))
            except OSError:
                clean = False
            if not clean:
                self.remounts += 1
                assert self.jail is not None
                if self.jail.lib().umount2(b"/work", MNT_DETACH) != 0:
                    raise SystemExit("cannot unmount the work area")
                self._mount()
            return
        try:
            os.rmdir(workdir)
        except OSError:
            rmtree(workdir)

    def remove(self) -> None:
        """At the worker's end, where the area is on the machine's disk (no mount namespace)."""
        if self.on_disk:
            rmtree(self.root)


def rmtree(path: str) -> None:  # noqa: C901
    """Remove ``path`` and all below it, for the fallback without a work tmpfs (no mount namespace).

    Flattening, through directory descriptors and never following a symbolic link: every
    subdirectory found is first renamed to the top of the tree, so no recursion and no path of
    any length is needed (1,200 nested directories, chains longer than PATH_MAX), and at most
    two descriptors are open. Processes that could race it are dead by now (PID namespace, or the
    worker's own uid killed), and a link is unlinked, never followed.
    """
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    try:
        top = os.open(path, flags)
    except OSError:
        return
    moved = 0
    try:
        for _ in range(1_000_000):  # bounded; each round removes at least one directory or stops
            pending = []
            with os.scandir(top) as entries:
                for entry in entries:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            pending.append(entry.name)
                        else:
                            os.unlink(entry.name, dir_fd=top)
                    except OSError:
                        pass
            if not pending:
                break
            progress = False
            for name in pending:
                try:
                    fd = os.open(name, flags, dir_fd=top)
                except OSError:
                    continue
                try:
                    with os.scandir(fd) as entries:
                        for entry in entries:
                            try:
                                if entry.is_dir(follow_symlinks=False):
                                    moved += 1
                                    os.rename(entry.name, f".rm{moved}", src_dir_fd=fd, dst_dir_fd=top)
                                    progress = True
                                else:
                                    os.unlink(entry.name, dir_fd=fd)
                            except OSError:
                                pass
                finally:
                    os.close(fd)
                try:
                    os.rmdir(name, dir_fd=top)
                    progress = True
                except OSError:
                    pass
            if not progress:
                break
    except OSError:
        pass
    finally:
        os.close(top)
    try:
        os.rmdir(path)
    except OSError:
        pass


MECHANISM = Mechanism("worktmpfs", "worktmpfs", RISK, steps=(setup,))

"""faultfs: a FUSE passthrough filesystem for rmqlog's tests, with injected faults and a
LazyFS-style model of power loss.

    python tests/faultfs.py BACKING MOUNTPOINT CONTROL_SOCKET

Mounts BACKING at MOUNTPOINT (libfuse 3 through ``mfusepy``, foreground, single-threaded) and
serves every operation rmqlog uses on a store directory by doing it on BACKING: lookup and
getattr, create/open/read/write/truncate (also ``O_TRUNC``), fallocate, fsync and fdatasync (an
``msync(MS_SYNC)`` of a shared map arrives here as one: the kernel first writes the dirty pages
back with FUSE writes, then sends the fsync), fsyncdir, rename, unlink, mkdir, rmdir, statfs,
utimens, chmod, chown, readdir. ``flock`` is not implemented, so the kernel emulates it locally
(enough for one machine). There is no ``direct_io``: the kernel page cache is used as for any
filesystem, and shared writable maps work. Nothing but the daemon changes BACKING while it is
mounted, so cached pages are kept as a local filesystem keeps them: files are opened with
``kernel_cache`` (an open does not drop them) and ``auto_inval_data`` is off (a changed mtime does
not drop them either; they leave the page cache under memory pressure or at unmount). A page
whose write-back failed stays cached, as on ext4; but the pages a failed ``write(2)`` covered are
marked not up to date by the kernel's FUSE code, so the next fault or read there reads them from
BACKING again. Files are removed with
``hard_remove`` (no ``.fuse_hidden`` files). ``rename`` flags (``RENAME_NOREPLACE``,
``RENAME_EXCHANGE``) are refused with EINVAL.

Control. The daemon listens on the Unix socket CONTROL_SOCKET; each request is one JSON object on
one line, each reply one JSON line, ``{"ok": true, ...}`` or ``{"ok": false, "error": "..."}``:

- ``{"cmd": "ping"}``
- ``{"cmd": "fail", "op": OP, "glob": GLOB, "errno": "EIO", "times": N}``: from now on the
  operation OP on a path matching GLOB fails with that errno (a name such as ``"ENOSPC"`` or a
  number), the next N times only when ``times`` is given (null or absent: until cleared). Paths
  are those seen inside the mount, starting with ``/`` (``/store/00000000000000000000``);
  ``fnmatch`` rules, so ``*`` also matches ``/``. OP is one of :data:`OPS`; ``fsync`` covers
  fsync and fdatasync (and so msync), ``fdatasync`` only the latter; a rename matches on either
  name. The first matching rule with times left fires; the operation then does nothing. Replies
  ``{"ok": true, "rule": ID}``.
- ``{"cmd": "clear"}``: removes every rule.
- ``{"cmd": "stats", "reset": false}``: ``{"ops": {OP: {PATH: COUNT}}, "faults": {OP: {PATH:
  COUNT}}, "pending": {PATH: BYTES}, "lazy": BOOL, "cut": BOOL}``: every operation served (a
  failed one too), the injected failures, and the unsynced data lazy mode holds; ``reset``
  zeroes the counters after the reply is built.
- ``{"cmd": "lazy", "on": true}``: lazy mode on or off (turning it off writes the unsynced data
  to BACKING, without syncing it).
- ``{"cmd": "cut"}``: a power cut, see below.
- ``{"cmd": "no_size", "on": true}``: statfs answers as libfuse does for a filesystem that does
  not implement it (LazyFS, some network filesystems): ``f_bsize`` 512, ``f_namemax`` 255, every
  count zero (``f_blocks = f_bfree = f_bavail = 0``). Off again with ``"on": false``.

Lazy mode (the model of LazyFS). Data written to a file (a ``write`` from the program, or the
kernel writing back dirty pages of a map) is not written to BACKING: the daemon keeps it in
memory, page by page, per inode, and reads see it. An fsync or fdatasync of the file writes that
inode's data to BACKING and fsyncs the BACKING file. ``cut`` drops all of it, and from then on
the daemon acknowledges writes and syncs without doing anything (so what the kernel writes back
later, e.g. the dirty pages of a killed writer's maps, is lost too), and every other change
(create, mkdir, unlink, rename, truncate, fallocate, chmod, utimens) fails with EIO, as on a
disk that is gone. After a cut, unmount and mount BACKING again with a fresh daemon: what it
shows is what was durable (``tests/_faultfs.py`` does this).

An fsync failure injected in lazy mode also drops the unsynced data of that inode, as Linux
marks the pages clean after a failed writeback: a later fsync then succeeds without writing
them (the "fsyncgate" behaviour), so a program that retries a failed sync is caught lying.

Limits of the model: only file *data* is lazy. Namespace operations (create, mkdir, rename,
unlink, rmdir) and size changes (a write past the end, truncate, ``O_TRUNC``, fallocate) are
applied to BACKING at once and count as durable at once, as if every directory and inode change
were journaled synchronously; a write past the end therefore leaves zeros up to the new size
after a cut, where a real filesystem might keep the old size. BACKING's own page cache is
trusted (a cut is not a power loss of BACKING's disk: data an fsync applied is durable).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import fnmatch
import json
import os
import socket
import stat
import sys
import threading
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

# The libfuse 3 library even where libfuse 2 is installed too (mfusepy looks for "fuse" first).
os.environ.setdefault("FUSE_LIBRARY_NAME", "fuse3")

import mfusepy as fuse

PAGE = 4096
OPS = (
    "getattr",
    "open",
    "create",
    "read",
    "write",
    "flush",
    "release",
    "fsync",
    "fdatasync",
    "fsyncdir",
    "fallocate",
    "truncate",
    "rename",
    "unlink",
    "mkdir",
    "rmdir",
    "statfs",
    "utimens",
    "chmod",
    "chown",
    "readdir",
)
FUSE_CAP_AUTO_INVAL_DATA = 1 << 12  # libfuse 3's fuse_common.h
FALLOC_FL_PUNCH_HOLE = 0x02
FALLOC_FL_ZERO_RANGE = 0x10

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
_libc.fallocate.restype = ctypes.c_int


def _fallocate(fd: int, mode: int, offset: int, length: int) -> None:
    if _libc.fallocate(fd, mode, offset, length) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def _errno(value: Any) -> int:
    if isinstance(value, int) and value > 0:
        return value
    if isinstance(value, str) and value.isupper() and isinstance(getattr(errno, value, None), int):
        return getattr(errno, value)
    raise ValueError(f"not an errno: {value!r}")


class Rule:
    """Fail ``op`` on paths matching ``glob`` with ``err``, ``times`` more times (None: always)."""

    def __init__(self, rid: int, op: str, glob: str, err: int, times: int | None) -> None:
        self.id, self.op, self.glob, self.errno, self.times = rid, op, glob, err, times

    def matches(self, ops: tuple[str, ...], paths: tuple[str | None, ...]) -> bool:
        if self.op not in ops or self.times == 0:
            return False
        return any(p is not None and fnmatch.fnmatchcase(p, self.glob) for p in paths)


class Pending:
    """Unsynced data of one inode: whole pages, over what BACKING holds. ``fd`` (a duplicate of
    the first descriptor that wrote) keeps the inode alive while its data is pending."""

    def __init__(self, fd: int, path: str | None) -> None:
        self.fd = os.dup(fd)
        self.path = path
        self.pages: dict[int, bytearray] = {}

    def write(self, data: bytes, offset: int) -> None:
        pos, end = offset, offset + len(data)
        while pos < end:
            index, start = divmod(pos, PAGE)
            page = self.pages.get(index)
            if page is None:
                page = bytearray(os.pread(self.fd, PAGE, index * PAGE).ljust(PAGE, b"\0"))
                self.pages[index] = page
            n = min(PAGE - start, end - pos)
            page[start : start + n] = data[pos - offset : pos - offset + n]
            pos += n

    def overlay(self, data: bytes, offset: int) -> bytes:
        """``data`` read from BACKING at ``offset``, with the pending pages over it."""
        if not self.pages or not data:
            return data
        out = bytearray(data)
        end = offset + len(out)
        for index in range(offset // PAGE, (end - 1) // PAGE + 1):
            page = self.pages.get(index)
            if page is None:
                continue
            lo, hi = max(offset, index * PAGE), min(end, (index + 1) * PAGE)
            out[lo - offset : hi - offset] = page[lo - index * PAGE : hi - index * PAGE]
        return bytes(out)

    def zero(self, start: int, end: int | None) -> None:
        """Zeros ``[start, end)`` (``end`` None: to the end) in the pending pages; pages wholly
        inside go (BACKING has zeros or no bytes there)."""
        for index in list(self.pages):
            lo, hi = index * PAGE, (index + 1) * PAGE
            if hi <= start or (end is not None and lo >= end):
                continue
            if start <= lo and (end is None or hi <= end):
                del self.pages[index]
                continue
            a, b = max(start, lo), hi if end is None else min(end, hi)
            self.pages[index][a - lo : b - lo] = bytes(b - a)

    def size(self) -> int:
        return len(self.pages) * PAGE

    def apply(self) -> None:
        """Writes the pages to BACKING (clipped to the file's length) and forgets them."""
        length = os.fstat(self.fd).st_size
        for index in sorted(self.pages):
            lo = index * PAGE
            if lo < length:
                os.pwrite(self.fd, bytes(self.pages[index][: length - lo]), lo)
        self.pages.clear()

    def close(self) -> None:
        self.pages.clear()
        os.close(self.fd)


def _locked(method: Callable[..., Any]) -> Callable[..., Any]:
    def locked(self: FaultFS, *args: Any) -> Any:
        with self.mutex:
            return method(self, *args)

    locked.__name__ = method.__name__
    locked.__doc__ = method.__doc__
    return locked


class FaultFS(fuse.Operations):
    """The operations; every one runs under ``self.mutex`` (the control thread takes it too; not
    ``self.lock``, which mfusepy would take for the FUSE ``lock`` operation and then fail every
    fcntl lock on the mount)."""

    use_ns = True

    def __init__(self, backing: str) -> None:
        self.root = os.path.realpath(backing)
        self.mutex = threading.RLock()
        self.rules: list[Rule] = []
        self.next_rule = 1
        self.ops: defaultdict[str, Counter[str]] = defaultdict(Counter)
        self.faults: defaultdict[str, Counter[str]] = defaultdict(Counter)
        self.lazy = False
        self.cut = False
        self.no_size = False
        self.pending: dict[int, Pending] = {}
        self.fh_ino: dict[int, int] = {}

    # -- helpers ---------------------------------------------------------------------------

    def _full(self, path: str | None) -> str:
        if path is None:
            raise fuse.FuseOSError(errno.ESTALE)
        return os.path.join(self.root, path.lstrip("/"))

    def _enter(self, op: str, path: str | None, *more: str | None, alias: str | None = None):
        """Counts the operation and raises the injected fault, if a rule fires."""
        shown = path if path is not None else "<removed>"
        self.ops[op][shown] += 1
        if alias:
            self.ops[alias][shown] += 1
        names = (op, alias) if alias else (op,)
        for rule in self.rules:
            if rule.matches(names, (path, *more)):
                if rule.times is not None:
                    rule.times -= 1
                self.faults[op][shown] += 1
                return rule.errno
        return 0

    def _fault(self, op: str, path: str | None, *more: str | None) -> None:
        err = self._enter(op, path, *more)
        if err:
            raise fuse.FuseOSError(err)

    def _mutate(self, op: str, path: str | None, *more: str | None) -> None:
        """A namespace or size change: refused after a cut."""
        self._fault(op, path, *more)
        if self.cut:
            raise fuse.FuseOSError(errno.EIO)

    def _pending_for(self, fh: int, path: str | None) -> Pending:
        ino = self.fh_ino[fh]
        p = self.pending.get(ino)
        if p is None:
            p = self.pending[ino] = Pending(fh, path)
        elif path is not None:
            p.path = path
        return p

    def _forget_if_gone(self, ino: int) -> None:
        """Drops the pending data of an inode that has no name and no open handle left."""
        p = self.pending.get(ino)
        if p is None or ino in self.fh_ino.values():
            return
        if os.fstat(p.fd).st_nlink == 0:
            del self.pending[ino]
            p.close()

    def _inode_of(self, path: str) -> int | None:
        try:
            st = os.lstat(self._full(path))
        except OSError:
            return None
        return st.st_ino if stat.S_ISREG(st.st_mode) else None

    def _resized(self, ino: int | None, length: int) -> None:
        p = self.pending.get(ino) if ino is not None else None
        if p is not None:
            p.zero(length, None)

    def _register(self, fd: int) -> int:
        self.fh_ino[fd] = os.fstat(fd).st_ino
        return fd

    # -- control ---------------------------------------------------------------------------

    def control(self, req: dict[str, Any]) -> dict[str, Any]:
        cmd = req.get("cmd")
        with self.mutex:
            if cmd == "ping":
                return {"ok": True}
            if cmd == "fail":
                op = req.get("op")
                if op not in OPS:
                    raise ValueError(f"unknown op {op!r}; one of {', '.join(OPS)}")
                times = req.get("times")
                if times is not None and (not isinstance(times, int) or times < 1):
                    raise ValueError(f"times must be a positive integer or null, not {times!r}")
                rule = Rule(
                    self.next_rule, op, str(req.get("glob", "*")), _errno(req["errno"]), times
                )
                self.next_rule += 1
                self.rules.append(rule)
                return {"ok": True, "rule": rule.id}
            if cmd == "clear":
                self.rules.clear()
                return {"ok": True}
            if cmd == "stats":
                reply = {
                    "ok": True,
                    "ops": {op: dict(c) for op, c in self.ops.items()},
                    "faults": {op: dict(c) for op, c in self.faults.items()},
                    "pending": {
                        p.path or f"<inode {ino}>": p.size()
                        for ino, p in self.pending.items()
                        if p.pages
                    },
                    "lazy": self.lazy,
                    "cut": self.cut,
                }
                if req.get("reset"):
                    self.ops.clear()
                    self.faults.clear()
                return reply
            if cmd == "lazy":
                on = bool(req.get("on", True))
                if self.cut:
                    raise ValueError("the power is cut; mount again")
                if not on:
                    for p in self.pending.values():
                        p.apply()
                self.lazy = on
                return {"ok": True}
            if cmd == "no_size":
                self.no_size = bool(req.get("on", True))
                return {"ok": True}
            if cmd == "cut":
                for p in self.pending.values():
                    p.close()
                self.pending.clear()
                self.cut = True
                return {"ok": True}
        raise ValueError(f"unknown command {cmd!r}")

    def init_with_config(self, conn: Any, config: Any) -> None:
        if conn is not None:
            conn.want &= ~FUSE_CAP_AUTO_INVAL_DATA

    # -- metadata --------------------------------------------------------------------------

    @_locked
    def getattr(self, path: str | None, fh: int | None = None) -> dict[str, Any]:
        self._fault("getattr", path)
        st = os.fstat(fh) if fh is not None else os.lstat(self._full(path))
        keys = ("st_mode", "st_ino", "st_nlink", "st_uid", "st_gid", "st_size", "st_blocks")
        attrs: dict[str, Any] = {k: getattr(st, k) for k in keys}
        attrs.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
        return attrs

    @_locked
    def statfs(self, path: str) -> dict[str, int]:
        self._fault("statfs", path)
        if self.no_size:
            return {"f_bsize": 512, "f_namemax": 255}  # libfuse's answer without a statfs
        sv = os.statvfs(self._full(path))
        keys = ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree")
        out = {k: getattr(sv, k) for k in keys}
        out.update(f_favail=sv.f_favail, f_namemax=sv.f_namemax)
        return out

    @_locked
    def readdir(self, path: str, fh: int) -> list[str]:
        self._fault("readdir", path)
        return [".", "..", *os.listdir(self._full(path))]

    @_locked
    def utimens(self, path: str | None, times: tuple[int, int] | None = None) -> int:
        self._mutate("utimens", path)
        os.utime(self._full(path), ns=times)
        return 0

    @_locked
    def chmod(self, path: str | None, mode: int) -> int:
        self._mutate("chmod", path)
        os.chmod(self._full(path), mode)
        return 0

    @_locked
    def chown(self, path: str | None, uid: int, gid: int) -> int:
        self._mutate("chown", path)
        os.chown(self._full(path), uid, gid)
        return 0

    # -- namespace -------------------------------------------------------------------------

    @_locked
    def mkdir(self, path: str, mode: int) -> int:
        self._mutate("mkdir", path)
        os.mkdir(self._full(path), mode)
        return 0

    @_locked
    def rmdir(self, path: str) -> int:
        self._mutate("rmdir", path)
        os.rmdir(self._full(path))
        return 0

    @_locked
    def unlink(self, path: str) -> int:
        self._mutate("unlink", path)
        ino = self._inode_of(path)
        os.unlink(self._full(path))
        if ino is not None:
            self._forget_if_gone(ino)
        return 0

    @_locked
    def rename(self, old: str, new: str) -> int:
        self._mutate("rename", old, new)
        replaced = self._inode_of(new)
        os.rename(self._full(old), self._full(new))
        if replaced is not None:
            self._forget_if_gone(replaced)
        for p in self.pending.values():
            if p.path == old:
                p.path = new
        return 0

    # -- files -----------------------------------------------------------------------------

    @staticmethod
    def _backing_flags(flags: int) -> int:
        # Always readable and writable (reads of lazy data use the same descriptor); the kernel
        # computes every write offset itself (no O_APPEND), and caches pages (no O_DIRECT).
        strip = os.O_ACCMODE | os.O_CREAT | os.O_EXCL | os.O_TRUNC | os.O_APPEND | os.O_NOCTTY
        strip |= getattr(os, "O_DIRECT", 0)
        return (flags & ~strip) | os.O_RDWR | os.O_CLOEXEC

    def _open_backing(self, full: str, flags: int, mode: int = 0o600) -> int:
        try:
            return os.open(full, self._backing_flags(flags) | (flags & os.O_CREAT), mode)
        except PermissionError:
            # A read-only file: the mode that was asked for, then.
            plain = (self._backing_flags(flags) & ~os.O_RDWR) | (flags & os.O_ACCMODE)
            return os.open(full, plain | (flags & os.O_CREAT), mode)

    @_locked
    def open(self, path: str, flags: int) -> int:
        self._fault("open", path)
        if flags & os.O_TRUNC and self.cut:
            raise fuse.FuseOSError(errno.EIO)
        fd = self._register(self._open_backing(self._full(path), flags))
        if flags & os.O_TRUNC:
            os.ftruncate(fd, 0)
            self._resized(self.fh_ino[fd], 0)
        return fd

    @_locked
    def create(self, path: str, mode: int, flags: int) -> int:
        self._mutate("create", path)
        fd = self._open_backing(self._full(path), flags | os.O_CREAT, mode)
        fd = self._register(fd)
        if flags & os.O_TRUNC:
            os.ftruncate(fd, 0)
            self._resized(self.fh_ino[fd], 0)
        return fd

    @_locked
    def read(self, path: str | None, size: int, offset: int, fh: int) -> bytes:
        self._fault("read", path)
        data = os.pread(fh, size, offset)
        p = self.pending.get(self.fh_ino[fh])
        return p.overlay(data, offset) if p is not None else data

    @_locked
    def write(self, path: str | None, data: bytes, offset: int, fh: int) -> int:
        self._fault("write", path)
        if self.cut:
            return len(data)  # the power is off: acknowledged, and lost
        if not self.lazy:
            return os.pwrite(fh, data, offset)
        end = offset + len(data)
        if os.fstat(fh).st_size < end:
            os.ftruncate(fh, end)  # size changes apply at once (the model's limit)
        self._pending_for(fh, path).write(data, offset)
        return len(data)

    @_locked
    def truncate(self, path: str | None, length: int, fh: int | None = None) -> int:
        self._mutate("truncate", path)
        full = self._full(path)
        os.truncate(full, length)
        self._resized(self._inode_of(path) if path is not None else None, length)
        return 0

    @_locked
    def fallocate(self, path: str | None, mode: int, offset: int, size: int, fh: int) -> int:
        self._mutate("fallocate", path)
        _fallocate(fh, mode, offset, size)
        p = self.pending.get(self.fh_ino[fh])
        if p is not None:
            if mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE):
                p.zero(offset, offset + size)
        return 0

    @_locked
    def fsync(self, path: str | None, datasync: int, fh: int) -> int:
        err = self._enter("fsync", path, alias="fdatasync" if datasync else None)
        ino = self.fh_ino[fh]
        if err:
            p = self.pending.pop(ino, None)
            if p is not None:
                p.close()  # a failed writeback: the data is gone, the pages count as clean
            raise fuse.FuseOSError(err)
        if self.cut:
            return 0
        p = self.pending.pop(ino, None)
        if p is not None:
            try:
                p.apply()
            finally:
                p.close()
        (os.fdatasync if datasync else os.fsync)(fh)
        return 0

    @_locked
    def fsyncdir(self, path: str | None, datasync: int, fh: int) -> int:
        self._fault("fsyncdir", path)
        if self.cut:
            return 0
        fd = os.open(self._full(path), os.O_RDONLY | os.O_DIRECTORY)
        try:
            (os.fdatasync if datasync else os.fsync)(fd)
        finally:
            os.close(fd)
        return 0

    @_locked
    def flush(self, path: str | None, fh: int) -> int:
        self._fault("flush", path)
        return 0

    @_locked
    def release(self, path: str | None, fh: int) -> int:
        ino = self.fh_ino.pop(fh, None)
        try:
            self._fault("release", path)
        finally:
            os.close(fh)
            if ino is not None:
                self._forget_if_gone(ino)
        return 0


class _FUSE(fuse.FUSE):
    def rename_fuse_3(self, old: bytes, new: bytes, flags: int) -> int:
        if flags:
            return -errno.EINVAL  # RENAME_NOREPLACE / RENAME_EXCHANGE: not supported
        return self.rename_fuse_2(old, new)


def _serve_control(ops: FaultFS, sock_path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(sock_path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(sock_path)
    server.listen(8)

    def handle(conn: socket.socket) -> None:
        with conn, conn.makefile("rwb") as f:
            for line in f:
                try:
                    reply = ops.control(json.loads(line))
                except Exception as e:
                    reply = {"ok": False, "error": f"{type(e).__name__}: {e}"}
                f.write(json.dumps(reply).encode() + b"\n")
                f.flush()

    def accept() -> None:
        while True:
            conn, _ = server.accept()
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, name="faultfs-control", daemon=True).start()


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    backing, mountpoint, sock_path = argv[1:]
    if not os.path.isdir(backing):
        print(f"faultfs: {backing} is not a directory", file=sys.stderr)
        return 2
    ops = FaultFS(backing)
    _serve_control(ops, sock_path)
    print(f"faultfs: serving {backing} at {mountpoint}, control {sock_path}", flush=True)
    _FUSE(
        ops,
        mountpoint,
        foreground=True,
        nothreads=True,
        fsname="faultfs",
        subtype="faultfs",
        kernel_cache=True,
        hard_remove=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""Host-side access to directories a sandboxed process could write.

Everything a build, an evaluation child or an agent's shell command leaves behind is hostile: a symlink to
``/etc/shadow``, a FIFO that blocks a reader forever, a device node, a file swapped between a check and a use, a
100 GB file. The worker runs as root, so following any of them hands the candidate whatever root can reach.

Every path here is resolved one component at a time relative to a directory file descriptor, each opened with
``O_NOFOLLOW`` (a link at any component fails) and checked with ``fstat`` on the open descriptor (so what is
checked is what is read: no time-of-check/time-of-use window). Reads are bounded. Only directories and regular
files are ever opened; anything else is refused with ``UnsafePath``, which names the path and the reason.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO for reading would otherwise block until a writer appears; fstat then refuses it.
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_CHUNK = 1 << 20


class UnsafePath(ValueError):
    """A path the host refuses to follow or read; the message names the path and why."""


def _parts(relpath: str) -> list[str]:
    path = PurePosixPath(relpath)
    if path.is_absolute() or ".." in path.parts or not path.parts or "\x00" in relpath:
        raise UnsafePath(f"{relpath!r}: not a relative path inside its directory")
    return [p for p in path.parts if p != "."]


def _why(exc: OSError, where: str) -> UnsafePath:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
        return UnsafePath(f"{where}: a symbolic link or not a directory (links are never followed)")
    if exc.errno == errno.ENOENT:
        return UnsafePath(f"{where}: does not exist")
    return UnsafePath(f"{where}: {exc.strerror}")


@contextlib.contextmanager
def _open_dir(root: Path, parts: list[str], *, create: bool = False) -> Iterator[int]:
    """A descriptor of ``root/parts...``, every component a real directory (created when ``create``)."""
    try:
        fd = os.open(root, _DIR_FLAGS)
    except OSError as exc:
        raise _why(exc, str(root)) from None
    try:
        for i, name in enumerate(parts):
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o755, dir_fd=fd)
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                raise _why(exc, str(root.joinpath(*parts[: i + 1]))) from None
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def _read_fd(fd: int, where: str, limit: int) -> bytes:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise UnsafePath(f"{where}: not a regular file")
    if info.st_size > limit:
        raise UnsafePath(f"{where}: {info.st_size} bytes, more than the {limit} allowed")
    os.set_blocking(fd, True)
    chunks, total = [], 0
    while chunk := os.read(fd, min(_CHUNK, limit + 1 - total)):
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:  # the file grew after fstat
            raise UnsafePath(f"{where}: more than the {limit} bytes allowed")
    return b"".join(chunks)


def read_bytes(root: Path, relpath: str, limit: int) -> bytes:
    """The content of regular file ``root/relpath``, at most ``limit`` bytes; no link followed anywhere."""
    parts = _parts(relpath)
    where = str(root.joinpath(*parts))
    with _open_dir(root, parts[:-1]) as dir_fd:
        try:
            fd = os.open(parts[-1], _READ_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            raise _why(exc, where) from None
        try:
            return _read_fd(fd, where, limit)
        finally:
            os.close(fd)


def read_text(root: Path, relpath: str, limit: int) -> str:
    return read_bytes(root, relpath, limit).decode("utf-8", errors="replace")


def write_bytes(root: Path, relpath: str, data: bytes) -> None:
    """Write ``root/relpath`` (parents created), replacing a regular file; never writes through a link.

    The data goes to a fresh file that is renamed over the target: a link or FIFO planted at the target is
    replaced, not followed."""
    parts = _parts(relpath)
    with _open_dir(root, parts[:-1], create=True) as dir_fd:
        tmp = f".{parts[-1]}.{uuid.uuid4().hex}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dir_fd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        try:
            existing = os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            existing = None
        if existing is not None and stat.S_ISDIR(existing.st_mode):
            os.unlink(tmp, dir_fd=dir_fd)
            raise UnsafePath(f"{root.joinpath(*parts)}: is a directory")
        os.rename(tmp, parts[-1], src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def write_text(root: Path, relpath: str, text: str) -> None:
    write_bytes(root, relpath, text.encode("utf-8"))


def exists(root: Path, relpath: str) -> bool:
    """True when ``root/relpath`` is a regular file reached without following any link."""
    parts = _parts(relpath)
    try:
        with _open_dir(root, parts[:-1]) as dir_fd:
            info = os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False)
    except (UnsafePath, OSError):
        return False
    return stat.S_ISREG(info.st_mode)


def _walk(dir_fd: int, prefix: str, found: list[tuple[str, int]], max_files: int, where: Path) -> None:
    for entry in sorted(os.listdir(dir_fd)):
        info = os.stat(entry, dir_fd=dir_fd, follow_symlinks=False)
        rel = f"{prefix}{entry}"
        if stat.S_ISDIR(info.st_mode):
            child = os.open(entry, _DIR_FLAGS, dir_fd=dir_fd)
            try:
                _walk(child, rel + "/", found, max_files, where)
            finally:
                os.close(child)
        elif stat.S_ISREG(info.st_mode):
            found.append((rel, info.st_mode))
            if len(found) > max_files:
                raise UnsafePath(f"{where}: more than {max_files} files")
        else:
            kind = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a regular file or directory"
            raise UnsafePath(f"{where / rel}: {kind}")


def walk_files(root: Path, *, max_files: int) -> list[str]:
    """Relative paths of every regular file under ``root``; any link, FIFO, socket or device node is refused."""
    return [rel for rel, _ in _regular_files(root, max_files)]


def _regular_files(root: Path, max_files: int) -> list[tuple[str, int]]:
    found: list[tuple[str, int]] = []
    with _open_dir(root, []) as fd:
        _walk(fd, "", found, max_files, root)
    return found


def copy_tree(src: Path, dst: Path, *, max_bytes: int, max_files: int) -> int:
    """Copy the directories and regular files of ``src`` into ``dst`` (created); returns the bytes copied.

    Refuses (``UnsafePath``) links, FIFOs, sockets and device nodes anywhere in ``src``, more than ``max_files``
    files or ``max_bytes`` bytes. Content is copied, so a hard link in ``src`` never becomes shared state."""
    total = 0
    dst.mkdir(parents=True, exist_ok=True)
    for rel, mode in _regular_files(src, max_files):
        data = read_bytes(src, rel, max_bytes - total)
        total += len(data)
        write_bytes(dst, rel, data)
        if mode & stat.S_IXUSR:  # shared libraries and scripts keep their executable bit
            os.chmod(dst / rel, 0o755)
    return total


def remove_tree(path: Path) -> None:
    """Delete ``path`` and everything below it without following links (a link itself is removed)."""
    if not shutil.rmtree.avoids_symlink_attacks:  # the fd-based walk exists on Linux; never fall back to a path walk
        raise OSError("this platform's shutil.rmtree follows links")
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(info.st_mode):
        os.unlink(path)
        return
    # The fd-based walk unlinks links found below ``path`` instead of following them.
    shutil.rmtree(path, ignore_errors=True)

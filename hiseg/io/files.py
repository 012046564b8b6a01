"""Files out, safely: atomic writes (a killed run leaves the complete file or none), exclusive
creation, a folder lock for a whole run, stray temporary files, PNG encoding by row bands."""
from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from .. import _lifetime
from .errors import display_path

__all__ = ["RECORD", "set_usual_mode", "refuse_overwrite", "remove_stray_temps", "naming_the_file", "AtomicFiles",
           "atomic_write", "atomic_write_files", "folder_lock", "file_complete", "write_png", "write_png_rows"]


#: The run record in a folder of ``hiseg predict``'s outputs (:class:`hiseg.segmentation.record.RunRecord`):
#: the options that made each image's files, which ``--resume`` checks. Hidden, and never one of
#: the outputs: not refused as an existing file, not in the index, not a temporary file. Named
#: here, below the packages, so that ``hiseg predict --help`` names it without the image pipeline.
RECORD = ".hiseg-predict.json"


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def set_usual_mode(path) -> None:
    """Give a file made by ``mkstemp`` / ``mkdtemp`` (private, 0600) the mode a plain
    ``open`` would have: ``0666 & ~umask``."""
    os.chmod(path, 0o666 & ~_umask())


def refuse_overwrite(outputs, inputs, overwrite: bool = False, command: str = "hiseg", resume: bool = False) -> None:
    """ValueError, before anything is written, when one of the ``outputs`` paths is one of
    the ``inputs`` files, or (unless ``overwrite``) already exists: a command never replaces
    a file it was not asked to replace. The message names the files (and with ``resume``,
    the command's ``--resume``, which finishes an interrupted run)."""
    ins = {Path(p).resolve() for p in inputs}
    hit = sorted(display_path(p) for p in outputs if Path(p).resolve() in ins)
    if hit:
        raise ValueError(f"output file(s) {hit[:3]} would overwrite input files: choose another --out folder "
                         "(or move the inputs)")
    if overwrite:
        return
    there = sorted(display_path(p) for p in outputs if os.path.lexists(p))
    if there:
        raise ValueError(f"{len(there)} output file(s) exist already, e.g. {there[:5]}: {command} does not replace "
                         "files; choose another --out folder, "
                         + ("give --resume to finish an interrupted run into it (its complete images skipped), "
                            if resume else "") + "or give --overwrite to replace them (nothing was written)")


_LIVE_TEMPS: set = set()  # this process's temporary files not yet renamed or removed


def _temp_beside(path: Path) -> str:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp" + path.suffix)
    os.close(fd)
    _LIVE_TEMPS.add(tmp)
    return tmp


def _discard(tmp) -> None:
    _LIVE_TEMPS.discard(tmp)
    try:
        os.remove(tmp)
    except FileNotFoundError:
        pass


def _discard_live_temps() -> None:
    for tmp in list(_LIVE_TEMPS):
        _discard(tmp)


_lifetime.at_orphan(_discard_live_temps)  # a pool worker whose main process died leaves no temporary file


def remove_stray_temps(path) -> int:
    """Remove the temporary files that a killed :func:`atomic_write` of ``path`` left beside
    it (named ``.NAME.<random>.tmpSUFFIX``; only those). Returns how many; O(files in the folder)."""
    path = Path(path)
    head, tail = f".{path.name}.", ".tmp" + path.suffix
    n = 0
    with contextlib.suppress(FileNotFoundError):
        for name in os.listdir(path.parent):
            if name.startswith(head) and name.endswith(tail) and len(name) == len(head) + 8 + len(tail):
                _discard(path.parent / name)
                n += 1
    return n


@contextlib.contextmanager
def naming_the_file(path):
    """Re-raise an OSError of the block as an OSError that names ``path`` (a full disk's
    "[Errno 27] File too large" carries no file name, nor does a failed encoder); the
    errno, and so the class (FileExistsError, ...), is kept."""
    try:
        yield
    except OSError as e:
        shown = display_path(path)
        if shown in str(e):
            raise
        what = e.strerror or str(e) or type(e).__name__
        if e.errno == errno.ENOSPC:
            what += " (the disk is full)"
        msg = f"cannot write {shown}: {what}"
        raise (OSError(e.errno, msg) if e.errno is not None else OSError(msg)) from e


#: errors of ``os.link`` on a file system without hard links (FAT, some network file systems)
_NO_LINKS = {errno.EPERM, errno.EXDEV, errno.EMLINK, errno.ENOSYS, getattr(errno, "ENOTSUP", -1),
             getattr(errno, "EOPNOTSUPP", -1)}


def _exists_error(path) -> FileExistsError:
    return FileExistsError(errno.EEXIST, f"{display_path(path)} exists already (written by another run at the same "
                                         "time?); it was not replaced")


def _commit(tmp: str, path: Path, overwrite: bool) -> None:
    """Give the complete temporary file ``tmp`` the name ``path``: ``os.replace``, or without
    ``overwrite`` a hard link, which fails when the name exists (no run replaces another's
    file, even at the same moment), then ``tmp`` removed. Where the file system has no hard
    links: a check, then the rename. A pool worker whose main process ended renames nothing:
    it ends there (:func:`hiseg._lifetime.exit_if_orphaned`)."""
    _lifetime.exit_if_orphaned()
    if overwrite:
        os.replace(tmp, path)
        _LIVE_TEMPS.discard(tmp)
        return
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise _exists_error(path) from None
    except OSError as e:
        if e.errno not in _NO_LINKS:
            raise
        if os.path.lexists(path):
            raise _exists_error(path) from None
        os.replace(tmp, path)
        _LIVE_TEMPS.discard(tmp)
        return
    _discard(tmp)


class AtomicFiles:
    """Files that appear together, complete: :meth:`write` writes each one to a temporary
    file beside its destination (one at a time: large contents are never held together),
    :meth:`commit` then gives them all their names; leaving the ``with`` block by an
    exception (or a Ctrl-C) removes the temporary files, so nothing is half-written.

    ``overwrite=False``: each name is created exclusively (:func:`_commit`); when one exists
    already, the files this commit had created are removed again and
    :class:`FileExistsError` names the file: the image is all another run's or all this one's.
    """

    def __init__(self, overwrite: bool = True):
        self.overwrite = overwrite
        self._temps: list[tuple[Path, str]] = []

    def write(self, path, write: Callable[[str], object]) -> None:
        """``write(tmp_path)`` writes ``path``'s content to a temporary file (usual mode)."""
        path = Path(path)
        with naming_the_file(path):
            self._temps.append((path, _temp_beside(path)))
            write(self._temps[-1][1])
            set_usual_mode(self._temps[-1][1])

    def commit(self) -> list[Path]:
        """Move every written file into place; returns their paths. Raises OSError naming the
        file (FileExistsError without ``overwrite`` when one exists)."""
        done: list[Path] = []
        try:
            for dest, tmp in self._temps:
                with naming_the_file(dest):
                    _commit(tmp, dest, self.overwrite)
                done.append(dest)
        except BaseException:
            if not self.overwrite:  # exclusive: the names made here are this call's own
                for dest in done:
                    _discard(dest)
            self.discard()
            raise
        self._temps = []
        return done

    def discard(self) -> None:
        """Remove the temporary files not yet committed."""
        for _, tmp in self._temps:
            _discard(tmp)
        self._temps = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.discard()
        return False


def atomic_write(path, write: Callable[[str], object], overwrite: bool = True) -> None:
    """Write one file: ``write(tmp_path)`` writes the content to a temporary file in the
    same folder, which then gets the usual mode and is renamed to ``path``.

    A killed run leaves either the complete file or none (plus at most a stray ``.tmp``
    file, never under the final name, :func:`remove_stray_temps`); on error the temporary
    file is removed. ``overwrite=False``: FileExistsError when ``path`` exists, even when
    another process creates it meanwhile (:class:`AtomicFiles`).
    """
    with AtomicFiles(overwrite) as files:
        files.write(path, write)
        files.commit()


def atomic_write_files(out_dir, files: Mapping[str, bytes | str], overwrite: bool = True) -> list[Path]:
    """Write several files so that none is left half-written: all go to temporary files
    first, and only when every write succeeded are they renamed into place.

    Parameters
    ----------
    out_dir : str or Path
        Destination folder (created if missing).
    files : mapping of str to bytes or str
        File name (relative to ``out_dir``) -> content (str is written as UTF-8).
    overwrite : bool
        False: FileExistsError when one of them exists (:class:`AtomicFiles`).

    Returns
    -------
    list of Path: the written paths.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with AtomicFiles(overwrite) as group:
        for name, content in files.items():
            data = content.encode("utf-8") if isinstance(content, str) else bytes(content)
            group.write(out_dir / name, lambda tmp, data=data: Path(tmp).write_bytes(data))
        return group.commit()


@contextlib.contextmanager
def folder_lock(folder, command: str = "hiseg"):
    """Hold an exclusive lock on ``folder`` (created if missing) for the block, so that a
    second run into the same folder refuses at once instead of mixing its files with this
    one's. The lock is the operating system's (``flock`` on the folder itself: no lock file,
    released when the process ends, even killed); where there is none (Windows, some network
    file systems) the block runs unlocked, and :class:`AtomicFiles` still keeps one run from
    replacing another's files. The folders this call created (``folder`` and its missing
    parents) are removed again when the block leaves them empty.

    Raises
    ------
    BlockingIOError
        Another process holds the lock; the message names the folder and ``command``.
    """
    folder = Path(folder)
    # the folders this call creates: ``folder`` and any missing parents, innermost first
    created = [d for d in (folder, *folder.parents) if not d.exists()]
    folder.mkdir(parents=True, exist_ok=True)
    fd = None
    try:
        import fcntl

        fd = os.open(folder, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            fd = None
            raise BlockingIOError(errno.EWOULDBLOCK, f"another {command} is writing into {display_path(folder)} at "
                                                     "this moment: wait for it to finish, or choose another --out "
                                                     "folder (nothing was written)") from None
        except OSError:  # no locks on this file system: unlocked
            os.close(fd)
            fd = None
    except ImportError:  # Windows
        pass
    try:
        yield folder
    finally:
        if fd is not None:
            os.close(fd)  # releases the lock
        for d in created:
            try:
                d.rmdir()  # only when empty
            except OSError:
                break


def file_complete(path) -> bool:
    """Whether ``path`` holds a whole file of its kind, as hiseg writes them (O(1) reads): a
    PNG that ends with its IEND chunk, a ``.mat`` whose compressed element (written by
    :func:`write_ucm2_mat`) fills the file to its end, an ``.html`` page that ends with
    ``</html>``; any other kind: a non-empty file. False for a missing file."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size == 0:
            return False
        suffix = path.suffix.lower()
        with open(path, "rb") as fh:
            if suffix == ".png":
                fh.seek(max(0, size - 12))
                return size >= 57 and fh.read(12) == b"\0\0\0\0IEND\xaeB`\x82"
            if suffix == ".mat":
                head = fh.read(136)
                if len(head) < 136 or not head.startswith(b"MATLAB 5.0"):
                    return False
                import struct

                kind, n = struct.unpack("<II", head[128:136])
                return kind != 15 or 136 + n == size  # other MAT writers: their own layout, taken as whole
            if suffix in (".html", ".htm"):
                fh.seek(max(0, size - 64))
                return fh.read().rstrip().endswith(b"</html>")
        return True
    except OSError:
        return False


def write_png(arr: np.ndarray) -> Callable[[str], None]:
    """A writer for :func:`atomic_write`: ``arr`` (uint8 / uint16, gray or BGR) as PNG."""
    import cv2

    def w(tmp):  # encoded in memory, written by Python: any file name (OpenCV's own writer crashes on some)
        ok, buf = cv2.imencode(".png", arr)
        if not ok:
            raise OSError(f"could not encode a PNG of shape {arr.shape}, dtype {arr.dtype}")
        with open(tmp, "wb") as fh:
            fh.write(buf.data)
    return w


def write_png_rows(rows_of: Callable[[int, int], np.ndarray], height: int, dtype, band: int) -> Callable[[str], None]:
    """A writer for :func:`atomic_write`: the PNG of an image of ``height`` rows given by
    ``rows_of(r0, r1)`` (its rows r0..r1-1: (n, W) gray or (n, W, 3) RGB, cast to ``dtype``,
    uint8 or uint16), encoded ``band`` rows at a time: the image is never whole in memory
    (:func:`write_png` holds it and its encoded copy). The same pixels as :func:`write_png`
    of the whole image (given there in BGR order), other bytes: each row filtered by the one
    above (PNG's "Up"), zlib level 1 with run-length matching: smaller files than OpenCV's encoder
    in less time (a 12000x9000 overlay's figures: ``benchmarks/results/large.md``). Cost O(H W)."""
    import struct
    import zlib

    def chunk(f, kind: bytes, data: bytes) -> None:
        f.write(struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data)))

    def w(tmp):
        big = np.dtype(dtype).newbyteorder(">")  # PNG's samples are big-endian
        with open(tmp, "wb") as f:
            f.write(b"\x89PNG\r\n\x1a\n")
            z = zlib.compressobj(1, zlib.DEFLATED, 15, 9, zlib.Z_RLE)
            prev = None
            for r0 in range(0, height, band):
                rows = np.ascontiguousarray(rows_of(r0, min(height, r0 + band)), dtype=big)
                raw = rows.view(np.uint8).reshape(rows.shape[0], -1)
                if prev is None:  # the header, from the first rows' width and channels
                    chunk(f, b"IHDR", struct.pack(">IIBBBBB", rows.shape[1], height, 8 * big.itemsize,
                                                  0 if rows.ndim == 2 else 2, 0, 0, 0))
                    prev = np.zeros(raw.shape[1], np.uint8)  # the row above the first: zeros
                out = np.empty((raw.shape[0], raw.shape[1] + 1), np.uint8)
                out[:, 0] = 2  # filter "Up": each byte minus the one above it, modulo 256
                np.subtract(raw[:1], prev, out=out[:1, 1:])
                np.subtract(raw[1:], raw[:-1], out=out[1:, 1:])
                prev = raw[-1].copy()
                data = z.compress(out.tobytes())
                if data:
                    chunk(f, b"IDAT", data)
            chunk(f, b"IDAT", z.flush())
            chunk(f, b"IEND", b"")
    return w

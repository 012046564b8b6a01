"""Worker processes that end with the process that started them, on any signal (``kill -9``
included): the one mechanism of every hiseg pool (``hiseg predict --workers N``, ``hiseg evaluate
--workers N``, the training host pool :mod:`hiseg.segmentation.hostpool`).

:func:`process_pool` makes a :class:`~concurrent.futures.ProcessPoolExecutor` whose workers run
:func:`start_worker` before their own initializer. A worker then

* asks Linux to send it SIGTERM when its parent dies (``prctl(PR_SET_PDEATHSIG)``; with the
  ``forkserver`` start method its parent is the fork server, not the main process), and ends on
  SIGTERM as below;
* watches the main process itself from a daemon thread: its pidfd (``os.pidfd_open``, Linux
  5.3+) becomes readable the moment it ends; elsewhere a poll every :data:`POLL_S` seconds
  of ``os.kill(pid, 0)`` and of the worker's parent pid;
* when the main process is gone, removes the temporary files of its unfinished writes
  (:func:`at_orphan`, registered by :mod:`hiseg.io.files`) and ends (``os._exit``); the fork
  server and the resource tracker, which only the workers kept open, then end by themselves.

:func:`exit_if_orphaned` is the last check before a file gets its final name
(:mod:`hiseg.io.files`): a worker never renames a file into place after the main process ended.
:func:`first_process` tells which process of a DDP run writes what is written once.
Importing this module costs nothing (no numpy, no torch).
"""
from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time

__all__ = ["first_process", "process_pool", "start_worker", "orphaned", "exit_if_orphaned", "at_orphan", "POLL_S"]

#: Seconds between two checks of the main process where no pidfd is available.
POLL_S = 0.5

_MAIN: int | None = None    # in a worker: the pid of the process that made the pool
_PPID: int | None = None    # in a worker: its parent's pid when it started
_PIDFD: int | None = None   # in a worker on Linux: a pidfd of the main process
_CLEANUPS: list = []
_DYING = threading.Event()


def at_orphan(fn) -> None:
    """Run ``fn()`` in a worker whose main process ended, just before the worker ends."""
    _CLEANUPS.append(fn)


def _parent_death_signal() -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - no libc prctl: the watchdog alone
        pass


def orphaned() -> bool:
    """Whether this process is a pool's worker whose main process has ended (False elsewhere)."""
    if _MAIN is None:
        return False
    if _DYING.is_set():
        return True
    if _PIDFD is not None:
        return bool(select.select([_PIDFD], [], [], 0)[0])
    if _PPID is not None and os.getppid() != _PPID:
        return True
    try:
        os.kill(_MAIN, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # pragma: no cover - another user's process took the pid: ours is gone
        return True
    return False


def _die() -> None:
    _DYING.set()
    for fn in _CLEANUPS:
        try:
            fn()
        except Exception:  # noqa: BLE001 - the worker ends whatever a clean-up does
            pass
    os._exit(1)


def exit_if_orphaned() -> None:
    """End this worker (its unfinished writes' temporary files removed) when its main process
    has ended; nothing otherwise."""
    if orphaned():
        _die()


def _watch() -> None:
    if _PIDFD is not None:
        while not select.select([_PIDFD], [], [])[0]:  # pragma: no cover - returns only when readable
            pass
    else:
        while not orphaned():
            time.sleep(POLL_S)
    _die()


def start_worker(main_pid: int, initializer=None, initargs=()) -> None:
    """A worker's first step (:func:`process_pool`): tie its life to process ``main_pid``, then
    ``initializer(*initargs)``."""
    global _MAIN, _PPID, _PIDFD
    signal.signal(signal.SIGTERM, lambda *_: _die())
    _parent_death_signal()
    _MAIN, _PPID = int(main_pid), os.getppid()
    if hasattr(os, "pidfd_open"):
        try:
            _PIDFD = os.pidfd_open(_MAIN)
        except ProcessLookupError:
            _die()  # gone before this worker started
        except OSError:  # pragma: no cover - a kernel without pidfds: the poll
            _PIDFD = None
    exit_if_orphaned()  # the parent died before prctl took effect
    threading.Thread(target=_watch, name="hiseg-parent-watchdog", daemon=True).start()
    if initializer is not None:
        initializer(*initargs)


def process_pool(workers: int, mp_context=None, initializer=None, initargs=()):
    """A :class:`~concurrent.futures.ProcessPoolExecutor` of ``workers`` processes (``mp_context``
    as there) that end when this process ends, on any signal (module docstring);
    ``initializer(*initargs)`` runs in each after :func:`start_worker`."""
    from concurrent.futures import ProcessPoolExecutor

    return ProcessPoolExecutor(workers, mp_context=mp_context, initializer=start_worker,
                               initargs=(os.getpid(), initializer, tuple(initargs)))


def first_process() -> bool:
    """Whether this process is the first of a DDP run (``RANK``, ``LOCAL_RANK`` and ``NODE_RANK``
    unset or 0: Lightning's launcher sets them in the processes it starts from this one, other
    launchers in each process), or of no DDP run: the one that prints and writes what is
    written once. Read it before the run starts (launchers may set them in this process)."""
    return all(os.environ.get(v, "0") == "0" for v in ("RANK", "LOCAL_RANK", "NODE_RANK"))

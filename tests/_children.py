"""Every process a test starts dies with the test, and with the test run (issue 42): a pytest
plugin (``tests/conftest.py`` imports it; ``-p _children`` elsewhere).

Each ``subprocess.Popen`` a test makes (``subprocess.run`` too) starts in a process group of
its own (``start_new_session``), unless the call chooses its session, group or ``preexec_fn``
itself; the group goes (SIGKILL, children and grandchildren: ``bash script.sh`` -> ``train.py``
-> its data loader workers) when the test ends, when ``subprocess.run``'s ``timeout`` left
the grandchildren behind, and when the run itself is stopped: SIGTERM (``timeout``), SIGHUP,
Ctrl-C (SIGINT) in any pytest process (xdist's workers too), or its normal exit. Only a
SIGKILL of pytest itself cannot be caught."""
from __future__ import annotations

import atexit
import os
import signal
import subprocess

import pytest

#: the process groups (their leaders' pids) started by this pytest process and not killed yet
_GROUPS: list[int] = []
_popen_init = subprocess.Popen.__init__


def _popen_in_a_group_of_its_own(self, *args, **kwargs):
    own = all(kwargs.get(k) in (None, False) for k in ("start_new_session", "process_group", "preexec_fn"))
    if own:
        kwargs["start_new_session"] = True
    _popen_init(self, *args, **kwargs)
    if own:
        _GROUPS.append(self.pid)


def kill_started_groups(since: int = 0) -> None:
    """SIGKILL every process group started so far (what is left of it), or those started after
    the first ``since``."""
    while len(_GROUPS) > since:
        try:
            os.killpg(_GROUPS.pop(), signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass  # the group is gone


def _on_signal(signum, frame):
    kill_started_groups()
    previous = _PREVIOUS.get(signum)
    if callable(previous):
        return previous(signum, frame)  # pytest's own Ctrl-C (KeyboardInterrupt)
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


_PREVIOUS: dict = {}


def pytest_configure(config):
    subprocess.Popen.__init__ = _popen_in_a_group_of_its_own
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        try:
            _PREVIOUS[sig] = signal.signal(sig, _on_signal)
        except (ValueError, OSError):  # not the main thread
            pass
    atexit.register(kill_started_groups)


def pytest_unconfigure(config):
    kill_started_groups()
    subprocess.Popen.__init__ = _popen_init


@pytest.fixture(autouse=True)
def _children_die_with_the_test():
    """What a test started is gone when it ends; what a module- or session-scoped fixture started
    before it (a browser driver shared by a module's tests) stays until the run ends."""
    before = len(_GROUPS)
    yield
    kill_started_groups(since=before)

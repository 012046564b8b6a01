"""``python tests/_slow_workers.py MARKS predict|evaluate|hostpool ARGS...``: run ``hiseg ARGS``
(or a training host pool's jobs) with each worker job slowed to a minute, a file named
``worker<pid>`` touched in folder MARKS when a worker starts one: a test then kills this
process and checks that its workers end (``tests/test_lifetime.py``).

The patches are made when the module is imported, so that the pool's workers, which import
the main script (forkserver, spawn) or inherit it (fork), run the slowed jobs too.
"""
import functools
import os
import sys
import time

import hiseg.cli.predict as _predict
import hiseg.metrics.bsds as _bsds

MARKS = os.environ.get("HISEG_TEST_MARKS", "")


def slowed(fn):
    @functools.wraps(fn)  # the same name: pickled by reference as the original
    def job(*a, **k):
        open(os.path.join(MARKS, f"worker{os.getpid()}"), "w").close()
        time.sleep(60)
        return fn(*a, **k)
    return job


def sleeper(s):
    open(os.path.join(MARKS, f"worker{os.getpid()}"), "w").close()
    time.sleep(s)
    return s


_predict._predict_one = slowed(_predict._predict_one)
_bsds._evaluate_task = slowed(_bsds._evaluate_task)

if __name__ == "__main__":
    if sys.argv[1] == "hostpool":
        from hiseg.segmentation.hostpool import HostPool

        HostPool(2).map(sleeper, [60, 60, 60, 60])
    else:
        from hiseg.cli import main

        sys.exit(main(sys.argv[1:]))

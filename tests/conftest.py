from pathlib import Path

import numpy as np
import pytest
import torch

# every process a test starts dies with the test and with the run (issue 42): tests/_children.py
from _children import _children_die_with_the_test, pytest_configure, pytest_unconfigure  # noqa: E402,F401

# single-threaded, deterministic tests
torch.set_num_threads(1)

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture
def shared_data():
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


def cuda_available():
    return torch.cuda.is_available()

import os
import pathlib

import numpy as np
import pytest
import torch

# tests read benchmark files from ../shared/data unless the caller set LATENTGP_DATA
_shared = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "data"
if "LATENTGP_DATA" not in os.environ and _shared.exists():
    os.environ["LATENTGP_DATA"] = str(_shared)

torch.set_num_threads(min(2, torch.get_num_threads()))


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture
def toy1d(rng):
    X = rng.uniform(-3, 3, size=(80, 1))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.standard_normal(80)
    return X, y


@pytest.fixture(autouse=True)
def _seed_global_rngs():
    """Every test starts from the same torch and numpy global RNG state, so a test that
    draws without its own generator gives the same result alone, under ``-k`` or in the
    whole suite (and a Monte Carlo tolerance is checked on one fixed draw)."""
    torch.manual_seed(0)
    np.random.seed(0)

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

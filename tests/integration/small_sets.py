"""Small seeded data sets and settings shared by the training tests (not a test module)."""

from __future__ import annotations

import numpy as np
import pytest
import torch


def cls_data(n: int = 61, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(N, 2)`` inputs and 0/1 labels from ``sin(1.5 x_1) + x_2 / 2`` plus noise."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, (n, 2))
    y = (np.sin(1.5 * X[:, 0]) + 0.5 * X[:, 1] + 0.3 * rng.standard_normal(n) > 0).astype(float)
    return X, y


def sep_check_data(n: int = 60, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The notes' SEP check problem (notes/checks/sep_check.py): 1-D inputs, labels
    (0/1) from the sign of sin(1.5 x) plus noise."""
    rng = np.random.default_rng(seed)
    X = np.sort(rng.uniform(-3, 3, n))
    y = np.sign(np.sin(1.5 * X) + 0.3 * rng.standard_normal(n))
    y[y == 0] = 1
    return X[:, None], (y + 1) / 2


def reg_data(n: int = 61, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """``(N, 2)`` inputs and targets ``sin(x_1) + x_2 / 10`` plus noise."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, (n, 2))
    return X, np.sin(X[:, 0]) + 0.1 * X[:, 1] + 0.1 * rng.standard_normal(n)


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny matrices: OpenMP threads only spin on a shared 2-core machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)

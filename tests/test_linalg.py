import numpy as np
import pytest
import torch

import latentgp as lg
from latentgp.linalg import CholeskyError, JitterWarning, cho_solve, cholesky, logdet_chol


def spd(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(n, n, generator=g, dtype=torch.float64)
    return A @ A.T + n * torch.eye(n, dtype=torch.float64)


def test_cholesky_matches_torch_and_reports_default_jitter():
    A = spd(6)
    L, j = cholesky(A, "A")
    assert j == lg.get_config().jitter
    torch.testing.assert_close(L @ L.T, A + j * A.diagonal().mean() * torch.eye(6, dtype=A.dtype))


def test_singular_matrix_needs_more_jitter_and_warns():
    Q, _ = torch.linalg.qr(torch.randn(10, 10, dtype=torch.float64))
    eig = torch.ones(10, dtype=torch.float64)
    eig[-1] = -1e-10  # slightly indefinite, as round-off makes kernel matrices
    K = Q @ torch.diag(eig) @ Q.T
    with pytest.warns(JitterWarning, match="Kzz"):
        L, j = cholesky(K, "Kzz", jitter=1e-14)
    assert j > 1e-14
    assert torch.isfinite(L).all()


def test_indefinite_matrix_raises_named_error():
    A = -torch.eye(4, dtype=torch.float64)
    A[0, 0] = 1.0
    with pytest.raises(CholeskyError, match=r"Kzz \(4x4\)"):
        cholesky(A, "Kzz", max_tries=2)


def test_nan_matrix_raises():
    A = spd(3)
    A[1, 2] = float("nan")
    with pytest.raises(CholeskyError, match="NaN"):
        cholesky(A, "K")


def test_float32_is_factorised_in_float64():
    A = spd(5).float()
    L, _ = cholesky(A, "A")
    assert L.dtype == torch.float32


def test_cho_solve_and_logdet():
    A = spd(7, 1)
    B = torch.randn(7, 3, dtype=torch.float64)
    L = torch.linalg.cholesky(A)
    torch.testing.assert_close(cho_solve(L, B), torch.linalg.solve(A, B))
    assert float(logdet_chol(L)) == pytest.approx(float(torch.logdet(A)), rel=1e-12)


def test_config_context_restores():
    base = lg.get_config().jitter
    with lg.config(jitter=1e-3):
        assert lg.get_config().jitter == 1e-3
    assert lg.get_config().jitter == base
    assert np.isclose(base, 1e-6)

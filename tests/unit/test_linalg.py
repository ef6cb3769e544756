import numpy as np
import pytest
import torch

import latentgp as lg
from latentgp.linalg import (
    CholeskyError,
    JitterWarning,
    add_diagonal,
    cho_solve,
    cholesky,
    logdet_chol,
    solve_lower,
    weighted_gram,
    whitened_sums,
)


def spd(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(n, n, generator=g, dtype=torch.float64)
    return A @ A.T + n * torch.eye(n, dtype=torch.float64)


def test_cholesky_matches_torch_and_reports_default_jitter():
    A = spd(6)
    L, j = cholesky(A, "A")
    assert j == lg.get_config().jitter
    torch.testing.assert_close(L @ L.T, A + j * A.diagonal().mean() * torch.eye(6, dtype=A.dtype))


def test_add_diagonal_equals_adding_a_multiple_of_the_identity_with_its_gradients():
    """``add_diagonal`` (one copy, the diagonal shifted in place) gives ``A + d I`` bit for
    bit, for a batch with one shift per matrix, and the same gradients to ``A`` and ``d``;
    the input is left as it was."""
    A = torch.stack([spd(4, 0), spd(4, 1)]).requires_grad_(True)
    d = torch.tensor([[0.3], [2.0]], dtype=torch.float64, requires_grad=True)
    before = A.detach().clone()
    W = torch.randn(2, 4, 4, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    out = add_diagonal(A, d)
    ref = A + d[..., None] * torch.eye(4, dtype=torch.float64)
    assert torch.equal(out, ref)
    assert torch.equal(A.detach(), before)
    g_out = torch.autograd.grad((W * out).sum(), (A, d))
    g_ref = torch.autograd.grad((W * ref).sum(), (A, d))
    for a, b in zip(g_out, g_ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-14, atol=0)
    torch.testing.assert_close(g_out[1][:, 0], W.diagonal(dim1=-2, dim2=-1).sum(-1))


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


@pytest.mark.parametrize("weighted", [False, True])
def test_weighted_gram_matches_autograd_of_the_plain_product(weighted):
    g = torch.Generator().manual_seed(3)
    A = torch.randn(4, 9, generator=g, dtype=torch.float64, requires_grad=True)
    w = (torch.rand(9, generator=g, dtype=torch.float64) + 0.5).requires_grad_(weighted)
    G = torch.randn(4, 4, generator=g, dtype=torch.float64)  # not symmetric on purpose
    got = weighted_gram(A, w if weighted else None)
    ref = ((A * w) if weighted else A) @ A.mT
    torch.testing.assert_close(got, ref, rtol=1e-14, atol=1e-14)
    inputs = (A, w) if weighted else (A,)
    d_got = torch.autograd.grad((got * G).sum(), inputs)
    d_ref = torch.autograd.grad((ref * G).sum(), inputs)
    for a, b in zip(d_got, d_ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert torch.autograd.gradcheck(lambda a, v: weighted_gram(a, v), (A, w))


def test_whitened_sums_match_autograd_of_the_triangular_solve():
    g = torch.Generator().manual_seed(5)
    M, N, P = 5, 11, 2
    L = torch.linalg.cholesky(spd(M, 1)).requires_grad_(True)
    K = torch.randn(M, N, generator=g, dtype=torch.float64, requires_grad=True)
    Y = torch.randn(N, P, generator=g, dtype=torch.float64, requires_grad=True)
    GP = torch.randn(M, M, generator=g, dtype=torch.float64)
    Gq = torch.randn(M, P, generator=g, dtype=torch.float64)
    P_got, q_got = whitened_sums(L, K, Y)
    A = solve_lower(L, K)
    P_ref, q_ref = A @ A.mT, A @ Y
    torch.testing.assert_close(P_got, P_ref, rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(q_got, q_ref, rtol=1e-13, atol=1e-13)
    d_got = torch.autograd.grad((P_got * GP).sum() + (q_got * Gq).sum(), (L, K, Y))
    d_ref = torch.autograd.grad((P_ref * GP).sum() + (q_ref * Gq).sum(), (L, K, Y))
    for a, b in zip(d_got, d_ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-11, atol=1e-11)
    # finite differences, with L kept lower-triangular as the function only reads that part
    assert torch.autograd.gradcheck(
        lambda l, k, y: whitened_sums(l.tril(), k, y), (L, K, Y), eps=1e-6, atol=1e-6
    )

import numpy as np
import pytest
import torch

import latentgp as lg
from latentgp.variational import GaussianVariational, conditional_marginals, gaussian_kl


def _setup(Q=2, M=4, seed=0, whiten=True, cov="full"):
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(Q, M, M, generator=g, dtype=torch.float64)
    Kzz = A @ A.mT + M * torch.eye(M, dtype=torch.float64)
    Lzz = torch.linalg.cholesky(Kzz)
    q = GaussianVariational(Q, M, cov, whiten)
    with torch.no_grad():
        q.q_mu.copy_(torch.randn(Q, M, generator=g, dtype=torch.float64))
        if cov == "full":
            q.q_sqrt_raw.copy_(torch.tril(torch.randn(Q, M, M, generator=g, dtype=torch.float64)))
            q.q_sqrt_raw.diagonal(dim1=-2, dim2=-1).abs_().add_(0.5)
        else:
            q.q_sqrt_raw.copy_(torch.randn(Q, M, generator=g, dtype=torch.float64))
    return q, Kzz, Lzz


@pytest.mark.parametrize("whiten", [True, False])
@pytest.mark.parametrize("cov", ["full", "diag"])
def test_kl_matches_torch_distributions(whiten, cov):
    q, Kzz, Lzz = _setup(whiten=whiten, cov=cov)
    S = q.q_sqrt
    qd = torch.distributions.MultivariateNormal(q.q_mu, scale_tril=S)
    prior_cov = torch.eye(4, dtype=torch.float64).expand_as(Kzz) if whiten else Kzz
    pd = torch.distributions.MultivariateNormal(torch.zeros_like(q.q_mu), prior_cov)
    ref = torch.distributions.kl_divergence(qd, pd).sum()
    assert float(q.kl(Lzz)) == pytest.approx(float(ref), rel=1e-10)


def test_kl_matches_monte_carlo():
    q, Kzz, Lzz = _setup(Q=1, M=3, whiten=False)
    qd = torch.distributions.MultivariateNormal(q.q_mu, scale_tril=q.q_sqrt)
    pd = torch.distributions.MultivariateNormal(torch.zeros_like(q.q_mu), Kzz)
    torch.manual_seed(0)
    u = qd.sample((400_000,))
    lr = (qd.log_prob(u) - pd.log_prob(u)).detach()
    mc, se = float(lr.mean()), float(lr.std() / np.sqrt(lr.shape[0]))
    assert abs(float(gaussian_kl(q.q_mu, q, Lzz)) - mc) < 5 * se


@pytest.mark.parametrize("whiten", [True, False])
@pytest.mark.parametrize("cov", ["full", "diag"])
def test_conditional_matches_dense_formula(whiten, cov):
    Q, M, B = 2, 4, 6
    q, Kzz, Lzz = _setup(Q, M, whiten=whiten, cov=cov)
    g = torch.Generator().manual_seed(5)
    Kzx = torch.randn(Q, M, B, generator=g, dtype=torch.float64)
    kxx = Kzx.square().sum(1) / M + 3.0
    mu_u, S_u = q.q_mu, q.q_sqrt @ q.q_sqrt.mT
    if whiten:  # u = L v
        mu_u = (Lzz @ mu_u[..., None])[..., 0]
        S_u = Lzz @ S_u @ Lzz.mT
    Kinv_Kzx = torch.linalg.solve(Kzz, Kzx)
    mean_ref = (Kinv_Kzx * mu_u[..., None]).sum(1)
    var_ref = kxx - (Kzx * Kinv_Kzx).sum(1) + (Kinv_Kzx * (S_u @ Kinv_Kzx)).sum(1)
    diag = cov == "diag"
    mean, var = conditional_marginals(
        Kzx, kxx, Lzz, q.q_mu, q.q_sqrt_diag() if diag else q.q_sqrt, whiten, diag
    )
    torch.testing.assert_close(mean, mean_ref)
    torch.testing.assert_close(var, var_ref)


@pytest.mark.parametrize("whiten", [True, False])
@pytest.mark.parametrize("cov", ["full", "diag"])
def test_quad_form_and_solve_paths_agree_in_values_and_gradients(whiten, cov):
    """The two ways of computing the marginals ("solve", "quad") are the same function."""
    Q, M, B = 2, 5, 7
    q, Kzz, Lzz = _setup(Q, M, whiten=whiten, cov=cov)
    g = torch.Generator().manual_seed(3)
    Kzx = torch.randn(Q, M, B, generator=g, dtype=torch.float64)
    kxx = Kzx.square().sum(1) / M + 3.0
    w_mu, w_var = torch.randn(2, Q, B, generator=g, dtype=torch.float64)
    diag = cov == "diag"
    results = []
    for mode in ("solve", "quad"):
        leaves = [t.detach().clone().requires_grad_(True) for t in (Kzx, Lzz)]
        params = [p for p in q.parameters()]
        for p in params:
            p.grad = None
        with lg.config(marginals=mode):
            mean, var = conditional_marginals(
                leaves[0], kxx, leaves[1], q.q_mu, q.q_sqrt_diag() if diag else q.q_sqrt,
                whiten, diag,
            )
        ((mean * w_mu).sum() + (var * w_var).sum()).backward()
        results.append(
            [mean.detach(), var.detach(), leaves[0].grad, leaves[1].grad]
            + [p.grad.clone() for p in params]
        )
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


def test_quad_form_marginals_gradcheck():
    from latentgp.variational.fastpaths import QuadFormMarginals

    g = torch.Generator().manual_seed(0)
    Kzx = torch.randn(2, 4, 6, generator=g, dtype=torch.float64, requires_grad=True)
    alpha = torch.randn(2, 4, generator=g, dtype=torch.float64, requires_grad=True)
    R0 = torch.randn(2, 4, 4, generator=g, dtype=torch.float64)
    R = (R0 + R0.mT).requires_grad_(True)
    # R enters as a symmetric matrix: check the symmetrised function
    assert torch.autograd.gradcheck(
        lambda K, a, r: QuadFormMarginals.apply(K, a, 0.5 * (r + r.mT)), (Kzx, alpha, R)
    )


def test_factor_marginals_gradcheck_and_agree_with_projected_path():
    """The small-batch path (W = S^T A) is the same function as the T = I - S S^T path."""
    from latentgp.variational.fastpaths import FactorMarginals, ProjectedMarginals

    g = torch.Generator().manual_seed(1)
    Q, M, B = 2, 4, 6
    Kzx = torch.randn(Q, M, B, generator=g, dtype=torch.float64, requires_grad=True)
    L0 = torch.randn(Q, M, M, generator=g, dtype=torch.float64).tril()
    L = (L0 + 3 * torch.eye(M, dtype=torch.float64)).requires_grad_(True)
    m = torch.randn(Q, M, generator=g, dtype=torch.float64, requires_grad=True)
    S = torch.randn(Q, M, M, generator=g, dtype=torch.float64).tril().requires_grad_(True)

    def factor(K, l, mu, s):
        return FactorMarginals.apply(K, l.tril(), mu, s.tril())

    def projected(K, l, mu, s):
        T = torch.eye(M, dtype=torch.float64) - s.tril() @ s.tril().mT
        return ProjectedMarginals.apply(K, l.tril(), mu, T)

    assert torch.autograd.gradcheck(factor, (Kzx, L, m, S))
    w = torch.randn(2, Q, B, generator=g, dtype=torch.float64)
    grads = []
    for f in (factor, projected):
        mean, quad = f(Kzx, L, m, S)
        grads.append(torch.autograd.grad((mean * w[0]).sum() + (quad * w[1]).sum(), (Kzx, L, m, S)))
        grads[-1] = (mean.detach(), quad.detach()) + grads[-1]
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_marginal_path_follows_the_batch_size(monkeypatch):
    """B < 2M takes the factor form, B >= 2M the quadratic form (float64)."""
    import types

    import latentgp.variational.fastpaths as C

    calls = []
    for name in ("FactorMarginals", "QuadFormMarginals", "ProjectedMarginals"):
        original = getattr(C, name)

        def apply(*args, _name=name, _f=original):
            calls.append(_name)
            return _f.apply(*args)

        monkeypatch.setattr(C, name, types.SimpleNamespace(apply=apply))
    q, Kzz, Lzz = _setup(1, 4, whiten=True, cov="full")
    for B in (3, 7, 8, 20):
        Kzx = torch.randn(1, 4, B, dtype=torch.float64)
        kxx = torch.ones(1, B, dtype=torch.float64)
        C.fast_marginals(Kzx, kxx, Lzz, q.q_mu, q.q_sqrt, True)
    assert calls == ["FactorMarginals", "FactorMarginals"] + ["QuadFormMarginals"] * 2


def test_auto_mode_avoids_quad_form_for_ill_conditioned_kzz():
    from latentgp.variational.fastpaths import use_quad_form

    Kzx = torch.zeros(1, 3, 10, dtype=torch.float64)
    good = torch.eye(3, dtype=torch.float64)[None]
    bad = torch.diag(torch.tensor([1.0, 1.0, 1e-4], dtype=torch.float64))[None]
    assert use_quad_form(Kzx, good)
    assert not use_quad_form(Kzx, bad)  # pivot ratio^2 = 1e8
    assert not use_quad_form(Kzx.float(), good.float())  # float32 keeps the solve path
    assert not use_quad_form(Kzx[..., :2], good)  # batch smaller than M
    with lg.config(marginals="quad"):
        assert use_quad_form(Kzx, bad)
    with pytest.raises(ValueError, match="marginals"):
        with lg.config(marginals="fast"):
            pass


def test_whitened_quad_factors_backward_matches_autograd_and_finite_differences():
    from latentgp.variational.fastpaths import WhitenedQuadFactors, quad_form_factors

    g = torch.Generator().manual_seed(1)
    Q, M = 2, 5
    A = torch.randn(Q, M, M, generator=g, dtype=torch.float64)
    L = torch.linalg.cholesky(A @ A.mT + M * torch.eye(M, dtype=torch.float64))
    m = torch.randn(Q, M, generator=g, dtype=torch.float64)
    S = torch.tril(torch.randn(Q, M, M, generator=g, dtype=torch.float64)) * 0.3
    wa = torch.randn(Q, M, generator=g, dtype=torch.float64)
    wR = torch.randn(Q, M, M, generator=g, dtype=torch.float64)

    def loss(fn, L, m, S):
        alpha, R = fn(L, m, S)
        return (alpha * wa).sum() + (R * wR).sum()

    def generic(L, m, S):
        T = torch.eye(M, dtype=torch.float64) - S @ S.mT
        return quad_form_factors(L, m, T)

    leaves1 = [t.clone().requires_grad_(True) for t in (L, m, S)]
    leaves2 = [t.clone().requires_grad_(True) for t in (L, m, S)]
    l1 = loss(WhitenedQuadFactors.apply, *leaves1)
    l2 = loss(generic, *leaves2)
    torch.testing.assert_close(l1, l2, rtol=1e-12, atol=1e-12)
    l1.backward()
    l2.backward()
    # L's gradient is defined on its lower triangle (it is a Cholesky factor)
    torch.testing.assert_close(leaves1[0].grad, torch.tril(leaves2[0].grad), rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(leaves1[1].grad, leaves2[1].grad, rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(
        torch.tril(leaves1[2].grad), torch.tril(leaves2[2].grad), rtol=1e-9, atol=1e-10
    )
    assert torch.autograd.gradcheck(
        lambda Lx, mx, Sx: WhitenedQuadFactors.apply(torch.tril(Lx), mx, torch.tril(Sx)),
        tuple(t.clone().requires_grad_(True) for t in (L, m, S)),
    )

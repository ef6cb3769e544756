import numpy as np
import pytest
import torch

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

"""Pathwise posterior samples (ExactGP.sample_paths, SVGP.sample_paths): moments
against the exact posterior, gradients, chunking, memory, seeds and bad input."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import latentgp as lg
from latentgp.models.pathwise import PathwiseSamples


def _data(n=60, seed=0, noise=0.3):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 2, generator=g, dtype=torch.float64)
    y = torch.sin(6 * X[:, 0]) + X[:, 1] + noise * torch.randn(n, generator=g, dtype=torch.float64)
    return X, y


def _test_points():
    g = torch.Generator().manual_seed(7)
    near = torch.rand(100, 2, generator=g, dtype=torch.float64)  # among the data
    far = 3 * torch.rand(100, 2, generator=g, dtype=torch.float64) - 1  # and around them
    return torch.cat([near, far])


@pytest.fixture(scope="module")
def models():
    torch.manual_seed(0)
    X, y = _data()
    exact = lg.ExactGP().fit(X, y, max_steps=30)
    svgp = lg.SVGP(15).fit(X, y, max_steps=300)
    return {"ExactGP": exact, "SVGP": svgp}


def check_moments(paths, model, Xs):
    """With 2,000 paths: the sample mean and covariance at 200 points against the exact
    posterior, in units of their Monte Carlo standard errors."""
    F = paths(Xs).numpy()
    S = F.shape[0]
    mu, K = model.predict_f_full_cov(Xs)
    mu, K = mu[:, 0], K[0]
    d = np.diag(K)
    z_mean = (F.mean(0) - mu) / np.sqrt(d / S)
    C = np.cov(F.T)
    z_cov = (C - K) / np.sqrt((np.outer(d, d) + K**2) / S)
    z_var = np.diag(z_cov)
    return np.abs(z_mean).max(), np.abs(z_cov).max(), np.mean(z_var**2)


@pytest.mark.parametrize("name", ["ExactGP", "SVGP"])
def test_paths_match_the_exact_posterior(models, name):
    model = models[name]
    paths = model.sample_paths(2000, seed=1, num_features=4096)
    assert isinstance(paths, PathwiseSamples) and paths.num_paths == 2000
    zm, zc, zv2 = check_moments(paths, model, _test_points())
    # 200 means and 40,000 covariance entries: maxima of |N(0,1)| are about 3 and 4.5;
    # the variances' z^2 average about 1 (a wrong update term gives far more)
    assert zm < 4.5, zm
    assert zc < 6.0, zc
    assert zv2 < 2.0, zv2


def test_paths_are_functions(models):
    model = models["ExactGP"]
    paths = model.sample_paths(8, seed=3)
    Xs = _test_points()
    full = paths(Xs)
    # a path's value at a point does not depend on the other points or on the chunking
    np.testing.assert_allclose(paths(Xs[5:9]), full[:, 5:9], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(paths(Xs, chunk_size=7), full, rtol=1e-12, atol=1e-12)
    # the same seed draws the same paths; another seed other ones
    np.testing.assert_array_equal(model.sample_paths(8, seed=3)(Xs), full)
    assert not torch.allclose(model.sample_paths(8, seed=4)(Xs), full)
    # gradient with respect to the inputs against central finite differences
    x = Xs[:3].clone().requires_grad_(True)
    (g,) = torch.autograd.grad(paths(x).sum(), x)
    h = 1e-6
    E = torch.zeros_like(x)
    E[1, 0] = h
    with torch.no_grad():
        fd = (paths(x + E).sum() - paths(x - E).sum()) / (2 * h)
    assert abs(float(fd) - float(g[1, 0])) < 1e-6 * max(1.0, abs(float(fd)))


def test_paths_do_not_follow_later_training(models):
    X, y = _data(30, seed=2)
    model = lg.ExactGP().fit(X, y, max_steps=5)
    paths = model.sample_paths(4, seed=0)
    before = paths(X[:5]).clone()
    model.fit(X, y, max_steps=20)
    np.testing.assert_array_equal(paths(X[:5]), before)


def test_multi_output_and_bad_input():
    X, y = _data(30)
    Y = torch.stack([y, -y], 1)
    model = lg.ExactGP().fit(X, Y, max_steps=10)
    paths = model.sample_paths(5, seed=0)
    assert paths(X[:4]).shape == (5, 4, 2)
    with pytest.raises(ValueError, match="shape"):
        paths(X[:4, :1])
    with pytest.raises(ValueError, match="num_paths"):
        model.sample_paths(0)
    with pytest.raises(ValueError, match="SE or Matérn"):
        lg.ExactGP(kernel="periodic").fit(X, y, max_steps=2).sample_paths(3)
    with pytest.raises(RuntimeError, match="not fitted"):
        lg.ExactGP().sample_paths(3)


def test_many_points_in_bounded_memory():
    """256 paths at 10^5 points: the peak memory beyond the (256 x 10^5) result (200 MB)
    stays far below what unchunked intermediates would need (the (10^5 x 256) features and
    a second copy of the result: 400 MB; the first version, which concatenated the
    chunks, grew by 400 MB here)."""
    code = textwrap.dedent(
        """
        import resource, torch, latentgp as lg
        g = torch.Generator().manual_seed(0)
        X = torch.rand(200, 2, generator=g, dtype=torch.float64)
        y = torch.sin(6 * X[:, 0]) + 0.1 * torch.randn(200, generator=g, dtype=torch.float64)
        paths = lg.ExactGP().fit(X, y, max_steps=5).sample_paths(256, seed=0, num_features=256)
        Xs = torch.rand(100_000, 2, generator=g, dtype=torch.float64)
        out = torch.empty(256, 100_000, dtype=torch.float64)  # the result's own memory
        out.fill_(0.0)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        del out
        F = paths(Xs)
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        assert F.shape == (256, 100_000) and bool(torch.isfinite(F).all())
        print((after - before) / 1024)
        """
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    grown_mb = float(res.stdout.strip().splitlines()[-1])
    print(grown_mb)
    assert grown_mb < 150, grown_mb

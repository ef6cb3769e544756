"""The Cholesky path's objective without the kernel's autograd graph
(``models.exact.cholesky_log_marginal``): the same value and gradients as autograd
through ``K(X)`` (an independent derivation: the closed form ``d log p / dK`` taken
block by block against the chain rule through every kernel operation)."""

import numpy as np
import pytest
import torch

import latentgp as lg
from latentgp.kernels import RBF, Kernel, Linear
from latentgp.linalg import add_diagonal, cholesky
from latentgp.models.exact import cholesky_log_marginal, gaussian_log_marginal


def _model(kernel, P=1, mean=None, n=120, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    Y = np.stack([np.sin(X.sum(1) + p) for p in range(P)], 1) + 0.1 * rng.normal(size=(n, P))
    m = lg.ExactGP(kernel, solver="cholesky", **({} if mean is None else {"mean": mean}))
    m.fit(X, Y[:, 0] if P == 1 else Y, max_steps=2, progress=False)
    return m


def _deviation(m, X):
    """The training targets' deviation from the prior mean ``(N, P)``."""
    Y = m.y_train.reshape(X.shape[0], -1)
    mean = m.prior_mean_at(X)
    return Y if mean is None else Y - mean


def _objective(m):
    return m.objective(m.X_train, m.y_train, m.X_train.shape[0])


def _reference(m):
    """Value and gradients by autograd through the kernel (the path used before)."""
    X = m.X_train
    R = _deviation(m, X)
    K = add_diagonal(m.kernel(X), m.likelihood.variance)
    L, _ = cholesky(K.detach(), "K", jitter=0.0)
    return gaussian_log_marginal(K, L, R)


@pytest.mark.parametrize("kernel", ["rbf", "matern52", "matern12", "rq", "sum"])
@pytest.mark.parametrize("P", [1, 2])
def test_value_and_gradients_equal_autograd_through_the_kernel(kernel, P):
    k = RBF() + Linear() if kernel == "sum" else kernel
    m = _model(k, P=P, mean="linear" if P == 1 else None)
    params = [p for p in m.parameters() if p.requires_grad]
    info = {}
    X = m.X_train
    R = _deviation(m, X)
    lean = cholesky_log_marginal(m.kernel, X, m.likelihood.variance, R, info=info)
    assert lean is not None and info["jitter"] == 0.0
    ref = _reference(m)
    assert float(lean.detach()) == pytest.approx(float(ref.detach()), rel=1e-12, abs=1e-9)
    g_lean = torch.autograd.grad(lean, params, allow_unused=True)
    g_ref = torch.autograd.grad(ref, params, allow_unused=True)
    assert [g is None for g in g_lean] == [g is None for g in g_ref]
    # Matern 1/2 is not differentiable at r = 0, where the blocks' distances of a point
    # to itself are rounding-sized: the diagonal's gradient comes from kernel.diag (3e-8
    # of the largest entry off without it)
    rtol = 1e-8
    for a, b in zip(g_lean, g_ref, strict=True):
        if b is not None:
            torch.testing.assert_close(a, b, rtol=rtol, atol=rtol * float(b.abs().max()) + 1e-12)


def test_the_model_objective_takes_the_lean_path_and_its_gradient_is_right():
    m = _model("rbf", mean="constant")
    params = [p for p in m.parameters() if p.requires_grad]
    value = _objective(m)
    assert type(value.grad_fn).__name__ == "_CholeskyLogMarginalBackward"
    got = torch.autograd.grad(value, params, allow_unused=True)
    want = torch.autograd.grad(_reference(m), params, allow_unused=True)
    for a, b in zip(got, want, strict=True):
        if b is not None:
            torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10)
    # without gradients the plain factorisation serves (nothing to save)
    with torch.no_grad():
        assert float(_objective(m)) == pytest.approx(float(value))


class _WhiteOnDiagonal(Kernel):
    """An RBF plus a white-noise term that ``K(X)`` and ``diag(X)`` have and ``K(X, Z)``
    has not (``diag_has_white=False``: a ``diag`` that disagrees with ``K(X)``)."""

    def __init__(self, diag_has_white=True):
        super().__init__()
        self.rbf = RBF()
        self.diag_has_white = diag_has_white

    def _build(self, dtype, device):
        self.rbf.build(self.input_dim, self.batch_shape, dtype, device)
        self.raw_white = torch.nn.Parameter(torch.tensor(-1.0, dtype=dtype, device=device))

    def white(self):
        return torch.nn.functional.softplus(self.raw_white)

    def forward(self, X, Z=None):
        K = self.rbf(X, Z)
        return add_diagonal(K, self.white()) if Z is None else K

    def diag(self, X):
        d = self.rbf.diag(X)
        return d + self.white() if self.diag_has_white else d


def test_a_term_on_the_diagonal_alone_gets_its_gradient_from_diag():
    m = _model(_WhiteOnDiagonal())
    X = m.X_train
    assert cholesky_log_marginal(m.kernel, X, m.likelihood.variance, _deviation(m, X)) is not None
    params = [p for p in m.parameters() if p.requires_grad]
    got = torch.autograd.grad(_objective(m), params, allow_unused=True)
    want = torch.autograd.grad(_reference(m), params, allow_unused=True)
    for p, a, b in zip(params, got, want, strict=True):
        if b is not None:
            torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10)
        if p is m.kernel.raw_white:
            assert float(a) != 0.0


def test_a_kernel_whose_diag_is_not_its_diagonal_keeps_full_autograd():
    m = _model(_WhiteOnDiagonal(diag_has_white=False))
    X = m.X_train
    assert cholesky_log_marginal(m.kernel, X, m.likelihood.variance, _deviation(m, X)) is None
    value = _objective(m)
    assert type(value.grad_fn).__name__ != "_CholeskyLogMarginalBackward"
    (g,) = torch.autograd.grad(value, [m.kernel.raw_white])
    (want,) = torch.autograd.grad(_reference(m), [m.kernel.raw_white])
    assert float(g) != 0.0
    torch.testing.assert_close(g, want)


def test_tiny_trial_lengthscales_keep_the_blockwise_gradient():
    # a line search's trial point: lengthscales of 1e-5 put rounding of 1e-6 of the
    # variance on the blocks' own entries K(x_i, x_i); the diagonal comes from diag
    m = _model("rbf")
    m.kernel.lengthscale = torch.full((3,), 1e-5, dtype=torch.float64)
    X = m.X_train
    value = cholesky_log_marginal(m.kernel, X, m.likelihood.variance, _deviation(m, X))
    assert value is not None
    params = [p for p in m.parameters() if p.requires_grad]
    got = torch.autograd.grad(value, params, allow_unused=True)
    want = torch.autograd.grad(_reference(m), params, allow_unused=True)
    for a, b in zip(got, want, strict=True):
        if b is not None:
            torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-8 * float(b.abs().max()) + 1e-12)


def test_inputs_that_need_gradients_keep_full_autograd():
    m = _model("rbf")
    X = m.X_train.clone().requires_grad_(True)
    assert cholesky_log_marginal(m.kernel, X, m.likelihood.variance, _deviation(m, X)) is None


def _functional_objective(m, values):
    """``m.objective`` on its training data with ``values`` (name -> tensor) swapped in
    by ``torch.func.functional_call``."""
    N = m.X_train.shape[0]

    class Objective(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, X, y):
            return self.model.objective(X, y, N)

    return torch.func.functional_call(
        Objective(m), {f"model.{n}": v for n, v in values.items()}, (m.X_train, m.y_train)
    )


def _fresh_values(m):
    return {n: p.detach().clone().requires_grad_(True)
            for n, p in m.named_parameters() if p.requires_grad}


def test_functional_call_keeps_full_autograd_and_its_gradients():
    # torch.func.functional_call swaps plain tensors into the module for the call only;
    # a backward pass that evaluated the kernel again would see the module's own
    m = _model("rbf")
    values = _fresh_values(m)
    got = torch.autograd.grad(_functional_objective(m, values), tuple(values.values()))
    want = torch.autograd.grad(_objective(m), [p for p in m.parameters() if p.requires_grad])
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10)


def test_the_iterative_path_refuses_functional_call_gradients_clearly():
    m = _model("rbf")
    m.solver = "cg"
    with pytest.raises(NotImplementedError, match="functional_call"):
        _functional_objective(m, _fresh_values(m))
    with torch.no_grad():  # a value alone is fine
        assert torch.isfinite(_functional_objective(m, _fresh_values(m)))

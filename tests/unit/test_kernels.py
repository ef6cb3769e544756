import math

import numpy as np
import pytest
import torch

import latentgp as lg
from latentgp import kernels as K


def _build(k, D=3, batch=()):
    return k.build(D, batch)


@pytest.fixture
def XZ():
    g = torch.Generator().manual_seed(1)
    X = torch.randn(7, 3, generator=g, dtype=torch.float64)
    Z = torch.randn(5, 3, generator=g, dtype=torch.float64)
    return X, Z


def _r(X, Z, ls):
    d = (X[:, None, :] - Z[None, :, :]) / ls
    return (d**2).sum(-1).sqrt()


@pytest.mark.parametrize(
    "cls,profile",
    [
        (K.RBF, lambda r: np.exp(-0.5 * r**2)),
        (K.Matern12, lambda r: np.exp(-r)),
        (K.Matern32, lambda r: (1 + math.sqrt(3) * r) * np.exp(-math.sqrt(3) * r)),
        (K.Matern52, lambda r: (1 + math.sqrt(5) * r + 5 / 3 * r**2) * np.exp(-math.sqrt(5) * r)),
    ],
)
def test_stationary_matches_formula(cls, profile, XZ):
    X, Z = XZ
    k = _build(cls(lengthscale=[0.7, 1.3, 2.0], variance=1.7))
    r = _r(X, Z, torch.tensor([0.7, 1.3, 2.0], dtype=torch.float64)).numpy()
    np.testing.assert_allclose(k(X, Z).detach().numpy(), 1.7 * profile(r), rtol=1e-10, atol=1e-12)
    full = k(X).detach()
    np.testing.assert_allclose(k.diag(X).detach().numpy(), np.diag(full.numpy()), rtol=1e-12)
    assert torch.linalg.eigvalsh(full).min() > -1e-10
    torch.testing.assert_close(full, full.T)


def test_periodic_matches_formula(XZ):
    X, Z = XZ
    k = _build(K.Periodic(period=1.5, lengthscale=0.8, variance=2.0))
    d = (X[:, None, :] - Z[None, :, :]).numpy()
    ref = 2.0 * np.exp(-2 * (np.sin(np.pi * d / 1.5) ** 2).sum(-1) / 0.8**2)
    np.testing.assert_allclose(k(X, Z).detach().numpy(), ref, rtol=1e-9, atol=1e-12)


def test_linear_and_combinations(XZ):
    X, Z = XZ
    lin = _build(K.Linear(variance=0.5))
    np.testing.assert_allclose(lin(X, Z).detach().numpy(), 0.5 * X.numpy() @ Z.numpy().T)
    np.testing.assert_allclose(lin.diag(X).detach().numpy(), 0.5 * (X.numpy() ** 2).sum(1))
    rbf = K.RBF(lengthscale=1.0)
    s = _build(rbf + K.Linear(variance=0.5))
    p = _build(K.RBF(lengthscale=1.0) * K.Matern32(lengthscale=2.0))
    sc = _build(3.0 * K.RBF(lengthscale=1.0))
    r = rbf(X, Z).detach()
    np.testing.assert_allclose(s(X, Z).detach(), r + 0.5 * X @ Z.T, rtol=1e-12)
    m32 = _build(K.Matern32(lengthscale=2.0))
    np.testing.assert_allclose(p(X, Z).detach(), r * m32(X, Z).detach(), rtol=1e-12)
    np.testing.assert_allclose(sc(X, Z).detach(), 3.0 * r, rtol=1e-10)
    for k in (s, p, sc):
        np.testing.assert_allclose(k.diag(X).detach(), np.diag(k(X).detach()), rtol=1e-10)


def test_batch_shape_for_latents(XZ):
    X, Z = XZ
    k = _build(K.RBF(), batch=(4,))
    assert k.lengthscale.shape == (4, 3)
    assert k(Z, X).shape == (4, 5, 7)
    assert k.diag(X).shape == (4, 7)
    assert k(Z.expand(4, 5, 3), X).shape == (4, 5, 7)


def test_kernel_gradients_match_finite_differences(XZ):
    X, Z = XZ
    for cls in (K.RBF, K.Matern12, K.Matern52, K.Periodic, K.Linear):
        k = _build(cls())
        names = [n for n, _ in k.named_parameters()]
        inputs = tuple(p.detach().clone().requires_grad_(True) for p in k.parameters())

        def g(*vals, k=k, names=names):
            return torch.func.functional_call(k, dict(zip(names, vals, strict=True)), (X, Z))

        assert torch.autograd.gradcheck(g, inputs, eps=1e-6, atol=1e-6)


def test_zero_distance_gradient_is_finite():
    k = _build(K.Matern12(), D=2)
    X = torch.zeros(3, 2, dtype=torch.float64, requires_grad=True)
    k(X).sum().backward()
    assert torch.isfinite(X.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in k.parameters())


def test_names_and_config_roundtrip():
    for name in ("rbf", "se", "matern12", "matern32", "matern52", "linear", "periodic"):
        assert isinstance(K.kernel_from_name(name), K.Kernel)
    with pytest.raises(ValueError, match="unknown kernel"):
        K.kernel_from_name("wiggly")
    k = 2.0 * (K.RBF(lengthscale=0.5) + K.Periodic(period=3.0)) * K.Linear()
    k2 = K.kernel_from_config(k.to_config())
    X = torch.randn(4, 2, dtype=torch.float64)
    k.build(2), k2.build(2)
    torch.testing.assert_close(k(X), k2(X))


def test_lengthscale_initialised_from_data_scale():
    k = K.RBF()
    k.build(2)
    X = torch.tensor([[0.0, 0.0], [1e-6, 1e6], [2e-6, -1e6]], dtype=torch.float64)
    k.init_from_data(X)
    ls = k.lengthscale.detach()
    assert ls[0] < 1e-4 and ls[1] > 1e5


@pytest.mark.parametrize("batch", [(), (3,)])
def test_rbf_cross_covariance_product_form_matches_distance_form(batch):
    """RBF's one-product cross-covariance equals variance * exp(-r^2/2) in value and grads."""
    g = torch.Generator().manual_seed(0)
    X = torch.randn(7, 4, generator=g, dtype=torch.float64) * 3 + 5
    Z = torch.randn(5, 4, generator=g, dtype=torch.float64) * 3 + 5
    k = lg.kernels.RBF(lengthscale=[0.7, 1.3, 2.0, 4.0], variance=1.7)
    k.build(4, batch, torch.float64)
    K = k(X, Z)
    ls, var = k.lengthscale[..., None, :], k.variance[..., None, None]
    r2 = (((X[:, None, :] - Z[None, :, :]) / ls[..., None, :]) ** 2).sum(-1)
    K_ref = var * torch.exp(-0.5 * r2)
    torch.testing.assert_close(K, K_ref, rtol=1e-12, atol=1e-14)
    w = torch.randn(K.shape, generator=g, dtype=torch.float64)
    g1 = torch.autograd.grad((K * w).sum(), [k.raw_lengthscale, k.raw_variance])
    g2 = torch.autograd.grad((K_ref * w).sum(), [k.raw_lengthscale, k.raw_variance])
    for a, b in zip(g1, g2, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    Xg = X.clone().requires_grad_(True)
    torch.autograd.gradcheck(lambda x: k(x, Z), (Xg,))


@pytest.mark.parametrize("cls", [K.RBF, K.Matern12, K.Matern52])
def test_one_far_row_does_not_change_the_other_rows(cls):
    """The distance form centres its inputs; a far-away row (a test point at 1e17, such as
    an unseen category value standardised by a round-off spread) must not move the centre
    for the other rows.  With the old centre (the mean of the second argument) every
    entry of k(Z, X) lost all precision and SVGP predictions of a whole chunk were off."""
    g = torch.Generator().manual_seed(3)
    Z = torch.randn(6, 3, generator=g, dtype=torch.float64)
    X = torch.randn(9, 3, generator=g, dtype=torch.float64)
    far = X.clone()
    far[4, 1] = 1e17
    k = _build(cls(lengthscale=[0.7, 1.3, 0.9], variance=1.7))
    keep = [0, 1, 2, 3, 5, 6, 7, 8]
    ls = torch.tensor([0.7, 1.3, 0.9], dtype=torch.float64)
    exact = 1.7 * torch.exp(-0.5 * _r(X, Z, ls) ** 2)
    for a, b in [(Z, far), (far, Z)]:
        kzx = k(a, b)
        kzx = kzx if a is Z else kzx.mT
        torch.testing.assert_close(kzx[:, keep], k(Z, X)[:, keep], rtol=1e-12, atol=1e-14)
        # the far row sits at the floor, exp(floor) times the variance (or 1: the product
        # form of RBF puts the variance in the exponent)
        floor = math.exp(K.exp_floor(torch.float64))
        far_values = kzx[:, 4].detach()
        assert bool(((far_values >= floor * (1 - 1e-12)) & (far_values <= 1.7 * floor)).all())
    sym = k(far)
    torch.testing.assert_close(sym[keep][:, keep], k(X)[keep][:, keep], rtol=1e-12, atol=1e-14)
    if cls is K.RBF:
        torch.testing.assert_close(k(Z, X), exact.mT, rtol=1e-12, atol=1e-14)


def _against_cases():
    return [
        ("rbf", lambda: K.RBF(lengthscale=[0.7, 1.3, 2.0], variance=1.7)),
        ("matern12", lambda: K.Matern12(lengthscale=[0.7, 1.3, 2.0], variance=1.7)),
        ("matern32", lambda: K.Matern32(lengthscale=0.9, variance=0.6, ard=False)),
        ("matern52", lambda: K.Matern52(lengthscale=[0.7, 1.3, 2.0])),
        ("rq", lambda: K.RationalQuadratic(lengthscale=1.1, alpha=0.7)),
        ("periodic", lambda: K.Periodic(period=1.5, lengthscale=0.8)),
        ("linear", lambda: K.Linear(variance=0.5)),
        ("sum", lambda: K.RBF(lengthscale=1.0) + K.Linear(variance=0.5)),
        ("product", lambda: K.RBF(lengthscale=1.0) * K.Matern32(lengthscale=2.0)),
        ("scale", lambda: 3.0 * K.Matern52(lengthscale=[0.5, 1.0, 2.0])),
        ("active", lambda: K.RBF(lengthscale=0.8).on([0, 2]) * K.Matern12().on([1])),
    ]


@pytest.mark.parametrize("batch", [(), (3,)])
@pytest.mark.parametrize("name,make", _against_cases(), ids=[c[0] for c in _against_cases()])
def test_against_equals_the_kernel_in_value_and_gradient(name, make, batch):
    """``k.against(Z)(A)`` (the ``Z`` side prepared once, as the iterative exact GP's
    products use it) is ``k(A, Z)``: values to rounding, gradients with respect to every
    parameter and to ``A`` the same, for each row block of ``A``; with ``out=`` (a view
    of a larger buffer) the values land in it.  (``A``'s rows are not
    ``Z``'s: at zero distance Matern 1/2's square root turns the distance form's rounding,
    which depends on the centre, into 1e-8.)"""
    g = torch.Generator().manual_seed(4)
    Z = torch.randn(40, 3, generator=g, dtype=torch.float64) * 2 + 3
    X = torch.randn(30, 3, generator=g, dtype=torch.float64) * 2 + 3
    k = make().build(3, batch)
    block = k.against(Z)
    for rows in (slice(0, 1), slice(5, 17), slice(0, 30)):
        A = X[rows].clone().requires_grad_(True)
        ref, got = k(A, Z), block(A)
        torch.testing.assert_close(got, ref, rtol=1e-11, atol=1e-13)
        w = torch.randn(ref.shape, generator=g, dtype=torch.float64)
        params = [A, *k.parameters()]
        g_ref = torch.autograd.grad((ref * w).sum(), params, retain_graph=True)
        g_got = torch.autograd.grad((got * w).sum(), params, retain_graph=True)
        for a, b in zip(g_got, g_ref, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)
        with torch.no_grad():  # into a caller's buffer: the same values, in that buffer
            buf = torch.full((*ref.shape[:-2], 40, 40), float("nan"), dtype=torch.float64)
            view = buf[..., : ref.shape[-2], :]
            into = block(A, out=view)
            assert into.data_ptr() == view.data_ptr()
            torch.testing.assert_close(view, ref, rtol=1e-11, atol=1e-13)


def test_against_keeps_other_rows_exact_beside_a_far_row():
    """The prepared side is centred on the median of ``Z``'s rows, so a far row in either
    argument leaves every other entry as exact as ``k(A, Z)``'s."""
    g = torch.Generator().manual_seed(3)
    Z = torch.randn(9, 3, generator=g, dtype=torch.float64)
    A = torch.randn(6, 3, generator=g, dtype=torch.float64)
    ls = torch.tensor([0.7, 1.3, 0.9], dtype=torch.float64)
    exact = 1.7 * torch.exp(-0.5 * _r(A, Z, ls) ** 2)
    k = _build(K.RBF(lengthscale=[0.7, 1.3, 0.9], variance=1.7))
    far_z, far_a = Z.clone(), A.clone()
    far_z[4, 1], far_a[2, 0] = 1e17, -1e17
    with torch.no_grad():
        got = k.against(far_z)(A)
        keep = [0, 1, 2, 3, 5, 6, 7, 8]
        torch.testing.assert_close(got[:, keep], exact[:, keep], rtol=1e-12, atol=1e-14)
        floor = math.exp(K.exp_floor(torch.float64))  # far pairs sit at the floor
        torch.testing.assert_close(got[:, 4], torch.full((6,), floor, dtype=torch.float64))
        got = k.against(Z)(far_a)
        rows = [0, 1, 3, 4, 5]
        torch.testing.assert_close(got[rows], exact[rows], rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(got[2], torch.full((9,), floor, dtype=torch.float64))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_floored_exp_is_exp_above_the_floor_and_the_floor_below(dtype):
    """``floored_exp``: ``exp`` (value and gradient) at or above ``exp_floor``; below it
    the floor's value, a normal number far from the subnormal range, and zero gradient;
    ``lowest`` at or above the floor skips the clamp, in place or not."""
    floor = K.exp_floor(dtype)
    tiny = torch.finfo(dtype).tiny
    assert floor < 0 and math.exp(floor) > tiny * 1e6
    x = torch.tensor([0.0, -3.0, floor + 1.0, floor - 1.0, -1e4, -math.inf], dtype=dtype,
                     requires_grad=True)
    y = K.floored_exp(x)
    want = torch.exp(x.detach().clamp(min=floor))
    torch.testing.assert_close(y, want)
    assert bool((y >= tiny).all())
    (g,) = torch.autograd.grad(y.sum(), x)
    torch.testing.assert_close(g, torch.where(x.detach() >= floor, want, torch.zeros_like(want)))
    with torch.no_grad():
        z = x.detach().clone()
        assert K.floored_exp(z, inplace=True).data_ptr() == z.data_ptr()
        torch.testing.assert_close(z, want)
        # a caller's bound above the floor: plain exp, no clamp (so no floor either)
        w = torch.tensor([-1.0, -2.0], dtype=dtype)
        torch.testing.assert_close(K.floored_exp(w, lowest=-2.0), torch.exp(w))
        below = torch.tensor([floor - 5.0], dtype=dtype)
        torch.testing.assert_close(K.floored_exp(below, lowest=floor - 10.0),
                                   torch.tensor([math.exp(floor)], dtype=dtype))


@pytest.mark.parametrize("name", ["rbf", "matern12", "matern32", "matern52", "rq", "periodic"])
def test_far_pairs_give_no_subnormal_kernel_values(name):
    """At lengthscales that put most pairs far apart (exponents down to -1e5), no kernel
    value is subnormal or zero, in the plain form, the cross form and ``against`` blocks:
    each is at least ``min(1, variance) * exp(exp_floor)``, and most sit there."""
    g = torch.Generator().manual_seed(5)
    X = torch.randn(50, 3, generator=g, dtype=torch.float64) * 4
    Z = torch.randn(30, 3, generator=g, dtype=torch.float64) * 4
    make = {
        "rbf": lambda: K.RBF(lengthscale=[0.02, 0.05, 0.1], variance=2.0),
        "matern12": lambda: K.Matern12(lengthscale=[0.002, 0.005, 0.01], variance=2.0),
        "matern32": lambda: K.Matern32(lengthscale=0.003, variance=2.0),
        "matern52": lambda: K.Matern52(lengthscale=0.004, variance=2.0),
        "rq": lambda: K.RationalQuadratic(lengthscale=0.01, alpha=1e4, variance=2.0),
        "periodic": lambda: K.Periodic(period=7.3, lengthscale=0.02, variance=2.0),
    }[name]
    k = make().build(3)
    floor = math.exp(K.exp_floor(torch.float64))
    with torch.no_grad():
        blocks = [k(X), k(X, Z)]
        if hasattr(k, "against"):
            blocks.append(k.against(Z)(X))
        for b in blocks:
            assert bool((b >= floor * (1 - 1e-12)).all())
            assert bool((b <= 2.0 * floor * (1 + 1e-12)).float().mean() > 0.5)  # most are far
        torch.testing.assert_close(torch.diagonal(blocks[0]), torch.full((50,), 2.0,
                                   dtype=torch.float64))

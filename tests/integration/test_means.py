"""Prior mean functions (``mean=``) against closed forms: a constant mean is the zero-mean
GP of the shifted targets, a linear mean extrapolates the line, SVGP with Z = X and the
optimal q(u) is the exact GP with the same mean (whitened and not), gradients, files."""

import copy

import numpy as np
import pytest
import torch

import latentgp as lg
from latentgp.means import ConstantMean, LinearMean, ModuleMean, ZeroMean, mean_from_spec


def _data(n=40, d=2, seed=0, offset=3.0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, d))
    y = np.sin(2 * X[:, 0]) + 0.3 * X[:, 1] + offset + 0.1 * rng.standard_normal(n)
    return X, y


def _set_hypers(model, ls=(0.8, 1.5), var=1.3, noise=0.05):
    with torch.no_grad():
        k = model.kernel
        k.lengthscale = list(ls)
        k.raw_variance.copy_(lg.parameters.inv_softplus(torch.tensor(var, dtype=torch.float64)))
        lik = model.likelihood
        lik.raw_variance.copy_(
            lg.parameters.inv_softplus(torch.tensor(noise - lik.min_variance, dtype=torch.float64))
        )


def _exact(X, y, mean="zero"):
    m = lg.ExactGP(mean=mean, normalize_y=False).initialize(X, y)
    _set_hypers(m)
    m.clear_prediction_cache()
    return m


def test_constant_mean_is_the_zero_mean_gp_of_shifted_targets():
    X, y = _data()
    c = 2.7
    with_mean = _exact(X, y, mean="constant")
    with torch.no_grad():
        with_mean.mean_function.constant.fill_(c)
    with_mean.clear_prediction_cache()
    shifted = _exact(X, y - c)
    assert with_mean.log_marginal_likelihood() == pytest.approx(
        shifted.log_marginal_likelihood(), rel=1e-12
    )
    Xs = np.random.default_rng(1).uniform(-3, 3, size=(15, 2))
    m1, v1 = with_mean.predict_f(Xs)
    m0, v0 = shifted.predict_f(Xs)
    np.testing.assert_allclose(m1, m0 + c, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(v1, v0, rtol=1e-10)
    ys = np.sin(2 * Xs[:, 0]) + 3.0
    np.testing.assert_allclose(
        with_mean.log_predictive_density(Xs, ys), shifted.log_predictive_density(Xs, ys - c),
        rtol=1e-10,
    )
    # and the LML is not the zero-mean one (the mean matters)
    assert abs(_exact(X, y).log_marginal_likelihood() - shifted.log_marginal_likelihood()) > 1


def test_linear_mean_recovers_the_slope_and_extrapolates():
    rng = np.random.default_rng(3)
    X = rng.uniform(0, 5, size=(50, 1))
    y = 2.0 * X[:, 0] - 1.0 + 1e-3 * rng.standard_normal(50)
    m = lg.ExactGP(mean="linear", normalize_y=False).fit(X, y, seed=0)
    w = float(m.mean_function.weight.detach()[0, 0])
    b = float(m.mean_function.bias.detach()[0])
    assert w == pytest.approx(2.0, abs=1e-2)
    assert b == pytest.approx(-1.0, abs=5e-2)
    far = np.array([[15.0], [-10.0]])
    mu, _ = m.predict_f(far)  # far from the data the GP reverts to its mean: the line
    np.testing.assert_allclose(mu, 2.0 * far[:, 0] - 1.0, rtol=0, atol=0.2)


@pytest.mark.parametrize("whiten", [True, False])
@pytest.mark.parametrize("mean", ["constant", "linear"])
def test_svgp_with_Z_equal_X_and_a_mean_is_the_exact_gp(whiten, mean):
    X, y = _data()
    exact = _exact(X, y, mean=mean)
    svgp = lg.SVGP(Z=X, whiten=whiten, mean=mean, normalize_y=False).initialize(X, y)
    _set_hypers(svgp)
    values = {"constant": [2.5], "linear": None}
    for m in (exact, svgp):
        with torch.no_grad():
            if mean == "constant":
                m.mean_function.constant.copy_(torch.tensor(values["constant"]))
            else:
                m.mean_function.weight = [[0.4], [-0.7]]
                m.mean_function.bias.fill_(2.0)
        m.clear_prediction_cache()
    with lg.config(jitter=1e-10):
        svgp.set_optimal_variational(X, y)
        elbo = svgp.elbo(X, y)
        Xs = np.random.default_rng(1).uniform(-2.5, 2.5, size=(25, 2))
        ms, vs = svgp.predict_y(Xs)
    assert elbo == pytest.approx(exact.log_marginal_likelihood(), rel=1e-6)
    me, ve = exact.predict_y(Xs)
    tol = 1e-6 if whiten else 1e-4  # unwhitened: Kzz^{-1} with condition number ~1e8
    np.testing.assert_allclose(ms, me, rtol=tol, atol=tol)
    np.testing.assert_allclose(vs, ve, rtol=tol, atol=tol)
    # the joint predictive (BoTorch's path) carries the mean too
    mj, _ = svgp.predict_f_joint(torch.tensor(Xs))
    np.testing.assert_allclose(mj[:, 0].detach().numpy(), me, rtol=tol, atol=tol)


def _svgp_pair(mean="linear", likelihood="gaussian"):
    X, y = _data(30)
    if likelihood == "bernoulli":
        y = (y > 3).astype(float)
    models = []
    for whiten in (True, False):
        m = lg.SVGP(
            Z=X[::3], whiten=whiten, mean=mean, likelihood=likelihood, normalize_y=False
        ).initialize(X, y)
        models.append(m)
    for m in models:
        with torch.no_grad():
            m.kernel.lengthscale = [0.8, 1.5]
            m.mean_function.weight = [[0.4], [-0.7]]
            m.mean_function.bias.fill_(1.5)
    return X, y, models


@pytest.mark.parametrize("likelihood", ["gaussian", "bernoulli"])
def test_whitened_and_unwhitened_q_with_a_mean_are_the_same_model(likelihood):
    """The same q(u) over u = f(Z), set in both parameterisations: the same ELBO (KL with
    the prior mean at Z, conditional with m(X) + Kxz Kzz^-1 (mu - m(Z))) and predictions."""
    X, y, (white, plain) = _svgp_pair(likelihood=likelihood)
    rng = np.random.default_rng(5)
    M = 10
    mean = rng.normal(size=(1, M)) + 1.5
    R = np.tril(rng.normal(size=(M, M))) * 0.3 + np.eye(M)
    cov = (R @ R.T)[None]
    for m in (white, plain):
        m.set_variational_distribution(mean, cov)
    assert white.elbo(X, y) == pytest.approx(plain.elbo(X, y), rel=1e-9)
    Xs = rng.uniform(-2.5, 2.5, size=(20, 2))
    for a, b in zip(white.predict_f(Xs), plain.predict_f(Xs), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10)
    for a, b in zip(white.variational_distribution(), (mean, cov), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10)
    # and the prior mean at Z is where q(u) = p(u) puts u: zero KL
    mz = white.inducing_prior_mean().detach().numpy()
    K = white.kernel(white.Z).detach().numpy()
    for m in (white, plain):
        m.set_variational_distribution(mz, K.reshape(1, 10, 10))
        assert float(m.kl_divergence().detach()) == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("whiten", [True, False])
def test_svgp_mean_gradients_match_finite_differences(whiten):
    X, y = _data(20)
    model = lg.SVGP(num_inducing=5, mean="linear", whiten=whiten, likelihood="poisson")
    model.fit(X, np.round(np.exp((y - 3) / 2)), max_steps=3, seed=0)
    with torch.no_grad():
        model.q.q_mu.normal_()
        model.mean_function.raw_weight.normal_()
    Xt, yt = torch.tensor(X), model.scale_targets(np.round(np.exp((y - 3) / 2)))
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert "mean_function.raw_weight" in names and "mean_function.bias" in names
    vals = tuple(p.detach().clone().requires_grad_(True) for n, p in model.named_parameters()
                 if p.requires_grad)

    def obj(*v):
        return torch.func.functional_call(
            model, dict(zip(names, v, strict=True)), (Xt, yt, 20), strict=False
        )

    model.forward = model.objective
    assert torch.autograd.gradcheck(obj, vals, eps=1e-6, atol=1e-5, rtol=1e-4)


def test_exact_mean_gradients_match_finite_differences():
    X, y = _data(15)
    model = lg.ExactGP(mean="linear").fit(X, y, max_steps=2)
    Xt, yt = torch.tensor(X), model.scale_targets(y)
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    vals = tuple(p.detach().clone().requires_grad_(True) for _, p in model.named_parameters())

    def obj(*v):
        return torch.func.functional_call(
            model, dict(zip(names, v, strict=True)), (Xt, yt, 15), strict=False
        )

    model.forward = model.objective
    assert torch.autograd.gradcheck(obj, vals, eps=1e-6, atol=1e-6, rtol=1e-5)


def test_sparse_gp_with_a_constant_mean_is_the_zero_mean_one_of_shifted_targets():
    X, y = _data()
    c = 3.1
    m1 = lg.SparseGP(Z=X[::4], method="vfe", mean="constant", normalize_y=False)
    m1.initialize(X, y)
    m0 = lg.SparseGP(Z=X[::4], method="vfe", normalize_y=False).initialize(X, y - c)
    for m in (m1, m0):
        _set_hypers(m)
    with torch.no_grad():
        m1.mean_function.constant.fill_(c)
    m1.set_data(X, y)
    m0.set_data(X, y - c)
    assert m1.log_marginal_likelihood() == pytest.approx(m0.log_marginal_likelihood(), rel=1e-12)
    Xs = X[:7] + 0.3
    np.testing.assert_allclose(m1.predict_f(Xs)[0], m0.predict_f(Xs)[0] + c, rtol=1e-10)


def test_savigp_mean_function_equals_its_constant_prior_mean():
    """SAVIGP's q(u) is over the deviation from the prior mean, so a constant mean
    function c and the fixed ``prior.mean = [c]`` give the same model."""
    X, y = _data(30)
    yb = (y > 3).astype(float)
    a = lg.SAVIGP(num_inducing=8, likelihood="bernoulli", mean="constant")
    b = lg.SAVIGP(num_inducing=8, likelihood="bernoulli", prior=lg.SAVIGP.Prior(mean=[0.8]))
    a.fit(X, yb, max_steps=1, seed=0)
    b.fit(X, yb, max_steps=1, seed=0)
    shared = {k: v for k, v in a.state_dict().items()
              if "mean_function" not in k and k != "prior_mean"}
    b.load_state_dict(shared, strict=False)
    with torch.no_grad():
        a.mean_function.constant.fill_(0.8)
    a.clear_prediction_cache()
    b.clear_prediction_cache()
    np.testing.assert_allclose(a.predict_y(X)[0], b.predict_y(X)[0], rtol=1e-12)


@pytest.mark.parametrize("name", ["svgp", "exact", "vfe"])
@pytest.mark.parametrize("mean", ["constant", "linear"])
def test_save_and_load_keep_the_mean(tmp_path, name, mean):
    X, y = _data(30)
    make = {
        "svgp": lambda: lg.SVGP(num_inducing=6, mean=mean),
        "exact": lambda: lg.ExactGP(mean=mean),
        "vfe": lambda: lg.SparseGP(num_inducing=6, mean=mean),
    }[name]
    m = make().fit(X, y, max_steps=5, seed=0)
    m.save(tmp_path / "m.pt")
    back = lg.load(tmp_path / "m.pt")
    assert type(back.mean_function) is type(m.mean_function)
    np.testing.assert_array_equal(back.predict_y(X)[0], m.predict_y(X)[0])
    header = torch.load(tmp_path / "m.pt", weights_only=True)["header"]
    import json

    h = json.loads(header)
    assert h["format_version"] == 3 and h["config"]["mean"]["type"] == mean


def test_zero_mean_files_are_as_before_and_old_files_load_with_the_zero_mean(tmp_path):
    """A zero-mean model writes no ``mean`` entry and no mean tensors, and a format-2 file
    (no mean) loads with the zero mean and predicts as saved."""
    import json

    X, y = _data(30)
    m = lg.SVGP(num_inducing=6).fit(X, y, max_steps=5, seed=0)
    payload = m.file_payload()
    header = json.loads(payload["header"])
    assert "mean" not in header["config"]
    assert not [k for k in payload["state"] if k.startswith("mean_function")]
    header["format_version"] = 2  # what the previous release wrote for this model
    payload["header"] = json.dumps(header)
    payload.pop("checksums")
    torch.save(payload, tmp_path / "v2.pt")
    back = lg.load(tmp_path / "v2.pt")
    assert isinstance(back.mean_function, ZeroMean)
    np.testing.assert_array_equal(back.predict_y(X)[0], m.predict_y(X)[0])


def test_a_user_module_is_copied_trained_and_cannot_be_saved(tmp_path):
    X, y = _data(30)
    net = torch.nn.Sequential(torch.nn.Linear(2, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    before = copy.deepcopy(net.state_dict())
    m = lg.SVGP(num_inducing=6, mean=net).fit(X, y, max_steps=20, seed=0)
    for k, v in net.state_dict().items():  # the user's module is untouched
        assert torch.equal(v, before[k])
    trained = m.mean_function.module.state_dict()
    assert any(not torch.allclose(trained[k].float(), before[k].float()) for k in before)
    with pytest.raises(ValueError, match="cannot be stored"):
        m.save(tmp_path / "u.pt")


def test_bad_means_are_refused():
    with pytest.raises(ValueError, match="unknown mean"):
        lg.SVGP(mean="quadratic")
    with pytest.raises(TypeError, match="mean must be"):
        lg.SVGP(mean=3.0)
    with pytest.raises(ValueError, match="no prior mean"):
        lg.QSGP(mean="constant")
    X, y = _data(10)
    wrong = ModuleMean(torch.nn.Linear(2, 3))
    with pytest.raises(ValueError, match="must return"):
        lg.SVGP(num_inducing=4, mean=wrong).fit(X, y, max_steps=1)


def test_mean_objects():
    c = mean_from_spec("constant")
    assert isinstance(c, ConstantMean)
    c.build(2, 3)
    assert c(torch.zeros(5, 2)).shape == (5, 3)
    lin = LinearMean().build(2, 1)
    lin.init_from_data(torch.tensor([[0.0, 0.0], [10.0, 0.1]], dtype=torch.float64))
    lin.weight = [[1.0], [2.0]]
    np.testing.assert_allclose(lin.weight.detach().numpy(), [[1.0], [2.0]])
    out = lin(torch.tensor([[1.0, 1.0]], dtype=torch.float64))
    assert float(out[0, 0].detach()) == pytest.approx(3.0)
    given = ConstantMean(1.0)
    assert mean_from_spec(given) is not given


@pytest.mark.parametrize("cls", ["SVHGP"])
def test_modulated_compositions_take_a_mean_on_each_latent(cls):
    """SVHGP is an SVGP composition: a constant mean ``(c, 0)`` on (f, g) with targets y
    is the zero-mean model of ``y - c`` (same ELBO and predictive mean + c).  (SHGP's
    ``y = exp(w) f + eps`` has no such identity; it takes the mean the same way.)"""
    X, y = _data(30)
    c = 2.2
    a = getattr(lg, cls)(num_inducing=6, mean="constant", normalize_y=False).initialize(X, y)
    b = getattr(lg, cls)(num_inducing=6, normalize_y=False).initialize(X, y - c)
    b.load_state_dict({k: v for k, v in a.state_dict().items() if "mean_function" not in k})
    with torch.no_grad():
        a.mean_function.constant.copy_(torch.tensor([c, 0.0], dtype=torch.float64))
        a.q.q_mu.normal_()
        b.q.q_mu.copy_(a.q.q_mu)
    a.clear_prediction_cache()
    b.clear_prediction_cache()
    assert a.elbo(X, y) == pytest.approx(b.elbo(X, y - c), rel=1e-12)
    np.testing.assert_allclose(a.predict_y(X)[0], b.predict_y(X)[0] + c, rtol=1e-10)
    np.testing.assert_allclose(a.predict_y(X)[1], b.predict_y(X)[1], rtol=1e-10)


def test_optimal_q_with_a_mean_gives_the_vfe_bound_whitened_or_not():
    """At the Titsias optimum of q(u), SVGP's ELBO is the collapsed VFE bound, with the
    same linear mean, whichever parameterisation q has (Z != X: a real sparse model)."""
    X, y = _data(40)
    Z = X[::4]
    models = [
        lg.SVGP(Z=Z, whiten=w, mean="linear", normalize_y=False).initialize(X, y)
        for w in (True, False)
    ]
    vfe = lg.SparseGP(Z=Z, method="vfe", mean="linear", normalize_y=False).initialize(X, y)
    for m in (*models, vfe):
        _set_hypers(m)
        with torch.no_grad():
            m.mean_function.weight = [[0.4], [-0.7]]
            m.mean_function.bias.fill_(2.0)
    vfe.set_data(X, y)
    bound = vfe.log_marginal_likelihood()
    for m in models:
        m.set_optimal_variational(X, y)
        assert m.elbo(X, y) == pytest.approx(bound, rel=1e-9)
    Xs = X[:9] + 0.2
    np.testing.assert_allclose(models[0].predict_f(Xs)[0], vfe.predict_f(Xs)[0], rtol=1e-8)
    np.testing.assert_allclose(models[1].predict_f(Xs)[0], vfe.predict_f(Xs)[0], rtol=1e-7)


def test_q_starts_at_the_prior_and_savigp_trains_the_mean_in_its_hyperparameter_group():
    X, y = _data(20)
    for whiten in (True, False):
        m = lg.SVGP(num_inducing=5, whiten=whiten, mean=ConstantMean(4.0), normalize_y=False)
        m.initialize(X, y)
        assert float(m.kl_divergence().detach()) == pytest.approx(0.0, abs=1e-8)
        np.testing.assert_allclose(m.predict_f(X)[0], 4.0, rtol=1e-8)  # the prior's mean
    sav = lg.SAVIGP(num_inducing=5, mean="linear").initialize(X, y)
    group = {id(p) for p in sav.parameter_groups()["hyperparameters"]}
    assert all(id(p) in group for p in sav.mean_function.parameters())

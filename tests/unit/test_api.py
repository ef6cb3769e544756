"""The public API's shared rules (issue 22, item 4): keyword-only options after the first
argument (old positional calls still work, with a DeprecationWarning), likelihoods given
as names, objects or callables, sizes taken from the data, user objects never mutated."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import latentgp as lg

MODELS = [
    lg.ExactGP, lg.SparseGP, lg.SVGP, lg.SAVIGP, lg.GFITC, lg.SEP, lg.QSGP, lg.SHGP, lg.SMGP,
    lg.SVHGP, lg.SLGP, lg.DeepGP,
]


@pytest.mark.parametrize("cls", MODELS, ids=lambda c: c.__name__)
def test_options_after_the_first_are_keyword_only(cls):
    import inspect

    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    assert params[0].kind is params[0].POSITIONAL_OR_KEYWORD
    assert all(p.kind in (p.KEYWORD_ONLY, p.VAR_KEYWORD) for p in params[1:]), cls


def test_old_positional_calls_warn_and_keep_their_meaning():
    with pytest.warns(DeprecationWarning, match=r"SVGP\(<first>, likelihood=\.\.\., kernel="):
        m = lg.SVGP(16, "bernoulli", "matern32")
    assert isinstance(m.likelihood, lg.likelihoods.Bernoulli)
    assert type(m.kernel).__name__ == "Matern32"
    assert m.num_inducing == 16
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lg.SVGP(16, likelihood="bernoulli", kernel="matern32")  # the new spelling: silent
    with pytest.raises(TypeError, match="two values for 'likelihood'"):
        lg.SVGP(16, "bernoulli", likelihood="gaussian")
    with pytest.raises(TypeError, match="takes 1 positional argument"):
        lg.SAVIGP(16, "gaussian", "rbf", 0.5)  # SAVIGP's sparsity was never positional


def _data(n=60, seed=0):
    g = np.random.default_rng(seed)
    X = g.normal(size=(n, 2))
    return X, np.sin(X[:, 0]) + 0.1 * g.normal(size=n)


def test_softmax_takes_the_number_of_classes_from_the_labels(tmp_path):
    X, _ = _data()
    labels = np.arange(60) % 3
    m = lg.SVGP(num_inducing=10, likelihood="softmax").fit(X, labels, max_steps=5, progress=False)
    assert m.likelihood.num_classes == 3 and m.num_latent == 3
    p, _ = m.predict_y(X[:4])
    assert p.shape == (4, 3)
    np.testing.assert_allclose(p.sum(1), 1.0, rtol=1e-10)
    with pytest.raises(ValueError, match="integer class labels"):
        lg.SVGP(num_inducing=10, likelihood="softmax").fit(X, labels + 0.5, max_steps=1)
    with pytest.raises(ValueError, match="labels 0..1 for a 2-class"):
        lg.SVGP(num_inducing=10, likelihood=lg.likelihoods.Softmax(2)).fit(X, labels, max_steps=1)
    m.save(tmp_path / "m.pt")  # a model file keeps the number found
    np.testing.assert_array_equal(lg.load(tmp_path / "m.pt").predict_y(X[:4])[0], p)


def test_an_object_with_log_prob_is_a_likelihood():
    """Any object with ``log_prob(y, f)`` works (the same model as the plain callable)."""
    X, y = _data()

    class HalfSquare:
        latent_dim = 1

        def log_prob(self, y, f):
            return -0.5 * (y - f) ** 2

    fits = []
    for lik in (HalfSquare(), lambda y, f: -0.5 * (y - f) ** 2):
        m = lg.SVGP(num_inducing=8, likelihood=lik).fit(X, y, max_steps=20, seed=0, progress=False)
        fits.append(m.predict_f(X[:5])[0])
    np.testing.assert_allclose(fits[0], fits[1], rtol=1e-12)
    with pytest.raises(ValueError, match="an object with a log_prob"):
        lg.SVGP(likelihood=3.0)


def test_user_kernels_and_likelihoods_are_not_changed_by_fitting():
    X, y = _data()
    k = lg.kernels.RBF(lengthscale=0.3)
    lik = lg.likelihoods.Gaussian(variance=0.5)
    def state():
        return {n: t.clone() for obj in (k, lik) for n, t in obj.state_dict().items()}

    before = state()
    m = lg.SVGP(num_inducing=8, kernel=k, likelihood=lik).fit(X, y, max_steps=30, progress=False)
    after = state()
    assert before.keys() == after.keys()
    for n in before:
        assert torch.equal(before[n], after[n]), n
    assert float(m.likelihood.variance.detach()) != pytest.approx(0.5)  # the copy trained


def test_smgp_says_that_it_ignores_a_likelihood():
    with pytest.warns(DeprecationWarning, match="noise_variance"):
        lg.SMGP(num_inducing=5, likelihood="student_t")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lg.SMGP(num_inducing=5)


def test_config_blocks_do_not_leak_across_threads():
    """A ``with lg.config(...)`` block in one thread leaves a concurrent thread's settings
    (and what it computes) alone; a new thread starts from the defaults."""
    import threading

    seen = {}
    inside = threading.Event()
    release = threading.Event()

    def holder():
        with lg.config(chunk_size=7, num_gauss_hermite=5):
            seen["holder"] = lg.get_config().chunk_size
            inside.set()
            release.wait(5)

    def other():
        inside.wait(5)
        seen["other"] = (lg.get_config().chunk_size, lg.get_config().num_gauss_hermite)
        release.set()

    threads = [threading.Thread(target=holder), threading.Thread(target=other)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen == {"holder": 7, "other": (None, 20)}
    assert lg.get_config().chunk_size is None


@pytest.mark.parametrize(
    "bad",
    [
        {"num_gauss_hermite": 380},
        {"num_gauss_hermite": 0},
        {"chunk_size": 0},
        {"jitter": -1.0},
        {"num_mc_samples": 2.5},
        {"dtype": torch.int64},
        {"chunk_sizes": 10},
    ],
)
def test_config_values_are_checked(bad):
    with pytest.raises(ValueError, match="config|unknown config"):
        with lg.config(**bad):
            pass


@pytest.mark.parametrize(
    "cls", [lg.SVGP, lg.ExactGP, lg.SparseGP, lg.SAVIGP, lg.QSGP, lg.DeepGP]
)
def test_noise_variance_is_spelt_the_same_in_every_model(cls):
    m = cls(noise_variance=0.25)
    assert float(m.likelihood.variance.detach()) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="not both"):
        cls(noise_variance=0.25, likelihood=lg.likelihoods.Gaussian(variance=0.3))
    if cls is not lg.SparseGP:
        with pytest.raises(ValueError, match="Gaussian noise"):
            cls(noise_variance=0.25, likelihood="bernoulli")

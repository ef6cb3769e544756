"""QSGP's grouped options (issue 22): lg.QSGP.Basis / Covariance / ControlVariate / Newton /
Hyperparameters, the deprecated flat keywords, and files written with flat options."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import latentgp as lg
from latentgp.models.qsgp import options as qsgp_options

Q = lg.QSGP
DATA = Path(__file__).resolve().parents[1] / "data"


def _data(n=60, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, (n, 2))
    return X, np.sin(X[:, 0]) + 0.1 * rng.standard_normal(n)


def _fit(model):
    X, y = _data()
    model.fit(X, y, max_steps=6, batch_size=20, seed=1, progress=False)
    return model


def _assert_same_fit(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k
    X, _ = _data(10, seed=2)
    for u, v in zip(a.predict_f(X), b.predict_f(X), strict=True):
        np.testing.assert_array_equal(u, v)


# (flat keywords, the grouped spelling, other arguments both share, the warning's spelling)
DEPRECATED = [
    ({"basis_batch": 15}, {"basis": Q.Basis(batch=15)}, {}, "basis=lg.QSGP.Basis(batch=15)"),
    ({"feature_seed": 3}, {"basis": Q.Basis(seed=3)}, {}, "lg.QSGP.Basis(seed=3)"),
    (
        {"basis": "rvm", "rvm_update": "em"},
        {"basis": Q.Basis(kind="rvm", rvm_update="em")},
        {},
        "basis=lg.QSGP.Basis(rvm_update='em')",
    ),
    (
        {"covariance": "chevron", "num_dense": 2},
        {"covariance": Q.Covariance(kind="chevron", num_dense=2)},
        {},
        "covariance=lg.QSGP.Covariance(num_dense=2)",
    ),
    (
        {"covariance": "full", "num_columns": 3},
        {"covariance": Q.Covariance(kind="full", num_columns=3)},
        {"num_basis": 12},
        "lg.QSGP.Covariance(num_columns=3)",
    ),
    (
        {"closed_form_diagonal": False},
        {"covariance": Q.Covariance(closed_form_diagonal=False)},
        {},
        "lg.QSGP.Covariance(closed_form_diagonal=False)",
    ),
    ({"cv_rank": 8}, {"control_variate": 8}, {}, "control_variate=lg.QSGP.ControlVariate(rank=8)"),
    (
        {"control_variate": 8, "nystrom_cv": False},
        {"control_variate": Q.ControlVariate(rank=8, nystrom=False)},
        {"basis": "inducing", "num_basis": 30},
        "lg.QSGP.ControlVariate(nystrom=False)",
    ),
    (
        {"mean_step": "newton", "newton_damping": 0.8},
        {"mean_step": Q.Newton(damping=0.8)},
        {},
        "mean_step=lg.QSGP.Newton(damping=0.8)",
    ),
    (
        {"mean_step": "newton", "newton_ridge": 0.01},
        {"mean_step": Q.Newton(ridge=0.01)},
        {},
        "lg.QSGP.Newton(ridge=0.01)",
    ),
    (
        {"hyper_lr": 0.05},
        {"hyperparameters": Q.Hyperparameters(lr=0.05)},
        {},
        "hyperparameters=lg.QSGP.Hyperparameters(lr=0.05)",
    ),
    (
        {"hyper_delay": 3},
        {"hyperparameters": Q.Hyperparameters(delay=3)},
        {},
        "lg.QSGP.Hyperparameters(delay=3)",
    ),
]


def test_every_flat_keyword_is_covered():
    covered = {k for flat, *_ in DEPRECATED for k in flat if k in qsgp_options.FLAT_KEYWORDS}
    assert covered == set(qsgp_options.FLAT_KEYWORDS)


@pytest.mark.parametrize("flat, grouped, shared, spelled", DEPRECATED, ids=lambda v: str(v))
def test_flat_keyword_warns_and_fits_like_the_grouped_spelling(flat, grouped, shared, spelled):
    shared = {"num_basis": 40, **shared}
    with pytest.warns(DeprecationWarning) as caught:
        old = Q(**shared, **flat)
    assert len(caught) == 1
    message = str(caught[0].message)
    # the grouped spelling names the group and every field the call set
    head, _, args = spelled.partition("(")
    assert head.split("=")[-1] + "(" in message and "deprecated" in message
    assert all(part in message for part in args.rstrip(")").split(", "))
    assert caught[0].filename == __file__  # points at the caller's line
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        new = Q(**shared, **grouped)
    for argument in qsgp_options.GROUPS:
        assert getattr(old, argument) == getattr(new, argument), argument
    assert old.get_config() == new.get_config()
    _assert_same_fit(_fit(old), _fit(new))


def test_the_flat_spelling_gives_the_predictions_of_before_the_groups():
    """The model the fixture's note describes, refit with today's grouped spelling, gives
    the predictions the flat-keyword code gave (tests/data/qsgp_flat_options.json), to
    1e-8 relative: recorded on an AMD EPYC machine, they differ on an Intel Xeon by up to
    2e-12 through BLAS rounding (the same at the commit before this test's tolerance),
    where a field read wrongly (another damping, seed or batch) moves them by far more."""
    ref = json.loads((DATA / "qsgp_flat_options.json").read_text())
    rng = np.random.default_rng(5)
    X = rng.uniform(-3, 3, (120, 1))
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(120)
    m = Q(
        num_basis=20,
        basis=Q.Basis(kind="rvm", batch=10, seed=1, rvm_update="mackay"),
        # the fixture predates the variance-reduction anchor and the Newton step's
        # default hyperparameter rate (0.03)
        mean_step=Q.Newton(damping=0.8, ridge=0.01, anchor_every=0),
        hyperparameters=Q.Hyperparameters(lr=0.01),
        augment=True,
    )
    m.fit(X, y, max_steps=15, batch_size=40, seed=2)
    mean, var = m.predict_y(np.array(ref["X"])[:, None])
    np.testing.assert_allclose(mean, ref["rvm"]["mean"], rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(var, ref["rvm"]["var"], rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"basis": Q.Basis(batch=10), "basis_batch": 20}, "batch"),
        ({"basis": {"seed": 1}, "feature_seed": 2}, "seed"),
        ({"control_variate": 5, "cv_rank": 6}, "rank"),
        ({"covariance": "chevron", "covariance_kind": None}, None),
        ({"mean_step": Q.Newton(damping=0.7), "newton_damping": 0.8}, "damping"),
        ({"hyperparameters": Q.Hyperparameters(lr=0.1), "hyper_lr": 0.2}, "lr"),
    ],
)
def test_both_spellings_of_one_field_are_refused(kwargs, field):
    if field is None:  # not a keyword at all
        with pytest.raises(TypeError, match="covariance_kind"):
            Q(**kwargs)
        return
    with pytest.raises(ValueError, match=f"both set {field}"), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        Q(**kwargs)


def test_newton_settings_need_the_newton_step():
    with pytest.raises(ValueError, match="newton_damping= sets the Newton mean step"):
        Q(likelihood="bernoulli", newton_damping=0.8)  # its default is the gradient step
    with pytest.warns(DeprecationWarning):
        assert Q(newton_damping=0.8).mean_step == Q.Newton(damping=0.8)
    with pytest.raises(ValueError, match="newton_ridge= sets the Newton mean step"):
        Q(mean_step="gradient", newton_ridge=0.1)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: Q.Basis(kind="fourier"), r"Basis.kind \(basis=\) must be"),
        (lambda: Q(basis="fourier"), r"Basis.kind \(basis=\) must be"),
        (lambda: Q.Basis(batch=0), "Basis.batch must be >= 1"),
        (lambda: Q.Basis(batch=2.5), "Basis.batch must be an integer"),
        (lambda: Q.Basis(seed=-1), "Basis.seed must be >= 0"),
        (lambda: Q.Basis(kind="rvm", rvm_update="tipping"), "Basis.rvm_update must be"),
        (lambda: Q.Basis(rvm_update="em"), "Basis.rvm_update='em' .* needs kind='rvm'"),
        (lambda: Q(covariance="banded"), r"Covariance.kind \(covariance=\) must be"),
        (lambda: Q.Covariance(num_dense=3), "Covariance.num_dense .* needs kind='chevron'"),
        (lambda: Q.Covariance(kind="chevron", num_dense=-1), "Covariance.num_dense must be"),
        (lambda: Q.Covariance(num_columns=2), "Covariance.num_columns .* mean-field"),
        (lambda: Q.Covariance(kind="full", num_columns=0), "Covariance.num_columns must be"),
        (lambda: Q.Covariance(closed_form_diagonal="yes"), "Covariance.closed_form_diagonal"),
        (lambda: Q.ControlVariate(rank=-1), "ControlVariate.rank must be >= 0"),
        (lambda: Q.ControlVariate(nystrom=None), "ControlVariate.nystrom must be True or"),
        (lambda: Q.Newton(damping=0), "Newton.damping must be a positive"),
        (lambda: Q.Newton(damping=1.5), r"Newton.damping must be in \(0, 1\]"),
        (lambda: Q.Newton(ridge=-1.0), "Newton.ridge must be a finite number >= 0"),
        (lambda: Q.Newton(ridge=float("nan")), "Newton.ridge must be a finite number"),
        (lambda: Q(mean_step="lbfgs"), "mean_step must be 'auto', 'gradient', 'newton' or"),
        (lambda: Q.Hyperparameters(lr=0.0), "Hyperparameters.lr must be a positive"),
        (lambda: Q.Hyperparameters(delay=-2), "Hyperparameters.delay must be >= 0"),
        (lambda: Q.Basis().replace(batch=0), "Basis.batch must be >= 1"),
        (lambda: Q(likelihood="bernoulli", control_variate=4), "control_variate .* Gaussian"),
        (lambda: Q(likelihood="laplace", mean_step="newton"), "Newton needs the Gaussian"),
    ],
)
def test_bad_values_name_the_field(make, match):
    with pytest.raises(ValueError, match=match):
        make()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"basis": 3}, "basis must be a lg.QSGP.Basis, a dict of its fields or"),
        ({"covariance": 1.0}, "covariance must be a lg.QSGP.Covariance"),
        ({"control_variate": "many"}, "control_variate must be a lg.QSGP.ControlVariate"),
        ({"control_variate": True}, "control_variate must be a lg.QSGP.ControlVariate"),
        ({"mean_step": 1}, "mean_step must be a lg.QSGP.Newton"),
        ({"basis": {"batchsize": 3}}, "Basis has no option 'batchsize'"),
        ({"hyperparameters": "fast"}, "hyperparameters must be a Hyperparameters"),
    ],
)
def test_wrong_types_are_type_errors(kwargs, match):
    with pytest.raises(TypeError, match=match):
        Q(**kwargs)
    with pytest.raises(TypeError, match="has no option 'kind'"):
        Q.Hyperparameters().replace(kind="x")


def test_old_positional_calls_keep_their_meaning():
    """Before the arguments became keyword-only the 6th positional argument was num_dense:
    it still is (with the position's and the flat keyword's warnings)."""
    with pytest.warns(DeprecationWarning) as caught:
        old = Q(30, "rff", "gaussian", "rbf", "chevron", 3)
    assert len(caught) == 2 and "num_dense" in str(caught[1].message)
    assert old.covariance == Q.Covariance(kind="chevron", num_dense=3)
    assert old.control_variate == Q.ControlVariate()


def test_shorthands_and_class_attributes():
    m = Q(basis="rvm", covariance="chevron", control_variate=7, mean_step="newton")
    assert m.basis == Q.Basis(kind="rvm") and m.covariance == Q.Covariance(kind="chevron")
    assert m.control_variate == Q.ControlVariate(rank=7) and m.mean_step == Q.Newton()
    # the Gaussian likelihood's mean step is chosen at the first fit; the default
    # random-feature model pretrains its hyperparameters on 1,000 rows and keeps them
    assert Q().mean_step == "auto"
    assert Q().hyperparameters == Q.Hyperparameters(pretrain_rows=1000)
    assert Q().learn_hyperparameters == "noise"
    assert Q(learn_hyperparameters=True).learn_hyperparameters is True
    with pytest.raises(ValueError, match="learn_hyperparameters must be True, False, 'noise'"):
        Q(learn_hyperparameters="kernel")
    # hyperparameters given as values, or another basis: no pretraining, learned as before
    given = (Q(kernel=lg.kernels.RBF(lengthscale=0.5)), Q(noise_variance=0.1),
             Q(likelihood=lg.likelihoods.Gaussian(0.1)), Q(basis="rvm"))
    for m in given:
        assert m.hyperparameters.pretrain_rows == 0 and m.learn_hyperparameters
    assert Q(basis="inducing").hyperparameters.pretrain_rows == 0
    # the Newton step needs the Gaussian likelihood: the others default to gradient steps
    assert Q(likelihood="bernoulli").mean_step == "gradient"
    assert Q.Basis is qsgp_options.Basis and lg.QSGP.Newton is qsgp_options.Newton
    # a flat keyword fills a field the shorthand leaves at its default
    with pytest.warns(DeprecationWarning):
        m = Q(basis="rvm", basis_batch=5)
    assert m.basis == Q.Basis(kind="rvm", batch=5)


def test_groups_are_frozen_and_not_shared_with_the_caller():
    basis = Q.Basis(kind="inducing", batch=10)
    m = Q(basis=basis)
    with pytest.raises(AttributeError):
        m.basis.batch = 5
    m.basis = m.basis.replace(batch=5)
    assert basis.batch == 10 and m.basis.batch == 5


def test_save_load_round_trip_keeps_the_groups(tmp_path):
    m = Q(
        num_basis=30,
        basis=Q.Basis(kind="rff", batch=12, seed=4),
        covariance=Q.Covariance(kind="chevron", num_dense=3, num_columns=2),
        control_variate=Q.ControlVariate(rank=6),
        mean_step=Q.Newton(damping=0.9, ridge=0.02),
        hyperparameters=Q.Hyperparameters(lr=0.03, delay=2),
    )
    _fit(m)
    cfg = m.get_config()
    assert cfg["basis"] == {"kind": "rff", "batch": 12, "seed": 4, "rvm_update": "gradient"}
    assert cfg["mean_step"] == {"damping": 0.9, "ridge": 0.02, "anchor_every": None}
    assert json.loads(json.dumps(cfg)) == cfg
    m.save(tmp_path / "q.pt")
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        r = lg.load(tmp_path / "q.pt")
    assert r.get_config() == cfg
    for argument in qsgp_options.GROUPS:
        assert getattr(r, argument) == getattr(m, argument)
    X, _ = _data(10, seed=3)
    for u, v in zip(r.predict_y(X), m.predict_y(X), strict=True):
        np.testing.assert_array_equal(u, v)


@pytest.mark.parametrize("name", ["rff", "rvm"])
def test_files_with_flat_options_load_silently_and_predict_the_same(name):
    """Files written before the groups (flat basis_batch, cv_rank, newton_damping, ...;
    tests/data/qsgp_flat_options_*.pt) load without a warning, with the groups their flat
    values spell, and predict what the flat-keyword code predicted."""
    ref = json.loads((DATA / "qsgp_flat_options.json").read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        m = lg.load(DATA / f"qsgp_flat_options_{name}.pt")
    if name == "rff":
        assert m.basis == Q.Basis(kind="rff", batch=12, seed=3)
        assert m.covariance == Q.Covariance(
            kind="chevron", num_dense=3, num_columns=2, closed_form_diagonal=True
        )
        assert m.control_variate == Q.ControlVariate(rank=8, nystrom=False)
        assert m.mean_step == "gradient"  # its newton_damping / ridge had no effect
        # written before pretraining existed: none (its kernel is a value in the file)
        assert m.hyperparameters == Q.Hyperparameters(lr=0.02, delay=2, pretrain_rows=0)
    else:
        assert m.basis == Q.Basis(kind="rvm", batch=10, seed=1, rvm_update="mackay")
        assert m.covariance == Q.Covariance()  # num_dense / num_columns were None
        assert m.mean_step == Q.Newton(damping=0.8, ridge=0.01)
    mean, var = m.predict_y(np.array(ref["X"])[:, None])
    np.testing.assert_allclose(mean, ref[name]["mean"], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(var, ref[name]["var"], rtol=1e-12, atol=1e-14)


def test_grouped_config_drops_flat_values_that_had_no_effect():
    old = {
        "basis": "rff",
        "rvm_update": "em",
        "covariance": "meanfield",
        "num_dense": 5,
        "num_columns": 2,
        "mean_step": "gradient",
        "newton_damping": 0.9,
        "cv_rank": 3,
    }
    assert qsgp_options.grouped_config(old) == {
        "basis": {"kind": "rff"},
        "covariance": {"kind": "meanfield"},
        "mean_step": "gradient",
        "control_variate": {"rank": 3},
    }
    grouped = Q(basis="rvm").get_config()
    assert qsgp_options.grouped_config(grouped) == grouped

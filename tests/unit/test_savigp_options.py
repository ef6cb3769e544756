"""SAVIGP's grouped options (issue 22, item 4): ``posterior=``, ``estimator=`` and
``prior=`` groups; the old flat keywords warn (at the caller's line) and build the same
model to the bit; both spellings of one field, or bad values, are refused naming the
field; model files written with flat options load silently and predict the same."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import warnings

import numpy as np
import pytest

import latentgp as lg
from latentgp.models.savigp_options import (
    FLAT_KEYWORDS,
    Estimator,
    Posterior,
    Prior,
    grouped_config,
    parse_posterior,
)

DATA = pathlib.Path(__file__).resolve().parents[1] / "data"


def _data(n=20, seed=0):
    g = np.random.default_rng(seed)
    X = np.sort(g.uniform(-2, 2, n))[:, None]
    return X, np.sin(2 * X[:, 0]) + 0.2 * g.standard_normal(n)


def _fit(model):
    X, y = _data()
    model.fit(X, y, max_steps=3, seed=4, progress=False)
    return model


# each deprecated flat spelling, and the grouped spelling that replaces it
RENAMES = [
    ({"num_components": 2}, {"posterior": Posterior(components=2)}, "components=2"),
    ({"covariance": "diag"}, {"posterior": Posterior(covariance="diag")}, "covariance='diag'"),
    (
        {"parameterization": "lambda"},
        {"posterior": Posterior(parameterization="lambda")},
        "parameterization='lambda'",
    ),
    ({"whiten": False}, {"posterior": Posterior(whiten=False)}, "whiten=False"),
    ({"init_cov_scale": 0.5}, {"posterior": Posterior(init_cov_scale=0.5)}, "init_cov_scale=0.5"),
    ({"num_samples": 7}, {"estimator": Estimator(num_samples=7)}, "num_samples=7"),
    (
        {"estimator": "score", "control_variates": False},
        {"estimator": Estimator(method="score", control_variates=False)},
        "method='score', control_variates=False",  # the shorthand's field too
    ),
    ({"pred_samples": 50}, {"estimator": Estimator(pred_samples=50)}, "pred_samples=50"),
    ({"prior_mean": [0.3]}, {"prior": Prior(mean=(0.3,))}, "mean=[0.3]"),
    ({"prior_variance": [1.5]}, {"prior": Prior(variance=[1.5])}, "variance=[1.5]"),
]


def test_every_flat_keyword_is_covered():
    covered = {k for old, _, _ in RENAMES for k in old if k in FLAT_KEYWORDS}
    assert covered == set(FLAT_KEYWORDS)


@pytest.mark.parametrize("old, new, spelled", RENAMES, ids=[str(r[0]) for r in RENAMES])
def test_flat_keyword_warns_and_fits_like_the_grouped_spelling(old, new, spelled):
    (keyword,) = [k for k in old if k in FLAT_KEYWORDS]
    argument, _ = FLAT_KEYWORDS[keyword]
    with pytest.warns(DeprecationWarning) as caught:
        a = lg.SAVIGP(5, **old)
    (w,) = caught.list
    message = str(w.message)
    assert f"{keyword}= is deprecated" in message
    assert f"{argument}=lg.SAVIGP.{argument.capitalize()}({spelled})" in message
    assert w.filename == __file__  # the warning points at the caller's line
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        b = lg.SAVIGP(5, **new)
    assert (a.posterior, a.estimator, a.prior) == (b.posterior, b.estimator, b.prior)
    _fit(a), _fit(b)
    assert a.history_.objective == b.history_.objective
    X, _ = _data(7, seed=1)
    for x, z in zip(a.predict_f(X), b.predict_f(X), strict=True):
        assert np.array_equal(x, z)


def test_several_flat_keywords_give_one_warning_per_group():
    with pytest.warns(DeprecationWarning) as caught:
        m = lg.SAVIGP(5, num_components=2, covariance="diag", num_samples=9)
    posterior, estimator = sorted(str(w.message) for w in caught.list)
    assert "num_components=, covariance= are deprecated" in posterior
    assert "Posterior(components=2, covariance='diag')" in posterior
    assert "num_samples= is deprecated; write estimator=lg.SAVIGP.Estimator(num_samples=9)" in (
        estimator
    )
    assert m.posterior == Posterior.parse("mog2") and m.estimator.num_samples == 9


def test_the_warning_points_at_the_user_through_wrappers_and_subclasses():
    class Mine(lg.SAVIGP):
        def __init__(self, num_inducing, **kw):
            super().__init__(num_inducing, **kw)

    with pytest.warns(DeprecationWarning) as caught:
        lg.SAVIGP(5, "gaussian", num_samples=3)  # positional likelihood: two warnings
    assert len(caught.list) == 2
    assert {w.filename for w in caught.list} == {__file__}
    with pytest.warns(DeprecationWarning, match=r"^Mine: num_samples=") as caught:
        Mine(5, num_samples=3)
    assert caught.list[0].filename == __file__


def test_grouped_spellings_are_silent_and_readable():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = lg.SAVIGP(
            5,
            posterior="mog3",
            estimator={"method": "reparam", "num_samples": 4},
            prior={"mean": [1.0]},
        )
    assert m.posterior == Posterior(components=3, covariance="diag")
    assert m.num_components == 3
    assert m.estimator == Estimator(method="reparam", num_samples=4)
    assert m.resolved_estimator() == "reparam"
    assert m.prior == Prior(mean=(1.0,))
    assert lg.SAVIGP.Posterior is Posterior and lg.SAVIGP.Estimator is Estimator
    assert lg.SAVIGP.Prior is Prior


@pytest.mark.parametrize(
    "kw, field",
    [
        ({"posterior": Posterior(components=2), "num_components": 3}, "components"),
        ({"posterior": "mog2", "covariance": "full"}, "covariance"),
        ({"posterior": "fg", "num_components": 2}, "components"),
        ({"posterior": {"whiten": True}, "whiten": False}, "whiten"),
        ({"estimator": Estimator(num_samples=5), "num_samples": 6}, "num_samples"),
        ({"estimator": {"pred_samples": 10}, "pred_samples": 10}, "pred_samples"),
        ({"prior": Prior(mean=[1.0]), "prior_mean": [2.0]}, "mean"),
    ],
)
def test_both_spellings_of_one_field_are_refused(kw, field):
    with pytest.raises(ValueError, match=rf"both set {field}"):
        lg.SAVIGP(5, **kw)


def test_a_flat_keyword_beside_a_group_setting_other_fields_is_merged():
    with pytest.warns(DeprecationWarning, match="control_variates"):
        m = lg.SAVIGP(5, estimator="score", control_variates=False)
    assert m.estimator == Estimator(method="score", control_variates=False)
    with pytest.warns(DeprecationWarning) as caught:
        m = lg.SAVIGP(5, posterior="mog2", whiten=False)
    assert "posterior=lg.SAVIGP.Posterior(components=2, covariance='diag', whiten=False)" in (
        str(caught.list[0].message)
    )
    assert m.posterior == Posterior(components=2, covariance="diag", whiten=False)


@pytest.mark.parametrize(
    "make, name",
    [
        (lambda: Posterior(components=0), "Posterior.components"),
        (lambda: Posterior(components=1.5), "Posterior.components"),
        (lambda: Posterior(covariance="dense"), "Posterior.covariance"),
        (lambda: Posterior(parameterization="qr"), "Posterior.parameterization"),
        (lambda: Posterior(whiten="yes"), "Posterior.whiten"),
        (lambda: Posterior(init_cov_scale=-1.0), "Posterior.init_cov_scale"),
        (lambda: Posterior(init_cov_scale="big"), "Posterior.init_cov_scale"),
        (lambda: Posterior(components=2, parameterization="lambda"), "Posterior.parameterization"),
        (lambda: Estimator(method="magic"), "Estimator.method"),
        (lambda: Estimator(num_samples=0), "Estimator.num_samples"),
        (lambda: Estimator(control_variates=None), "Estimator.control_variates"),
        (lambda: Estimator(pred_samples=2.5), "Estimator.pred_samples"),
        (lambda: Prior(mean=[np.nan]), "Prior.mean"),
        (lambda: Prior(mean=[[1.0]]), "Prior.mean"),
        (lambda: Prior(mean="high"), "Prior.mean"),
        (lambda: Prior(variance=[1.0, -1.0]), "Prior.variance"),
        (lambda: lg.SAVIGP(5, posterior="gmm"), "posterior"),
        (lambda: lg.SAVIGP(5, estimator="magic"), "Estimator.method"),
        (lambda: lg.SAVIGP(5, estimator={"num_samples": 0}), "Estimator.num_samples"),
        (lambda: Posterior().replace(components=0), "Posterior.components"),
    ],
)
def test_bad_values_name_the_field(make, name):
    with pytest.raises(ValueError, match=rf"^{name}"):
        make()


def test_wrong_types_and_unknown_fields_are_type_errors():
    with pytest.raises(TypeError, match="posterior must be a lg.SAVIGP.Posterior"):
        lg.SAVIGP(5, posterior=3)
    with pytest.raises(TypeError, match="estimator must be a lg.SAVIGP.Estimator"):
        lg.SAVIGP(5, estimator=Posterior())
    with pytest.raises(TypeError, match="no option 'samples'"):
        lg.SAVIGP(5, estimator={"samples": 3})
    with pytest.raises(TypeError, match="no option 'size'"):
        Posterior().replace(size=2)
    with pytest.raises(TypeError):
        Posterior(2)  # keyword-only


def test_replace_gives_a_checked_copy_and_groups_are_frozen():
    p = Posterior(components=2, covariance="diag")
    q = p.replace(whiten=False)
    assert q == Posterior(components=2, covariance="diag", whiten=False)
    assert p.whiten is True  # unchanged
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.components = 3
    assert hash(Prior(mean=[1.0, 2.0])) == hash(Prior(mean=(1.0, 2.0)))


def test_user_objects_are_not_mutated():
    mean, given = [1, 2], {"components": 2, "covariance": "diag"}
    Prior(mean=mean)
    lg.SAVIGP(5, posterior=given)
    assert mean == [1, 2] and given == {"components": 2, "covariance": "diag"}


def test_shorthands_and_config_round_trip():
    assert parse_posterior("mog3") == (3, "diag") and parse_posterior("FG") == (1, "full")
    assert Posterior.parse("fg2") == Posterior(components=2)
    assert Posterior.parse("mog1") == Posterior(covariance="diag")
    assert Estimator.parse("score") == Estimator(method="score")
    for group in (Posterior(components=4, whiten=False), Estimator(num_samples=3), Prior(mean=[2])):
        config = group.to_config()
        assert json.loads(json.dumps(config)) == config  # plain JSON values
        assert type(group).from_config(config) == group
        assert type(group).parse(group) is group


def test_grouped_config_reads_flat_configurations_and_keeps_grouped_ones():
    flat = {
        "num_inducing": 5,
        "num_components": 2,
        "covariance": "diag",
        "whiten": False,
        "estimator": "score",
        "num_samples": 7,
        "prior_mean": [0.3],
    }
    cfg = grouped_config(flat)
    assert cfg == {
        "num_inducing": 5,
        "posterior": {"components": 2, "covariance": "diag", "whiten": False},
        "estimator": {"method": "score", "num_samples": 7},
        "prior": {"mean": [0.3]},
    }
    assert flat["num_components"] == 2  # the given dict is not changed
    assert grouped_config(cfg) == cfg
    grouped = lg.SAVIGP(5, posterior="mog2").get_config()
    assert grouped_config(grouped) == grouped


def test_save_load_round_trip_keeps_the_groups(tmp_path):
    m = lg.SAVIGP(
        5,
        posterior=Posterior(components=2, covariance="diag", init_cov_scale=0.3),
        estimator=Estimator(method="reparam", num_samples=6, pred_samples=40),
        prior=Prior(mean=[0.2], variance=[1.2]),
    )
    _fit(m)
    cfg = m.get_config()
    assert cfg["posterior"] == m.posterior.to_config()
    assert cfg["prior"] == {"mean": [0.2], "variance": [1.2]}
    m.save(tmp_path / "m.pt")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m2 = lg.load(tmp_path / "m.pt")
    assert (m2.posterior, m2.estimator, m2.prior) == (m.posterior, m.estimator, m.prior)
    assert m2.get_config() == cfg
    X, _ = _data(9, seed=2)
    for x, z in zip(m.predict_y(X), m2.predict_y(X), strict=True):
        assert np.array_equal(x, z)


def test_a_file_written_with_flat_options_loads_silently_and_predicts_the_same():
    """tests/data/savigp_flat_options.pt was written by SAVIGP before the groups (flat
    num_components, covariance, whiten, estimator, num_samples, control_variates,
    pred_samples, prior_mean, prior_variance, init_cov_scale in its header)."""
    ref = json.loads((DATA / "savigp_flat_options.json").read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = lg.load(DATA / "savigp_flat_options.pt")
    assert m.posterior == Posterior(
        components=2, covariance="diag", whiten=False, init_cov_scale=0.5
    )
    assert m.estimator == Estimator(
        method="reparam", num_samples=7, control_variates=False, pred_samples=50
    )
    assert m.prior == Prior(mean=[0.3], variance=[1.5])
    X = np.array(ref["X"])[:, None]
    mean, var = m.predict_y(X)
    f_mean, f_var = m.predict_f(X)
    np.testing.assert_allclose(mean, ref["mean"], rtol=1e-12)
    np.testing.assert_allclose(var, ref["var"], rtol=1e-12)
    np.testing.assert_allclose(f_mean, ref["f_mean"], rtol=1e-12)
    np.testing.assert_allclose(f_var, ref["f_var"], rtol=1e-12)
    lpd = m.log_predictive_density(X, np.array(ref["y"]))
    np.testing.assert_allclose(lpd, ref["lpd"], rtol=1e-12)


def test_prior_sizes_are_checked_against_the_latents():
    X, y = _data()
    with pytest.raises(ValueError, match=r"prior.mean has 2 values for Q=1"):
        lg.SAVIGP(5, prior=Prior(mean=[0.0, 1.0])).fit(X, y, max_steps=1)
    with pytest.raises(ValueError, match=r"prior.variance has 3 values for Q=1"):
        lg.SAVIGP(5, prior=Prior(variance=[1.0, 1.0, 1.0])).fit(X, y, max_steps=1)

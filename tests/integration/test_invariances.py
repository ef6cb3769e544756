"""Issue 29, item 2: predictions are invariant to how the same data are presented.

Property-based (hypothesis) over every public model family of
:mod:`model_families` (ExactGP, SparseGP VFE/FITC/SoR, SVGP, SAVIGP, SEP, GFITC, QSGP,
SHGP, SMGP, SVHGP, SLGP and the scikit-learn estimators), each fitted small and seeded:

- **inputs shifted and scaled** column by column, ``(X + c) * s`` with ``s`` in
  ``10^[-3, 3]`` and ``|c|`` up to ``10^6`` (the test inputs mapped alike; the shift is
  up to a million times the columns' spread, as timestamps are): the models measure
  lengthscales and inducing inputs in units of each column's spread and centre what
  needs centring (QSGP's features, SLGP's networks), so the predictions agree to
  round-off amplified by the fit.  The tolerance (relative to the largest prediction)
  is ``FLOOR + AMPLIFICATION * rounding`` per family, where ``rounding`` is the relative
  precision the shifted inputs keep (``2.2e-16 * max |x| / spread``): a shift by 10^6
  spreads leaves ~10 significant digits of position, and the fit amplifies that
  (measured: ~200x for the exact GP and SVGP on inputs, ~1e5x for the L-BFGS-trained
  sparse and EP methods, ~4e5x for the modulated models on targets shifted by 1e5
  spreads and ~6e6x for SLGP (its networks) at 1e6 spreads, where Adam turns round-off
  in near-zero gradient components into steps; the constants below keep a margin of at
  least 5x);
- **targets shifted and scaled**, ``a y + b`` with ``a`` in ``10^[-3, 3]`` and ``b`` up
  to 10^6 scaled spreads (Gaussian-likelihood regression only: the other likelihoods are
  not location-scale families): predictive means map to ``a m + b`` and variances to
  ``a^2 v`` (the models standardise the targets), to the same kind of tolerance;
- **row order**: a permutation of the training rows changes nothing beyond round-off
  for the methods that are order-independent.  Given the inducing inputs (``Z=``) the
  full-batch methods are: their objectives are sums over rows.  Not order-independent
  (each family's ``order`` says why): the Monte Carlo methods (SAVIGP, SMGP, SLGP),
  whose seeded draws are made per row, and every model whose inducing inputs come from
  the seeded k-means++ initialisation without a ``Z`` argument (it picks rows by
  index); minibatch training (``batch_size < N``) also depends on the order;
- **container type**: numpy, torch, pandas and lists give the same predictions (to
  ``CONTAINER_RTOL``: the values are the same, but a pandas frame's column-major layout
  sums in another order, and the fit amplifies that round-off to ~1e-10); float32
  inputs give those of the float64 values they hold, to
  ``FLOAT32_RTOL`` (the fit is in float64; the inputs differ by float32 rounding, ~6e-8,
  amplified by the fit); boolean inputs are the numbers 0 and 1.

The default run draws one example per family and property (the file takes about a
minute on a shared 2-core machine); ``make slow`` (``-m slow``) draws ``SLOW_EXAMPLES``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from model_families import FAMILIES, Family, family_data

import latentgp as lg

#: Examples per family and property: the default run, and ``make slow``.
DEFAULT_EXAMPLES, SLOW_EXAMPLES = 1, 8

#: Tolerance of the shifted-and-scaled fits: ``FLOOR + AMPLIFICATION * rounding``.
SPARSE = ("VFE", "FITC", "SoR", "GFITC")
MODULATED = ("SHGP", "SMGP", "SVHGP", "SLGP")
FLOOR = {**dict.fromkeys(SPARSE, 1e-6)}
FLOOR_DEFAULT = 1e-8
AMPLIFICATION = {**dict.fromkeys(SPARSE, 2e6), **dict.fromkeys(MODULATED, 4e6), "SLGP": 3e7}
AMPLIFICATION_DEFAULT = 1e5
#: Relative tolerance of a fit on float32 inputs against one on their float64 values.
FLOAT32_RTOL = {"VFE": 1e-3, "FITC": 1e-2, "SoR": 1e-3, "GFITC": 1e-2}
FLOAT32_RTOL_DEFAULT = 1e-5
#: Relative tolerance of a fit on the same values in another container.
CONTAINER_RTOL = 1e-8
#: Relative tolerance of a permuted fit (round-off of sums in another order).
ORDER_RTOL = {"FITC": 1e-5, "VFE": 1e-7, "SoR": 1e-7}
ORDER_RTOL_DEFAULT = 1e-8

BUDGETS = [
    pytest.param(DEFAULT_EXAMPLES, id="default"),
    pytest.param(SLOW_EXAMPLES, id="slow", marks=pytest.mark.slow),
]
IDS = [f.name for f in FAMILIES]
REGRESSION = [f for f in FAMILIES if f.task == "regression"]
ORDER_FREE = [f for f in FAMILIES if not f.order]

X_TEST = np.random.default_rng(5).uniform(-3, 3, (15, 2))
Z_GIVEN = np.random.default_rng(3).uniform(-3, 3, (8, 2))


def _settings(examples: int):
    return settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=True,  # the same examples every run: a tolerance is never hit by chance
        suppress_health_check=list(HealthCheck),
    )


def _affine_rtol(family: Family, *arrays: np.ndarray) -> float:
    """The tolerance of a fit on the (shifted and scaled) inputs and targets ``arrays``."""
    rounding = max(
        2.2e-16 * float(np.max(np.abs(a).max(0) / a.std(0))) for a in arrays
    )
    floor = FLOOR.get(family.name, FLOOR_DEFAULT)
    return floor + AMPLIFICATION.get(family.name, AMPLIFICATION_DEFAULT) * rounding


def _rel(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-300))


def _assert_same(got, want, rtol: float, what: str) -> None:
    for name, g, w in zip(("mean", "variance"), got, want, strict=True):
        assert _rel(g, w) <= rtol, f"{what}: predictive {name} differs by {_rel(g, w):.2e}"


_BASE: dict[tuple[str, bool], tuple[np.ndarray, np.ndarray]] = {}


def _base(family: Family, given_z: bool = False):
    """Predictions at ``X_TEST`` of the family fitted to the untransformed data (cached)."""
    key = (family.name, given_z)
    if key not in _BASE:
        X, y = family_data(family.task)
        model = family.fitted(X, y, Z=Z_GIVEN if given_z else None)
        _BASE[key] = family.predict(model, X_TEST)
    return _BASE[key]


# ---------------------------------------------------------------------------- inputs
@st.composite
def affine_maps(draw):
    scale = 10.0 ** np.array([draw(st.floats(-3, 3)) for _ in range(2)])
    size = 10.0 ** np.array([draw(st.floats(0, 6)) for _ in range(2)])
    sign = np.array([draw(st.sampled_from([-1.0, 1.0])) for _ in range(2)])
    return scale, sign * size  # (X + c) * s


@pytest.mark.parametrize("examples", BUDGETS)
@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_predictions_invariant_to_shifting_and_scaling_inputs(family, examples):
    want = _base(family)
    X, y = family_data(family.task)

    @_settings(examples)
    @given(affine_maps())
    def check(mapping):
        s, c = mapping
        Xm = (X + c) * s
        got = family.predict(family.fitted(Xm, y), (X_TEST + c) * s)
        _assert_same(got, want, _affine_rtol(family, Xm), f"(X + {c}) * {s}")

    check()


# --------------------------------------------------------------------------- targets
@pytest.mark.parametrize("examples", BUDGETS)
@pytest.mark.parametrize("family", REGRESSION, ids=[f.name for f in REGRESSION])
def test_regression_predictions_follow_shifted_and_scaled_targets(family, examples):
    want = _base(family)
    X, y = family_data(family.task)

    @_settings(examples)
    @given(st.floats(-3, 3), st.floats(0, 6), st.sampled_from([-1.0, 1.0]))
    def check(log_a, log_b, sign):
        a = 10.0**log_a
        b = sign * a * 10.0**log_b  # up to a million (scaled) target spreads away
        ym = a * y + b
        mean, var = family.predict(family.fitted(X, ym), X_TEST)
        rtol = _affine_rtol(family, X, ym)
        _assert_same(((mean - b) / a, var / a**2), want, rtol, f"{a} * y + {b}")

    check()


# ------------------------------------------------------------------------- row order
@pytest.mark.parametrize("examples", BUDGETS)
@pytest.mark.parametrize("family", ORDER_FREE, ids=[f.name for f in ORDER_FREE])
def test_order_independent_methods_ignore_the_row_order(family, examples):
    given_z = family.make_z is not None
    want = _base(family, given_z)
    X, y = family_data(family.task)
    rtol = ORDER_RTOL.get(family.name, ORDER_RTOL_DEFAULT)

    @_settings(examples)
    @given(st.permutations(range(len(y))))
    def check(perm):
        perm = np.asarray(perm)
        model = family.fitted(X[perm], y[perm], Z=Z_GIVEN if given_z else None)
        _assert_same(family.predict(model, X_TEST), want, rtol, "permuted rows")

    check()


def test_every_family_is_classified_for_row_order():
    """Each family is either order-independent (tested above) or says why it is not."""
    dependent = {f.name for f in FAMILIES if f.order}
    assert dependent == {"SAVIGP", "SMGP", "SLGP", "DeepGP", "GPClassifier", "GPCountRegressor"}
    assert {f.name for f in ORDER_FREE} | dependent == set(IDS)


# ---------------------------------------------------------------------- containers
CONTAINERS = {
    "torch": lambda X, y: (torch.as_tensor(X), torch.as_tensor(y)),
    "pandas": lambda X, y: (pd.DataFrame(X, columns=["a", "b"]), pd.Series(y, name="y")),
    "lists": lambda X, y: (X.tolist(), y.tolist()),
    "float32 numpy": lambda X, y: (X.astype(np.float32), y),
    "float32 torch": lambda X, y: (torch.as_tensor(X, dtype=torch.float32), y),
}


@pytest.mark.parametrize("examples", BUDGETS)
@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_predictions_do_not_depend_on_the_container(family, examples):
    X, y = family_data(family.task)
    X32 = X.astype(np.float32).astype(np.float64)  # the values float32 inputs hold
    want = _base(family)
    cache: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    @_settings(examples)
    @given(st.sampled_from(sorted(CONTAINERS)))
    def check(name):
        Xc, yc = CONTAINERS[name](X, y)
        got = family.predict(family.fitted(Xc, yc), X_TEST)
        if "float32" not in name:
            _assert_same(got, want, CONTAINER_RTOL, name)
            return
        if "ref" not in cache:
            cache["ref"] = family.predict(family.fitted(X32, y), X_TEST)
        _assert_same(got, cache["ref"], CONTAINER_RTOL, f"{name} against its float64 values")
        rtol = FLOAT32_RTOL.get(family.name, FLOAT32_RTOL_DEFAULT)
        _assert_same(got, want, rtol, f"{name} against the float64 data")

    check()


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_boolean_inputs_are_zeros_and_ones(family):
    """Every model takes boolean X as the numbers 0 and 1 (no torch error)."""
    X, y = family_data(family.task)
    rng = np.random.default_rng(2)
    Xb = np.c_[X[:, :1] > 0, rng.uniform(size=len(y)) > 0.5]
    Xt = np.array([[True, False], [False, True], [True, True]])
    with warnings.catch_warnings():
        # four distinct inputs: some fits end degenerate, and say so (TrainingWarning)
        warnings.simplefilter("ignore", lg.TrainingWarning)
        got = family.predict(family.fitted(Xb, y), Xt)
        want = family.predict(family.fitted(Xb.astype(np.float64), y), Xt.astype(np.float64))
    _assert_same(got, want, 1e-12, "boolean X")

"""When a fit stops: the convergence criterion of every model, in one place.

A fit without a step budget (no ``epochs``/``max_steps``) runs until its objective stops
improving, guarded by a step ceiling proportional to the data; a fit with a budget runs it
out, or stops earlier when ``tol`` is given.  :func:`~latentgp.training.loop.run_loop`
feeds every step's objective to a :class:`Convergence` and stops when it says so.

The criterion compares the means of two consecutive *windows* of the objective per data
point (the training objective over N, in the model's internal units, so its size does not
depend on N or on the units of y):

    change_k = |m_k - m_{k-1}|,
    calm when  change_k < rtol * max(|m_{k-1}|, floor) * s_k + z * se_k

where ``se_k`` is the standard error of ``m_k - m_{k-1}`` estimated from the step-to-step
differences inside the two windows (so a minibatch objective's noise does not hide
convergence, and a trend does not count as noise), and ``s_k`` the window's length over the
base window (``rtol`` is a change per base window: a grown window does not make the rule
stricter about a steady trend, only less easily fooled by noise).  ``patience`` calm
windows in a row stop the fit.  The rule suits both kinds of objective:

- *stochastic* (minibatch ELBOs, QSGP, stochastic SEP, Monte Carlo objectives): windows
  of ``max(min_window, steps per epoch, growth * steps so far)`` steps, the noise term on.
  Windows that grow with the run matter late in a minibatch fit: a fixed window's noise
  allowance (one standard error, ~ 1/sqrt(window)) ends up as large as the slow late
  improvement per window (~ window), so two calm windows come too early; with windows a
  fraction ``growth`` of the run, the improvement grows faster than the noise allowance
  shrinks;
- *deterministic* (full-batch L-BFGS): windows of one step, no noise term: the relative
  change per step.

- *probed* (a stochastic rule with ``probe_rate`` > 0, and a task whose ``probe`` gives
  the objective on fixed rows, :func:`probe_rows`): ``probe_points`` probes per window
  replace the minibatch values, and a window is calm when the least-squares slope ``b``
  of its probes (per point per step) is small with confidence,
  ``|b| + probe_z * se(b) < probe_rate * max(|mean|, floor)``.  The probe has no
  minibatch noise, only the jitter of the parameters themselves, so a slow rise that the
  window means take for noise shows as a slope; a jitter too large to resolve the rate
  keeps the fit going (to its ceiling), which is why only a model's automatic defaults
  turn it on (SVGP's natural-gradient fit on large data, ``models.svgp.PROBED_RULE``).

An explicit ``tol`` with a user budget keeps the historical rule: windows of one epoch,
``floor`` 1e-12, no noise term, ``patience`` 3.

The state (the current and previous windows, calm windows in a row) is part of a
checkpoint, so a resumed fit stops exactly where an uninterrupted one would.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

__all__ = [
    "Convergence",
    "StoppingRule",
    "default_ceiling",
    "default_rule",
    "probe_rows",
    "step_ceiling",
    "user_rule",
]


@dataclasses.dataclass(frozen=True)
class StoppingRule:
    """Parameters of the convergence criterion (see the module notes).

    window: steps per window.  rtol: relative tolerance on the change of window means.
    floor: the smallest ``|m|`` the tolerance is relative to (1: an absolute tolerance in
    nats per point for objectives smaller than one nat per point).  z: noise allowance in
    standard errors (0: none).  patience: calm windows in a row that stop the fit.
    kind: ``"stochastic"``, ``"deterministic"`` or ``"tol"`` (the user's ``tol``).
    growth: a window that starts after ``s`` steps lasts ``max(window, ceil(growth * s))``
    steps (0: fixed windows).  probe_rate, probe_z, probe_points: the stochastic rule of a
    task with a probe (``StepTask.probe``, the objective on fixed rows): ``probe_points``
    probes per window, a window calm when the least-squares slope of its probes (per point
    per step) plus ``probe_z`` standard errors is below ``probe_rate * max(|mean|, floor)``
    (0: no probe; the window means of the minibatch values are compared instead).
    """

    window: int
    rtol: float
    floor: float = 1.0
    z: float = 0.0
    patience: int = 2
    kind: str = "stochastic"
    growth: float = 0.0
    probe_rate: float = 0.0
    probe_z: float = 2.0
    probe_points: int = 8

    def length(self, start: int) -> int:
        """Steps in the window that starts after ``start`` completed steps."""
        return max(self.window, math.ceil(self.growth * start))


def user_rule(tol: float, steps_per_epoch: int, patience: int = 3) -> StoppingRule:
    """The rule of an explicit ``tol``: relative change of per-epoch means below ``tol``
    for ``patience`` epochs."""
    return StoppingRule(window=steps_per_epoch, rtol=float(tol), floor=1e-12, z=0.0,
                        patience=patience, kind="tol")


#: defaults of the automatic rule per kind of objective (a model's ``fit_defaults`` may
#: override them with a ``"convergence"`` dict)
DEFAULTS: dict[str, dict[str, Any]] = {
    "stochastic": {"min_window": 50, "rtol": 2e-4, "z": 1.0, "patience": 2, "growth": 0.2,
                   "probe_rate": 0.0, "probe_z": 2.0},
    "deterministic": {"min_window": 1, "rtol": 1e-7, "z": 0.0, "patience": 3, "growth": 0.0},
}


def default_rule(
    steps_per_epoch: int, *, deterministic: bool, overrides: dict[str, Any] | None = None
) -> StoppingRule:
    """The automatic rule of a fit without a budget: ``deterministic`` for full-batch
    L-BFGS, stochastic otherwise; ``overrides`` (keys of :data:`DEFAULTS`) from the
    model's defaults."""
    kind = "deterministic" if deterministic else "stochastic"
    p = {**DEFAULTS[kind], **(overrides or {})}
    window = max(int(p["min_window"]), 1 if deterministic else int(steps_per_epoch))
    return StoppingRule(window=window, rtol=float(p["rtol"]), z=float(p["z"]),
                        patience=int(p["patience"]), kind=kind, growth=float(p["growth"]),
                        probe_rate=float(p.get("probe_rate", 0.0)),
                        probe_z=float(p.get("probe_z", 2.0)))


#: the step ceiling of a fit without a budget, per kind of objective (overridden by a
#: ``"ceiling"`` dict in the model's ``fit_defaults``)
CEILINGS: dict[str, dict[str, float]] = {
    "stochastic": {"epochs": 500, "floor": 3000, "cap": 30000},
    "deterministic": {"epochs": 1000, "floor": 1000, "cap": 1000},
}


def step_ceiling(steps_per_epoch: int, *, epochs: float, floor: int, cap: int) -> int:
    """``epochs`` passes over the data, at least ``floor`` and at most ``cap`` steps."""
    return int(min(cap, max(floor, math.ceil(epochs * steps_per_epoch))))


def default_ceiling(
    steps_per_epoch: int, *, deterministic: bool, overrides: dict[str, Any] | None = None
) -> int:
    """The step ceiling of a fit without a budget (:data:`CEILINGS`, ``overrides`` from the
    model's defaults)."""
    p = {**CEILINGS["deterministic" if deterministic else "stochastic"], **(overrides or {})}
    return step_ceiling(steps_per_epoch, epochs=float(p["epochs"]), floor=int(p["floor"]),
                        cap=int(p["cap"]))


#: rows of the fixed-row objective a stochastic rule watches (:func:`probe_rows`): a probe
#: of 2,048 rows costs about two thirds of a step of 1,024 (a forward pass, no backward),
#: 8 per window about 3% of a fit of a few thousand steps
PROBE_ROWS = 2048


def probe_rows(num_data: int, batch_size: int) -> Any:
    """The fixed rows whose objective a minibatch fit's rule watches (``StepTask.probe``): up to
    :data:`PROBE_ROWS` rows evenly spaced over the data (no random draw, so the fit's
    random state is untouched), or None where a step already sees every row."""
    import torch

    if batch_size >= num_data:
        return None
    S = min(num_data, PROBE_ROWS)
    return torch.linspace(0, num_data - 1, S, dtype=torch.float64).round().long()


class Convergence:
    """The criterion's running state: :meth:`add` each completed step's objective, then
    :meth:`end_of_step` says whether the fit has converged.  ``rule`` None: never;
    ``scale``: what turns the objective into the objective per point (1 / N)."""

    def __init__(self, rule: StoppingRule | None, scale: float = 1.0,
                 probe: Callable[[], float | None] | None = None) -> None:
        self.rule, self.scale = rule, float(scale)
        # the task's objective on fixed rows (StepTask.probe): a stochastic rule then tests
        # the slope of its values inside each window (no minibatch noise in them)
        self.probe = (probe if rule is not None and rule.kind == "stochastic"
                      and rule.probe_rate > 0 else None)
        self.points: list[tuple[int, float]] = []  # the current window's probes
        self.values: list[float] = []  # the current window's objectives
        self.prev: tuple[float, float, int] | None = None  # previous window: mean, SS, n
        self.calm = 0
        self.start: int | None = 0  # completed steps before the current window
        self.last: dict[str, float] = {}

    def add(self, value: float) -> None:
        """Record a completed step's objective (times ``scale``: per point)."""
        if self.rule is not None:
            self.values.append(float(value) * self.scale)

    def end_of_step(self, step: int) -> bool:
        """After step number ``step`` (1-based, failed steps included): close the window
        when ``step`` ends one; True when the run has converged."""
        rule = self.rule
        if rule is None or not self.values:
            return False
        if self.start is None:  # a checkpoint from before windows could grow
            self.start = step - len(self.values)
        steps = step - self.start
        length = rule.length(self.start)
        if self.probe is not None and steps % max(1, length // rule.probe_points) == 0:
            value = self.probe()
            if value is None:  # the task has no probe (or it failed): the window means
                self.probe, self.points = None, []
            else:
                self.points.append((step, float(value) * self.scale))
        if steps < length:
            return False
        self.start = step
        vals = self.values
        n = len(vals)
        mean = sum(vals) / n
        diffs = [b - a for a, b in zip(vals[:-1], vals[1:], strict=False)]
        d_mean = sum(diffs) / len(diffs) if diffs else 0.0
        ss = sum((d - d_mean) ** 2 for d in diffs)  # first differences: trend removed
        self.values = []
        if self.probe is not None:
            self.prev = (mean, ss, n)
            return self._probe_window(rule)
        done = False
        if self.prev is not None:
            prev_mean, prev_ss, prev_n = self.prev
            change = abs(mean - prev_mean)
            # rtol is per base window: a window k times as long may change k times as much
            stretch = max(1.0, steps / rule.window)
            bound = rule.rtol * max(abs(prev_mean), rule.floor) * stretch
            se = 0.0
            if rule.z:
                # var(step noise) = var(first differences) / 2, pooled over both windows
                dof = max(n - 2, 0) + max(prev_n - 2, 0)
                var = (ss + prev_ss) / (2 * dof) if dof > 0 else 0.0
                se = math.sqrt(var * (1.0 / n + 1.0 / prev_n))
                bound += rule.z * se
            self.calm = self.calm + 1 if change < bound else 0
            self.last = {"change": change, "bound": bound, "noise_se": se}
            done = self.calm >= rule.patience
        self.prev = (mean, ss, n)
        return done

    def _probe_window(self, rule: StoppingRule) -> bool:
        """Close a window of a probed rule: calm when the least-squares slope ``b`` of its
        probes (per point per step) is within ``|b| + probe_z * se(b) < probe_rate *
        max(|mean probe|, floor)``; a window with fewer than 3 probes is not calm."""
        pts, self.points = self.points, []
        n = len(pts)
        if n < 3:
            self.calm = 0
            return False
        xm = sum(p[0] for p in pts) / n
        ym = sum(p[1] for p in pts) / n
        sxx = sum((p[0] - xm) ** 2 for p in pts)
        slope = sum((p[0] - xm) * (p[1] - ym) for p in pts) / sxx
        rss = sum((p[1] - ym - slope * (p[0] - xm)) ** 2 for p in pts)
        se = math.sqrt(rss / (n - 2) / sxx)
        change, bound = abs(slope) + rule.probe_z * se, rule.probe_rate * max(abs(ym), rule.floor)
        self.calm = self.calm + 1 if change < bound else 0
        self.last = {"change": change, "bound": bound, "noise_se": se, "slope": slope,
                     "probes": float(n)}
        return self.calm >= rule.patience

    def describe(self) -> str:
        """The criterion and its last numbers, for ``history_.stopped``."""
        r, last = self.rule, self.last
        if r is None:
            return ""
        size = f"{r.window}-step" if not r.growth else (
            f"{r.window}-step (growing to {r.growth:g} of the steps so far)")
        if self.probe is not None:
            text = (f"{r.kind} rule on the objective of fixed rows: |slope| of its "
                    f"{r.probe_points} probes per {size} window + {r.probe_z:g} s.e. < "
                    f"{r.probe_rate:g} per step, {r.patience} in a row")
        else:
            text = (f"{r.kind} rule: change of {size} window means < rtol {r.rtol:g}"
                    + (f" + {r.z:g} noise s.e." if r.z else "") + f", {r.patience} in a row")
        if last:
            text += (f"; last change {last['change']:.3g} vs bound {last['bound']:.3g}"
                     f" (noise s.e. {last['noise_se']:.3g})")
        return text

    def state(self) -> dict[str, Any]:
        """Checkpoint state (the windows and the calm count)."""
        return {"window_values": list(self.values),
                "probe_points": [list(p) for p in self.points],
                "prev_window": None if self.prev is None else list(self.prev),
                "calm": self.calm, "window_start": self.start, "last": dict(self.last)}

    def load(self, s: dict[str, Any]) -> None:
        """Restore :meth:`state` (or the ``tol`` state of older checkpoints)."""
        if "epoch_values" in s:
            prev = s["prev"]
            s = {"window_values": s["epoch_values"], "calm": s["calm"],
                 "prev_window": None if prev is None else [prev, 0.0, 0]}
        self.values = [float(v) for v in s["window_values"]]
        self.points = [(int(a), float(b)) for a, b in s.get("probe_points", [])]
        p = s["prev_window"]
        self.prev = None if p is None else (float(p[0]), float(p[1]), int(p[2]))
        self.calm = int(s["calm"])
        start = s.get("window_start")
        self.start = None if start is None else int(start)
        self.last = {k: float(v) for k, v in s.get("last", {}).items()}

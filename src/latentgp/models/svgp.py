"""Stochastic variational GP (Hensman et al. 2013/2015): the uncollapsed ELBO

    L = N / B * sum_{n in batch} E_{q(f_n)}[log p(y_n | f_n)] - sum_q KL[q(u_q) || p(u_q)]

with q(u) Gaussian (full or diagonal, whitened by default), Q independent latent
functions batched as tensor dimensions, any likelihood.  One Cholesky of Kzz per step
is shared by the KL and the conditional.
"""

from __future__ import annotations

from typing import Any

import torch

from ..inducing import (
    check_inducing_sizes,
)
from ..kernels import Kernel
from ..likelihoods import Gaussian, Likelihood, Poisson
from ..linalg import cholesky, solve_lower
from ..validation import (
    check_choice,
    check_mean_covariance,
    check_positive_int,
    keyword_only_after_first,
)
from ..variational import (
    GaussianVariational,
    gaussian_marginals,
    gaussian_predictive_cache,
)
from .base import GPModel, register_model
from .inducing_inputs import InducingInputs
from .pathwise import PathwiseSampling, svgp_paths

#: The rows up to which a fit that names no optimiser, learning rate, batch size or budget
#: trains by full-batch L-BFGS where the ELBO is deterministic
#: (``likelihood.deterministic_expectation``): the default minibatch, so up to here the
#: default Adam fit would already take every row at each step, and L-BFGS on that same
#: objective converges in far fewer, and cheaper, passes (``docs/results/defaults.md``).
#: Above it minibatch Adam can be cheaper (3,633 rows of DoctorVisits: Adam's default 6-13 s,
#: L-BFGS 21 s with Z fixed and 57 s learning Z, on a shared 2-core machine).
FULL_BATCH_ROWS = 1024

#: The convergence rule and step ceiling of that L-BFGS fit (overrides of the deterministic
#: rule of :mod:`latentgp.training.convergence`): the relative change of the means of
#: 5-step windows of the ELBO per point below 3e-6, twice in a row, within 2,000 steps.
#: Windows, not single steps: L-BFGS's progress per step dips below any per-step tolerance
#: for a few steps and picks up again (a 50-row Bernoulli SVGP stopped at step 74 of a
#: climb that went on to step 590 under a 3-step rule).  Z stays at its placement in that
#: fit unless ``learn_inducing`` is given: learning it too leaves a long, slow tail (the
#: user guide's 300-row snelson fit ran to the 2,000-step ceiling, 56 s against Adam's
#: 45 s, where fixed Z converged in 160 steps, 3.5 s, with the better test NLPD).
LBFGS_RULE = {"min_window": 5, "rtol": 3e-6, "patience": 2}
LBFGS_CEILING = {"floor": 2000, "cap": 2000}

#: The likelihoods whose SVGP fits on more than ``FULL_BATCH_ROWS`` rows, naming no
#: optimiser, learning rate, batch size or budget, take natural-gradient steps on q(u)
#: (:mod:`latentgp.training.natural`: rate 0.1, after a 5-step warm-up where the
#: likelihood is not conjugate) with Adam at lr 0.01 on the rest, instead of Adam on
#: everything: the fastest setting to a good test NLPD on every time-to-accuracy row
#: where it got there (``docs/results/time_to_accuracy.md``).  Until the minibatch rule
#: watched the ELBO of fixed rows (``training.convergence.probe_rows``) only Poisson had
#: it: the noisy window means stopped the Gaussian natural fit while it still improved.
#: Not Bernoulli: on flights-binary the natural default reached the race's level at 1.55x
#: the best setting's time, the Adam default at 0.86x.  Other likelihoods (Student-t,
#: negative binomial, softmax, ...): not measured, Adam.
NATURAL_LIKELIHOODS = (Gaussian, Poisson)

#: The convergence rule of that natural-gradient fit (an override of the stochastic rule of
#: :mod:`latentgp.training.convergence`): 8 times per window the ELBO per point of fixed
#: rows is evaluated (a "probe", no minibatch noise), and a window is calm when the
#: least-squares slope of its probes plus 2 standard errors is below 2e-5 per step (twice
#: in a row).  Replayed on long traces (``benchmarks/stopping_traces.py``) the minibatch
#: window means stopped these fits 0.03-0.05 nats short; the probe's slope kept them
#: going while the test NLPD still fell.  User-chosen settings keep the window means: with
#: small minibatches Adam's jitter of the probe would hold the slope test off to the ceiling.
PROBED_RULE = {"probe_rate": 2e-5, "probe_z": 2.0}


@register_model
class SVGP(PathwiseSampling, InducingInputs, GPModel):
    """Sparse variational GP with minibatch training.

    Parameters
    ----------
    num_inducing: M (ignored when ``Z`` is given).
    likelihood, kernel: names or objects (see :class:`GPModel`).
    Z: initial inducing inputs ``(M, D)`` (shared, or with ``shared_inducing=False`` the
        start of every latent's own set) or ``(Q, M, D)`` (one set per latent).
    num_latent: Q; default: the likelihood's latent dimension, or the number of target
        columns for independent multi-output regression.
    shared_inducing: one set of inducing inputs for all Q latents.
    covariance: ``"full"`` or ``"diag"`` q(u).  whiten: whitened parameterisation.
    learn_inducing: optimise Z; None (the default): yes, except in the full-batch L-BFGS
        fit that small data get when ``fit`` names no optimiser, learning rate, batch size
        or budget (:meth:`full_batch_default`), which keeps Z at its initial placement.
        Such a fit on more than ``FULL_BATCH_ROWS`` rows with a likelihood in
        :data:`NATURAL_LIKELIHOODS` (Gaussian, Poisson) takes natural-gradient
        steps on q(u) and Adam on the rest; otherwise minibatch Adam.
    inducing_init: ``"kmeans"``, ``"random"``, ``"greedy"``.
    Common keywords (:class:`~latentgp.models.base.GPModel`): ``normalize_y``, ``device``,
    ``dtype``, ``noise_variance``.
    """

    default_optimizer = "adam"
    default_lr = 0.01
    paths_builder = staticmethod(svgp_paths)

    @keyword_only_after_first()
    def __init__(
        self,
        num_inducing: int = 128,
        *,
        likelihood: str | Likelihood = "gaussian",
        kernel: str | Kernel | None = "rbf",
        Z=None,
        num_latent: int | None = None,
        shared_inducing: bool = True,
        covariance: str = "full",
        whiten: bool = True,
        learn_inducing: bool | None = None,
        inducing_init: str = "kmeans",
        **common: Any,
    ) -> None:
        super().__init__(kernel, likelihood, **common)
        shared = self._store_inducing_args(num_inducing, Z, learn_inducing, inducing_init)
        check_choice(covariance, "covariance", ("full", "diag"))
        self._num_latent_arg = (
            None if num_latent is None else check_positive_int(num_latent, "num_latent")
        )
        # a 3-D Z is one set per latent; a 2-D Z is shared unless shared_inducing=False
        # asks for separate sets, which then each start at a copy of it
        self.shared_inducing = bool(shared_inducing) and shared is not False
        self.covariance, self.whiten = covariance, bool(whiten)

    @property
    def deterministic_objective(self) -> bool:  # type: ignore[override]
        """The ELBO of given rows is deterministic where the likelihood's expectation is."""
        return bool(self.likelihood.deterministic_expectation)

    def get_config(self):
        cfg = super().get_config()
        cfg.update(
            self.inducing_config(),
            num_latent=self._num_latent_arg,
            shared_inducing=self.shared_inducing,
            covariance=self.covariance,
            whiten=self.whiten,
        )
        return cfg

    def _default_fit_args(self, N):
        args = {"optimizer": "adam", "lr": 0.01, "batch_size": min(N, 1024)}
        if N > FULL_BATCH_ROWS and type(self.likelihood) in NATURAL_LIKELIHOODS:
            # minibatch natural gradients on q(u), Adam on the rest (NATURAL_LIKELIHOODS)
            args["automatic"] = {"optimizer": "natural", "lr": 0.01,
                                 "batch_size": min(N, 1024),
                                 "convergence": dict(PROBED_RULE)}
        return self.full_batch_default(args, N)

    def full_batch_default(self, args: dict[str, Any], N: int) -> dict[str, Any]:
        """``args`` (the defaults of a fit that names an optimiser, learning rate, batch size
        or budget) with, for ``N <= FULL_BATCH_ROWS`` rows and a deterministic ELBO
        (``likelihood.deterministic_expectation``), the ``"automatic"`` defaults of a fit
        that names none of them: full-batch L-BFGS (unit step, the line search scales it)
        on every trainable parameter except Z, unless ``learn_inducing=True`` was given
        (``"fixed_inducing"``: Z stays at its k-means placement), stopped by
        the deterministic rule of :data:`LBFGS_RULE` under :data:`LBFGS_CEILING`."""
        if N <= FULL_BATCH_ROWS and self.likelihood.deterministic_expectation:
            args["automatic"] = {"optimizer": "lbfgs", "lr": 1.0,
                                 "convergence": dict(LBFGS_RULE),
                                 "ceiling": dict(LBFGS_CEILING),
                                 "fixed_inducing": self.learn_inducing is None}
        return args

    # ------------------------------------------------------------------ building --
    def _build(self, input_dim: int, output_dim: int) -> None:
        super()._build(input_dim, output_dim)
        Q, M = self.num_latent, self.num_inducing
        if self.likelihood.latent_dim == 1 and output_dim > 1 and Q != output_dim:
            raise ValueError(f"{output_dim} target columns need num_latent={output_dim}, got {Q}")
        self.kernel.build(input_dim, (Q,), self.dtype_, self.device_)
        zshape = (M, input_dim) if self.shared_inducing else (Q, M, input_dim)
        self._build_inducing(zshape, learn=self.learn_inducing)
        self.q = GaussianVariational(Q, M, self.covariance, self.whiten, dtype=self.dtype_)
        self.to(dtype=self.dtype_, device=self.device_)

    def _validate_sizes(self, N: int) -> None:
        check_inducing_sizes(self._init_Z, self.num_inducing, N, self.input_dim)

    def _init_from_data(self, X, y):
        super()._init_from_data(X, y)
        self._place_inducing(X, _FirstLatent(self.kernel))
        with torch.no_grad():
            if not self.whiten:
                Lzz, _ = cholesky(self.kernel(self.Z), "Kzz")
                self.q.set_unwhitened_init(Lzz, 1.0)
                mz = self.inducing_prior_mean()
                if mz is not None:  # q over u starts at the prior, u ~ N(m(Z), Kzz)
                    self.q.q_mu.copy_(mz)
            init_mean = getattr(self.likelihood, "initial_latent_means", None)
            if init_mean is not None:  # e.g. GPRN: start off the W g = 0 saddle
                c = init_mean().to(self.q.q_mu)  # (Q,)
                u = c[:, None].expand_as(self.q.q_mu)[..., None]  # u = c 1_M
                if self.whiten:
                    Lzz, _ = cholesky(self.kernel(self.Z), "Kzz")
                    u = solve_lower(Lzz.expand(u.shape[0], *Lzz.shape[-2:]), u)
                self.q.q_mu.copy_(u[..., 0])

    # ------------------------------------------------------------------ objective --

    def _marginals(self, X: torch.Tensor, Lzz: torch.Tensor):
        """Marginals of q(f) at ``X`` ``(B, D)``: mean, var ``(B, Q)``."""
        mean, var = gaussian_marginals(
            self.q, self.kernel(self.Z, X), self.kernel.diag(X), Lzz,
            mean_x=self.latent_prior_mean(X), mean_z=self._mean_z(),
        )
        return mean.mT, var.mT

    def _mean_z(self) -> torch.Tensor | None:
        """The prior mean at Z ``(Q, M)`` when q needs it (q over u), else None."""
        return None if self.whiten else self.inducing_prior_mean()

    def expected_log_lik(self, X, y, Lzz) -> torch.Tensor:
        """``E_q[log p(y_n | f_n)]`` for each point of the batch, ``(B,)``."""
        m, v = self._marginals(X, Lzz)
        ell = self.likelihood.expected_log_prob(y, *self._lik_args(m, v))
        return ell.sum(-1) if ell.ndim > 1 else ell

    def kl_divergence(self, Lzz: torch.Tensor | None = None) -> torch.Tensor:
        """``sum_q KL[q(u_q) || p(u_q)]``."""
        return self.q.kl(self.prior_factor() if Lzz is None else Lzz, self._mean_z())

    def objective(self, X, y, num_data):
        """Minibatch estimate of the ELBO (scaled-target units)."""
        Lzz = self.prior_factor()
        ell = self.expected_log_lik(X, y, Lzz)
        return ell.sum() * (num_data / X.shape[0]) - self.q.kl(Lzz, self._mean_z())

    def elbo(self, X, y) -> float:
        """The full-data ELBO in the targets' original units (computed in chunks)."""
        self._require_built()
        Xt = self._check_X(X)
        yt = self._scale_y(self._check_y(y, Xt.shape[0]))
        with torch.no_grad():
            Lzz = self.prior_factor()
            total = 0.0
            for s in range(0, Xt.shape[0], 65536):
                total += float(
                    self.expected_log_lik(Xt[s : s + 65536], yt[s : s + 65536], Lzz).sum()
                )
            total -= float(self.q.kl(Lzz, self._mean_z()))
        return total - Xt.shape[0] * self._log_scale_sum()

    # ---------------------------------------------------------- q(u), read and set --
    def variational_distribution(self) -> tuple[Any, Any]:
        """q(u) as mean ``(Q, M)`` and covariance ``(Q, M, M)`` numpy arrays, over the
        inducing values ``u = f(Z)`` (whatever ``whiten`` is), in the units the model
        trains in: those of the standardised targets when the model standardises them
        (``y = y_mean + y_scale * f``), else the targets' own."""
        self._require_built()
        with torch.no_grad():
            m, S = self.q.distribution(self.prior_factor(), self.inducing_prior_mean())
        return m.detach().cpu().numpy(), S.detach().cpu().numpy()

    def set_variational_distribution(self, mean: Any, covariance: Any) -> None:
        """Set q(u) to ``N(mean, covariance)``: mean ``(Q, M)`` (or ``(M,)`` for one
        latent) and covariance ``(Q, M, M)`` (or ``(M, M)``), symmetric positive
        semi-definite, over the inducing values ``u = f(Z)`` at the current ``Z`` and
        kernel, in the units of :meth:`variational_distribution` (the inverse of it).

        With :attr:`Z`, the kernel's ``lengthscale``/``variance`` and the likelihood's
        parameters (e.g. ``likelihood.variance``) it sets every parameter, so that the
        model can be evaluated at given values (predictions, :meth:`elbo`) without
        training.  Set ``Z`` and the kernel first: with ``whiten=True`` q is stored
        relative to Kzz's Cholesky factor.  ``ValueError`` for a wrong shape, non-finite
        values, a covariance that is not symmetric positive semi-definite, or (for
        ``covariance="diag"``) one that is not diagonal in the stored parameterisation.
        """
        self._require_built()
        Q, M = self.q.num_latent, self.q.num_inducing
        m, S = check_mean_covariance(
            mean, covariance, num_latent=Q, size=M, name="q(u)", dtype=self.dtype_
        )
        with torch.no_grad():
            Lzz = self.prior_factor()
            mz = self.inducing_prior_mean()
        self.q.set_distribution(m.to(self.device_), S.to(self.device_), Lzz, mz)
        self.clear_prediction_cache()

    # ---------------------------------------------------------- optimal q (Gaussian) --
    def set_optimal_variational(self, X, y) -> None:
        """Set q(u) to its optimum for a Gaussian likelihood (Titsias), in O(N M^2).

        For whitened q with ``A = Lzz^{-1} Kzx``: ``Sigma = (I + A A^T / s^2)^{-1}`` and
        ``m = Sigma A y / s^2``; unwhitened values are mapped through ``Lzz``.
        """
        if not isinstance(self.likelihood, Gaussian):
            raise ValueError("the closed-form optimal q(u) exists only for a Gaussian likelihood")
        if self.covariance != "full":
            raise ValueError("the optimal q(u) needs covariance='full'")
        self._require_built()
        Xt = self._check_X(X)
        yt = self._scale_y(self._check_y(y, Xt.shape[0])).reshape(Xt.shape[0], -1)
        with torch.no_grad():
            Lzz = self.prior_factor()
            Q, M = Lzz.shape[0], Lzz.shape[-1]
            s2 = self.likelihood.variance
            P = torch.zeros(Q, M, M, dtype=self.dtype_, device=self.device_)
            b = torch.zeros(Q, M, 1, dtype=self.dtype_, device=self.device_)
            for s in range(0, Xt.shape[0], 65536):
                xc, yc = Xt[s : s + 65536], yt[s : s + 65536]
                mx = self.prior_mean_at(xc)
                if mx is not None:  # the GP of the deviation y - m(X)
                    yc = yc - mx
                A = solve_lower(Lzz, self.kernel(self.Z, xc))
                P += A @ A.mT
                b += A @ yc.expand(-1, Q).mT[..., None]
            Lam = torch.eye(M, dtype=self.dtype_, device=self.device_) + P / s2
            # eigenvalues >= 1 and Sigma's in (0, 1]: both factorise as they are (the
            # configured jitter would move the optimum by ~jitter * N / s^2)
            LL, _ = cholesky(Lam, "I + A A^T / s^2", jitter=0)
            mean = torch.cholesky_solve(b / s2, LL)[..., 0]  # (Q, M)
            eye = torch.eye(M, dtype=self.dtype_, device=self.device_)
            Sigma = torch.cholesky_solve(eye.expand(Q, M, M), LL)
            R, _ = cholesky(0.5 * (Sigma + Sigma.mT), "optimal S", jitter=0)
            if not self.whiten:
                mean = (Lzz @ mean[..., None])[..., 0]
                R = Lzz @ R  # a product of lower-triangular factors is lower triangular
                mz = self.inducing_prior_mean()
                if mz is not None:
                    mean = mean + mz
            self.q.q_mu.copy_(mean)
            self.q.q_sqrt_raw.copy_(R)

    # ------------------------------------------------------------------ new data --
    def condition_on(self, X_new: Any, y_new: Any) -> SVGP:
        """A new SVGP whose q(u) is also conditioned on ``(X_new, y_new)`` (Gaussian
        likelihood, full covariance), at the same hyperparameters and inducing inputs;
        this model is unchanged.

        Online variational conditioning (Maddox et al. 2021) for a Gaussian likelihood:
        q(u) is the prior of the new points' projected likelihood
        ``N(y_n | a_n^T v, s^2)`` (``v`` the whitened inducing values,
        ``A = Lzz^{-1} Kzx``), so with ``Sigma = S S^T`` and ``C = s^2 I + A^T Sigma A``

            m_new = m + Sigma A C^{-1} (y - A^T m),
            Sigma_new = Sigma - Sigma A C^{-1} A^T Sigma,

        ``O(M^2 k)`` per latent; no pass over the old data and no new optimisation.
        (Starting from ``N(0, I)`` with all the data this is the Titsias optimum of
        :meth:`set_optimal_variational`.)
        """
        if type(self.likelihood) is not Gaussian or self.covariance != "full":
            raise ValueError(
                "SVGP.condition_on needs a Gaussian likelihood and covariance='full' "
                f"(got {type(self.likelihood).__name__}, covariance={self.covariance!r})"
            )
        self._require_built()
        Xn = self._check_X(X_new, "X_new")
        Y = self._scale_y(self._check_y(y_new, Xn.shape[0], "y_new")).reshape(Xn.shape[0], -1)
        new = self.clone()
        with torch.no_grad():
            Lzz = self.prior_factor()
            A = solve_lower(Lzz, self.kernel(self.Z, Xn))  # (Q, M, k)
            m, S = self.q.q_mu[..., None], self.q.q_sqrt  # (Q, M, 1), (Q, M, M)
            mz, mx = self._mean_z(), self.prior_mean_at(Xn)
            if mz is not None:
                m = m - mz[..., None]
            if mx is not None:  # the GP of the deviation y - m(X)
                Y = Y - mx
            if not self.whiten:  # to whitened coordinates
                m, S = solve_lower(Lzz, m), solve_lower(Lzz, S)
            SA = S @ (S.mT @ A)  # Sigma A (Q, M, k)
            k = Xn.shape[0]
            C = A.mT @ SA + self.likelihood.variance * torch.eye(k, dtype=A.dtype, device=A.device)
            LC, _ = cholesky(0.5 * (C + C.mT), "s^2 I + A^T Sigma A", jitter=0.0)
            W = solve_lower(LC, SA.mT)  # LC^{-1} A^T Sigma (Q, k, M)
            r = solve_lower(LC, Y.mT[..., None] - A.mT @ m)  # (Q, k, 1)
            m = m + W.mT @ r
            Sigma = S @ S.mT - W.mT @ W
            R, _ = cholesky(0.5 * (Sigma + Sigma.mT), "conditioned q(u) covariance", jitter=0.0)
            if not self.whiten:
                m, R = Lzz @ m, Lzz @ R
            if mz is not None:
                m = m + mz[..., None]
            new.q.q_mu.copy_(m[..., 0])
            new.q.q_sqrt_raw.copy_(R)
        return new

    # ----------------------------------------------------------------- prediction --
    def _compute_cache(self):
        """The strategy's :class:`~latentgp.variational.PredictiveCache` (``O(M^3)``, once
        per parameter state)."""
        return gaussian_predictive_cache(self.q, self.prior_factor(), mean_z=self._mean_z())


class _FirstLatent:
    """View of a batched kernel as its first latent's kernel (for greedy initialisation)."""

    def __init__(self, kernel):
        self.k = kernel

    def __call__(self, X, Z):
        return self.k(X, Z)[0] if self.k(X[:1], Z[:1]).ndim == 3 else self.k(X, Z)

    def diag(self, X):
        d = self.k.diag(X)
        return d[0] if d.ndim == 2 else d

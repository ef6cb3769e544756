"""What the modulated GPs of seed 003 share.

* :class:`MixturePredictive`: every predictive of these models is (exactly, or up to a
  stated quadrature / Monte Carlo approximation) a per-point Gaussian mixture

      p(y* | x*) = sum_k w_k N(y* | m_k, v_k),

  so one representation ``_predictive_mixture(X) -> (log_w, m, v)``, each ``(B, K)`` in
  scaled-target units, gives the density, the log density, the moments, samples and
  quantiles (bisection on the mixture CDF), and the seed's KDE-over-samples NLL.
* :class:`ModulatedGP`: Q independent sparse GPs with a batched kernel (batch shape
  ``(Q,)``), inducing inputs ``(Q, M, D)``, and a whitened full-covariance
  :class:`~latentgp.variational.GaussianVariational`; ``latent_marginals`` returns the
  SVGP marginals ``(B, Q)`` of all Q GPs from one batched Cholesky.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ...config import get_config
from ...inducing import initial_inducing
from ...kde import kde_log_density, rule_bandwidth
from ...kernels import Kernel
from ...validation import check_positive_int
from ...variational import GaussianVariational, gaussian_marginals
from ..base import GPModel
from ..inducing_inputs import InducingInputs
from ..predict import chunked, mixture_cdf, mixture_log_density, mixture_moments, unscale_moments


def modulated_fit_defaults(N: int) -> dict[str, Any]:
    """The fit defaults of every modulated model on ``N`` points.  Adam at lr 0.005 on
    these objectives (two or more coupled GPs, one of them in a non-conjugate likelihood)
    needs more than the usual 3,000-step ceiling floor on small data: mcycle's 93 rows
    take about 9,000 full-batch steps (``docs/results/defaults.md``).  SHGP and SVHGP add
    SVGP's full-batch L-BFGS for a fit that names no optimiser, learning rate, batch size
    or budget on small data (:meth:`latentgp.SVGP.full_batch_default`)."""
    return {"optimizer": "adam", "lr": 0.005, "batch_size": min(N, 512),
            "ceiling": {"floor": 12000}}


class MixturePredictive:
    """Mixin: predictive functions from ``_predictive_mixture`` (see module docstring).

    The host class is a :class:`~latentgp.models.base.GPModel` with one output column;
    it implements ``_predictive_mixture(X, cache) -> (log_w, mean, var)`` ``(B, K)`` each,
    in scaled-target units.  Everything returned here is in the targets' original units.
    """

    def _predictive_mixture(self, X: torch.Tensor, cache: Any):
        """The mixture at a chunk: the likelihood's predictive mixture of the latent
        marginals (models whose predictive is not of that form override this)."""
        return self.likelihood.predictive_mixture(*self._predict_f_chunk(X, cache))

    def predict_latent(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """Marginals ``(N, Q)`` of every latent GP at ``X``, in the model's internal
        (scaled) units."""
        self._require_built()
        m, v = self._latent_raw(self._check_X(X))
        return m.cpu().numpy(), v.cpu().numpy()

    def predict_f(self, X: Any, chunk_size: int | None = None, as_numpy: bool = True):
        raise NotImplementedError(
            f"{type(self).__name__} is not 'one latent + likelihood'; use predict_latent "
            "(marginals of every latent GP) or predict_y / predict_density"
        )

    def _mixture(self, Xt: torch.Tensor, chunk_size: int | None = None):
        """Mixture of all rows of ``Xt``, in original units: three ``(N, K)`` tensors."""
        cache = self.prediction_cache()
        rows = self.prediction_chunk_rows(chunk_size)
        log_w, m, v = chunked(lambda xc: self._predictive_mixture(xc, cache), Xt, rows=rows)
        if self._uses_scaling():
            m, v = unscale_moments(m, v, self.y_scale[:1], self.y_mean[:1])
        return log_w, m, v

    def _single_output(self) -> None:
        if self.output_dim not in (None, 1):
            raise ValueError(
                f"{type(self).__name__} with {self.output_dim} outputs has no per-point 1-D "
                "predictive mixture; use log_predictive_density or predict_samples"
            )

    def predictive_mixture(self, X: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The predictive mixture at ``X`` ``(N, D)``: weights, means, variances ``(N, K)``."""
        self._require_built()
        self._single_output()
        log_w, m, v = self._mixture(self._check_X(X))
        return log_w.exp().cpu().numpy(), m.cpu().numpy(), v.cpu().numpy()

    def predict_y(self, X: Any, chunk_size: int | None = None, as_numpy: bool = True):
        """Predictive mean and variance ``(N,)`` of y at ``X`` (moments of the mixture)."""
        self._require_built()
        self._single_output()
        log_w, mean, var = self._mixture(self._check_X(X), chunk_size)
        m, v = mixture_moments(log_w.exp(), mean, var)
        return self._to_output(m, as_numpy), self._to_output(v, as_numpy)

    def log_predictive_density(
        self, X: Any, y: Any, chunk_size: int | None = None, as_numpy: bool = True
    ):
        """``log p(y_n | x_n)`` ``(N,)`` under the predictive mixture (original units)."""
        self._require_built()
        self._single_output()
        Xt = self._check_X(X)
        yt = self._check_y(y, Xt.shape[0])
        out = mixture_log_density(yt, *self._mixture(Xt, chunk_size))
        return self._to_output(out, as_numpy)

    def predict_density(self, X: Any, y_grid: Any, log: bool = False) -> np.ndarray:
        """Predictive density on a grid: ``(N, G)`` for ``X`` ``(N, D)``, ``y_grid`` ``(G,)``.

        Meant for plots of p(y | x) over 1-D inputs (density heat maps).
        """
        self._require_built()
        self._single_output()
        g = np.asarray(y_grid, dtype=np.float64)
        if g.ndim != 1 or g.size == 0 or not np.isfinite(g).all():
            raise ValueError(f"y_grid must be a non-empty finite 1-D array, got shape {g.shape}")
        log_w, m, v = self._mixture(self._check_X(X))
        gt = torch.as_tensor(g, dtype=m.dtype, device=m.device)
        out = mixture_log_density(gt[:, None].expand(-1, m.shape[0]), log_w, m, v).mT
        out = out if log else out.exp()
        return out.cpu().numpy()

    def predict_samples(self, X: Any, num_samples: int = 200, seed: int | None = 0) -> np.ndarray:
        """``num_samples`` draws of y per input: ``(S, N)`` (``(S, N, P)`` for P outputs)."""
        self._require_built()
        S = check_positive_int(num_samples, "num_samples")
        Xt = self._check_X(X)
        gen = torch.Generator(device="cpu")
        gen.manual_seed(0 if seed is None else int(seed))
        log_w, m, v = self._mixture(Xt)
        k = torch.multinomial(log_w.exp().cpu(), S, replacement=True, generator=gen).mT
        k = k.to(m.device)  # (S, N)
        mk = m.gather(1, k.mT).mT
        vk = v.gather(1, k.mT).mT
        eps = torch.randn(mk.shape, generator=gen, dtype=m.dtype).to(m.device)
        return (mk + vk.sqrt() * eps).cpu().numpy()

    def predict_quantiles(self, X: Any, quantiles=(0.025, 0.5, 0.975)) -> np.ndarray:
        """Predictive quantiles ``(len(quantiles), N)``, by bisection on the mixture CDF."""
        self._require_built()
        self._single_output()
        q = np.atleast_1d(np.asarray(quantiles, dtype=np.float64))
        if q.ndim != 1 or not np.all((q > 0) & (q < 1)):
            raise ValueError(f"quantiles must lie strictly between 0 and 1, got {quantiles!r}")
        log_w, m, v = self._mixture(self._check_X(X))
        sd = v.sqrt()
        lo = (m - 12 * sd).min(-1).values.expand(len(q), -1).clone()
        hi = (m + 12 * sd).max(-1).values.expand(len(q), -1).clone()
        qt = torch.as_tensor(q, dtype=m.dtype, device=m.device)[:, None]
        for _ in range(80):
            mid = 0.5 * (lo + hi)
            below = mixture_cdf(mid, log_w, m, v) < qt
            lo = torch.where(below, mid, lo)
            hi = torch.where(below, hi, mid)
        return (0.5 * (lo + hi)).cpu().numpy()

    def nlpd_kde(
        self,
        X: Any,
        y: Any,
        num_samples: int = 200,
        bandwidth: str | float = "silverman",
        seed: int | None = 0,
    ) -> float:
        """The seed-003 test NLL: Gaussian KDE over ``num_samples`` predictive draws per point.

        Bandwidth per point by Silverman's 1-D rule ``h = sd (3 S / 4)^(-1/5)`` unless given
        (see :func:`latentgp.kde.kde_bandwidth`; the robust variant
        ``0.9 min(sd, IQR/1.34) S^(-1/5)`` undersmooths the tails of multi-modal
        predictives).  Original target units.
        """
        samples = self.predict_samples(X, num_samples, seed)
        yt = self._check_y(y, samples.shape[1]).cpu().numpy()
        if isinstance(bandwidth, str):
            h = rule_bandwidth(samples, bandwidth)
        elif isinstance(bandwidth, (int, float)) and bandwidth > 0:
            h = np.full(yt.shape, float(bandwidth))
        else:
            raise ValueError(
                f"bandwidth must be a rule name or a positive number, got {bandwidth!r}"
            )
        return float(-np.mean(kde_log_density(yt, samples, h)))


class ModulatedGP(InducingInputs, MixturePredictive, GPModel):
    """Q independent sparse GPs (whitened, full-covariance q(u)) over the same inputs.

    Subclasses say how many GPs they need (``_num_gps``) and what they mean.
    """

    default_optimizer = "adam"
    default_lr = 0.005
    #: SLGP's conditional over latent inputs is for zero-mean GPs (no ``mean=``)
    supports_mean = False

    def __init__(
        self,
        num_inducing: int = 100,
        kernel: str | Kernel | None = "rbf",
        likelihood: Any = "gaussian",
        normalize_y: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(kernel, likelihood, normalize_y, device, dtype)
        self.num_inducing = check_positive_int(num_inducing, "num_inducing")

    def _num_gps(self) -> int:
        raise NotImplementedError

    def _gp_input_dim(self, input_dim: int) -> int:
        return input_dim

    def _default_fit_args(self, N):
        return modulated_fit_defaults(N)

    def _build(self, input_dim: int, output_dim: int) -> None:
        if output_dim != 1:
            raise ValueError(
                f"{type(self).__name__} models one target column; y has {output_dim} columns"
            )
        GPModel._build(self, input_dim, output_dim)
        Q, M, D = self._num_gps(), self.num_inducing, self._gp_input_dim(input_dim)
        self.kernel.build(D, (Q,), self.dtype_, self.device_)
        self._build_inducing((Q, M, D))
        self.q = GaussianVariational(Q, M, "full", whiten=True, dtype=self.dtype_)

    def _validate_sizes(self, N: int) -> None:
        if self.num_inducing > N:
            raise ValueError(
                f"num_inducing={self.num_inducing} is larger than the {N} training points"
            )

    def _init_from_data(self, X, y):
        self.kernel.init_from_data(X)
        with torch.no_grad():
            Z = initial_inducing(X, self.num_inducing, "kmeans")
            self._set_input_unit(X)
            self.Z = Z


    def latent_marginals(self, X: torch.Tensor, Lzz: torch.Tensor):
        """SVGP marginals of all Q GPs at ``X`` ``(B, D)``: mean, var ``(B, Q)``."""
        mean, var = gaussian_marginals(self.q, self.kernel(self.Z, X), self.kernel.diag(X), Lzz)
        return mean.mT, var.mT

    def _compute_cache(self):
        return self.prior_factor()

    def _predict_f_chunk(self, X, Lzz):
        return self.latent_marginals(X, Lzz)

    def get_config(self):
        cfg = GPModel.get_config(self)
        cfg["num_inducing"] = self.num_inducing
        return cfg


def gauss_hermite_nodes(n: int | None, like: torch.Tensor):
    """Gauss-Hermite nodes/weights for N(0,1), matched to ``like``'s dtype and device."""
    from ...likelihoods import gauss_hermite

    return gauss_hermite(n or max(get_config().num_gauss_hermite, 32), like.dtype, like.device)

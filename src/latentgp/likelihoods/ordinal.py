"""Ordinal regression: ordered labels ``y in {0, ..., K - 1}`` by cumulative probit.

``p(y = k | f) = Phi(b_k - f) - Phi(b_{k-1} - f)`` with cut-points
``b_{-1} = -inf < b_0 < ... < b_{K-2} < b_{K-1} = +inf`` (Chu & Ghahramani 2005; the noise
scale is 1, the kernel's variance sets the scale of f).  The cut-points are learned: the
first as it is, the others as positive increments.  Under ``q(f) = N(m, v)`` the class
probabilities are closed form, ``Phi((b_k - m) / sqrt(1 + v)) - Phi((b_{k-1} - m) /
sqrt(1 + v))``, and so is the predictive log density; the expected log-likelihood goes
through the base class's Gauss-Hermite quadrature.
"""

from __future__ import annotations

import torch
from torch.special import log_ndtr, ndtr

from ..parameters import inv_softplus, softplus
from .base import Likelihood, register

#: the outer cut-points b_{-1} = -OUTER and b_{K-1} = OUTER
OUTER = 1e4


def _log_diff_ndtr(hi: torch.Tensor, lo: torch.Tensor) -> torch.Tensor:
    """``log(Phi(hi) - Phi(lo))`` for ``hi > lo``, stable in both tails (by symmetry,
    the difference is taken where both arguments are on the same side of zero)."""
    flip = lo > 0
    a = torch.where(flip, -lo, hi)  # Phi(hi) - Phi(lo) = Phi(-lo) - Phi(-hi)
    b = torch.where(flip, -hi, lo)
    log_a, log_b = log_ndtr(a), log_ndtr(b)
    return log_a + torch.log1p(-torch.exp(log_b - log_a).clamp_max(1.0 - 1e-16))


@register("ordinal", "cumulativeprobit")
class Ordinal(Likelihood):
    """Cumulative-probit likelihood for ``num_classes`` ordered labels.

    Parameters
    ----------
    num_classes: K (None: from the training labels, their maximum + 1).
    cutpoints: initial ``b_0 < ... < b_{K-2}`` (default: spaced by 1, centred at 0).
    """

    task = "ordinal"

    def __init__(self, num_classes: int | None = None, cutpoints=None) -> None:
        super().__init__()
        if num_classes is not None and (not isinstance(num_classes, int) or num_classes < 2):
            raise ValueError(f"Ordinal num_classes must be an integer >= 2, got {num_classes!r}")
        self._init_cutpoints = None if cutpoints is None else [float(c) for c in cutpoints]
        if self._init_cutpoints is not None:
            c = self._init_cutpoints
            if any(b <= a for a, b in zip(c, c[1:], strict=False)):
                raise ValueError(f"Ordinal cutpoints must increase strictly, got {c}")
            if num_classes is not None and len(c) != num_classes - 1:
                raise ValueError(
                    f"Ordinal with {num_classes} classes needs {num_classes - 1} cutpoints, "
                    f"got {len(c)}"
                )
            num_classes = len(c) + 1
        self.num_classes = num_classes
        if num_classes is not None:
            self._build()

    def _build(self) -> None:
        K = self.num_classes
        c = self._init_cutpoints or [k - (K - 2) / 2.0 for k in range(K - 1)]
        c = torch.tensor(c, dtype=torch.float64)
        self.first_cutpoint = torch.nn.Parameter(c[:1].clone())
        self.raw_gaps = torch.nn.Parameter(inv_softplus(c[1:] - c[:-1]).reshape(-1))

    def adapt_to_targets(self, y: torch.Tensor) -> None:
        if self.num_classes is None:
            self.num_classes = max(2, int(y.max()) + 1)
            self._build()

    def validate_targets(self, y, name="y"):
        K = self.num_classes
        bad = (y < 0) | (y != torch.round(y))
        if K is not None:
            bad = bad | (y > K - 1)
        if bool(bad.any()):
            i = int(torch.nonzero(bad.reshape(-1))[0, 0])
            top = "K - 1" if K is None else str(K - 1)
            raise ValueError(
                f"{name} must hold ordered integer labels 0..{top} for an ordinal likelihood; "
                f"found {y.reshape(-1)[i].item():g} at row {i}"
            )
        return y

    def cutpoints(self) -> torch.Tensor:
        """``(K - 1,)`` increasing cut-points ``b_0 < ... < b_{K-2}``."""
        gaps = softplus(self.raw_gaps)
        return torch.cat([self.first_cutpoint, self.first_cutpoint + torch.cumsum(gaps, 0)])

    def _bounds(self, y: torch.Tensor, f: torch.Tensor, scale=1.0):
        """``((b_y - f) / scale, (b_{y-1} - f) / scale)`` with the outer cut-points at
        ``-+OUTER`` (Phi is 0 / 1 there to double precision, and unlike infinities they
        give finite gradients)."""
        b = self.cutpoints().to(f)
        inf = torch.full((1,), OUTER, dtype=f.dtype, device=f.device)
        edges = torch.cat([-inf, b, inf])
        k = y.to(torch.long)
        return (edges[k + 1] - f) / scale, (edges[k] - f) / scale

    def log_prob(self, y, f):
        hi, lo = self._bounds(y, f)
        return _log_diff_ndtr(hi, lo)

    def predictive_log_density(self, y, mean, var, num_samples: int = 1000):
        hi, lo = self._bounds(y, mean, torch.sqrt(1.0 + var))
        return _log_diff_ndtr(hi, lo)

    def class_probabilities(self, mean: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
        """``(N, K)`` predictive class probabilities under ``q(f) = N(mean, var)`` (tensors
        or arrays, e.g. what ``predict_f`` returns)."""
        b = self.cutpoints()
        mean = torch.as_tensor(mean, dtype=b.dtype, device=b.device)
        var = torch.as_tensor(var, dtype=b.dtype, device=b.device)
        cdf = ndtr((b - mean[..., None]) / torch.sqrt(1.0 + var)[..., None])  # (N, K - 1)
        ones = torch.ones_like(cdf[..., :1])
        return torch.diff(torch.cat([torch.zeros_like(ones), cdf, ones], -1), dim=-1)

    def conditional_mean(self, f):
        """``E[y | f] = sum_k k p(y = k | f)`` (the expected label)."""
        return self._label_moments(f, torch.zeros_like(f))[0]

    def conditional_variance(self, f):
        return self._label_moments(f, torch.zeros_like(f))[1]

    def _label_moments(self, mean, var):
        p = self.class_probabilities(mean, var)
        k = torch.arange(p.shape[-1], dtype=p.dtype, device=p.device)
        m = (p * k).sum(-1)
        return m, (p * k.square()).sum(-1) - m.square()

    def predictive_moments(self, mean, var):
        return self._label_moments(mean, var)

    def sample_y(self, f):
        u = torch.rand(f.shape, dtype=f.dtype, device=f.device)
        p = self.class_probabilities(f, torch.zeros_like(f))
        return (torch.cumsum(p, -1) < u[..., None]).sum(-1).to(f.dtype)

    def _config_args(self):
        cut = None if self.num_classes is None else self.cutpoints().detach().tolist()
        return {"num_classes": self.num_classes, "cutpoints": cut if cut else None}

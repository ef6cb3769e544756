"""A user-written black-box likelihood: the seismic-inversion forward model of SAVIGP §9.8.

At each surface site n there are P = 4 layers with depths ``d_n1 < .. < d_n4`` (m) and
velocities ``v_n1..v_n4`` (m/s), given by Q = 2P latent functions
``f = [d_1..d_4, v_1..v_4]``.  The observed two-way reflection times (s) are

    y_n1 = 2 d_n1 / v_n1 + eps_n1
    y_np = 2 (d_np - d_n,p-1) / v_np + y_n,p-1 + eps_np,       1 < p <= P

i.e. noise-free times ``t_np = sum_{i<=p} 2 (d_ni - d_n,i-1) / v_ni`` (``d_n0 = 0``) with
``eps_np ~ N(0, sigma_p^2)``, ``sigma = 0.025, 0.05, 0.075, 0.1`` s.

Two versions of the same likelihood:

* :func:`seismic_log_lik_numpy`: a plain numpy function, no torch at all.  SAVIGP trains
  with it through the score-function estimator (no gradient of the likelihood needed).
* :class:`SeismicLikelihood`: the same model as a torch :class:`latentgp.likelihoods.
  Likelihood` (differentiable, so the reparameterisation estimator can be used).

Prior (the paper's): mean depths 200, 500, 1600, 2200 m and velocities 1950, 2300, 2750,
3650 m/s, standard deviations 15% (depths) and 10% (velocities) of the means.
"""

from __future__ import annotations

import numpy as np
import torch

from latentgp.likelihoods import Likelihood

NOISE_STD = (0.025, 0.05, 0.075, 0.1)
DEPTH_MEANS = (200.0, 500.0, 1600.0, 2200.0)
VELOCITY_MEANS = (1950.0, 2300.0, 2750.0, 3650.0)
PRIOR_MEAN = list(DEPTH_MEANS) + list(VELOCITY_MEANS)
PRIOR_STD = [0.15 * d for d in DEPTH_MEANS] + [0.10 * v for v in VELOCITY_MEANS]
PRIOR_VARIANCE = [s * s for s in PRIOR_STD]


def travel_times_numpy(f: np.ndarray) -> np.ndarray:
    """Noise-free reflection times ``(..., N, 4)`` from latents ``f`` ``(..., N, 8)``."""
    d, v = f[..., :4], f[..., 4:]
    thickness = np.diff(d, axis=-1, prepend=0.0)
    return np.cumsum(2.0 * thickness / v, axis=-1)


def seismic_log_lik_numpy(y: np.ndarray, f: np.ndarray) -> np.ndarray:
    """``log p(y_n | f_n)`` for ``y`` ``(N, 4)`` and ``f`` ``(..., N, 8)``; numpy only."""
    s = np.asarray(NOISE_STD)
    r = (y - travel_times_numpy(f)) / s
    return (-0.5 * r**2 - np.log(s) - 0.5 * np.log(2.0 * np.pi)).sum(-1)


class SeismicLikelihood(Likelihood):
    """The forward model as a torch likelihood (``latent_dim = 8``, targets ``(N, 4)``)."""

    latent_dim = 8
    num_outputs = 4
    task = "regression"

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("noise_std", torch.tensor(NOISE_STD, dtype=torch.float64))

    def travel_times(self, f: torch.Tensor) -> torch.Tensor:
        d, v = f[..., :4], f[..., 4:]
        thickness = torch.diff(d, dim=-1, prepend=torch.zeros_like(d[..., :1]))
        return torch.cumsum(2.0 * thickness / v, dim=-1)

    def log_prob(self, y, f):
        s = self.noise_std.to(f)
        r = (y - self.travel_times(f)) / s
        return (-0.5 * r.square() - s.log() - 0.5 * np.log(2.0 * np.pi)).sum(-1)

    def validate_targets(self, y, name="y"):
        if y.ndim != 2 or y.shape[1] != 4:
            raise ValueError(f"{name} must have shape (N, 4) reflection times")
        return y

    def conditional_mean(self, f):
        return self.travel_times(f)

    def conditional_variance(self, f):
        return self.noise_std.to(f).square().expand(f.shape[:-1] + (4,))

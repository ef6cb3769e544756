"""Student-t likelihood: heavy-tailed regression noise, expectations by quadrature."""

from __future__ import annotations

import math

import torch

from ..parameters import assign_positive, positive_parameter, softplus
from .base import Likelihood, register


@register("studentt", "t")
class StudentT(Likelihood):
    """``y = f + scale * t_df``.

    Parameters
    ----------
    df: degrees of freedom (fixed unless ``learn_df``); scale: initial noise scale.
    """

    scale_family = True

    def __init__(self, df: float = 4.0, scale: float = 0.3, learn_df: bool = False) -> None:
        super().__init__()
        if not df > 0:
            raise ValueError(f"StudentT df must be positive, got {df}")
        if not (math.isfinite(float(scale)) and float(scale) > 0):
            raise ValueError(f"StudentT scale must be a positive finite number, got {scale!r}")
        self._init = (float(df), float(scale), bool(learn_df))
        self.raw_scale = positive_parameter(scale, (), torch.float64)
        raw_df = positive_parameter(df, (), torch.float64)
        if learn_df:
            self.raw_df = raw_df
        else:
            self.register_buffer("raw_df", raw_df.detach())

    @property
    def scale(self):
        """The scale; assign ``likelihood.scale = value`` to set it."""
        return softplus(self.raw_scale)

    @scale.setter
    def scale(self, value) -> None:
        assign_positive(self.raw_scale, value, "StudentT scale")

    @property
    def df(self):
        """The degrees of freedom; assign ``likelihood.df = value`` to set them."""
        return softplus(self.raw_df)

    @df.setter
    def df(self, value) -> None:
        assign_positive(self.raw_df, value, "StudentT df")

    def log_prob(self, y, f):
        nu, s = self.df, self.scale
        z = (y - f) / s
        return (
            torch.lgamma((nu + 1) / 2)
            - torch.lgamma(nu / 2)
            - 0.5 * torch.log(nu * math.pi)
            - torch.log(s)
            - (nu + 1) / 2 * torch.log1p(z * z / nu)
        )

    def conditional_mean(self, f):
        return f

    def conditional_variance(self, f):
        nu = self.df
        if float(nu) <= 2:
            return torch.full_like(f, float("inf"))
        return (self.scale**2 * nu / (nu - 2)).expand_as(f)

    def predictive_moments(self, mean, var):
        return mean, var + self.conditional_variance(mean)

    def sample_y(self, f):
        t = torch.distributions.StudentT(self.df).sample(f.shape).to(f)
        return f + self.scale * t

    def _config_args(self):
        df, scale, learn_df = self._init
        return {"df": df, "scale": scale, "learn_df": learn_df}

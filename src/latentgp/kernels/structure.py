"""Kernels that give a covariance structure: change-points and task (coregionalisation)
covariances.

- :class:`ChangePoint`: ``k = s(x) k_1(x, z) s(z) + (1 - s(x)) k_2(x, z) (1 - s(z))`` with
  the sigmoid ``s(x) = sigma(steepness (location - x_d))`` along one input column: the
  function follows ``k_1`` before the change and ``k_2`` after it.
- :class:`Coregion`: the index kernel ``B[i, j]`` with ``B = W W^T + diag(kappa)``
  (``W`` ``(P, rank)``) on a column of integer task labels ``0 .. P-1``; combined with an
  input kernel by a product and active dimensions (``RBF().on([0]) *
  Coregion(num_tasks=2).on([1])``) it is the intrinsic coregionalisation model, where each
  observation names its task and absent outputs are simply absent rows.
"""

from __future__ import annotations

import torch
from torch import nn

from ..parameters import inv_softplus, positive_parameter, softplus
from .base import Kernel, register


@register("changepoint")
class ChangePoint(Kernel):
    """Two kernels joined smoothly at ``location`` along input column ``dim``.

    Parameters
    ----------
    kernels: ``[k_1, k_2]`` (before, after).
    location: initial change location (None: the median of the column at the first fit).
    steepness: initial steepness of the sigmoid (in inverse input units), learned.
    dim: the input column the change is along.
    """

    def __init__(self, kernels, location: float | None = None, steepness: float = 1.0,
                 dim: int = 0) -> None:
        super().__init__()
        kernels = list(kernels)
        if len(kernels) != 2 or not all(isinstance(k, Kernel) for k in kernels):
            raise ValueError("ChangePoint takes kernels=[k_before, k_after], two latentgp kernels")
        if not (isinstance(steepness, (int, float)) and steepness > 0):
            raise ValueError(f"ChangePoint steepness must be positive, got {steepness!r}")
        if not (isinstance(dim, int) and dim >= 0):
            raise ValueError(f"ChangePoint dim must be a column index >= 0, got {dim!r}")
        self.kernels = nn.ModuleList(kernels)
        self.dim = dim
        self._init = (None if location is None else float(location), float(steepness))

    def build(self, input_dim, batch_shape=(), dtype=torch.float64, device=None):  # noqa: D102
        if self.dim >= input_dim:
            raise ValueError(f"ChangePoint dim={self.dim}, but the data have {input_dim} columns")
        for k in self.kernels:
            k.build(input_dim, batch_shape, dtype, device)
        if not self.built:
            self.input_dim, self.batch_shape = int(input_dim), tuple(batch_shape)
            loc, steep = self._init
            self.location = nn.Parameter(
                torch.full(self.batch_shape, 0.0 if loc is None else loc, dtype=dtype,
                           device=device)
            )
            self.raw_steepness = positive_parameter(steep, self.batch_shape, dtype, device)
        return self

    def init_from_data(self, X):  # noqa: D102
        for k in self.kernels:
            k.init_from_data(X)
        if self._init[0] is None:
            with torch.no_grad():
                self.location.fill_(float(X[:, self.dim].median()))

    @property
    def steepness(self) -> torch.Tensor:
        return softplus(self.raw_steepness)

    def _sigmoid(self, X) -> torch.Tensor:
        """``(*batch, N)`` weight of the first kernel at each row."""
        x = X[..., self.dim]
        return torch.sigmoid(self.steepness[..., None] * (self.location[..., None] - x))

    def forward(self, X, Z=None):  # noqa: D102
        sx = self._sigmoid(X)
        sz = sx if Z is None else self._sigmoid(Z)
        k1, k2 = self.kernels[0](X, Z), self.kernels[1](X, Z)
        return sx[..., :, None] * k1 * sz[..., None, :] + (
            (1 - sx)[..., :, None] * k2 * (1 - sz)[..., None, :]
        )

    def diag(self, X):  # noqa: D102
        s = self._sigmoid(X)
        return s.square() * self.kernels[0].diag(X) + (1 - s).square() * self.kernels[1].diag(X)

    def _config_args(self):
        loc, steep = self._init
        return {"kernels": [k.to_config() for k in self.kernels], "location": loc,
                "steepness": steep, "dim": self.dim}


@register("coregion", "index")
class Coregion(Kernel):
    """Index kernel ``B[i, j]``, ``B = W W^T + diag(kappa)``, on one column of task labels
    ``0 .. num_tasks - 1`` (use ``.on([column])`` to pick it out of the inputs).

    ``W`` ``(*batch, P, rank)`` starts small and random-free (``0.1`` everywhere) and
    ``kappa`` at 1, so ``B`` starts near the identity: tasks independent until the data
    say otherwise.
    """

    def __init__(self, num_tasks: int, rank: int = 1) -> None:
        super().__init__()
        if not (isinstance(num_tasks, int) and num_tasks >= 1):
            raise ValueError(f"Coregion num_tasks must be an integer >= 1, got {num_tasks!r}")
        if not (isinstance(rank, int) and rank >= 1):
            raise ValueError(f"Coregion rank must be an integer >= 1, got {rank!r}")
        self.num_tasks, self.rank = num_tasks, rank

    def _build(self, dtype, device):
        if self.input_dim != 1:
            raise ValueError(
                f"Coregion takes one column of task labels, got {self.input_dim} columns; "
                "select it with .on([column])"
            )
        P, R = self.num_tasks, self.rank
        self.W = nn.Parameter(torch.full(self.batch_shape + (P, R), 0.1, dtype=dtype,
                                         device=device))
        self.raw_kappa = nn.Parameter(
            inv_softplus(1.0).to(dtype=dtype, device=device).expand(
                *self.batch_shape, P).clone()
        )

    @property
    def kappa(self) -> torch.Tensor:
        return softplus(self.raw_kappa)

    def task_covariance(self) -> torch.Tensor:
        """``B`` ``(*batch, P, P)``."""
        return self.W @ self.W.mT + torch.diag_embed(self.kappa)

    def _labels(self, X) -> torch.Tensor:
        t = X[..., 0]
        labels = torch.round(t).to(torch.long)
        if bool(((t != labels) | (labels < 0) | (labels >= self.num_tasks)).any()):
            raise ValueError(
                f"the task column must hold integer labels 0..{self.num_tasks - 1}, "
                f"got values in [{float(t.min()):g}, {float(t.max()):g}]"
            )
        return labels

    def forward(self, X, Z=None):
        self._check_built()
        B = self.task_covariance()
        i = self._labels(X)
        j = i if Z is None else self._labels(Z)
        return B[..., i, :][..., :, j]

    def diag(self, X):
        self._check_built()
        B = self.task_covariance()
        d = torch.diagonal(B, dim1=-2, dim2=-1)
        return d[..., self._labels(X)]

    def _config_args(self):
        return {"num_tasks": self.num_tasks, "rank": self.rank}

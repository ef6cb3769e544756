"""Stationary kernels: squared exponential (RBF) and Matérn 1/2, 3/2, 5/2, with ARD.

All share the scaled squared distance
``r^2(x, z) = sum_d (x_d - z_d)^2 / l_d^2``
computed with one matrix product, ``|x|^2 - 2 x.z + |z|^2`` (clamped at zero), on
inputs centred first to limit cancellation.  The centre is the coordinate-wise median of
the rows of both arguments, held constant for autograd (the distance does not depend on
it): a mean would let one far-away row (a test point at 1e17) move the centre of a whole
prediction chunk and wipe out the precision of every other row's distances.
"""

from __future__ import annotations

import math

import torch

from ..parameters import (
    assign_positive,
    check_positive_values,
    column_unit,
    inv_softplus,
    positive_parameter,
    softplus,
)
from .base import Kernel, exp_floor, floored_exp, into, register

#: rows of each argument that the centre's median looks at (evenly strided)
_CENTRE_ROWS = 1024


def centre(Xs: torch.Tensor, Zs: torch.Tensor | None = None) -> torch.Tensor:
    """Centre ``(*batch, 1, D)`` for the distance form: the coordinate-wise median of the
    rows of ``Xs`` ``(..., N, D)`` and ``Zs`` ``(..., M, D)``, detached.

    Any point works in exact arithmetic; the median stays among the bulk of the rows, so
    a minority of extreme rows costs precision only in their own (negligible) kernel
    values, never in the other rows'.  It is taken over at most ``_CENTRE_ROWS`` evenly
    strided rows of each argument, so its cost stays far below the distance product's.
    """
    with torch.no_grad():
        rows = [
            A[..., :: max(1, -(-A.shape[-2] // _CENTRE_ROWS)), :]
            for A in (Xs, Zs)
            if A is not None and A.shape[-2] > 0
        ]
        if not rows:  # no rows at all: nothing to centre
            return torch.zeros_like(Xs[..., :1, :])
        if len(rows) == 2:
            batch = torch.broadcast_shapes(rows[0].shape[:-2], rows[1].shape[:-2])
            rows = [A.expand(*batch, *A.shape[-2:]) for A in rows]
        return torch.cat(rows, -2).median(-2, keepdim=True).values


def _sqdist(Xs: torch.Tensor, Zs: torch.Tensor, z2: torch.Tensor | None = None):
    """``|x - z|^2`` ``(..., N, M)`` of centred rows ``Xs`` ``(..., N, D)``, ``Zs``
    ``(..., M, D)`` by one product, clamped at zero (``z2``: ``|z|^2`` when known)."""
    x2 = (Xs * Xs).sum(-1)
    if z2 is None:  # one node for both sides when Zs is Xs (the gradients sum as before)
        z2 = x2 if Zs is Xs else (Zs * Zs).sum(-1)
    return (x2[..., :, None] + z2[..., None, :] - 2.0 * Xs @ Zs.mT).clamp_min(0.0)


def scaled_sqdist(X: torch.Tensor, Z: torch.Tensor | None, lengthscale: torch.Tensor):
    """Squared distance between rows of ``X/l`` and ``Z/l``.

    Parameters
    ----------
    X: ``(..., N, D)``; Z: ``(..., M, D)`` or None (then Z = X, exact zeros on the diagonal).
    lengthscale: ``(*batch, D)``.

    Returns
    -------
    ``(..., N, M)`` non-negative tensor.
    """
    ls = lengthscale[..., None, :]
    Xs = X / ls
    if Z is None:
        Xs = Xs - centre(Xs)
        d = _sqdist(Xs, Xs)  # a fresh tensor (clamp_min keeps its input, not d)
        d.diagonal(dim1=-2, dim2=-1).zero_()
        return d
    Zs = Z / ls
    c = centre(Xs, Zs)
    return _sqdist(Xs - c, Zs - c)


class Stationary(Kernel):
    """Base for ``k(x, z) = variance * g(r)`` with ARD lengthscales.

    Parameters
    ----------
    lengthscale:
        Initial lengthscale(s); None picks ``sqrt(D) * std`` of each input column at the
        first fit.
    variance:
        Initial signal variance.
    ard:
        One lengthscale per input dimension (True) or one shared (False).
    """

    def __init__(
        self,
        lengthscale: float | list[float] | None = None,
        variance: float = 1.0,
        ard: bool = True,
    ) -> None:
        super().__init__()
        name = type(self).__name__
        if lengthscale is not None:
            check_positive_values(lengthscale, f"{name} lengthscale")
        check_positive_values(variance, f"{name} variance")
        self._init_lengthscale = lengthscale
        self._init_variance = float(variance)
        self.ard = bool(ard)

    def _build(self, dtype, device):
        D = self.input_dim if self.ard else 1
        ls = 1.0 if self._init_lengthscale is None else self._init_lengthscale
        ls_t = torch.as_tensor(ls, dtype=torch.float64)
        if ls_t.numel() not in (1, D):
            raise ValueError(f"lengthscale has {ls_t.numel()} values but the kernel needs 1 or {D}")
        # lengthscale = softplus(raw_lengthscale) * input_unit; the unit is the spread of
        # each input column, set by init_from_data (1 until then)
        self.register_buffer("input_unit", torch.ones(D, dtype=dtype, device=device))
        self.raw_lengthscale = torch.nn.Parameter(
            inv_softplus(ls_t).to(dtype=dtype, device=device).expand(*self.batch_shape, D).clone()
        )
        self.raw_variance = positive_parameter(self._init_variance, self.batch_shape, dtype, device)

    def init_from_data(self, X: torch.Tensor) -> None:
        """Measure lengthscales in units of each column's spread and, unless the user fixed
        it, start the lengthscale at ``sqrt(D) * std`` of each column."""
        self._check_built()
        self.adopt_input_unit(column_unit(X))
        if self._init_lengthscale is None:
            self.lengthscale = self.input_unit * math.sqrt(X.shape[1])

    def adopt_input_unit(self, unit: torch.Tensor) -> None:
        """Store the lengthscale in the column ``unit`` ``(D,)`` (the mean unit without
        ARD), keeping its value in data units."""
        self._check_built()
        if not self.ard:
            unit = unit.mean().reshape(1)
        with torch.no_grad():
            keep = self.lengthscale.detach().clone()
            self.input_unit.copy_(unit.to(self.input_unit))
            self.lengthscale = keep

    @property
    def lengthscale(self) -> torch.Tensor:
        """``(*batch, D)`` (or ``(*batch, 1)`` without ARD), in the units of the inputs.

        Stored as ``raw_lengthscale = inv_softplus(lengthscale / input_unit)``; assign
        ``kernel.lengthscale = value`` to set it.
        """
        return softplus(self.raw_lengthscale) * self.input_unit

    @lengthscale.setter
    def lengthscale(self, value) -> None:
        self._check_built()
        name = f"{type(self).__name__} lengthscale"
        assign_positive(self.raw_lengthscale, value, name, unit=self.input_unit)

    @property
    def variance(self) -> torch.Tensor:
        """``(*batch,)``; assign ``kernel.variance = value`` to set it."""
        return softplus(self.raw_variance)

    @variance.setter
    def variance(self, value) -> None:
        self._check_built()
        assign_positive(self.raw_variance, value, f"{type(self).__name__} variance")

    def profile(self, r2: torch.Tensor) -> torch.Tensor:
        """``g(r)`` as a function of the squared scaled distance."""
        raise NotImplementedError

    def profile_(self, r2: torch.Tensor) -> torch.Tensor:
        """:meth:`profile` without autograd, free to overwrite ``r2`` (a fresh tensor of
        the caller's): a kernel that computes it in place holds one ``N x M`` matrix
        where the chain of element-wise steps held up to three (the no-grad evaluation
        of ``K(X)`` on the Cholesky path, prediction blocks)."""
        return self.profile(r2)

    def forward(self, X, Z=None):
        self._check_built()
        r2 = scaled_sqdist(X, Z, self.lengthscale)
        var = self.variance[..., None, None]
        if torch.is_grad_enabled() or torch.broadcast_shapes(r2.shape, var.shape) != r2.shape:
            return var * self.profile(r2)
        return self.profile_(r2).mul_(var)

    def against(self, Z, *, dtype=None):
        """:meth:`Kernel.against`: ``Z / l``, its centre and ``|z|^2`` computed once (the
        centre is the median of ``Z``'s rows alone); ``out`` receives a copy; blocks are
        computed in the kernel's dtype and converted to ``dtype``."""
        self._check_built()
        ls, var = self.lengthscale[..., None, :], self.variance[..., None, None]
        Zs, c = _centred(Z / ls)
        z2 = (Zs * Zs).sum(-1)

        def block(A, out=None):
            return into(var * self.profile(_sqdist(A / ls - c, Zs, z2)), out, dtype)

        return block

    def diag(self, X):
        self._check_built()
        shape = torch.broadcast_shapes(self.batch_shape + (1,), X.shape[:-1])
        return self.variance[..., None].expand(shape)

    def _config_args(self):
        ls = self._init_lengthscale
        return {"lengthscale": ls, "variance": self._init_variance, "ard": self.ard}


def _centred(Zs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(Zs - c, c)`` with ``c`` the :func:`centre` of ``Zs``'s rows alone (the prepared
    side of :meth:`Kernel.against`)."""
    c = centre(Zs)
    return Zs - c, c


def _rbf_lowest(x2: torch.Tensor, z2: torch.Tensor, log_var: torch.Tensor) -> float | None:
    """A lower bound of RBF's exponent ``log variance - |x - z|^2 / 2`` over all pairs of
    centred scaled rows with squared norms ``x2``, ``z2`` (``|x - z| <= |x| + |z|``), for
    :func:`~latentgp.kernels.base.floored_exp` to skip its clamp when no pair is near
    the floor; None off the CPU (no host synchronisation per block there, and its
    ``exp`` has no slow path)."""
    if x2.device.type != "cpu" or x2.numel() == 0 or z2.numel() == 0:
        return None
    with torch.no_grad():
        reach = float(x2.max()) ** 0.5 + float(z2.max()) ** 0.5
        return float(log_var.min()) - 0.5 * reach * reach


def _row_rows(Xs: torch.Tensor) -> torch.Tensor:
    """RBF's augmented left rows ``[x, -|x|^2/2, 1]`` of centred scaled ``Xs``."""
    x2 = (Xs * Xs).sum(-1, keepdim=True)
    return torch.cat([Xs, -0.5 * x2, torch.ones_like(x2)], -1)


def _column_rows(Zs: torch.Tensor, log_var: torch.Tensor) -> torch.Tensor:
    """RBF's augmented right rows ``[z, 1, log variance - |z|^2/2]``: ``exp`` of the
    product of the two is the kernel block."""
    z2 = (Zs * Zs).sum(-1, keepdim=True)
    return torch.cat([Zs, torch.ones_like(z2), log_var - 0.5 * z2], -1)


@register("rbf", "se", "squaredexponential", "gaussian")
class RBF(Stationary):
    """Squared exponential: ``variance * exp(-r^2 / 2)``.

    Cross-covariance blocks ``k(X, Z)`` are one matrix product and one exponential:
    with ``x, z`` the centred scaled inputs,
    ``log k(x, z) = x.z - |x|^2 / 2 - |z|^2 / 2 + log variance`` is the inner product of
    the augmented rows ``[x, -|x|^2/2, 1]`` and ``[z, 1, log variance - |z|^2/2]``, so
    the ``(N, M)`` block is touched twice in the forward pass (product, exponential) and
    twice in the backward pass (``g * K``, then two thin products), instead of the
    half-dozen element-wise passes of the distance form.  ``k(X)`` (one argument)
    keeps the distance form with exact zeros on the diagonal.
    """

    def profile(self, r2):
        return floored_exp(-0.5 * r2)

    def profile_(self, r2):
        return floored_exp(r2.mul_(-0.5), inplace=True)

    def forward(self, X, Z=None):
        if Z is None:
            return super().forward(X)
        self._check_built()
        ls = self.lengthscale[..., None, :]
        Xs, Zs = X / ls, Z / ls
        c = centre(Xs, Zs)
        log_var = self.variance.log()[..., None, None]
        Zc = Zs - c
        Za, Xa = _column_rows(Zc, log_var), _row_rows(Xs - c)
        lowest = _rbf_lowest(-2.0 * Xa[..., -2], (Zc * Zc).sum(-1), log_var)
        # without autograd the exponential overwrites the product (one N x M matrix)
        return floored_exp(Xa @ Za.mT, lowest=lowest, inplace=not torch.is_grad_enabled())

    def against(self, Z, *, dtype=None):
        """:meth:`Kernel.against`: ``Z``'s augmented rows (the product form above) built
        once (the centre is the median of ``Z``'s rows alone): a block is then the scaling
        of its own rows, one product and one exponential, both in ``out`` when given.
        ``dtype``: the augmented rows are formed in the kernel's dtype and converted, so
        the product and the exponential run in ``dtype`` (an exponent's rounding error
        is then about ``eps(dtype)`` times ``|x|^2 + |z|^2``)."""
        self._check_built()
        ls = self.lengthscale[..., None, :]
        Zs, c = _centred(Z / ls)
        log_var = self.variance.log()[..., None, None]
        Za = _column_rows(Zs, log_var)
        Za = Za if dtype is None else Za.to(dtype)
        z2 = (Zs * Zs).sum(-1)

        def block(A, out=None):
            Aa = _row_rows(A / ls - c)
            lowest = _rbf_lowest(-2.0 * Aa[..., -2], z2, log_var)
            Aa = Aa if dtype is None else Aa.to(dtype)
            if out is None:
                return floored_exp(Aa @ Za.mT, lowest=lowest)
            return floored_exp(torch.matmul(Aa, Za.mT, out=out), inplace=True, lowest=lowest)

        return block


@register("rationalquadratic", "rq")
class RationalQuadratic(Stationary):
    """``variance * (1 + r^2 / (2 alpha))^(-alpha)``: a scale mixture of RBF kernels whose
    inverse squared lengthscales are gamma distributed with shape ``alpha`` (learned;
    ``alpha -> inf`` is the RBF)."""

    def __init__(
        self,
        lengthscale: float | list[float] | None = None,
        variance: float = 1.0,
        alpha: float = 1.0,
        ard: bool = True,
    ) -> None:
        super().__init__(lengthscale, variance, ard)
        check_positive_values(alpha, "RationalQuadratic alpha")
        self._init_alpha = float(alpha)

    def _build(self, dtype, device):
        super()._build(dtype, device)
        self.raw_alpha = positive_parameter(self._init_alpha, self.batch_shape, dtype, device)

    @property
    def alpha(self) -> torch.Tensor:
        return softplus(self.raw_alpha)

    def profile(self, r2):
        a = self.alpha[..., None, None]
        return floored_exp(-a * torch.log1p(r2 / (2.0 * a)))

    def _config_args(self):
        return {**super()._config_args(), "alpha": self._init_alpha}


def _r(r2: torch.Tensor) -> torch.Tensor:
    # clamp keeps the gradient finite where r = 0 (it is zero there)
    return r2.clamp_min(1e-36).sqrt()


def _floored_matern(poly: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """``poly * exp(-s)``, at :func:`~latentgp.kernels.base.floored_exp`'s floor where
    ``-s`` is below it (``poly`` would otherwise lift the floor without bound)."""
    floor = exp_floor(s.dtype)
    return torch.where(s > -floor, math.exp(floor), poly * floored_exp(-s))


@register("matern12", "exponential", "ou")
class Matern12(Stationary):
    """Matérn 1/2 (exponential): ``variance * exp(-r)``."""

    def profile(self, r2):
        return floored_exp(-_r(r2))


@register("matern32")
class Matern32(Stationary):
    """Matérn 3/2: ``variance * (1 + sqrt(3) r) exp(-sqrt(3) r)``."""

    def profile(self, r2):
        s = math.sqrt(3.0) * _r(r2)
        return _floored_matern(1.0 + s, s)


@register("matern52")
class Matern52(Stationary):
    """Matérn 5/2: ``variance * (1 + sqrt(5) r + 5 r^2 / 3) exp(-sqrt(5) r)``."""

    def profile(self, r2):
        s = math.sqrt(5.0) * _r(r2)
        return _floored_matern(1.0 + s + (5.0 / 3.0) * r2, s)

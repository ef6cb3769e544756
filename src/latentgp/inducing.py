"""Initial inducing inputs: k-means++ (default), random subset, greedy variance reduction."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from .parameters import column_unit
from .validation import check_inputs


def _generator(seed: int | None, device) -> torch.Generator:
    g = torch.Generator(device="cpu")
    g.manual_seed(0 if seed is None else int(seed))
    return g


def random_subset(X: torch.Tensor, num_inducing: int, seed: int | None = None) -> torch.Tensor:
    """``M`` distinct rows of ``X`` ``(N, D)`` chosen uniformly; returns ``(M, D)``."""
    g = _generator(seed, X.device)
    idx = torch.randperm(X.shape[0], generator=g)[:num_inducing].to(X.device)
    return X[idx].clone()


def kmeans_pp(
    X: torch.Tensor,
    num_inducing: int,
    seed: int | None = None,
    max_points: int = 20000,
    lloyd_iters: int = 10,
) -> torch.Tensor:
    """k-means++ seeding followed by a few Lloyd iterations; ``(M, D)`` centres.

    Works on a random subset of at most ``max_points`` rows so the cost does not
    grow with N.  Duplicated rows never give duplicated centres: once every distinct
    point is a centre, the remaining ones are jittered copies.
    """
    g = _generator(seed, X.device)
    if X.shape[0] > max_points:
        X = X[torch.randperm(X.shape[0], generator=g)[:max_points].to(X.device)]
    N = X.shape[0]
    M = num_inducing
    centres = torch.empty(M, X.shape[1], dtype=X.dtype, device=X.device)
    first = int(torch.randint(N, (1,), generator=g))
    centres[0] = X[first]
    d2 = (X - centres[0]).square().sum(-1)
    for m in range(1, M):
        total = d2.sum()
        if total <= 0:  # fewer distinct points than centres
            idx = int(torch.randint(N, (1,), generator=g))
            noise = 1e-3 * X.std(0).clamp_min(1e-12)
            centres[m] = X[idx] + noise * torch.randn(X.shape[1], generator=g).to(X)
        else:
            idx = int(torch.multinomial((d2 / total).cpu(), 1, generator=g))
            centres[m] = X[idx]
        d2 = torch.minimum(d2, (X - centres[m]).square().sum(-1))
    for _ in range(lloyd_iters):
        dist = torch.cdist(X, centres)
        assign = dist.argmin(1)
        sums = torch.zeros_like(centres).index_add_(0, assign, X)
        counts = torch.bincount(assign, minlength=M).to(X.dtype)
        moved = counts > 0
        centres[moved] = sums[moved] / counts[moved, None]
    return centres


def greedy_variance(
    X: torch.Tensor,
    num_inducing: int,
    kernel: Callable,
    seed: int | None = None,
    max_points: int = 20000,
) -> torch.Tensor:
    """Greedy variance reduction (a pivoted Cholesky of Kxx): each new inducing input is
    the point whose prior variance is least explained by those already chosen.

    ``kernel(X, Z)`` and ``kernel.diag(X)`` must return un-batched ``(N, M)``/``(N,)``.
    Cost ``O(N M^2)`` on at most ``max_points`` rows.
    """
    g = _generator(seed, X.device)
    if X.shape[0] > max_points:
        X = X[torch.randperm(X.shape[0], generator=g)[:max_points].to(X.device)]
    N, M = X.shape[0], min(num_inducing, X.shape[0])
    with torch.no_grad():
        resid = kernel.diag(X).reshape(-1, N)[0].clone()
        L = torch.zeros(M, N, dtype=X.dtype, device=X.device)
        chosen: list[int] = []
        for m in range(M):
            i = int(resid.argmax())
            if resid[i] <= 1e-12 * resid.max().clamp_min(1e-300) and m > 0:
                break
            chosen.append(i)
            k = kernel(X[i : i + 1], X).reshape(-1, N)[0]
            l_m = (k - L[:m, i] @ L[:m]) / resid[i].sqrt()
            L[m] = l_m
            resid = (resid - l_m.square()).clamp_min(0)
            resid[i] = 0.0
    Z = X[chosen].clone()
    if Z.shape[0] < num_inducing:  # not enough distinct points: top up with k-means++
        Z = torch.cat([Z, kmeans_pp(X, num_inducing - Z.shape[0], seed, lloyd_iters=0)])
    return Z


def initial_inducing(
    X: torch.Tensor,
    num_inducing: int,
    method: str = "kmeans",
    kernel: Callable | None = None,
    seed: int | None = None,
) -> torch.Tensor:
    """Dispatch on ``method`` in ``{"kmeans", "random", "greedy"}``; returns ``(M, D)``.

    k-means++ clusters the columns divided by their standard deviations (then scales the
    centres back), so that a column in large units does not decide the clusters alone and
    rescaling a column rescales the inducing inputs with it.
    """
    if method in ("kmeans", "kmeans++", "kmeans_pp"):
        unit = column_unit(X)
        return kmeans_pp(X / unit, num_inducing, seed) * unit
    if method in ("random", "subset"):
        return random_subset(X, num_inducing, seed)
    if method in ("greedy", "greedy_variance"):
        if kernel is None:
            raise ValueError("greedy inducing initialisation needs a kernel")
        return greedy_variance(X, num_inducing, kernel, seed)
    raise ValueError(f"unknown inducing initialisation {method!r}: use kmeans, random or greedy")


#: ``inducing_init`` values understood by :func:`initial_inducing`.
INIT_METHODS = ("kmeans", "random", "greedy")


def inducing_inputs_arg(Z: Any, dtype: torch.dtype, batched: bool = True) -> torch.Tensor | None:
    """Validate a user's initial inducing inputs: ``(M, D)``, or ``(Q, M, D)`` if ``batched``.

    Accepts arrays, tensors and DataFrames; a 1-D array is one input column.  Returns a
    tensor of ``dtype`` (None for None); raises ``ValueError`` naming ``Z`` otherwise.
    """
    if Z is None:
        return None
    if isinstance(Z, torch.Tensor):
        Zt = Z.detach()
    else:
        try:
            arr = np.asarray(Z.to_numpy() if hasattr(Z, "to_numpy") else Z, dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"Z must be an array of numbers, got {type(Z).__name__}") from None
        Zt = torch.as_tensor(arr)
    if Zt.ndim == 1:
        Zt = Zt[:, None]
    shapes = (2, 3) if batched else (2,)
    if Zt.ndim not in shapes:
        want = "(M, D) or (Q, M, D)" if batched else "(M, D)"
        raise ValueError(f"Z must have shape {want}, got {tuple(Zt.shape)}")
    check_inputs(Zt.reshape(-1, Zt.shape[-1]), name="Z")
    return Zt.to(dtype)


def check_inducing_init(value: Any, allowed: tuple[str, ...] = INIT_METHODS) -> str:
    """The ``inducing_init`` argument, checked against the methods a model supports."""
    if value not in allowed:
        names = ", ".join(repr(a) for a in allowed[:-1]) + f" or {allowed[-1]!r}"
        raise ValueError(f"inducing_init must be {names}, got {value!r}")
    return value


def check_inducing_sizes(
    init_Z: torch.Tensor | None, M: int, N: int, D: int, hint: str = ""
) -> None:
    """Raise ``ValueError`` if ``M > N`` inducing points are to be picked from the data, or
    the given ``init_Z`` has the wrong number of columns."""
    if init_Z is None and M > N:
        raise ValueError(
            f"num_inducing={M} is larger than the {N} training points; "
            f"use num_inducing <= {N}{hint}"
        )
    if init_Z is not None and init_Z.shape[-1] != D:
        raise ValueError(f"Z has {init_Z.shape[-1]} columns but X has {D}")

"""Synthetic data generators (numpy only, seeded, float64).

Every generator takes a ``seed`` and draws from ``numpy.random.default_rng``, so the same
arguments always give the same arrays. Inputs are returned 2-D ``(N, D)`` and targets 1-D
``(N,)``.

* :func:`make_snelson`: the "Snelson-style" 1-D toy of the blog "Scaling Gaussian
  Processes" (seed 004): clustered ``x ~ N(0, 1)`` inputs and a fixed smooth function.
* :func:`make_heteroscedastic`, :func:`make_step`, :func:`make_moons_regression`,
  :func:`make_data_assoc`: the toys of the modulated-GP paper (seed 003), using the
  formulas of its released code.
* :func:`gp_draws`: a draw of a GP with a squared-exponential kernel via random Fourier
  features, streamable in chunks (e.g. 10^7 rows), and :func:`write_gp_draws_npy`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

__all__ = [
    "snelson_function",
    "make_snelson",
    "heteroscedastic_mean",
    "heteroscedastic_std",
    "make_heteroscedastic",
    "make_step",
    "make_moons_regression",
    "make_data_assoc",
    "data_assoc_mean",
    "gp_draws",
    "gp_draws_function",
    "write_gp_draws_npy",
    "GP_DRAWS_BLOCK_SIZE",
]

#: Rows per internal random block of :func:`gp_draws`. Each block has its own RNG stream
#: derived from ``(seed, block_index)``, which makes the output independent of ``chunk_size``.
GP_DRAWS_BLOCK_SIZE = 65536

# Rows per matrix product when evaluating the random features (bounds the memory used).
_FEATURE_BATCH = 4096


def _col(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float64).reshape(-1, 1)


# ------------------------------------------------------------------------- Snelson toy
def snelson_function(x: np.ndarray) -> np.ndarray:
    """The fixed latent function of :func:`make_snelson`: ``sin(3x) + 0.3 cos(9x)``.

    Parameters
    ----------
    x : np.ndarray
        Inputs of any shape.

    Returns
    -------
    np.ndarray
        Function values, same shape as ``x``.
    """
    x = np.asarray(x, dtype=np.float64)
    return np.sin(3.0 * x) + 0.3 * np.cos(9.0 * x)


def make_snelson(n: int = 2000, seed: int = 0, noise: float = 0.3) -> tuple[np.ndarray, np.ndarray]:
    """Snelson-style toy (seed 004): ``x ~ N(0, 1)``, ``y = f(x) + noise * eps``.

    The blog does not give its function, so this library fixes
    ``f(x) = sin(3x) + 0.3 cos(9x)`` (:func:`snelson_function`): smooth, with a
    short-scale wiggle so that 20-30 inducing points are needed. The N(0, 1) inputs are
    dense in the middle and sparse in the tails (clustered, redundant data).

    Parameters
    ----------
    n : int
        Number of points.
    seed : int
        Random seed.
    noise : float
        Noise standard deviation (not variance).

    Returns
    -------
    X : np.ndarray
        Inputs, shape ``(n, 1)``, unsorted.
    y : np.ndarray
        Noisy targets, shape ``(n,)``.
    """
    _check_positive_int(n, "n")
    if noise < 0:
        raise ValueError(f"noise must be >= 0, got {noise}")
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n)
    y = snelson_function(x) + noise * rng.standard_normal(n)
    return _col(x), y


# ------------------------------------------------------------------ seed 003 toys
def heteroscedastic_mean(x: np.ndarray) -> np.ndarray:
    """Mean of the heteroscedastic toy: ``cos(5x) exp(-x/2)``; same shape as ``x``."""
    x = np.asarray(x, dtype=np.float64)
    return np.cos(5.0 * x) * np.exp(-0.5 * x)


def heteroscedastic_std(x: np.ndarray) -> np.ndarray:
    """Noise std of the heteroscedastic toy: ``0.25 (cos(6x) + 1) exp(-x)``; shape of ``x``."""
    x = np.asarray(x, dtype=np.float64)
    return 0.25 * (np.cos(6.0 * x) + 1.0) * np.exp(-x)


def make_heteroscedastic(
    seed: int = 0, n_train: int = 1000, n_test: int = 500
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Heteroscedastic toy 1 of the modulated-GP paper (released-code version).

    ``y = cos(5x) exp(-x/2) + 0.25 (cos(6x) + 1) exp(-x) eps`` with ``eps ~ N(0, 1)``,
    training inputs evenly spaced on ``[-2, 2]``. The paper's ``cos(6x+1)`` is taken to be
    a typesetting slip for ``(cos(6x) + 1)`` (a non-negative noise scale), as in the code.
    The code has no test targets; here the test targets are an independent noisy draw at
    ``n_test`` evenly spaced points on ``[-2, 2]``.

    Parameters
    ----------
    seed : int
        Random seed.
    n_train, n_test : int
        Numbers of training and test points.

    Returns
    -------
    X_train : np.ndarray
        Shape ``(n_train, 1)``.
    y_train : np.ndarray
        Shape ``(n_train,)``.
    X_test : np.ndarray
        Shape ``(n_test, 1)``.
    y_test : np.ndarray
        Shape ``(n_test,)``.
    """
    _check_positive_int(n_train, "n_train")
    _check_positive_int(n_test, "n_test")
    rng = np.random.default_rng(seed)
    x_tr = np.linspace(-2.0, 2.0, n_train)
    x_te = np.linspace(-2.0, 2.0, n_test)
    y_tr = heteroscedastic_mean(x_tr) + heteroscedastic_std(x_tr) * rng.standard_normal(n_train)
    y_te = heteroscedastic_mean(x_te) + heteroscedastic_std(x_te) * rng.standard_normal(n_test)
    return _col(x_tr), y_tr, _col(x_te), y_te


def make_step(
    seed: int = 0, n_train: int = 500, n_test: int = 500, noise: float = 1e-2
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Non-stationary step toy 2: ``y = 1{x >= 0.5} + noise * eps`` on ``[0, 1]``.

    Parameters
    ----------
    seed : int
        Random seed.
    n_train, n_test : int
        Numbers of evenly spaced training and test points on ``[0, 1]``.
    noise : float
        Noise standard deviation (the code uses 1e-2, i.e. variance 1e-4).

    Returns
    -------
    X_train, y_train, X_test, y_test : np.ndarray
        Shapes ``(n_train, 1)``, ``(n_train,)``, ``(n_test, 1)``, ``(n_test,)``; the test
        targets are an independent noisy draw.
    """
    _check_positive_int(n_train, "n_train")
    _check_positive_int(n_test, "n_test")
    rng = np.random.default_rng(seed)
    x_tr = np.linspace(0.0, 1.0, n_train)
    x_te = np.linspace(0.0, 1.0, n_test)
    y_tr = (x_tr >= 0.5).astype(np.float64) + noise * rng.standard_normal(n_train)
    y_te = (x_te >= 0.5).astype(np.float64) + noise * rng.standard_normal(n_test)
    return _col(x_tr), y_tr, _col(x_te), y_te


def _two_moons(n: int, noise: float, rng: np.random.Generator) -> np.ndarray:
    """``n`` shuffled points on two interleaving half circles plus N(0, noise^2); ``(n, 2)``."""
    n_outer = n // 2
    n_inner = n - n_outer
    t_out = np.linspace(0.0, math.pi, n_outer)
    t_in = np.linspace(0.0, math.pi, n_inner)
    outer = np.stack([np.cos(t_out), np.sin(t_out)], axis=1)
    inner = np.stack([1.0 - np.cos(t_in), 0.5 - np.sin(t_in)], axis=1)
    pts = np.concatenate([outer, inner])[rng.permutation(n)]
    return pts + noise * rng.standard_normal(pts.shape)


def make_moons_regression(
    seed: int = 0, n_train: int = 200, n_test: int = 500, noise: float = 0.05
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Multi-modal "moons" toy 3: regress coordinate 1 of two-moons data on coordinate 0.

    The two moons are the upper half circle of radius 1 centred at (0, 0) and the lower
    half circle centred at (1, 0.5), with isotropic Gaussian noise (own implementation of
    the usual two-moons construction, equivalent in distribution to scikit-learn's
    ``make_moons``). Test points are a separate draw, sorted by ``x`` as in the code.

    Parameters
    ----------
    seed : int
        Random seed.
    n_train, n_test : int
        Numbers of training and test points.
    noise : float
        Standard deviation of the Gaussian noise added to both coordinates.

    Returns
    -------
    X_train, y_train, X_test, y_test : np.ndarray
        Shapes ``(n_train, 1)``, ``(n_train,)``, ``(n_test, 1)``, ``(n_test,)``.
    """
    _check_positive_int(n_train, "n_train")
    _check_positive_int(n_test, "n_test")
    rng = np.random.default_rng(seed)
    tr = _two_moons(n_train, noise, rng)
    te = _two_moons(n_test, noise, rng)
    te = te[np.argsort(te[:, 0], kind="stable")]
    return _col(tr[:, 0]), tr[:, 1].copy(), _col(te[:, 0]), te[:, 1].copy()


def data_assoc_mean(x: np.ndarray) -> np.ndarray:
    """Mean of the main component of the data-association toy: ``cos(pi x / 2) exp(-x^2/4)``."""
    x = np.asarray(x, dtype=np.float64)
    return np.cos(0.5 * math.pi * x) * np.exp(-0.25 * x**2)


def make_data_assoc(
    n: int = 1000, seed: int = 0, return_assignment: bool = False
) -> tuple[np.ndarray, ...]:
    """Data-association toy (code-only 4th toy of seed 003, after DAGP).

    ``x ~ U(-3, 3)``, ``delta ~ Bernoulli(0.4)``, ``eps ~ U(-1, 3)`` and
    ``y = (1 - delta) (cos(pi x / 2) exp(-x^2 / 4) + 0.15 N(0, 1)) + delta eps``:
    60% of the points follow a smooth function, 40% are uniform outliers.

    Parameters
    ----------
    n : int
        Number of points.
    seed : int
        Random seed.
    return_assignment : bool
        Also return ``delta`` (1.0 for the outlier component), shape ``(n,)``.

    Returns
    -------
    X : np.ndarray
        Shape ``(n, 1)``.
    y : np.ndarray
        Shape ``(n,)``.
    delta : np.ndarray
        Only if ``return_assignment``; shape ``(n,)``.
    """
    _check_positive_int(n, "n")
    rng = np.random.default_rng(seed)
    x = rng.uniform(-3.0, 3.0, n)
    delta = (rng.uniform(size=n) < 0.4).astype(np.float64)
    eps = rng.uniform(-1.0, 3.0, n)
    smooth = data_assoc_mean(x) + 0.15 * rng.standard_normal(n)
    y = (1.0 - delta) * smooth + delta * eps
    if return_assignment:
        return _col(x), y, delta
    return _col(x), y


# ------------------------------------------------------------------------ GP draws
def _check_positive_int(v: int, name: str) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise ValueError(f"{name} must be a positive integer, got {v!r}")


def _rff_params(
    input_dim: int, seed: int, num_features: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng([seed, 0])
    W = rng.standard_normal((num_features, input_dim))
    b = rng.uniform(0.0, 2.0 * math.pi, num_features)
    w = rng.standard_normal(num_features)
    return W, b, w


def gp_draws_function(
    input_dim: int = 8,
    seed: int = 0,
    num_features: int = 1024,
    lengthscale: float | np.ndarray = 1.0,
    variance: float = 1.0,
) -> Callable[[np.ndarray], np.ndarray]:
    """The noise-free latent function sampled by :func:`gp_draws` with the same arguments.

    Parameters
    ----------
    input_dim, seed, num_features, lengthscale, variance
        As in :func:`gp_draws`.

    Returns
    -------
    callable
        ``f(X)`` mapping inputs ``(M, input_dim)`` to values ``(M,)``.
    """
    _check_positive_int(input_dim, "input_dim")
    _check_positive_int(num_features, "num_features")
    if not (isinstance(seed, (int, np.integer)) and seed >= 0):
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    ell = np.broadcast_to(np.asarray(lengthscale, dtype=np.float64), (input_dim,)).copy()
    if np.any(ell <= 0) or variance < 0:
        raise ValueError("lengthscale must be > 0 and variance >= 0")
    W, b, w = _rff_params(input_dim, int(seed), num_features)
    Wl = (W / ell).T  # (D, F)
    amp = math.sqrt(2.0 * variance / num_features)

    def f(X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != input_dim:
            raise ValueError(f"X must have shape (M, {input_dim}), got {X.shape}")
        out = np.empty(X.shape[0])
        for start in range(0, X.shape[0], _FEATURE_BATCH):
            stop = min(start + _FEATURE_BATCH, X.shape[0])
            out[start:stop] = amp * (np.cos(X[start:stop] @ Wl + b) @ w)
        return out

    return f


def _gp_block(
    block: int,
    rows: int,
    seed: int,
    input_dim: int,
    noise: float,
    input_distribution: str,
    f: Callable[[np.ndarray], np.ndarray],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng([seed, 1, block])
    if input_distribution == "normal":
        X = rng.standard_normal((rows, input_dim))
    else:
        X = rng.uniform(-1.0, 1.0, (rows, input_dim))
    fx = f(X)
    y = fx + math.sqrt(noise) * rng.standard_normal(rows)
    return X, y, fx


def gp_draws(
    n: int,
    input_dim: int = 8,
    seed: int = 0,
    num_features: int = 1024,
    lengthscale: float | np.ndarray = 1.0,
    variance: float = 1.0,
    noise: float = 0.1,
    chunk_size: int | None = None,
    input_distribution: str = "normal",
    return_f: bool = False,
) -> tuple[np.ndarray, ...] | Iterator[tuple[np.ndarray, ...]]:
    """Noisy draws of one GP sample with an SE kernel, via random Fourier features.

    ``f(x) = sqrt(2 variance / F) * cos(x W^T / lengthscale + b) @ w`` with
    ``W ~ N(0, I)`` of shape ``(F, D)``, ``b ~ U(0, 2 pi)`` and ``w ~ N(0, I)``, which
    approximates a draw from ``GP(0, variance * exp(-|x - x'|^2 / (2 lengthscale^2)))``.
    Targets are ``y = f(x) + sqrt(noise) * eps``. The function parameters come from the RNG
    ``(seed, 0)``; rows are generated in fixed blocks of :data:`GP_DRAWS_BLOCK_SIZE` rows,
    block ``k`` from the RNG ``(seed, 1, k)``. Hence the data do not depend on
    ``chunk_size``, and the first ``m`` rows of a call with ``n > m`` equal a call with
    ``n = m``.

    Parameters
    ----------
    n : int
        Number of rows.
    input_dim : int
        Input dimension ``D``.
    seed : int
        Non-negative random seed.
    num_features : int
        Number of random features ``F``.
    lengthscale : float or np.ndarray
        Scalar or per-dimension ``(D,)`` lengthscales.
    variance : float
        Kernel (signal) variance.
    noise : float
        Gaussian noise **variance**.
    chunk_size : int, optional
        If given, return a generator yielding chunks of ``chunk_size`` rows (the last one
        may be shorter) instead of whole arrays, so that very large ``n`` can be streamed.
    input_distribution : {"normal", "uniform"}
        ``X ~ N(0, I)`` or ``X ~ U[-1, 1]^D``.
    return_f : bool
        Also return the noise-free values ``f(X)``.

    Returns
    -------
    X : np.ndarray
        Inputs ``(n, D)``.
    y : np.ndarray
        Targets ``(n,)``.
    f : np.ndarray
        Only if ``return_f``: latent values ``(n,)``.

    With ``chunk_size`` the same tuples are yielded chunk by chunk.
    """
    _check_positive_int(n, "n")
    if noise < 0:
        raise ValueError(f"noise must be >= 0 (it is a variance), got {noise}")
    if input_distribution not in ("normal", "uniform"):
        raise ValueError(
            f"input_distribution must be 'normal' or 'uniform', got {input_distribution!r}"
        )
    if chunk_size is not None:
        _check_positive_int(chunk_size, "chunk_size")
    f = gp_draws_function(input_dim, seed, num_features, lengthscale, variance)
    args = (int(seed), input_dim, float(noise), input_distribution, f)
    n_blocks = -(-n // GP_DRAWS_BLOCK_SIZE)

    def block_rows(k: int) -> int:
        return min(GP_DRAWS_BLOCK_SIZE, n - k * GP_DRAWS_BLOCK_SIZE)

    if chunk_size is None:
        X = np.empty((n, input_dim))
        y = np.empty(n)
        fx = np.empty(n)
        for k in range(n_blocks):
            s = k * GP_DRAWS_BLOCK_SIZE
            r = block_rows(k)
            X[s : s + r], y[s : s + r], fx[s : s + r] = _gp_block(k, r, *args)
        return (X, y, fx) if return_f else (X, y)

    def chunks() -> Iterator[tuple[np.ndarray, ...]]:
        pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        n_pending = 0
        for k in range(n_blocks):
            pending.append(_gp_block(k, block_rows(k), *args))
            n_pending += pending[-1][1].shape[0]
            if n_pending < chunk_size and k < n_blocks - 1:
                continue
            Xb = np.concatenate([p[0] for p in pending])
            yb = np.concatenate([p[1] for p in pending])
            fb = np.concatenate([p[2] for p in pending])
            last = k == n_blocks - 1
            start = 0
            while Xb.shape[0] - start >= chunk_size or (last and start < Xb.shape[0]):
                stop = min(start + chunk_size, Xb.shape[0])
                out = (Xb[start:stop], yb[start:stop], fb[start:stop])
                yield out if return_f else out[:2]
                start = stop
            pending = [(Xb[start:], yb[start:], fb[start:])]
            n_pending = Xb.shape[0] - start

    return chunks()


def write_gp_draws_npy(
    folder: str | os.PathLike,
    n: int,
    shard_size: int = 1_000_000,
    **kwargs: object,
) -> list[tuple[Path, Path]]:
    """Write :func:`gp_draws` to ``.npy`` shards ``X_00000.npy``, ``y_00000.npy``, ...

    Also writes ``meta.json`` with the arguments, the shard names and their row counts.

    Parameters
    ----------
    folder : str or path-like
        Output folder (created if missing).
    n : int
        Total number of rows.
    shard_size : int
        Rows per shard (the last shard may be shorter).
    **kwargs
        Passed to :func:`gp_draws` (``input_dim``, ``seed``, ``num_features``,
        ``lengthscale``, ``variance``, ``noise``, ``input_distribution``).

    Returns
    -------
    list of (Path, Path)
        ``(X_path, y_path)`` per shard; ``X`` shards have shape ``(rows, D)``, ``y`` shards
        ``(rows,)``, both float64.
    """
    if "chunk_size" in kwargs or "return_f" in kwargs:
        raise ValueError("write_gp_draws_npy sets chunk_size and return_f itself")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths: list[tuple[Path, Path]] = []
    rows: list[int] = []
    for i, (X, y) in enumerate(gp_draws(n, chunk_size=shard_size, **kwargs)):  # type: ignore[arg-type]
        xp, yp = folder / f"X_{i:05d}.npy", folder / f"y_{i:05d}.npy"
        np.save(xp, X)
        np.save(yp, y)
        paths.append((xp, yp))
        rows.append(int(X.shape[0]))
    meta = {
        "generator": "latentgp.data.synthetic.gp_draws",
        "n": n,
        "shard_size": shard_size,
        "kwargs": {
            k: (np.asarray(v).tolist() if isinstance(v, np.ndarray) else v)
            for k, v in kwargs.items()
        },
        "shards": [
            {"X": xp.name, "y": yp.name, "rows": r} for (xp, yp), r in zip(paths, rows, strict=True)
        ],
    }
    (folder / "meta.json").write_text(json.dumps(meta, indent=2))
    return paths

import os
import pathlib

# One intra-op thread unless the caller chose otherwise: on a shared 2-core machine two
# spinning OpenMP threads per process made the modulated-model fixture of
# test_modulated.py take 87-188 s instead of 2.5 s. Set before torch is imported, so
# that the subprocesses of the CLI and scale-out tests inherit it too.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(min(2, torch.get_num_threads()))

#: the environment variable naming the benchmark data folder (latentgp.data.DATA_HOME_ENV)
DATA_ENV = "LATENTGP_DATA"


def require_data(
    *names: str, split: int | None = None, files: tuple[str, ...] = ()
) -> pathlib.Path:
    """Skip the calling test unless the data home holds what it reads; return the home.

    Parameters
    ----------
    *names : str
        Registry names of data-home datasets (``"uci/kin40k"``, ``"savigp/USPS"``, ...):
        their files for ``split`` are needed (``latentgp.data.data_home_files``).
    split : int, optional
        Split of ``names`` (``None``: each dataset's default split).
    files : tuple of str
        Further files, relative to the data home (e.g.
        ``"savigp/seismic/mcmc_results.csv.gz"``).

    The data home is resolved as the library does (``$LATENTGP_DATA``, else the user cache
    folder); a file counts as present in its ``.csv.gz`` or plain ``.csv`` form. The skip
    reason names ``LATENTGP_DATA`` and the first missing file.
    """
    from latentgp.data import data_home, data_home_files

    needed = [f for name in names for f in data_home_files(name, split)] + list(files)
    home = data_home()
    for rel in needed:
        path = home / rel
        plain = path.with_suffix("") if path.suffix == ".gz" else path
        if path.is_file() or plain.is_file():
            continue
        env = os.environ.get(DATA_ENV, "").strip()
        if env:
            why = f"which {DATA_ENV}={env} lacks"
        else:
            why = f"and {DATA_ENV} is not set (the default data home {home} lacks it)"
        pytest.skip(
            f"needs the benchmark file {rel} (or {plain.name}), {why}; point {DATA_ENV} at "
            f"the benchmark data folder (make test uses ../shared/data)"
        )
    return home


@pytest.fixture(name="require_data")
def require_data_fixture():
    """:func:`require_data` for tests: ``home = require_data("uci/kin40k", split=0)``."""
    return require_data


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture
def toy1d(rng):
    X = rng.uniform(-3, 3, size=(80, 1))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.standard_normal(80)
    return X, y


@pytest.fixture(autouse=True)
def _seed_global_rngs():
    """Every test starts from the same torch and numpy global RNG state, so a test that
    draws without its own generator gives the same result alone, under ``-k`` or in the
    whole suite (and a Monte Carlo tolerance is checked on one fixed draw)."""
    torch.manual_seed(0)
    np.random.seed(0)

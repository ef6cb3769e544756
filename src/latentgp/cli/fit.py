"""``latentgp fit``: train a model on a dataset or CSV file and report its test metrics.

Inputs are z-scored with training statistics (unless ``--no-standardize``); the
statistics, feature names, target name, class labels and the training history are
stored in the model file (:mod:`latentgp.cli.modelfile`, :mod:`latentgp.cli.history`).
``--data big.parquet`` or a folder of shards trains from streamed data.  ``--nproc N``
trains data-parallel in N processes; ``--checkpoint`` writes resumable checkpoints.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

from latentgp.cli.common import (
    CONFIG_HELP,
    EXIT_OK,
    HELP_FORMAT,
    USAGE_ERRORS,
    CLIError,
    check_output_path,
    emit_json,
    fraction,
    metric_line,
    nonneg_int,
    out,
    positive_float,
    positive_int,
    seed_int,
    warn,
    write_json,
)
from latentgp.cli.datafiles import (
    class_count,
    csv_target,
    is_csv,
    load_fit_data,
    read_table,
    split_table,
)
from latentgp.cli.history import history_record, metric_trace
from latentgp.cli.modelfile import (
    apply_inputs,
    compute_metrics,
    save_model_file,
    standardizer_record,
)
from latentgp.cli.models import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_INDUCING,
    DEFAULT_LIKELIHOOD,
    MODEL_BUILDERS,
    ModelBuilder,
)

EPILOG = """\
examples:
  latentgp fit --data boston --out boston.pt --metrics boston.json
  latentgp fit --data uci/kin40k --split 3 --inducing 512 --lr 0.01
  latentgp fit --data boston --epochs 50    # a fixed budget instead of the convergence rule
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


def fit_kwargs(args: argparse.Namespace, builder: ModelBuilder, n: int) -> dict[str, Any]:
    """The keyword arguments of ``model.fit``: only what the options name (and a builder's
    own choices, where it has any), so that everything else (optimiser, learning rate,
    batch size, the stopping rule: e.g. SVGP's full-batch L-BFGS on small data) comes
    from the model's :meth:`~latentgp.GPModel.fit_defaults`, as in the Python API.
    ``n``: the training rows (a ``--batch-size`` above it is capped by ``fit``, with the
    warning of every front end)."""
    kw: dict[str, Any] = {"seed": args.seed, "progress": args.progress}
    optimizer = args.optimizer or builder.optimizer
    if optimizer:
        kw["optimizer"] = optimizer
    lr = args.lr if args.lr is not None else builder.lr
    if lr is not None:
        kw["lr"] = lr
    if args.batch_size is not None:
        if builder.minibatch:
            kw["batch_size"] = args.batch_size
        else:
            warn(f"--batch-size is ignored: --model {builder.name} trains on the full data")
    epochs = args.epochs
    if epochs is None and args.max_steps is None:
        epochs = builder.epochs
    if epochs is not None:
        kw["epochs"] = epochs
    if args.max_steps is not None:
        kw["max_steps"] = args.max_steps  # with --epochs: whichever comes first (fit)
    if getattr(args, "checkpoint", None):
        every = args.checkpoint_every or "100"
        try:
            if every.endswith("s"):
                kw["checkpoint_seconds"] = positive_float(every[:-1])
            else:
                kw["checkpoint_every"] = positive_int(every)
        except argparse.ArgumentTypeError as err:
            raise CLIError(f"--checkpoint-every: {err}") from None
        kw.update(checkpoint=args.checkpoint, resume=bool(args.resume))
    elif getattr(args, "resume", False):
        raise CLIError("--resume needs --checkpoint PATH (the checkpoint to continue from)")
    return kw


@contextlib.contextmanager
def graceful_stop() -> Iterator[Callable[[dict], None]]:
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


def fit_rank(args: argparse.Namespace) -> None:
    """Entry point of one process of ``latentgp fit --nproc N``."""
    args.nproc = 1
    status = cmd_fit(args)
    if status:
        raise SystemExit(status)


def cmd_fit(args: argparse.Namespace) -> int:
    """Run ``latentgp fit``."""
    from latentgp.training import distributed as dist

    builder = MODEL_BUILDERS[args.model]
    nproc = getattr(args, "nproc", 1) or 1
    if nproc > 1 and dist.world()[1] == 1:
        return spawn_fit(args, builder, nproc)
    dist.init_from_env()  # started by torchrun: join its process group
    if not dist.is_main():
        args.out = args.metrics = None
        args.json = False
        args.progress = False
    if is_stream_path(args.data) or streams_csv(args):
        return cmd_fit_stream(args, builder)
    check_output_path(args.out, "--out")
    check_output_path(args.metrics, "--metrics")
    check_names(args, builder)  # before reading (possibly large) data

    data = load_fit_data(args)
    n_train = int(data.X_train.shape[0])
    warn_constant_columns(data)
    limit = builder.training_limit()
    if limit is not None and n_train > limit:
        raise CLIError(
            f"--model {builder.name} accepts at most {limit} training points, "
            f"got {n_train}; {builder.too_large_hint}"
        )
    lik_name, likelihood = data_likelihood(args, data)
    record = input_record(args, data, data.task or likelihood.task)
    X_train = apply_inputs(data.X_train, record)
    X_test = apply_inputs(data.X_test, record)

    model = builder.build(args, likelihood)
    history, trace = train_model(
        args, builder, model, (X_train, data.y_train), (X_test, data.y_test)
    )
    record["history"] = history_record(history, trace)
    metrics = fit_metrics(args, builder, model, history, data, lik_name, (X_train, X_test))

    if args.out:
        save_model_file(model, args.out, record)
    if args.metrics:
        write_json(args.metrics, metrics)

    if args.json:
        emit_json(args, metrics, model=args.out, metrics=args.metrics)
        return EXIT_OK
    report_fit(args, builder, model, history, data.name, lik_name, metrics)
    return EXIT_OK


def spawn_fit(args: argparse.Namespace, builder: ModelBuilder, nproc: int) -> int:
    """``fit --nproc N``: train in N processes started here (rank 0 writes the outputs)."""
    from latentgp.training import distributed as dist

    if not builder.distributed:
        raise CLIError(f"--nproc needs a minibatch model; --model {builder.name} is not one")
    check_output_path(args.out, "--out")
    check_output_path(args.metrics, "--metrics")
    try:
        dist.spawn(fit_rank, nproc, args)
    except Exception as err:  # noqa: BLE001 - a worker's error, reported in one line
        raise worker_failure(err) from None
    return EXIT_OK


def worker_failure(err: Exception) -> Exception:
    """The error ``fit --nproc`` reports for a failed worker, in one line: a usage error
    (exit 2) when the worker refused the input as the single-process fit would, else a
    ``RuntimeError`` (exit 1: a failure while running, e.g. a worker killed by a signal
    or out of memory)."""
    lines = [ln.strip() for ln in str(err).strip().splitlines() if ln.strip()]
    last = lines[-1] if lines else type(err).__name__
    raised = last.split(":", 1)[0].rsplit(".", 1)[-1]
    if raised in {cls.__name__ for cls in USAGE_ERRORS}:
        return CLIError(f"a training process refused the input: {last.split(':', 1)[-1].strip()}")
    return RuntimeError(f"a training process failed: {last}")


def check_names(args: argparse.Namespace, builder: ModelBuilder) -> None:
    """Check the kernel and likelihood names; warn about an --inducing that is ignored."""
    import latentgp as lg

    lg.kernels.kernel_from_name(args.kernel)
    if args.likelihood is not None:
        lg.likelihoods.likelihood_from_name(args.likelihood)
    if args.inducing is not None and not builder.sparse:
        warn(f"--inducing is ignored: --model {builder.name} has no inducing points")


def warn_constant_columns(data: Any) -> None:
    """Warn about each input column that is constant in the training data."""
    from latentgp.validation import constant_columns

    for j in constant_columns(data.X_train):
        warn(
            f"input column {data.feature_names[j]!r} is constant ({data.X_train[0, j]:g}) in "
            "the training data and carries no information"
        )


def data_likelihood(args: argparse.Namespace, data: Any) -> tuple[str, Any]:
    """The likelihood's name and object: ``--likelihood`` or the task's default."""
    import latentgp as lg

    lik_name = args.likelihood or DEFAULT_LIKELIHOOD.get(data.task or "regression", "gaussian")
    likelihood = lg.likelihoods.likelihood_from_name(lik_name)
    if isinstance(likelihood, lg.likelihoods.Softmax):
        likelihood = lg.likelihoods.Softmax(num_classes=class_count(data))
    return lik_name, likelihood


def input_record(args: argparse.Namespace, data: Any, task: str) -> dict[str, Any]:
    """The model file's record of the inputs: standardisation, names, classes, origin."""
    x_mean, x_scale = standardizer_record(data.X_train, enabled=not args.no_standardize)
    return {
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


def train_model(
    args: argparse.Namespace, builder: ModelBuilder, model: Any,
    train_data: tuple[Any, Any], test_data: tuple[Any, Any],
) -> tuple[Any, Any]:
    """Fit ``model`` (stoppable by SIGINT/SIGTERM); its history and test-metric trace."""
    X_train, y_train = train_data
    X_test, y_test = test_data
    fit_kw = fit_kwargs(args, builder, int(X_train.shape[0]))
    trace = metric_trace(args, X_test, y_test, X_train, y_train)
    if trace is not None:
        fit_kw["callbacks"] = (trace,)
    with graceful_stop() as stop:
        fit_kw["callbacks"] = (*fit_kw.get("callbacks", ()), stop)
        model.fit(X_train, y_train, **fit_kw)
    history = model.history_
    if history.stopped.startswith("interrupted"):
        raise KeyboardInterrupt  # outputs are written only by a completed run
    if trace is not None:
        trace.record(int(history.steps), model)
    return history, trace


def fit_metrics(
    args: argparse.Namespace, builder: ModelBuilder, model: Any, history: Any, data: Any,
    lik_name: str, inputs: tuple[Any, Any],
) -> dict[str, Any]:
    """The metrics file: the run's settings and test metrics (training metrics without
    a test set); ``inputs`` are the standardised training and test inputs."""
    X_train, X_test = inputs
    n_train, n_test = int(data.X_train.shape[0]), int(data.X_test.shape[0])
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
    return metrics


def report_fit(
    args: argparse.Namespace, builder: ModelBuilder, model: Any, history: Any, name: str,
    lik_name: str, metrics: dict[str, Any],
) -> None:
    """The text report of a completed ``latentgp fit``."""
    n_train, n_test = metrics["n_train"], metrics["n_test"]
    what = f"{type(model).__name__} ({args.kernel} kernel, {lik_name} likelihood"
    what += f", {metrics['num_inducing']} inducing points)" if builder.sparse else ")"
    out(f"fitted {what} on {name}: {n_train} train / {n_test} test points")
    final = f"; final objective {history.objective[-1]:.6g}" if history.objective else ""
    out(
        f"  {history.steps} steps ({history.epochs:.3g} epochs) in {history.seconds:.2f} s"
        f"{final} [{history.stopped}]"
    )
    for event in history.events[:3]:
        out(f"  note: {event}")
    if n_test:
        out(f"  test   {metric_line(metrics)}")
    else:
        out(f"  no test set; on the training data: {metric_line(metrics)}")
    if args.out:
        out(f"  model written to {args.out}")
    if args.metrics:
        out(f"  metrics written to {args.metrics}")


def is_stream_path(data: str) -> bool:
    """Whether ``--data`` is always streamed (a Parquet file or a folder of shards)."""
    return str(data).endswith(".parquet") or os.path.isdir(str(data))


def streams_csv(args: argparse.Namespace) -> bool:
    """Whether ``--stream`` asks to stream a CSV ``--data`` (a usage error for a
    registry dataset)."""
    if not getattr(args, "stream", False) or is_stream_path(args.data):
        return False
    if not is_csv(args.data):
        raise CLIError(f"--stream applies to a CSV file; {args.data!r} is not one")
    return True


def cmd_fit_stream(args: argparse.Namespace, builder: ModelBuilder) -> int:
    """``fit --data big.parquet``, ``--data shards/`` or ``--data big.csv --stream``:
    train without loading the data.

    Inputs are standardised with statistics from one streaming pass; metrics are computed
    on ``--test-data`` (a CSV) if given, else on a random sample of 10,000 training rows.
    """
    import numpy as np

    import latentgp as lg
    from latentgp.data.streaming import CSVSource, ShardedArrays, StandardizedSource

    if not builder.distributed:
        raise CLIError(f"streaming data needs a minibatch model; --model {builder.name} is not")
    check_output_path(args.out, "--out")
    check_output_path(args.metrics, "--metrics")
    if streams_csv(args):
        source = CSVSource(args.data, target=csv_target(args.data, args.target))
    else:
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
    kw = fit_kwargs(args, builder, n)
    if getattr(args, "eval_every", None):
        warn("--eval-every is ignored for streamed data (the objective is still recorded)")
    with graceful_stop() as stop:
        kw["callbacks"] = (*kw.get("callbacks", ()), stop)
        model.fit(StandardizedSource(source, mean, scale), **kw)
    history = model.history_
    if history.stopped.startswith("interrupted"):
        raise KeyboardInterrupt  # outputs are written only by a completed run
    record["history"] = history_record(history, None)
    if args.test_data:
        table = read_table(args.test_data)
        Xte, yte, _, _ = split_table(table, args.target, args.test_data)
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
        write_json(args.metrics, metrics)
    if args.json:
        emit_json(args, metrics, model=args.out, metrics=args.metrics)
    else:
        out(
            f"fitted {type(model).__name__} on {n} streamed rows from {args.data}: "
            f"{history.steps} steps in {history.seconds:.2f} s [{history.stopped}]"
        )
        out(f"  {'test' if not prefix else 'train sample'} {metric_line(metrics)}")
    return EXIT_OK


def add_parser(sub: Any, common: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``fit`` command to the subparsers ``sub``."""
    models = ", ".join(f"{b.name} ({b.summary})" for b in MODEL_BUILDERS.values())
    p = sub.add_parser(
        "fit",
        parents=[common],
        help="train a model and report test metrics",
        description="Train a GP model on a dataset and report its test metrics.",
        epilog=EPILOG,
        formatter_class=HELP_FORMAT,
    )
    p.add_argument("--config", metavar="TOML", help=CONFIG_HELP)
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
        type=nonneg_int,
        metavar="K",
        help="dataset split; for a CSV the seed of the random split (default 0)",
    )
    g.add_argument(
        "--test-fraction",
        type=fraction,
        metavar="F",
        help="fraction of rows held out (CSV default 0.2; datasets: their own)",
    )
    g.add_argument(
        "--data-home", metavar="DIR", help="folder of data-home files (default $LATENTGP_DATA)"
    )
    g.add_argument(
        "--stream",
        action="store_true",
        help="train from a CSV --data without loading it (converted once to .npy shards, "
        "as a Parquet file is; metrics on --test-data, else on 10,000 training rows)",
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
        "--mean",
        choices=("zero", "constant", "linear"),
        help="prior mean function of the latent GPs (default zero; not for sep, gfitc, "
        "slgp, qsgp)",
    )
    g.add_argument(
        "--inducing",
        type=positive_int,
        metavar="M",
        help=f"number of inducing points (default {DEFAULT_INDUCING})",
    )
    g = p.add_argument_group("training")
    g.add_argument(
        "--batch-size",
        type=positive_int,
        metavar="B",
        help=f"minibatch size, capped at N (default: the model's own, {DEFAULT_BATCH_SIZE} "
        "rows for SVGP; all rows where it trains with L-BFGS)",
    )
    g.add_argument(
        "--epochs",
        type=positive_int,
        metavar="E",
        help="passes over the data (default: train until converged, see 'stop' in the "
        "report)",
    )
    g.add_argument(
        "--max-steps", type=positive_int, metavar="S",
        help="cap on the number of optimiser steps (default: until converged)",
    )
    g.add_argument(
        "--lr",
        type=positive_float,
        metavar="LR",
        help="learning rate (default: the model's own: 0.01 for SVGP's adam, 1.0 for "
        "L-BFGS); a rate given without --optimizer trains SVGP with adam at any size",
    )
    g.add_argument(
        "--optimizer",
        choices=("adam", "adadelta", "sgd", "lbfgs", "natural"),
        help="optimiser (default: the model's own: lbfgs for exact and VFE, and for SVGP, "
        "SHGP and SVHGP on up to 1,024 rows with a closed-form or quadrature ELBO; natural "
        "for a Poisson SVGP on more rows; adam otherwise); natural: natural-gradient steps "
        "on a Gaussian q(u) with adam on the hyperparameters (SVGP and the modulated GPs; "
        "natural rate 1 in full batch for a Gaussian likelihood, else 0.1, after a 5-step "
        "warm-up for other likelihoods)",
    )
    g.add_argument("--seed", type=seed_int, default=0, help="random seed (default 0)")
    g.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show a progress bar (default: only on an interactive terminal)",
    )
    g.add_argument(
        "--eval-every",
        type=positive_int,
        metavar="K",
        help="record the test metrics every K steps (stored in the model file's training "
        "history; 'latentgp plot --kind metrics' draws them)",
    )
    g = p.add_argument_group("scale-out and fault tolerance")
    g.add_argument(
        "--nproc",
        type=positive_int,
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
    p.set_defaults(func=cmd_fit)
    return p

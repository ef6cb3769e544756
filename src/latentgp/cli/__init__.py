"""The ``latentgp`` command line: fit, predict, evaluate, plot, reproduce, list datasets.

::

    latentgp fit --data boston --model svgp --inducing 128 --epochs 20 --out boston.pt
    latentgp fit --config run.toml                # the same options from a TOML file
    latentgp predict --model-file boston.pt --data new_points.csv --out predictions.csv
    latentgp evaluate --model-file boston.pt --data boston --metrics metrics.json
    latentgp plot --model-file boston.pt --data boston --kind calibration --out c.png
    latentgp reproduce sep_reproduction --quick
    latentgp datasets list

This package is wiring only: it parses arguments, reads data through
:mod:`latentgp.datasets`, builds a model from :data:`~latentgp.cli.models.MODEL_BUILDERS`,
calls ``fit`` / ``predict_y`` / ``log_predictive_density`` and :mod:`latentgp.metrics`,
and writes files.

Layout
------
One module per command -- :mod:`~latentgp.cli.fit`, :mod:`~latentgp.cli.predict`,
:mod:`~latentgp.cli.evaluate`, :mod:`~latentgp.cli.datasets`, :mod:`~latentgp.cli.plot`,
:mod:`~latentgp.cli.reproduce` -- each with an ``add_parser(sub, common)`` and a
``cmd_*(args)`` function; :mod:`~latentgp.cli.app` builds the parser and holds
:func:`main`.  They share, importing downwards only: :mod:`~latentgp.cli.common` (exit
statuses, errors, output, atomic files, option types), :mod:`~latentgp.cli.datafiles`
(datasets and CSV files), :mod:`~latentgp.cli.modelfile` (model files and their
preprocessing record, metrics), :mod:`~latentgp.cli.history` (the training record),
:mod:`~latentgp.cli.models` (the ``--model`` values) and :mod:`~latentgp.cli.config`
(``--config`` TOML files).  No module imports torch at import time, so ``latentgp
--help``, ``--version`` and ``datasets list`` start quickly; the commands import the
library when they run.

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
  :func:`~latentgp.cli.history.history_record`): the objective per step (thinned to at
  most :data:`~latentgp.cli.history.MAX_TRACE_POINTS` points), steps, epochs, seconds,
  why training stopped, and with ``fit --eval-every K`` the test metrics every K steps.
  ``latentgp plot`` draws them.
* ``--config FILE.toml`` (fit, predict, evaluate, plot) reads options from a TOML file
  (:mod:`latentgp.cli.config`).
* ``--json`` prints one JSON object on stdout and nothing else: the results, the paths
  written (``"outputs"``) and the wall time (``"seconds"``).  Progress bars and script
  output go to stderr, only when it is a terminal (``--progress`` forces them).
"""

from __future__ import annotations

from latentgp.cli.app import build_parser, main
from latentgp.cli.common import CLIError, atomic_write
from latentgp.cli.modelfile import compute_metrics, load_model_file, save_model_file
from latentgp.cli.models import MODEL_BUILDERS, ModelBuilder, register_model_builder

__all__ = [
    "MODEL_BUILDERS",
    "CLIError",
    "ModelBuilder",
    "atomic_write",
    "build_parser",
    "compute_metrics",
    "load_model_file",
    "main",
    "register_model_builder",
    "save_model_file",
]

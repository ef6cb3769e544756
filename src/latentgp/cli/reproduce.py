"""``latentgp reproduce NAME``: re-run one seed experiment script from ``benchmarks/``.

The scripts ship with the source repository (not with a wheel).  They are found in
``--benchmarks-dir``, else ``$LATENTGP_BENCHMARKS``, else ``benchmarks/`` next to the
source tree of an editable install (the repository root is two folders above
``src/latentgp``).  Each runs as a subprocess of the current interpreter, from the
repository root; scripts with a separate report step (``--report``) get a second run that
writes the results page.  Arguments after ``--`` go to the experiment run.

The results pages are written where each script writes them (``docs/results/`` of the
repository); ``--quick`` runs are smoke runs with tiny budgets, and all but
``sparse_reproduction`` (which writes a quick run to a temporary folder) then overwrite
the pages with their smoke-run numbers.  ``--results-dir`` redirects the page of the
scripts that support it.  The child's output is shown on stderr when stderr is a
terminal (or with ``--progress``) and kept quiet otherwise; on failure its last lines
are shown.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from latentgp.cli.common import (
    EXIT_FAILURE,
    EXIT_OK,
    HELP_FORMAT,
    PROG,
    CLIError,
    emit_json,
    out,
)

QUICK = "{quick}"


@dataclass(frozen=True)
class Experiment:
    """One reproducible experiment.

    Attributes
    ----------
    name: the ``NAME`` of ``latentgp reproduce``; script: file in ``benchmarks/``.
    summary: one line for ``--list``.
    runs: argument lists, one subprocess each, in order; :data:`QUICK` marks where
        ``--quick`` goes (dropped without ``--quick``).
    pages: results pages written (relative to the repository root).
    results_dir: ``(option, file name)`` when the script can write its page elsewhere:
        ``--results-dir DIR`` becomes ``option DIR/file name``.
    quick_overwrites: whether a ``--quick`` run writes over the repository's pages.
    """

    name: str
    script: str
    summary: str
    pages: tuple[str, ...]
    runs: tuple[tuple[str, ...], ...] = ((QUICK,),)
    results_dir: tuple[str, str] | None = None
    quick_overwrites: bool = True


EXPERIMENTS: dict[str, Experiment] = {
    e.name: e
    for e in (
        Experiment(
            "sparse_reproduction",
            "sparse_reproduction.py",
            "seed 004: SoR/DTC/FITC/VFE on the 1-D toy and UCI, vs GPflow (--quick: temp dir)",
            ("docs/results/sparse.md",),
            quick_overwrites=False,
        ),
        Experiment(
            "savigp_reproduction",
            "savigp_reproduction.py",
            "seed 000: SAVIGP Table 1 and figures on the paper's data",
            ("docs/results/savigp.md",),
        ),
        Experiment(
            "sep_reproduction",
            "sep_reproduction.py",
            "seed 002: scalable EP classification (SEP, GFITC, SVGP), then the report",
            ("docs/results/sep.md",),
            runs=((QUICK,), ("--report",)),
        ),
        Experiment(
            "qsgp_reproduction",
            "qsgp_reproduction.py",
            "seed 001: QSGP Tables 2 and 3, QSRVM, augmentation figure, digits",
            ("docs/results/qsgp_reproduction.md",),
        ),
        Experiment(
            "qsgp_scaling",
            "qsgp_scaling.py",
            "seed 001: QSGP per-step time and memory against m and N",
            ("docs/results/qsgp_scaling.md",),
        ),
        Experiment(
            "modulated_reproduction",
            "modulated_reproduction.py",
            "seed 003: SHGP, SMGP, SLGP, SVHGP and SVGP on toys, UCI, digits, then the report",
            ("docs/results/modulated.md",),
            runs=((QUICK,), ("--report",)),
        ),
        Experiment(
            "slgp_diagnostic",
            "slgp_diagnostic.py",
            "seed 003: SLGP on housing, test/train NLL and noise against steps "
            "(--early-stop: with EarlyStopping)",
            ("docs/results/modulated.md",),
        ),
        Experiment(
            "svgp_performance",
            "svgp_performance.py",
            "SVGP step time and accuracy against GPyTorch and GPflow",
            ("docs/results/performance.md",),
            results_dir=("--out", "performance.md"),
        ),
        Experiment(
            "svgp_scaling",
            "svgp_scaling.py",
            "SVGP epoch time over 1e4..1e7 streamed points and step time against M",
            ("docs/results/scaling.md",),
        ),
        Experiment(
            "scaleout",
            "scaleout.py",
            "data-parallel SVGP with 1 and 2 processes; out-of-core Parquet epoch",
            ("docs/results/scale-out.md",),
        ),
        Experiment(
            "sep_streaming_memory",
            "sep_streaming_memory.py",
            "SEP's peak memory over 10^5 and 10^6 rows from Parquet vs the rows in memory",
            ("docs/results/sep_streaming_memory.md",),
            results_dir=("--out", "sep_streaming_memory.md"),
        ),
        Experiment(
            "core_step_speed",
            "core_step_speed.py",
            "step and prediction time of every family before and after the one-core change",
            ("docs/results/core_step_speed.md",),
            results_dir=("--out", "core_step_speed.md"),
        ),
        Experiment(
            "step_profile",
            "step_profile.py",
            "where the SVGP step's time goes; torch.compile, a fused ELBO, float32 vs peers",
            ("docs/results/step_profile.json",),
            results_dir=("--out", "step_profile.json"),
        ),
        Experiment(
            "exact_gp",
            "exact_gp.py",
            "exact GP up to N = 10^4: objective evaluation, fit and prediction time",
            ("docs/results/exact_gp.md",),
            results_dir=("--out", "exact_gp.md"),
        ),
        Experiment(
            "defaults",
            "defaults.py",
            "issue 30: each family's default fit (until converged) against a tuned run, on "
            "real sets (--quick: mcycle only)",
            ("docs/results/defaults.md",),
            results_dir=("--out", "defaults.md"),
        ),
        Experiment(
            "exact_conditioning",
            "exact_conditioning.py",
            "ExactGP.condition_on at N = 5,000 + 50 against a new Cholesky (--quick: printed)",
            ("docs/results/exact_conditioning.md",),
            quick_overwrites=False,
        ),
        Experiment(
            "bo_benchmark",
            "bo_benchmark.py",
            "BoTorch qLogNEI on Hartmann-6 and Branin: latentgp ExactGP vs SingleTaskGP "
            "(needs latentgp[bo]; --quick: printed)",
            ("docs/results/bo_benchmark.md",),
            quick_overwrites=False,
        ),
        Experiment(
            "bo_fit_agreement",
            "bo_fit_agreement.py",
            "issue 28: default_model's fit against SingleTaskGP's on 30 Hartmann-6 sets "
            "(needs latentgp[bo]; --quick: 3 sets, printed)",
            ("docs/results/bo_fit_agreement.md",),
            quick_overwrites=False,
        ),
        Experiment(
            "parity",
            "parity.py",
            "issue 25: LMC, negative binomial, ordinal and spectral mixture against GPflow "
            "and GPyTorch on real data (needs the peers' environments; --quick: temp dir)",
            ("docs/results/parity.md",),
            results_dir=("--out", "parity.md"),
            quick_overwrites=False,
        ),
        Experiment(
            "batched_gps",
            "batched_gps.py",
            "issue 28: 1,000 independent exact GPs in one BatchedExactGP fit against a loop "
            "(--quick: 40 members, printed)",
            ("docs/results/batched_gps.md",),
            quick_overwrites=False,
        ),
        Experiment(
            "restarts",
            "restarts.py",
            "issue 28: ExactGP with restarts against scikit-learn's 10 restarts on 26 small "
            "real sets (--quick: 3 sets, printed)",
            ("docs/results/restarts.md",),
            quick_overwrites=False,
        ),
        Experiment(
            "sklearn_small",
            "sklearn_small.py",
            "issue 24: the scikit-learn estimators' default fits on small data "
            "(--quick: the 30-row cells, printed)",
            ("docs/results/sklearn_small.md",),
            quick_overwrites=False,
        ),
        Experiment(
            "time_to_accuracy",
            "time_to_accuracy.py",
            "issue 24: time until a test NLPD for latentgp, GPyTorch and GPflow with Adam "
            "and natural gradients (--quick: elevators and poisson-draw, M=64, temp dir)",
            ("docs/results/time_to_accuracy.md",),
            results_dir=("--out", "time_to_accuracy.md"),
            quick_overwrites=False,
        ),
        Experiment(
            "deepgp_uci",
            "deepgp_uci.py",
            "issue 26: DeepGP with 1-3 layers on UCI housing, concrete, energy "
            "(--quick: housing, 200 steps, printed)",
            ("docs/results/deep.md",),
            runs=((QUICK,), ("--report",)),
            quick_overwrites=False,
        ),
        Experiment(
            "gplvm",
            "gplvm.py",
            "issue 26: BayesianGPLVM latent spaces of digits and USPS against PCA and GPflow "
            "(--quick: 200 digits, printed)",
            ("docs/results/gplvm.md",),
            runs=((QUICK,), ("--report",)),
            quick_overwrites=False,
        ),
        Experiment(
            "exact_at_scale",
            "exact_at_scale.py",
            "issue 26: ExactGP's iterative path (CG, SLQ) against the Cholesky path on "
            "uci/kin40k (--quick: 1,000 rows, printed)",
            ("docs/results/exact_at_scale.md",),
            quick_overwrites=False,
        ),
        Experiment(
            "exact_cg_record",
            "exact_cg_record.py",
            "issue 26: CG iterations of an exact GP's evaluation on uci/protein against N "
            "and preconditioner rank (--quick: 1,000 and 2,000 rows, temporary folder)",
            ("docs/results/exact_cg_record.md",),
            quick_overwrites=False,
        ),
        Experiment(
            "exact_cholesky_memory",
            "exact_cholesky_memory.py",
            "issue 26: memory and time of one Cholesky-path evaluation of an exact GP with "
            "its gradient, block-wise against autograd through the kernel, at N = 2,100, "
            "5,000 and 10^4 of uci/kin40k (--quick: 500 and 1,000 rows, printed)",
            ("docs/results/exact_cholesky_memory.md",),
            quick_overwrites=False,
        ),
        Experiment(
            "holdout_rule",
            "holdout_rule.py",
            "the held-out stopping rule: 10 against 20 held-out rows and four selection "
            "rules for the default SLGP on the 90-row toy and mcycle, 20 seeds each "
            "(--quick: two toy seeds, printed)",
            ("docs/results/holdout_rule.md",),
            runs=(("--data", "toy", "--min-rows", "10", QUICK),
                  ("--data", "toy", "--min-rows", "20", QUICK),
                  ("--data", "mcycle", "--min-rows", "10", QUICK),
                  ("--data", "mcycle", "--min-rows", "20", QUICK),
                  ("--render",)),
            quick_overwrites=False,
        ),
        Experiment(
            "exact_trained",
            "exact_trained.py",
            "issue 26: an exact GP trained on all 41,157 rows of uci/protein split 0 (subset "
            "pretrain, CG fine-tune) beside SVGP M = 1,024 (--quick: 2,000 rows, printed)",
            ("docs/results/exact_at_scale.md",),
            runs=((QUICK, "--part", "exact"), (QUICK, "--part", "svgp")),
            quick_overwrites=False,
        ),
        Experiment(
            "bo_heteroscedastic",
            "bo_heteroscedastic.py",
            "BoTorch qLogNEI on a heteroscedastic Branin: SHGP vs SingleTaskGP "
            "(needs latentgp[bo]; --quick: printed)",
            ("docs/results/bo_heteroscedastic.md",),
            quick_overwrites=False,
        ),
    )
}

EPILOG = """\
examples:
  latentgp reproduce --list
  latentgp reproduce sep_reproduction --quick
  latentgp reproduce svgp_performance --quick --results-dir /tmp/perf -- --peers latentgp
  latentgp reproduce qsgp_scaling --dry-run --json

The scripts live in the repository's benchmarks/ folder (found next to an editable
install, or give --benchmarks-dir / set LATENTGP_BENCHMARKS).  Full runs take from
minutes to hours; --quick runs tiny budgets and overwrites the results pages with
smoke-run numbers (except sparse_reproduction, which then writes to a temporary folder).
"""


def add_parser(sub: Any, common: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``reproduce`` command to the subparsers ``sub``."""
    p = sub.add_parser(
        "reproduce",
        parents=[common],
        help="re-run a benchmarks/ experiment and write its page",
        description="Re-run one experiment script from benchmarks/ (see --list).\n"
        "Arguments after '--' go to the script: latentgp reproduce NAME [options] [-- ARGS]",
        epilog=EPILOG,
        formatter_class=HELP_FORMAT,
    )
    p.add_argument("name", nargs="?", metavar="NAME", help="experiment (see --list)")
    p.add_argument("--list", action="store_true", help="list the experiments and exit")
    p.add_argument("--quick", action="store_true", help="tiny budgets (a smoke run)")
    p.add_argument("--benchmarks-dir", metavar="DIR", help="the benchmarks/ folder")
    p.add_argument("--results-dir", metavar="DIR", help="write the page here (if supported)")
    p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show the script's output on stderr (default: when stderr is a terminal)",
    )
    p.add_argument("--json", action="store_true", help="print a JSON summary")
    p.set_defaults(func=cmd_reproduce, script_args=[])
    return p


def benchmarks_dir(explicit: str | None = None) -> Path:
    """The benchmarks folder: ``explicit``, ``$LATENTGP_BENCHMARKS`` or the source tree's."""
    given = explicit or os.environ.get("LATENTGP_BENCHMARKS")
    if given:
        path = Path(given)
        if not path.is_dir():
            origin = "--benchmarks-dir" if explicit else "LATENTGP_BENCHMARKS"
            raise CLIError(f"{origin} {given!r} is not a folder")
        return path
    import latentgp

    path = Path(latentgp.__file__).resolve().parents[2] / "benchmarks"
    if not path.is_dir():
        raise CLIError(
            f"cannot find the benchmarks folder (looked in {str(path)!r}); the scripts ship "
            "with the source repository: give --benchmarks-dir DIR or set LATENTGP_BENCHMARKS"
        )
    return path


def commands(exp: Experiment, bench: Path, args: argparse.Namespace) -> list[list[str]]:
    """The subprocess command lines of one reproduction."""
    script = str(bench / exp.script)
    extra = list(args.script_args or [])
    if args.results_dir:
        if exp.results_dir is None:
            able = [e.name for e in EXPERIMENTS.values() if e.results_dir]
            raise CLIError(
                f"{exp.name} writes its page into docs/results only; --results-dir works "
                f"with: {', '.join(able)}"
            )
        option, filename = exp.results_dir
        extra += [option, str(Path(args.results_dir) / filename)]
    out = []
    for i, run in enumerate(exp.runs):
        argv = [a for a in run if a != QUICK]
        if QUICK in run and args.quick:
            argv.insert(run.index(QUICK), "--quick")
        if i == 0:
            argv += extra
        out.append([sys.executable, script, *argv])
    return out


def _snapshot(folders: list[Path]) -> dict[str, tuple[int, int]]:
    files = {}
    for folder in folders:
        if folder.is_dir():
            for p in folder.rglob("*"):
                if p.is_file():
                    st = p.stat()
                    files[str(p)] = (st.st_mtime_ns, st.st_size)
    return files


def _run(cmd: list[str], cwd: Path, show: bool, tail: collections.deque) -> int:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            tail.append(line.rstrip("\n"))
            if show:
                sys.stderr.write(line)
                sys.stderr.flush()
        return proc.wait()
    except BaseException:  # Ctrl-C: stop the script, then report the interrupt
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        raise


def _list_experiments(args: argparse.Namespace) -> None:
    """``reproduce --list``: the experiments, as text or JSON."""
    if args.json:
        rows = [
            {"name": e.name, "script": e.script, "summary": e.summary, "pages": e.pages}
            for e in EXPERIMENTS.values()
        ]
        emit_json(args, {"experiments": rows})
    else:
        width = max(len(n) for n in EXPERIMENTS)
        for e in EXPERIMENTS.values():
            out(f"{e.name.ljust(width)}  {e.summary}")


def _experiment(args: argparse.Namespace) -> Experiment:
    """The experiment named on the command line; an error for a missing or unknown name."""
    names = ", ".join(EXPERIMENTS)
    if args.name is None:
        raise CLIError(f"give an experiment NAME or --list; the experiments: {names}")
    if args.name not in EXPERIMENTS:
        raise CLIError(f"unknown experiment {args.name!r}; choose one of: {names}")
    return EXPERIMENTS[args.name]


def _prepare_results(args: argparse.Namespace, exp: Experiment) -> None:
    """Create ``--results-dir``; warn when a --quick run overwrites committed results."""
    if args.results_dir and not os.path.isdir(args.results_dir):
        os.makedirs(args.results_dir, exist_ok=True)
    if args.quick and exp.quick_overwrites and not args.results_dir:
        print(
            f"{PROG}: warning: a --quick run of {exp.name} writes its smoke-run numbers "
            f"over {', '.join(exp.pages)} (git restores them)",
            file=sys.stderr,
        )


def _run_commands(exp: Experiment, cmds: list[list[str]], root: Path, show: bool) -> int:
    """Run ``cmds`` in turn; on a failure report it and return EXIT_FAILURE."""
    tail: collections.deque = collections.deque(maxlen=20)
    for c in cmds:
        if show:
            print(f"{PROG}: running {' '.join(c)}", file=sys.stderr)
        code = _run(c, root, show, tail)
        if code != 0:
            if not show:
                for line in tail:
                    print(line, file=sys.stderr)
            print(
                f"{PROG}: error: {exp.name} failed (exit status {code}) in: {' '.join(c)}",
                file=sys.stderr,
            )
            return EXIT_FAILURE
    return EXIT_OK


def cmd_reproduce(args: argparse.Namespace) -> int:
    """Run ``latentgp reproduce``."""
    if args.list:
        _list_experiments(args)
        return EXIT_OK
    exp = _experiment(args)
    bench = benchmarks_dir(args.benchmarks_dir)
    if not (bench / exp.script).is_file():
        raise CLIError(f"{bench / exp.script} does not exist")
    cmds = commands(exp, bench, args)
    root = bench.parent
    summary: dict[str, Any] = {
        "name": exp.name,
        "script": str(bench / exp.script),
        "quick": bool(args.quick),
        "commands": cmds,
    }
    if args.dry_run:
        if args.json:
            emit_json(args, summary)
        else:
            for c in cmds:
                out(" ".join(c))
        return EXIT_OK
    _prepare_results(args, exp)
    watch = [root / "docs" / "results"] + ([Path(args.results_dir)] if args.results_dir else [])
    before = _snapshot(watch)
    show = args.progress if args.progress is not None else sys.stderr.isatty()
    t0 = time.perf_counter()
    if _run_commands(exp, cmds, root, show) != EXIT_OK:
        return EXIT_FAILURE
    after = _snapshot(watch)
    written = sorted(p for p, sig in after.items() if before.get(p) != sig)
    summary.update(written=written, returncode=0)
    if args.json:
        emit_json(args, summary)
    else:
        out(f"reproduced {exp.name} in {time.perf_counter() - t0:.1f} s")
        for p in written:
            out(f"  wrote {os.path.relpath(p)}")
    return EXIT_OK

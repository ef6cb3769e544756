"""Where do two BO runs of the BO benchmark part ways?  A diagnostic for issue 28.

Runs the BO loop of ``bo_benchmark.py`` (Hartmann-6, 10 Sobol points, qLogNEI,
``optimize_acqf``) for ``latentgp.default_model`` and ``botorch.SingleTaskGP`` on one seed
with ``cache_root=False`` for both (the wrapped latentgp model cannot use BoTorch's cached
root decomposition, so in the benchmark the two acquisition functions draw their
Monte Carlo samples differently), and reports, per iteration, the distance between the
two points chosen and the two fits' largest relative lengthscale difference on the
same data (the latentgp run's data).

    .venv/bin/python benchmarks/bo_trajectories.py --seed 4 [--iterations 40]

Prints JSON (the iterations where the chosen points first differ by more than 1e-3 and
0.1 in the unit cube, the final regrets, and the per-iteration rows).
"""

from __future__ import annotations

import argparse
import json
import warnings

import torch
from botorch.acquisition.logei import qLogNoisyExpectedImprovement
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from botorch.optim import optimize_acqf
from botorch.sampling.normal import SobolQMCNormalSampler
from botorch.test_functions import Hartmann
from gpytorch.mlls import ExactMarginalLogLikelihood

from latentgp.botorch import default_model


def fit_singletask(X, y):
    model = SingleTaskGP(X, y)
    fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
    return model


def next_point(model, X, unit, args):
    acqf = qLogNoisyExpectedImprovement(
        model, X_baseline=X, sampler=SobolQMCNormalSampler(torch.Size([128])),
        cache_root=False,
    )
    x, _ = optimize_acqf(acqf, bounds=unit, q=1, num_restarts=args.restarts,
                         raw_samples=args.raw)
    return x


def run(args) -> dict:
    f = Hartmann(dim=6, negate=True)
    unit = torch.stack([torch.zeros(6), torch.ones(6)]).double()
    X0 = torch.quasirandom.SobolEngine(6, scramble=True, seed=args.seed).draw(10).double()
    data = {name: (X0.clone(), f(X0).unsqueeze(-1)) for name in ("latentgp", "botorch")}
    fits = {"latentgp": default_model, "botorch": fit_singletask}
    rows, first, first_far = [], None, None
    # one generator state per run, as the benchmark seeds each run alike
    states = {name: None for name in fits}
    for it in range(args.iterations):
        chosen = {}
        for name, fit in fits.items():
            X, y = data[name]
            with torch.random.fork_rng():
                if states[name] is None:
                    torch.manual_seed(args.seed)
                else:
                    torch.set_rng_state(states[name])
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    chosen[name] = next_point(fit(X, y), X, unit, args)
                states[name] = torch.get_rng_state()
            data[name] = (torch.cat([X, chosen[name]]), torch.cat([y, f(chosen[name])[:, None]]))
        Xl, yl = data["latentgp"][0][:-1], data["latentgp"][1][:-1]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ls_b = fit_singletask(Xl, yl).covar_module.lengthscale.detach()[0]
        ls_l = default_model(Xl, yl).wrapped.kernel.lengthscale.detach()
        gap = float((chosen["latentgp"] - chosen["botorch"]).norm())
        if first is None and gap > 1e-3:
            first = it
        if first_far is None and gap > 0.1:
            first_far = it
        rows.append({"iteration": it, "point_distance": gap,
                     "lengthscale_rel_diff": float(((ls_l - ls_b).abs() / ls_b).max())})
    regret = {name: float(f.optimal_value) - float(d[1].max()) for name, d in data.items()}
    return {"seed": args.seed, "first_iteration_apart_1e-3": first,
            "first_iteration_apart_0.1": first_far, "regret": regret, "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=4)
    ap.add_argument("--iterations", type=int, default=40)
    ap.add_argument("--restarts", type=int, default=5)
    ap.add_argument("--raw", type=int, default=256)
    print(json.dumps(run(ap.parse_args()), indent=1))


if __name__ == "__main__":
    main()

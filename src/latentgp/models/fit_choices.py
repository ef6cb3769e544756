"""Which defaults a fit takes: a model's ``"automatic"`` defaults (see
:meth:`~latentgp.models.base.GPModel.fit_defaults`) apply to a fit that names no
optimiser, learning rate, batch size or budget.

Here, in the model layer, so that a model whose objective depends on which defaults are
in force (SAVIGP: Monte Carlo draws held fixed for a whole L-BFGS fit) decides it by the
same predicate as the fit engine (:mod:`latentgp.training.fit`, which uses this one).
"""

from __future__ import annotations

from typing import Any

__all__ = ["CHOICES", "automatic_defaults"]

#: the options whose explicit value sets aside a model's ``"automatic"`` defaults
CHOICES = ("optimizer", "lr", "batch_size", "epochs", "max_steps")


def automatic_defaults(defaults: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    """The defaults that apply to a fit with ``options`` (those of ``GPModel.fit``).

    A model's :meth:`~latentgp.models.base.GPModel.fit_defaults` may hold, under
    ``"automatic"``, the defaults of a fit that names none of :data:`CHOICES` (SVGP on
    small data: full-batch L-BFGS, see :data:`latentgp.models.svgp.FULL_BATCH_ROWS`);
    they replace the others for such a fit, and for a fit that names their optimiser (its
    learning rate, convergence rule, ``"fixed_inducing"`` and SAVIGP's ``"fixed_draws"``
    come with it).  A fit that names another optimiser, a learning rate, a batch size or
    a budget gets the others: an explicit choice is never overridden, nor taken and
    ignored."""
    defaults = dict(defaults)
    auto = defaults.pop("automatic", None)
    if auto is None:
        return defaults
    named = options.get("optimizer")
    if named is None:
        untouched = all(options.get(k) is None for k in CHOICES)
    else:
        untouched = isinstance(named, str) and named.lower() == auto["optimizer"]
    return dict(auto) if untouched else defaults

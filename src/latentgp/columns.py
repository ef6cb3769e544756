"""Column rules shared by the data layer and the model stack; imports nothing.

Both :class:`latentgp.data.Standardizer` and the input units of the models
(:func:`latentgp.parameters.column_unit`) must agree on which columns are constant, so
the rule lives here, below both: :mod:`latentgp.data` sits beside the model stack and
the models never import it.
"""

from __future__ import annotations

from typing import TypeVar

__all__ = ["CONSTANT_RTOL", "column_varies"]

#: a column whose range ``max - min`` is at most this fraction of its magnitude is
#: constant (exactly, or up to a few units in the last place of its values)
CONSTANT_RTOL = 1e-12

ArrayT = TypeVar("ArrayT")


def column_varies(lo: ArrayT, hi: ArrayT) -> ArrayT:
    """Whether columns with minima ``lo`` and maxima ``hi`` vary.

    Parameters
    ----------
    lo, hi : np.ndarray or torch.Tensor
        Column minima and maxima, shape ``(D,)`` (any matching shape works), in the
        units of the data.

    Returns
    -------
    np.ndarray or torch.Tensor
        Boolean, same shape and array type: ``hi - lo > CONSTANT_RTOL * (|lo| + |hi|)``.

    Constancy is read from the range, not from the standard deviation: the computed
    deviation of a constant column is the summation error of its mean (3.4e-21 for
    43,944 copies of -2.048e-05 in numpy, 6.8e-21 in torch), which a test on ``sd > 0``
    takes for a spread; the range involves no summation and is exactly 0.
    """
    return (hi - lo) > CONSTANT_RTOL * (abs(lo) + abs(hi))

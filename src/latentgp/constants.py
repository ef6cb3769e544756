"""Numerical constants shared across layers (imports nothing)."""

from __future__ import annotations

import math

#: ``log(2 pi)``, the constant of every Gaussian log density.
LOG_2PI = math.log(2.0 * math.pi)

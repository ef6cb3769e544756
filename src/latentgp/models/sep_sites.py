"""SEP's site store (a flat mixin of :class:`~latentgp.models.sep.SEP`): creating the EP
sites and the stochastic scheme's running sums, checking that they belong to the data,
counting and sharing their updates across processes, and the copies of them that a
checkpoint or a failed step's repair takes.

The sites are ``site_nu``, ``site_mu`` ``(N,)`` (and ``site_upsilon`` ``(N, M)`` for the
stochastic scheme), the running natural-parameter sums ``A`` ``(M, M)`` and ``c``
``(M,)``, and the counters ``site_updates_`` / ``skipped_updates_``.  The host (SEP)
provides ``dtype_``, ``device_``, ``num_inducing``, ``scheme`` and the ``nn.Module``
state; the maths that updates the sites is in SEP and :mod:`.ep_sites`.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

__all__ = ["SiteStore"]


class SiteStore:
    """The EP sites of a SEP model and their bookkeeping (see the module docstring)."""

    _SITE_STATE = ("site_nu", "site_mu", "site_upsilon", "A", "c")

    def reset_sites(self, num_data: int) -> None:
        """Start every site at ``nu = mu = 0`` (q = prior)."""
        kw = {"dtype": self.dtype_, "device": self.device_}
        self.site_nu = torch.zeros(num_data, **kw)
        self.site_mu = torch.zeros(num_data, **kw)
        M = self.num_inducing
        self.A = torch.zeros(M, M, **kw)
        self.c = torch.zeros(M, **kw)
        self.site_upsilon = torch.zeros(num_data, M, **kw) if self.scheme == "stochastic" else None
        self.skipped_updates_ = 0
        self.site_updates_ = 0

    def training_state(self) -> dict[str, Any]:
        """What a checkpoint holds of the model: parameters, sites, running sums, counters."""
        return {
            "model": self.state_dict(),
            "sites": {k: getattr(self, k) for k in self._SITE_STATE},
            "counters": [self.site_updates_, self.skipped_updates_],
        }

    def load_training_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`training_state` returned."""
        self.load_state_dict(state["model"])
        for k, v in state["sites"].items():
            setattr(self, k, None if v is None else v.to(device=self.device_, dtype=self.dtype_))
        self.site_updates_, self.skipped_updates_ = (int(v) for v in state["counters"])

    def _ensure_sites(self, N: int) -> None:
        if self.site_nu is None or self.site_nu.shape[0] != N:
            self.reset_sites(N)

    def _count(self, ok: torch.Tensor) -> None:
        self.site_updates_ += int(ok.numel())
        self.skipped_updates_ += int((~ok).sum())

    def _share_sites(self, targets, pos, nu, mu, upsilon, ok, reduce: Any, extra=None):
        """Write this process's new sites and receive everybody else's (data-parallel runs).

        ``targets``: the training rows being updated by all processes together (None: all
        N); ``pos``: the positions within ``targets`` of this process's ``nu, mu`` (and
        ``upsilon`` ``(|pos|, M)`` for the stochastic scheme, else None).  Each process
        contributes its rows (zeros elsewhere) to one summed message, so every process
        ends with the same sites and counters.  Returns the sum over processes of
        ``extra`` (None if not given).
        """
        T = self.site_nu.shape[0] if targets is None else targets.numel()
        M = self.num_inducing
        n_up = T * M if upsilon is not None else 0
        n_extra = 0 if extra is None else extra.numel()
        buf = self.site_nu.new_zeros(2 * T + n_up + 2 + n_extra)
        buf[pos] = nu
        buf[T + pos] = mu
        if upsilon is not None:
            buf[2 * T : 2 * T + n_up].view(T, M)[pos] = upsilon
        o = 2 * T + n_up
        buf[o] = ok.numel()
        buf[o + 1] = (~ok).sum()
        if extra is not None:
            buf[o + 2 :] = extra.reshape(-1)
        tot = reduce(buf)
        if targets is None:
            self.site_nu, self.site_mu = tot[:T].clone(), tot[T : 2 * T].clone()
        else:
            self.site_nu[targets] = tot[:T]
            self.site_mu[targets] = tot[T : 2 * T]
            if upsilon is not None:
                self.site_upsilon[targets] = tot[2 * T : o].view(T, M)
        self.site_updates_ += int(round(float(tot[o])))
        self.skipped_updates_ += int(round(float(tot[o + 1])))
        return None if extra is None else tot[o + 2 :].view_as(extra).clone()

    def _check_sites(self, N: int) -> None:
        if self.site_nu is None or self.site_nu.shape[0] != N:
            raise ValueError(
                f"the EP sites belong to {0 if self.site_nu is None else self.site_nu.shape[0]} "
                f"training points, but X has {N} rows: pass the training data"
            )

    def snapshot_training_state(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """A copy of the parameters, buffers, sites and running sums (to restore after a
        failed step)."""
        sites = {
            k: (None if getattr(self, k) is None else getattr(self, k).clone())
            for k in self._SITE_STATE
        }
        return copy.deepcopy(self.state_dict()), sites

    def restore_training_state(self, snapshot: tuple[dict[str, Any], dict[str, Any]]) -> None:
        """Put back what :meth:`snapshot_training_state` returned."""
        state, sites = snapshot
        self.load_state_dict(state)
        for k, v in sites.items():
            setattr(self, k, None if v is None else v.clone())

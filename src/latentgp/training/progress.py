"""A small terminal progress bar (no dependency): steps, objective, throughput, ETA."""

from __future__ import annotations

import sys
import time
from typing import TextIO


def _fmt_time(s: float) -> str:
    s = max(0, int(s))
    return (
        f"{s // 3600:d}:{s % 3600 // 60:02d}:{s % 60:02d}"
        if s >= 3600
        else f"{s // 60:02d}:{s % 60:02d}"
    )


class ProgressBar:
    """Redraws one line on ``stream`` at most every ``interval`` seconds.

    ``enabled=None`` shows it only when the stream is an interactive terminal.
    """

    def __init__(
        self,
        total: int,
        desc: str = "",
        enabled: bool | None = None,
        stream: TextIO | None = None,
        interval: float = 0.2,
        unit: str = "pts",
    ) -> None:
        self.stream = stream or sys.stderr
        if enabled is None:
            enabled = bool(getattr(self.stream, "isatty", lambda: False)())
        self.enabled = enabled
        self.total, self.desc, self.interval, self.unit = total, desc, interval, unit
        self.start = self.last = time.perf_counter()
        self.count = 0
        self.items = 0
        self._width = 0

    def update(self, n: int = 1, items: int = 0, **info: float) -> None:
        self.count += n
        self.items += items
        now = time.perf_counter()
        if self.enabled and (now - self.last >= self.interval or self.count >= self.total):
            self.last = now
            self._draw(now, info)

    def _draw(self, now: float, info: dict) -> None:
        el = now - self.start
        frac = self.count / self.total if self.total else 1.0
        bar = "#" * int(20 * frac) + "-" * (20 - int(20 * frac))
        rate = self.items / el if el > 0 else 0.0
        eta = el / frac - el if frac > 0 else 0.0
        extras = " ".join(f"{k}={v:.4g}" for k, v in info.items())
        line = (
            f"\r{self.desc} [{bar}] {self.count}/{self.total} {extras} "
            f"{rate:,.0f} {self.unit}/s {_fmt_time(el)}<{_fmt_time(eta)}"
        )
        pad = max(0, self._width - len(line))
        self._width = len(line)
        self.stream.write(line + " " * pad)
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self._draw(time.perf_counter(), {})
            self.stream.write("\n")
            self.stream.flush()

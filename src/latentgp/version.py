"""The library's version (imports nothing, so any layer may record it)."""

__version__ = "0.1.0"

"""``python -m latentgp ...``: the same as the ``latentgp`` command."""

from latentgp.cli import main

if __name__ == "__main__":
    raise SystemExit(main())

"""``python -m nlql``: the same as the ``nlql`` command."""

from __future__ import annotations

from nlql.cli import main

if __name__ == "__main__":
    main()

"""The ``compactor`` command line (needs the ``[cli]`` extra: click and rich).

:func:`main` is the console script. Without the extra it says what to install instead of failing
with an ``ImportError``; the commands themselves live in :mod:`progressive_compactor.cli.app`.
"""

from __future__ import annotations

import sys
from typing import Any

INSTALL_HINT = "pip install 'progressive-compactor[cli]'"


def main(args: Any = None, **kwargs: Any) -> Any:
    """Run the ``compactor`` command (``args``: the arguments, default ``sys.argv[1:]``)."""
    try:
        import click  # noqa: F401
        import rich  # noqa: F401
    except ImportError as exc:
        sys.stderr.write(
            f"error: the compactor command needs the [cli] extra ({exc.name} is not installed): {INSTALL_HINT}\n"
        )
        raise SystemExit(1) from None
    from .app import cli

    return cli.main(args, **kwargs)


__all__ = ["INSTALL_HINT", "main"]

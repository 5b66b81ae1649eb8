"""The command line of a Python child process BOO starts with ``python -c``.

``-c`` puts the working directory first on ``sys.path``: a child started in a directory
another user can write (a shared scratch directory, ``/tmp``) would import their
``boo_core`` or ``numpy`` instead of the installed one, as this user. BOO's children never
import from there: Python 3.11 and later are started with ``-P``, which leaves it out, and
older ones take it out first thing.
"""

from __future__ import annotations

import sys

__all__ = ["python_command"]

#: What a Python without ``-P`` runs first: the working directory off ``sys.path``.
_LEAVE_OUT_CWD = "import sys; sys.path = [p for p in sys.path if p != '']\n"


def python_command(program: str, *args: str) -> list[str]:
    """``python -c program args...`` with this interpreter, importing nothing from the
    working directory."""
    if sys.version_info >= (3, 11):
        return [sys.executable, "-P", "-c", program, *args]
    return [sys.executable, "-c", _LEAVE_OUT_CWD + program, *args]

"""A plain-text progress bar for long tool runs."""

from __future__ import annotations

import sys
from typing import TextIO


class ProgressBar:
    """``[#########...........]  9/20  note`` on ``stream``.

    On a terminal the line is redrawn in place; elsewhere (a log file, CI) a line is written
    at every tenth of the way, so logs stay short.
    """

    def __init__(self, total: int, stream: TextIO | None = None, width: int = 30) -> None:
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self._interactive = self.stream.isatty()
        self._last_tenth = -1

    def update(self, done: int, note: str = "") -> None:
        filled = self.width * done // self.total if self.total else self.width
        line = f"[{'#' * filled}{'.' * (self.width - filled)}] {done:>{len(str(self.total))}}/{self.total}  {note}"
        if self._interactive:
            self.stream.write(f"\r{line}\x1b[K")
        else:
            tenth = 10 * done // self.total if self.total else 10
            if tenth == self._last_tenth:
                return
            self._last_tenth = tenth
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self._interactive:
            self.stream.write("\n")
            self.stream.flush()

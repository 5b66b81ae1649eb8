"""What a plugin registers for one op."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .parser import CommandParser
from .signature import Signature

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


@dataclass(frozen=True)
class OpSpec:
    """One op, as a plugin hands it to ``register`` in :func:`boo_register_ops`.

    ``keywords`` are the base-argument stems the op owns: keyword ``conv`` claims ``conv``,
    ``convfp16``, ``convbfp16``... (keyword + a dtype suffix, matched exactly, never by
    substring). ``parser`` turns the flags after the base argument into signatures.
    """

    name: str
    keywords: tuple[str, ...]
    signature_class: type[Signature]
    parser: CommandParser
    description: str = ""

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"op name {self.name!r} must be lowercase letters, digits and _")
        if isinstance(self.keywords, str) or not self.keywords:
            raise ValueError(f"op {self.name!r}: keywords must be a non-empty tuple of strings")
        for keyword in self.keywords:
            if not _NAME.match(keyword):
                raise ValueError(f"op {self.name!r}: keyword {keyword!r} must be lowercase letters, digits and _")
        if not (isinstance(self.signature_class, type) and issubclass(self.signature_class, Signature)):
            raise TypeError(f"op {self.name!r}: signature_class must subclass boo_core.Signature")
        if not isinstance(self.parser, CommandParser):
            raise TypeError(f"op {self.name!r}: parser must be a boo_core.CommandParser instance")

"""The tuning database: one record per (signature, target, compiler version, device model),
in the cache directory (``<cache>/tuning/<func_name>-<digest>.json``), written atomically.

A record names the winning candidate (formulation, configuration, flags, or a kernel
library's substitution) and the times it was chosen by, PyTorch's own time for the same
kernel (``torch_us``: what torch.compile weighs BOO's winner against), and which library
substitutions were among the candidates. :func:`tuned_record` is what kernel selection and ``boo preload``
ask; a record made by another compiler, for another device model, or naming a formulation
or substitution no longer offered is not used.

A record's winner becomes compiler flags and executable edits, so records are trusted like
kernels: each is sealed under the cache's integrity key (:mod:`boo_core.kernels.integrity`)
for its own path, and its flags and configuration must be ones BOO's tuning spaces generate
(:mod:`.allowed`). A record that fails either check is ignored, with a warning naming it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..settings import get_settings
from . import owned
from .allowed_tunings import config_problem, flags_problem
from .cache import read_json_object
from .compiler import compiler_version
from .integrity import integrity_key, seal, unseal

if TYPE_CHECKING:
    from ..signatures.signature import Signature

logger = logging.getLogger(__name__)

TUNING_DIR = "tuning"
RECORD_FORMAT = 1


@dataclass(frozen=True)
class TuningRecord:
    """The winner of one tune, and what it was chosen by."""

    func_name: str
    signature: dict[str, Any]
    target: str
    compiler: str
    device: str
    formulation: str
    config: dict[str, Any] | None = None
    flags: tuple[str, ...] = ()
    label: str = ""
    time_us: float = 0.0
    default_time_us: float = 0.0
    created: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    substitution: str = ""  # the winner's library substitution, by digest ("": IREE's own kernels)
    library: tuple[str, ...] = ()  # every library substitution the tune timed, by digest
    torch_us: float = 0.0  # PyTorch's own kernel (Signature.eager) timed the same way; 0: not timed

    def to_json(self) -> dict[str, Any]:
        return {"format": RECORD_FORMAT, "func_name": self.func_name, "signature": self.signature,
                "target": self.target, "compiler": self.compiler, "device": self.device,
                "winner": {"formulation": self.formulation, "config": self.config, "flags": list(self.flags),
                           "label": self.label, "substitution": self.substitution},
                "library": list(self.library),
                "time_us": self.time_us, "default_time_us": self.default_time_us, "torch_us": self.torch_us,
                "created": self.created}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TuningRecord | None:
        try:
            winner = data["winner"]
            if data.get("format") != RECORD_FORMAT or not isinstance(winner, dict):
                return None
            config = winner.get("config")
            return cls(str(data["func_name"]), dict(data["signature"]), str(data["target"]), str(data["compiler"]),
                       str(data["device"]), str(winner["formulation"]), dict(config) if config else None,
                       tuple(str(f) for f in winner.get("flags", ())), str(winner.get("label", "")),
                       float(data.get("time_us", 0.0)), float(data.get("default_time_us", 0.0)),
                       str(data.get("created", "")), str(winner.get("substitution", "")),
                       tuple(str(d) for d in data.get("library", ())), float(data.get("torch_us", 0.0)))
        except (KeyError, TypeError, ValueError):
            return None


def tuning_dir(cache_dir: Path | None = None) -> Path:
    return (cache_dir or get_settings().cache_dir) / TUNING_DIR


def record_path(signature: Signature, target: str, device: str, compiler: str | None = None,
                cache_dir: Path | None = None) -> Path:
    """Where the record of ``signature`` on ``target`` and ``device`` lives."""
    material = json.dumps({"signature": signature.canonical(), "target": target, "device": device,
                           "compiler": compiler or compiler_version()}, sort_keys=True)
    digest = hashlib.sha256(material.encode()).hexdigest()[:24]
    return tuning_dir(cache_dir) / f"{signature.func_name[:64]}-{digest}.json"


def record_purpose(path: Path) -> str:
    """What a tuning record's seal is for: the record kept at that name."""
    return f"tuning record {path.name}"


def write_record(record: TuningRecord, signature: Signature, cache_dir: Path | None = None) -> Path:
    """Keep ``record`` for ``signature``, sealed under the cache's integrity key."""
    path = record_path(signature, record.target, record.device, record.compiler, cache_dir)
    secret = integrity_key(path.parent.parent, create=True) or b""
    sealed = seal(secret, record_purpose(path), record.to_json())
    return owned.write(path.parent.parent, path, json.dumps(sealed, indent=2, sort_keys=True) + "\n")


def load_record(path: Path) -> TuningRecord | None:
    """The record at ``path`` if it is well formed, sealed by this cache and asks only what
    BOO's tuning spaces generate; None (logged, when it exists) otherwise."""
    data = read_json_object(path)
    if data is None:
        return None
    record = TuningRecord.from_json(unseal(integrity_key(path.parent.parent), record_purpose(path), data) or {})
    problem = "it is not sealed by this cache's key (written by hand, by another user, or by another cache)" \
        if record is None else flags_problem(record.flags) or config_problem(record.config)
    if problem:
        logger.warning("tuning record %s is ignored: %s", path, problem)
        return None
    return record


def read_record(signature: Signature, target: str, device: str, cache_dir: Path | None = None) -> TuningRecord | None:
    """This compiler's record for ``signature`` on ``target`` and ``device``, if any."""
    record = load_record(record_path(signature, target, device, cache_dir=cache_dir))
    if record is None or record.compiler != compiler_version() or record.signature != signature.canonical():
        return None
    return record


def all_records(cache_dir: Path | None = None) -> list[TuningRecord]:
    """Every usable record in the database."""
    directory = tuning_dir(cache_dir)
    records = (load_record(path) for path in sorted(directory.glob("*.json"))) if directory.is_dir() else ()
    return [record for record in records if record is not None]


def tuned_record(signature: Signature, target: str, device: str) -> TuningRecord | None:
    """The record whose winner launches of ``signature`` on ``target`` and the device model
    ``device`` use (:func:`~boo_core.kernels.chain.plan_kernels` puts it first): None when
    tuned kernels are off (``BOO_USE_TUNED=0``), the cache is, or there is none."""
    settings = get_settings()
    if not settings.use_tuned or not settings.cache_enabled:
        return None
    return read_record(signature, target, device)

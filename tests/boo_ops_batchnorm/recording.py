"""Which signatures a fusion pattern asks BOO to build, recorded from the real method."""

from __future__ import annotations

import pytest


def record_signatures(monkeypatch: pytest.MonkeyPatch, pattern_class: type) -> list:
    """A list that fills with every signature ``pattern_class.signatures`` returns (the real
    method still runs) while ``monkeypatch`` is active."""
    found: list = []
    original = pattern_class.signatures

    def recording(self, spec, inputs):
        signatures = original(self, spec, inputs)
        found.extend(signatures)
        return signatures

    monkeypatch.setattr(pattern_class, "signatures", recording)
    return found

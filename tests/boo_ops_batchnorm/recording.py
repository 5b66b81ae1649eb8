"""What torch.compile's BOO backends did, recorded from the real functions: the signatures
a fusion pattern asks BOO to build, the graphs the backends rewrite."""

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


def record_graphs(monkeypatch: pytest.MonkeyPatch) -> dict:
    """A dict that fills with each graph the backends rewrite, by kind ("forward",
    "backward", "inference"; the graph object itself, as the rewrite leaves it)."""
    import boo_core.dynamo.backends as backends

    graphs: dict = {}
    real = backends.rewrite

    def recording(gm, **options):
        graphs[options["kind"]] = gm.graph
        return real(gm, **options)

    monkeypatch.setattr(backends, "rewrite", recording)
    return graphs

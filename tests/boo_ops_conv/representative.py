"""The conv sweeps' representative table: what CI runs of each grid, the rest under ``slow``.

A conv kernel's code path (its formulations, their order, the layout handling) is chosen by a
few features of its signature: :func:`conv_class`. CI runs the numerics matrix as a pairwise
table (every pair of rank, mode and layout family, in 12 of its 36 cases) and, of the corpus,
each class the numerics tables do not already run; ``pytest -m slow`` runs every case.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Iterable, Sequence

import pytest

from boo_ops_conv import ConvSignature


def _layout_family(signature: ConvSignature) -> str:
    layouts = (signature.input_layout, signature.kernel_layout, signature.output_layout)
    channels_last = [layout.endswith("C") for layout in layouts]
    if all(channels_last):
        return "last"
    if any(channels_last):
        return "mixed"
    return "first" if all(layout.startswith("N") for layout in layouts) else "other"


def conv_class(signature: ConvSignature) -> tuple[Hashable, ...]:
    """The features that select a conv kernel's formulations and code path."""
    kernel = signature.kernel_shape
    groups = "none" if signature.groups == 1 else (
        "depthwise" if kernel[1] == 1 and not signature.transposed else "grouped")
    return (len(signature.input_shape) - 2, signature.mode, signature.transposed, signature.dtype,
            _layout_family(signature), any(s != 1 for s in signature.stride), groups,
            all(w == 1 for w in signature.window), any(signature.padding))


def pairwise(ranks: Sequence, modes: Sequence, families: Sequence) -> set[tuple]:
    """Every (rank, mode) once, with the family that puts every (rank, family) and every
    (mode, family) pair in the table too (a Latin rectangle: needs len(families) == len(ranks)
    and len(modes) >= len(families))."""
    assert len(families) == len(ranks) <= len(modes)
    return {(rank, mode, families[(i + j) % len(families)])
            for (i, rank), (j, mode) in itertools.product(enumerate(ranks), enumerate(modes))}


def one_per_class(cases: Iterable[tuple[str, ConvSignature]], covered: Iterable[ConvSignature] = ()
                  ) -> list:
    """``pytest.param`` per case (id, signature): the first of each class not in ``covered``
    runs on CI, the others are ``slow``."""
    seen = {conv_class(signature) for signature in covered}
    params = []
    for case_id, signature in cases:
        key = conv_class(signature)
        params.append(pytest.param(signature, id=case_id, marks=pytest.mark.slow if key in seen else ()))
        seen.add(key)
    return params

"""boo_core.kernels.decompositions: an export keeps only the CIA operators its program calls,
and imports to the same MLIR as torch's own ``run_decompositions({})``."""

from __future__ import annotations

import threading

from torch.export import exported_program

from boo_core import BooOpRegistry, Target
from boo_core.kernels import decompositions, export
from boo_core.signatures.commands import collect_commands

#: First-party ops in each mode, through formulations that reach the ops they are built
#: from (matmuls, stacks, pads, reductions, the GPU's staged sums): (command, formulation, target).
CASES = [
    ("convbfp16 -n 2 -c 8 -H 10 -W 12 -k 16 -y 3 -x 3 -p 1 -q 1 -u 2 -v 2 -F 1 --in_layout NHWC --out_layout NHWC "
     "--fil_layout NHWC", "im2col", "cpu"),
    ("conv -n 2 -c 8 -H 10 -W 12 -k 16 -y 3 -x 3 -p 1 -q 1 -F 1", "explicit_pad", "cpu"),
    ("conv -n 2 -c 6 -H 9 -W 7 -k 4 -y 3 -x 2 -p 1 -q 0 -g 2 -F 2", "default", "cpu"),
    ("convfp16 -n 2 -c 4 -H 8 -W 8 -k 8 -y 1 -x 1 -u 2 -v 2 -F 4", "im2col_split32", "cpu"),
    ("gemmbfp16 -m 48 -k 32 -n 64 --transB 1", "padded", "cuda:sm_90"),
    ("layernormbfp16 --input 8x64 -o 1 -m 1 -F 1", "default", "cpu"),
    ("layernorm --input 4x6x32 -o 1 -m 1 -F 2", "default", "cpu"),
    ("bnormbfp16 -n 4 -c 16 -H 6 -W 6 -m 1 -F 1 -s 1 -r 1 -L NHWC", "staged_sums", "cuda:sm_90"),
    ("bnorm -n 4 -c 8 -H 5 -W 5 -m 1 -F 0 -b 1 -s 1", "staged_sums", "cuda:sm_90"),
    ("bnormfp16 -n 2 -c 8 -H 4 -W 4 -m 0 -F 2 -r 1", "default", "cpu"),
    ("CBAInferbfp16 -n 2 -c 8 -H 6 -W 6 -k 16 -y 3 -x 3 -p 1 -q 1 -F 0 -M 1 -m 3", "default", "cpu"),
]


def _exports():
    registry = BooOpRegistry.default()
    for command, name, target in CASES:
        signature = collect_commands([command])[0].parse().signatures[0]
        formulations = {f.name: f for f in registry.formulations(signature, Target.parse(target))}
        yield f"{command} [{name}]", signature, formulations[name].computation


def test_each_op_exports_to_the_mlir_of_torchs_own_decomposition(monkeypatch):
    assert decompositions._install(), "this torch's private CIA list moved: exports take the slow path"
    narrowed = {label: export.export_mlir(signature, computation) for label, signature, computation in _exports()}
    monkeypatch.setattr(export, "run_no_decompositions", lambda program: program.run_decompositions({}))
    differing = [label for label, signature, computation in _exports()
                 if export.export_mlir(signature, computation) != narrowed[label]]
    assert differing == []


def test_the_narrowed_list_is_seen_only_by_the_exporting_thread():
    assert decompositions._install()
    full = len(exported_program._collect_all_valid_cia_ops())
    seen_elsewhere = []
    decompositions._local.preserve = set()
    try:
        assert exported_program._collect_all_valid_cia_ops() == set()
        elsewhere = lambda: seen_elsewhere.append(len(exported_program._collect_all_valid_cia_ops()))  # noqa: E731
        other = threading.Thread(target=elsewhere)
        other.start()
        other.join()
    finally:
        decompositions._local.preserve = None
    assert full > 100
    assert seen_elsewhere == [full]
    assert len(exported_program._collect_all_valid_cia_ops()) == full

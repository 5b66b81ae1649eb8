"""The scale test op, for Ray cluster tests: where ``BOO_TEST_DIE_ONCE`` names a directory
(set for the cluster's workers only), the first process that builds a kernel whose size
is a multiple of 3 leaves a file named after the kernel there (holding its pid) and exits
at once, as a worker killed mid-task would; whoever builds it next finds the file and goes
on. Size 5 does not compile, anywhere.

For ``boo tune --ray``, sizes of 100 and more have a tuning space: a second formulation that
is wrong (x * 3), a configured one that is right but for size 101 only, and for size 104 a
flag set that iree-compile rejects (a candidate that fails alone).
"""

from __future__ import annotations

import os
from dataclasses import replace

from boo_core import Formulation, hookimpl
from boo_core.tune.space import TuningCandidate

from .broken_mlir import NONSENSE
from .scale_op import SPEC
from .wrong_kernel import triple


def formulations(signature, target):
    marks = os.environ.get("BOO_TEST_DIE_ONCE")
    if marks and signature.size % 3 == 0:
        try:
            fd = os.open(os.path.join(marks, signature.func_name), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            pass
        else:
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
            os._exit(17)
    if signature.size == 5:
        return (Formulation("broken", mlir=lambda: NONSENSE),)
    if signature.size >= 100:
        return (Formulation("default"), triple(signature))
    return (Formulation("default"),)


def tuning_space(signature, target):
    candidates = []
    if signature.size == 101:
        candidates.append(TuningCandidate(config={"distribution": [64], "vector_common_parallel": [16]}))
    if signature.size == 104:
        candidates.append(TuningCandidate(flags=("--iree-no-such-flag",)))
    return candidates


DYING_SPEC = replace(SPEC, formulations=formulations, tuning_space=tuning_space)


@hookimpl
def boo_register_ops(register):
    register(DYING_SPEC)

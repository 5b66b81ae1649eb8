"""The scale test op, for Ray cluster tests: where ``BOO_TEST_DIE_ONCE`` names a directory
(set for the cluster's workers only), the first process that builds a kernel whose size
is a multiple of 3 leaves a file named after the kernel there (holding its pid) and exits
at once, as a worker killed mid-task would; whoever builds it next finds the file and goes
on. Size 5 does not compile, anywhere.
"""

from __future__ import annotations

import os
from dataclasses import replace

from boo_core import Formulation, hookimpl

from .broken_mlir import NONSENSE
from .scale_op import SPEC


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
    return (Formulation("default"),)


DYING_SPEC = replace(SPEC, formulations=formulations)


@hookimpl
def boo_register_ops(register):
    register(DYING_SPEC)

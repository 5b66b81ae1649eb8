"""Where a kernel's substitutions come from, and what happens when one fails.

* The user's: ``get_launchable(..., substitutions=DIR)`` (the kernel's own directory), or
  the root ``BOO_SUBSTITUTIONS`` / ``--substitutions ROOT``, where a kernel's directory is
  ``ROOT/<target>/<func_name>/``. A user substitution replaces the op's chain: it applies
  to the first formulation that compiles with it, and a file that is wrong, or a kernel
  that fails verification, is an error: it never falls back to IREE's own kernel silently.
* Installed plugins' (the ``boo_kernel_substitutions`` hook): candidates tried before the
  op's formulations; one that fails is passed over and the op's formulations serve.

:func:`signature_plan` gathers what a signature's chain is made of (formulations,
substitutions, a tuned winner) and has :func:`~boo_core.kernels.chain.plan_kernels` order it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import BooError, SubstitutionError
from ..kernels.chain import PlannedKernel, TunedWinner, plan_kernels
from ..kernels.target import Target
from ..settings import get_settings
from ..signatures.installed import installed_ops
from .substitution import Substitution


def target_directory(target: Target) -> str:
    """A target as a directory name: ``cpu``, ``cuda-sm_80``, ``rocm-gfx942``."""
    return target.name.replace(":", "-")


def kernel_directory(root: Path, target: Target, signature: Any) -> Path:
    """The directory of ``signature``'s kernel for ``target`` under a dump or substitution root."""
    return Path(root) / target_directory(target) / signature.func_name


def user_substitution(signature: Any, target: Target, explicit: Substitution | str | Path | None = None
                      ) -> Substitution | None:
    """The user's substitution for this kernel: ``explicit`` (a substitution or its
    directory), else the kernel's directory under ``BOO_SUBSTITUTIONS``, if there is one."""
    if isinstance(explicit, Substitution):
        return explicit
    if explicit is not None:
        return Substitution.from_directory(explicit)
    root = get_settings().substitutions
    if root is None:
        return None
    if not root.is_dir():
        raise SubstitutionError(f"BOO_SUBSTITUTIONS={root}: not a directory")
    directory = kernel_directory(root, target, signature)
    return Substitution.from_directory(directory, name=str(directory)) if directory.is_dir() else None


def library_substitutions(signature: Any, target: Target) -> list[Substitution]:
    """What installed plugins supply for this kernel (``boo_kernel_substitutions``)."""
    found: list[Substitution] = []
    digests: set[str] = set()
    for substitution in installed_ops().kernel_substitutions(signature, target):
        if substitution.digest not in digests:  # two plugins shipping the same files: try them once
            digests.add(substitution.digest)
            found.append(substitution)
    return found


def signature_plan(signature: Any, target: Target, *, substitution: Substitution | str | Path | None = None,
                   tuned: Callable[[], TunedWinner | None] | None = None,
                   only: str | None = None) -> list[PlannedKernel]:
    """``signature``'s chain for ``target`` (:func:`~boo_core.kernels.chain.plan_kernels`),
    its inputs gathered: the op's formulations, the user's substitution (``substitution``, or
    ``BOO_SUBSTITUTIONS``) or else the installed plugins', and the tuned winner ``tuned``
    looks up (asked only where the chain takes one). ``only``: that formulation alone
    (with the user's substitution, if any); a user's substitution that names its
    formulation applies to that one alone."""
    formulations = installed_ops().formulations(signature, target)
    user = user_substitution(signature, target, substitution)
    if user is not None and user.own_formulation is not None:  # the module it brings, and only that
        return plan_kernels([user.own_formulation], user=user)
    if only is None and user is not None and user.formulation_name is not None:
        only = user.formulation_name  # its files replace that formulation's executables, no other's
    if only is not None:
        chosen = [f for f in formulations if f.name == only]
        if not chosen:
            raise BooError(f"{signature.func_name} has no formulation {only!r} on {target.name} "
                           f"(it has: {', '.join(f.name for f in formulations)})")
        return plan_kernels(chosen, user=user)
    if user is not None:
        return plan_kernels(formulations, user=user)
    return plan_kernels(formulations, library=library_substitutions(signature, target),
                        tuned=tuned() if tuned is not None else None)

"""The ``boo_kernel_substitutions`` hook: a kernel library adding kernels to an op it does not
own. Its kernels are tried first, always verified, passed over when they fail."""

from __future__ import annotations

import logging
import sys

import pytest
import torch

from boo_core import PluginError, clear_launchables, get_launchable, hookimpl
from boo_core.testing import isolated_registry

from .fake_plugins import scale_op
from .fake_plugins.scale_op import ScaleSignature
from .substitutions import NUDGED, NUDGED_VALUE, ScaleLibrary

SIGNATURE = ScaleSignature(size=21, factor=2.0)


class Broken:
    @hookimpl
    def boo_kernel_substitutions(self, signature, target):
        raise RuntimeError("no kernels today")


class Exits:
    @hookimpl
    def boo_kernel_substitutions(self, signature, target):
        sys.exit(3)


class WrongType:
    @hookimpl
    def boo_kernel_substitutions(self, signature, target):
        return "sources/x.mlir"


@pytest.fixture
def with_plugins(private_cache):
    def use(strict: bool = False, **plugins):
        return isolated_registry({"scale": scale_op, **plugins}, strict=strict)

    return use


def test_a_library_kernel_serves_first_verified_and_built_once(with_plugins):
    library = ScaleLibrary()
    x = torch.randn(21)
    with with_plugins(library=library):
        launchable = get_launchable(SIGNATURE)
        assert torch.equal(launchable(x), x * NUDGED_VALUE)
        assert launchable.verified and launchable.substitution.origin == '"library" (registered explicitly)'
        [kernel] = library.builds  # built with the kernel's executables as IREE formed them
        assert kernel.names == ["scale_fwd_f32_n21_f2$async_dispatch_0"] and kernel.formulation == "default"
        clear_launchables()
        again = get_launchable(SIGNATURE)
        assert again.cache_hit and len(library.builds) == 1  # the key, not the files, finds it in the cache
        assert get_launchable(ScaleSignature(size=21, factor=3.0)).substitution is None  # not its signature


def test_a_library_kernel_that_fails_verification_is_passed_over(with_plugins, caplog):
    x = torch.randn(21)
    with with_plugins(library=ScaleLibrary("3.000000e+00")), caplog.at_level(logging.WARNING):
        launchable = get_launchable(SIGNATURE)
        assert torch.equal(launchable(x), x * 2) and launchable.substitution is None
    [attempt] = launchable.passed_over
    assert attempt.stage == "verification" and "with substitution times3.000000e+00" in attempt.formulation
    assert "failed verification; trying the next" in caplog.text


def test_a_library_whose_build_fails_is_passed_over(with_plugins):
    with with_plugins(library=ScaleLibrary(fail=True)):
        launchable = get_launchable(SIGNATURE)
    [attempt] = launchable.passed_over
    assert launchable.substitution is None and attempt.stage == "compile"


def test_a_library_whose_build_calls_sys_exit_is_passed_over_naming_it(with_plugins):
    x = torch.randn(21)
    with with_plugins(library=ScaleLibrary(exit_code=3)):
        launchable = get_launchable(SIGNATURE)
        assert torch.equal(launchable(x), x * 2)
    [attempt] = launchable.passed_over
    assert launchable.substitution is None and attempt.stage == "compile"
    assert ('substitution times2.00000024e+00 (from "library" (registered explicitly)): building its files '
            "failed: called sys.exit(3)") in attempt.detail


def test_answers_are_tried_in_plugin_name_order(with_plugins):
    wrong, right = ScaleLibrary("3.000000e+00"), ScaleLibrary()
    with with_plugins(b_right=right, a_wrong=wrong):
        launchable = get_launchable(SIGNATURE)
    assert launchable.substitution.origin == '"b_right" (registered explicitly)'
    assert [a.stage for a in launchable.passed_over] == ["verification"]


def test_a_failing_plugin_is_skipped_with_its_name(with_plugins, caplog):
    for plugin, problem in ((Broken(), "RuntimeError: no kernels today"),
                            (Exits(), "called sys.exit(3)"),
                            (WrongType(), "TypeError: returned 'sources/x.mlir', not a Substitution")):
        with with_plugins(library=plugin), caplog.at_level(logging.WARNING):
            assert get_launchable(SIGNATURE).substitution is None
        assert ('plugin "library" (registered explicitly) failed in boo_kernel_substitutions for '
                f"scale_fwd_f32_n21_f2: {problem}") in caplog.text
        clear_launchables()
    with with_plugins(strict=True, library=Broken()), \
            pytest.raises(PluginError, match=r"failed in boo_kernel_substitutions .*\(BOO_STRICT_PLUGINS=1\)"):
        get_launchable(SIGNATURE)


def test_a_user_substitution_takes_precedence(with_plugins, tmp_path):
    from .substitutions import scale_substitution

    library = ScaleLibrary("3.000000e+00")
    with with_plugins(library=library):
        mine = scale_substitution(tmp_path / "mine", SIGNATURE, NUDGED)
        launchable = get_launchable(SIGNATURE, substitutions=mine)
    assert launchable.substitution.origin == "user" and not library.builds

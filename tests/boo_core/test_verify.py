"""Verification: kernels are checked once per device model, verdicts kept in the cache,
and a kernel that fails is never run (the next formulation serves, else PyTorch)."""

from __future__ import annotations

import json

import pytest
import torch

from boo_core import BooFallbackWarning, Formulation, clear_launchables, get_launchable
from boo_core.settings import get_settings, settings_override
from boo_core.testing import isolated_registry
from boo_core.verify.verdicts import read_verdict

from .fake_plugins import scale_op, wrong_kernel
from .fake_plugins.scale_op import ScalePlugin, ScaleSignature
from .fake_plugins.wrong_kernel import triple


def verdicts(launchable) -> dict:
    return json.loads((launchable.cache_directory / "verdicts.json").read_text())


def test_verification_is_on_for_gpus_and_off_for_the_cpu_by_default():
    settings = get_settings()
    assert settings.verify == "auto"
    assert settings.verifies("cuda") and not settings.verifies("cpu")
    with settings_override(verify=True):
        assert get_settings().verifies("cpu")
    with settings_override(verify=False):
        assert not get_settings().verifies("cuda")


def test_a_correct_kernel_passes_and_the_verdict_is_kept(private_cache):
    with isolated_registry({"scale": scale_op}), settings_override(verify=True):
        launchable = get_launchable(ScaleSignature(32))
        [verdict] = verdicts(launchable).values()
        assert verdict["verdict"] == "pass" and launchable.verified  # sealed under the cache's key
        assert read_verdict(launchable.cache_directory, torch.device("cpu")) == "pass"
        x = torch.randn(32)
        torch.testing.assert_close(launchable(x), x * 2)


def test_a_wrong_kernel_gives_way_to_the_next_formulation(private_cache):
    chain = lambda s, t: (triple(s), Formulation("default"))  # noqa: E731
    with isolated_registry({"scale": ScalePlugin(formulations=chain)}), settings_override(verify=True):
        launchable = get_launchable(ScaleSignature(8))
        assert launchable.formulation == "default" and launchable.verified
        [attempt] = launchable.passed_over
        assert attempt.formulation == "triple" and attempt.stage == "verification"
        assert attempt.detail.startswith("fail: y: max abs error")
        x = torch.randn(8)
        torch.testing.assert_close(launchable(x), x * 2)


def test_a_wrong_kernel_with_nothing_better_falls_back_to_pytorch_with_one_warning(private_cache):
    with isolated_registry({"scale": wrong_kernel}), settings_override(verify=True):
        with pytest.warns(BooFallbackWarning, match=r"BOO has no kernel for scale_fwd_f32_n8_f2 that loads and passes "
                                                    r"verification on cpu \w+; it computes with PyTorch instead. "
                                                    r"Tried:\n  - triple: failed verification \(fail: y: max abs"):
            launchable = get_launchable(ScaleSignature(8))
        x = torch.randn(8)
        torch.testing.assert_close(launchable(x), x * 2)  # PyTorch's answer, not the kernel's
        out = torch.empty(8)
        assert launchable(x, out=out) is out and torch.equal(out, x * 2)
        # A new process trusts the recorded verdict: no second check (the kernel is not even
        # loaded), still no kernel.
        clear_launchables()
        with pytest.warns(BooFallbackWarning):
            again = get_launchable(ScaleSignature(8))
        assert again.passed_over[0].detail.startswith("fail: y:")
        torch.testing.assert_close(again(x), x * 2)


def test_with_verification_off_nothing_is_checked(private_cache):
    with isolated_registry({"scale": wrong_kernel}), settings_override(verify=False):
        launchable = get_launchable(ScaleSignature(8))
        assert not (launchable.cache_directory / "verdicts.json").exists()
        x = torch.randn(8)
        torch.testing.assert_close(launchable(x), x * 3)

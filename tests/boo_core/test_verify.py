"""BOO_VERIFY: kernels are checked once, verdicts kept in the cache, failures never used."""

from __future__ import annotations

import json

import pytest
import torch

from boo_core import BooFallbackWarning, clear_launchables, get_launchable
from boo_core.config import settings_override
from boo_core.testing import isolated_registry

from .fake_plugins import scale_op
from .fake_plugins.scale_op import ScaleSignature
from .test_hooks import TripleMlir


def verdicts(launchable) -> dict:
    return json.loads((launchable.cache_directory / "verdicts.json").read_text())


def test_a_correct_kernel_passes_and_the_verdict_is_kept(private_cache):
    with isolated_registry({"scale": scale_op}), settings_override(verify=True):
        launchable = get_launchable(ScaleSignature(32))
        [verdict] = verdicts(launchable).values()
        assert verdict == "pass"
        x = torch.randn(32)
        torch.testing.assert_close(launchable(x), x * 2)


def test_a_wrong_kernel_is_never_used_and_calls_fall_back_to_pytorch(private_cache):
    # TripleMlir's kernel computes x * 3 where the signature (and PyTorch) say x * 2.
    with isolated_registry({"scale": scale_op, "triple": TripleMlir()}), settings_override(verify=True):
        with pytest.warns(BooFallbackWarning, match=r"BOO kernel scale_fwd_f32_n8_f2 failed verification on cpu "
                                                    r"\w+ \(fail: y: max abs error"):
            launchable = get_launchable(ScaleSignature(8))
        [verdict] = verdicts(launchable).values()
        assert verdict.startswith("fail: y:")
        x = torch.randn(8)
        torch.testing.assert_close(launchable(x), x * 2)  # PyTorch's answer, not the kernel's
        out = torch.empty(8)
        assert launchable(x, out=out) is out and torch.equal(out, x * 2)
        # A new process trusts the recorded verdict: no second check, still no kernel.
        clear_launchables()
        with pytest.warns(BooFallbackWarning):
            again = get_launchable(ScaleSignature(8))
        torch.testing.assert_close(again(x), x * 2)


def test_without_the_setting_nothing_is_checked(private_cache):
    with isolated_registry({"scale": scale_op, "triple": TripleMlir()}):
        launchable = get_launchable(ScaleSignature(8))
        assert not (launchable.cache_directory / "verdicts.json").exists()
        x = torch.randn(8)
        torch.testing.assert_close(launchable(x), x * 3)

"""Verification on by default on GPUs: a wrong kernel is refused on first use per device
model, the verdict is reused across processes, and BOO_VERIFY=0 opts out."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from boo_core import BooFallbackWarning, BooOpRegistry, Formulation, get_launchable
from boo_core.settings import get_settings, settings_override
from boo_core.testing import isolated_registry
from boo_core.verify.numerics import check_launchable

from ..boo_core.fake_plugins import wrong_kernel
from ..boo_core.fake_plugins.scale_op import ScalePlugin, ScaleSignature
from ..boo_core.fake_plugins.wrong_kernel import triple
from ..conftest import REPO

pytestmark = pytest.mark.gpu
DEVICE = "cuda:0"


def test_verification_is_on_by_default_on_the_gpu():
    assert get_settings().verify == "auto" and get_settings().verifies("cuda")


def test_a_planted_wrong_kernel_is_refused_and_the_next_formulation_serves(private_cache):
    chain = lambda s, t: (triple(s), Formulation("default"))  # noqa: E731
    with isolated_registry({"scale": ScalePlugin(formulations=chain)}):
        launchable = get_launchable(ScaleSignature(1000), DEVICE)
        assert launchable.formulation == "default" and launchable.verified
        assert launchable.passed_over[0].formulation == "triple"
        x = torch.randn(1000, device=DEVICE)
        torch.testing.assert_close(launchable(x), x * 2)


def test_a_wrong_kernel_with_nothing_better_falls_back_to_pytorch_with_one_warning(private_cache):
    with isolated_registry({"scale": wrong_kernel}):
        with pytest.warns(BooFallbackWarning, match=r"(?s)no kernel for scale_fwd_f32_n512_f2 that loads and passes "
                                                    r"verification on cuda .*- triple: failed verification"):
            launchable = get_launchable(ScaleSignature(512), DEVICE)
        x = torch.randn(512, device=DEVICE)
        torch.testing.assert_close(launchable(x), x * 2)


REUSE = """
import sys
from boo_core.testing import isolated_registry
from boo_core.verify import verdicts
from tests.boo_core.fake_plugins.scale_op import ScalePlugin, ScaleSignature
from tests.gpu.test_verification import CHAIN
checks = []
original = verdicts.check_launchable
verdicts.check_launchable = lambda l, *a, **k: checks.append(l) or original(l, *a, **k)
from boo_core import get_launchable
from boo_core.kernels import activity
with isolated_registry({"scale": ScalePlugin(formulations=CHAIN)}):
    launchable = get_launchable(ScaleSignature(777), "cuda:0")
print(launchable.formulation, launchable.verified, activity.counts()["verdict checked"], len(checks))
"""


def CHAIN(signature, target):  # noqa: N802 (a module-level chain the subprocess imports)
    return (triple(signature), Formulation("default"))


def test_a_verdict_is_reused_across_processes(private_cache):
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "BOO_CACHE_DIR": str(private_cache), "PYTHONPATH": path}
    first = subprocess.run([sys.executable, "-c", REUSE], env=env, cwd=REPO, capture_output=True, text=True)
    second = subprocess.run([sys.executable, "-c", REUSE], env=env, cwd=REPO, capture_output=True, text=True)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    # Both kernels checked (triple refused, default passed), by the worker process: no check ran in this one.
    assert first.stdout.split() == ["default", "True", "2", "0"]
    assert second.stdout.split() == ["default", "True", "0", "0"]  # both verdicts read from the cache: no check
    in_process = subprocess.run([sys.executable, "-c", REUSE], env={**env, "BOO_WORKER": "0",
                                "BOO_CACHE_DIR": str(private_cache / "another")}, cwd=REPO, capture_output=True,
                                text=True)
    assert in_process.returncode == 0, in_process.stderr
    assert in_process.stdout.split() == ["default", "True", "2", "3"]  # triple refused on its first check, default
    # checked twice, here


def test_boo_verify_0_skips_the_check(private_cache):
    with isolated_registry({"scale": wrong_kernel}), settings_override(verify=False):
        launchable = get_launchable(ScaleSignature(256), DEVICE)
        assert not launchable.verified and not (launchable.cache_directory / "verdicts.json").exists()
        x = torch.randn(256, device=DEVICE)
        torch.testing.assert_close(launchable(x), x * 3)  # unsafe, as documented: the wrong kernel runs


@pytest.mark.parametrize("command", ["gemmfp16 -m 38 -n 65 -k 38 -u 1 -v 0 -b 3 -F 1",
                                     "gemmbfp16 -m 17 -n 33 -k 9 -u 1 -v 0 -b 3 -F 1"])
def test_the_matmuls_a_new_user_found_wrong_are_right_with_default_settings(command, private_cache):
    launchable = get_launchable(BooOpRegistry.parse_command(command), DEVICE)
    assert launchable.verified
    assert all(c.passed for c in check_launchable(launchable))
    verdicts = json.loads((launchable.cache_directory / "verdicts.json").read_text())
    assert [entry["verdict"] for entry in verdicts.values()] == ["pass"]  # each entry sealed (its hmac)


@pytest.mark.parametrize("command", [
    # Found by boo tune at ResNet-50 sizes: IREE's own kernels for these are wrong.
    "convbfp16 -n 32 -c 64 -H 56 -W 56 -k 64 -y 1 -x 1 -F 4 -I NHWC -f NHWC -O NHWC",
    "convbfp16 -n 32 -c 64 -H 56 -W 56 -k 64 -y 3 -x 3 -p 1 -q 1 -F 1 -I NHWC -f NHWC -O NHWC",
])
def test_the_batch_32_conv_classes_are_right_with_default_settings(command, private_cache):
    from boo_ops_conv import hooks

    signature = BooOpRegistry.parse_command(command)
    launchable = get_launchable(signature, DEVICE)  # an installed kernel library's, where one serves the class
    assert launchable.verified and all(c.passed for c in check_launchable(launchable))
    with isolated_registry({"conv": hooks}):  # the op's own chain: no library
        launchable = get_launchable(signature, DEVICE)
        assert launchable.verified and launchable.formulation in ("im2col", "im2col_split32", "f32_compute")
        assert launchable.substitution is None and all(c.passed for c in check_launchable(launchable))
    with settings_override(verify=False):  # the plain export of the class really is wrong
        raw = get_launchable(signature, DEVICE, formulation="default")
    assert not all(all(c.passed for c in check_launchable(raw)) for _ in range(2))

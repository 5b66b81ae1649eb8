"""Per-op behaviour carried by the OpSpec: compile flags, formulations and the chain BOO
runs over them, and blame when an op's functions misbehave."""

from __future__ import annotations

import pytest
import torch

from boo_core import CompileError, Formulation, PluginError, Target, get_launchable, launchable_for
from boo_core.kernels import export
from boo_core.kernels.request import KernelRequest
from boo_core.testing import isolated_registry

from .fake_plugins import scale_op
from .fake_plugins.broken_mlir import NONSENSE
from .fake_plugins.scale_op import ScalePlugin, ScaleSignature
from .fake_plugins.wrong_kernel import TRIPLE, triple

CPU = Target.parse("cpu")


def opt_level(signature, target):
    return ["--iree-opt-level=O1"] if target.backend == "llvm-cpu" else []


def test_compile_flags_from_the_op_are_appended_and_keyed(private_cache):
    signature = ScaleSignature(16)
    with isolated_registry({"scale": scale_op}):
        plain = KernelRequest.create(signature, CPU)
    with isolated_registry({"scale": ScalePlugin(compile_flags=opt_level)}):
        flagged = KernelRequest.create(signature, CPU)
        launchable = get_launchable(signature)
        x = torch.randn(16)
        torch.testing.assert_close(launchable(x), x * 2)
        recorded = (launchable.cache_directory / "compile_command.txt").read_text()
    assert flagged.flags == (*plain.flags, "--iree-opt-level=O1")
    assert flagged.key.digest != plain.key.digest
    assert "--iree-opt-level=O1" in recorded and "--iree-llvmcpu-target-cpu=host" in recorded


def test_an_mlir_formulation_replaces_the_export(private_cache):
    signature = ScaleSignature(8)
    plugin = ScalePlugin(formulations=lambda s, t: (triple(s),) if s.size == 8 else (Formulation("default"),))
    with isolated_registry({"scale": plugin}):
        launchable = get_launchable(signature)
        x = torch.randn(8)
        torch.testing.assert_close(launchable(x), x * 3)  # the reference would give x * 2
        assert launchable.formulation == "triple"
        assert (launchable.cache_directory / "source.mlir").read_text() == TRIPLE.format(name=signature.func_name, n=8)
        # Signatures the op answers differently for still go through torch.export.
        torch.testing.assert_close(get_launchable(ScaleSignature(9))(torch.ones(9)), torch.full((9,), 2.0))


def test_a_kernel_chosen_under_other_plugins_is_not_served_from_memory(private_cache):
    signature = ScaleSignature(7)
    tripled = ScalePlugin(formulations=lambda s, t: (triple(s),))
    with isolated_registry({"scale": tripled}):
        assert get_launchable(signature).formulation == "triple"
        assert launchable_for(("scale", 7), lambda: signature).formulation == "triple"
    with isolated_registry({"scale": scale_op}):  # same signature, same settings, other plugins
        x = torch.randn(7)
        torch.testing.assert_close(get_launchable(signature)(x), x * 2)
        torch.testing.assert_close(launchable_for(("scale", 7), lambda: signature)(x), x * 2)
        assert get_launchable(signature).formulation == "default"


def test_a_computation_formulation_is_exported_instead_of_the_reference(private_cache):
    doubled_twice = Formulation("halves", computation=lambda x: (x * 0.5) * 4.0)
    with isolated_registry({"scale": ScalePlugin(formulations=lambda s, t: (doubled_twice,))}):
        launchable = get_launchable(ScaleSignature(6))
        source = (launchable.cache_directory / "source.mlir").read_text()
    assert "5.000000e-01" in source  # the 0.5 of the computation, not the reference's factor alone
    x = torch.randn(6)
    torch.testing.assert_close(launchable(x), x * 2)


def foreign_cpu() -> Formulation:
    """A formulation compiled for another CPU architecture: iree-compile takes it, this
    machine's runtime refuses to load it."""
    import platform

    triple = "x86_64-unknown-linux-gnu" if platform.machine() in ("aarch64", "arm64") else "aarch64-unknown-linux-gnu"
    return Formulation("foreign", flags=(f"--iree-llvmcpu-target-triple={triple}",))


def broken() -> Formulation:
    return Formulation("broken", mlir=lambda: NONSENSE)


@pytest.mark.parametrize("failing, stage", [(broken, "compile"), (foreign_cpu, "load")], ids=["compile", "load"])
def test_a_formulation_that_fails_to_compile_or_load_gives_way_to_the_next(failing, stage, private_cache):
    with isolated_registry({"scale": ScalePlugin(formulations=lambda s, t: (failing(), Formulation("default")))}):
        launchable = get_launchable(ScaleSignature(5))
        x = torch.randn(5)
        torch.testing.assert_close(launchable(x), x * 2)
        assert launchable.formulation == "default"
        [attempt] = launchable.passed_over
        assert attempt.formulation == failing().name and attempt.stage == stage
    if stage == "compile":
        assert attempt.detail.endswith("compile_log.txt")
        assert "iree-compile failed" in open(attempt.detail).read()
    else:
        assert str(attempt).startswith("foreign: did not load (kernel module does not load:")


def test_when_no_kernel_loads_calls_compute_with_pytorch_and_say_why(private_cache):
    from boo_core import BooFallbackWarning

    with isolated_registry({"scale": ScalePlugin(formulations=lambda s, t: (foreign_cpu(),))}):
        with pytest.warns(BooFallbackWarning, match=r"(?s)scale_fwd_f32_n4_f2 that loads.*foreign: did not load"):
            launchable = get_launchable(ScaleSignature(4))
        x = torch.randn(4)
        torch.testing.assert_close(launchable(x), x * 2)
        assert launchable.formulation == "pytorch"


def test_a_recorded_compile_failure_is_not_compiled_again(private_cache, monkeypatch):
    chain = lambda s, t: (Formulation("broken", mlir=lambda: NONSENSE), Formulation("default"))  # noqa: E731
    with isolated_registry({"scale": ScalePlugin(formulations=chain)}):
        get_launchable(ScaleSignature(5))
        from boo_core import clear_launchables

        clear_launchables()
        calls = []
        monkeypatch.setattr("boo_core.kernels.request.compile_to_bytes", lambda *a, **k: calls.append(a))
        assert get_launchable(ScaleSignature(5)).formulation == "default"
    assert calls == []  # neither the broken formulation (recorded) nor the default (cached) compiled


def test_when_every_formulation_fails_the_error_names_each_and_its_log(private_cache):
    chain = lambda s, t: (Formulation("first", mlir=lambda: NONSENSE),  # noqa: E731
                          Formulation("second", mlir=lambda: NONSENSE + "!"))
    with isolated_registry({"scale": ScalePlugin(formulations=chain)}):
        with pytest.raises(CompileError) as info:
            get_launchable(ScaleSignature(3))
    message = str(info.value)
    assert message.startswith("no formulation of scale_fwd_f32_n3_f2 compiles for cpu:")
    assert "- first: did not compile (" in message and "- second: did not compile (" in message
    assert message.count("compile_log.txt") == 2
    assert "command: scale -n 3 -f 2.0 -F 1" in message


def test_a_pinned_formulation_failure_names_the_saved_mlir_and_the_exact_command(private_cache):
    from .fake_plugins import broken_mlir

    signature = ScaleSignature(5)
    with isolated_registry({"scale": broken_mlir}):
        request = KernelRequest.create(signature, CPU)
        with pytest.raises(CompileError, match=r"iree-compile failed \(exit 1\)") as info:
            request.fetch()
    error = info.value
    assert error.mlir_path.endswith("source.mlir")
    assert open(error.mlir_path).read() == NONSENSE
    assert f"MLIR: {error.mlir_path}" in str(error) and f"command: {error.command}" in str(error)
    assert "iree-compile" in error.command and error.mlir_path in error.command
    saved = open(error.mlir_path.replace("source.mlir", "compile_command.txt")).read().strip()
    assert saved == error.command


def test_warm_lookups_export_nothing(private_cache):
    with isolated_registry({"scale": scale_op}):
        signature = ScaleSignature(12)
        get_launchable(signature)
        from boo_core import clear_launchables

        clear_launchables()
        before = export.export_count
        for _ in range(3):
            KernelRequest.create(signature, CPU)
            get_launchable(signature)
            clear_launchables()
    assert export.export_count == before


@pytest.mark.parametrize("behaviour, message", [
    (dict(compile_flags=lambda s, t: "--not-a-list"),
     r'plugin "bad" \(registered explicitly\): op \'scale\' compile_flags must return a list, tuple or generator'),
    (dict(compile_flags=lambda s, t: 42),
     r'plugin "bad" \(registered explicitly\): op \'scale\' compile_flags must return a list, tuple or generator'),
    (dict(compile_flags=lambda s, t: {}["oops"]),
     r"plugin \"bad\" \(registered explicitly\) failed in op 'scale' compile_flags: KeyError: 'oops'"),
    (dict(formulations=lambda s, t: 42),
     r"plugin \"bad\" \(registered explicitly\): op 'scale' formulations must return a non-empty sequence"),
    (dict(formulations=lambda s, t: ()),
     r"plugin \"bad\" \(registered explicitly\): op 'scale' formulations must return a non-empty sequence"),
    (dict(formulations=lambda s, t: (Formulation("a"), Formulation("a"))),
     r"op 'scale' formulations returned two formulations named 'a'"),
])
def test_misbehaving_op_functions_are_blamed_and_other_ops_keep_working(private_cache, behaviour, message):
    with isolated_registry({"bad": ScalePlugin(**behaviour)}, autoload=True):
        with pytest.raises(PluginError, match=message):
            get_launchable(ScaleSignature(4))
        from boo_core import BooOpRegistry

        signature = BooOpRegistry.parse_command("gemm -m 2 -n 3 -k 4")
        a, b = signature.get_sample_args()
        torch.testing.assert_close(get_launchable(signature)(a, b), a @ b)

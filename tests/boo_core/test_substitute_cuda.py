"""Substitutions for CUDA, cross-compiled (no GPU): objects in place of IREE's PTX, a
source whose variant runs a kernel built elsewhere, with its own launch geometry, and a
library's own module (one extern launch with zeroed counters and scratch)."""

from __future__ import annotations

import struct
from dataclasses import replace
from types import SimpleNamespace

import pytest

from boo_core import Formulation, Target
from boo_core.errors import SubstitutionError
from boo_core.kernels.chain import plan_kernels
from boo_core.kernels.launch_plan import Dispatch, LaunchPlan, plan_for_entry
from boo_core.kernels.request import KernelRequest
from boo_core.substitute import EXTERN_FLAGS, Substitution, dump_kernel, executables_of, extern_module, external_source

from .fake_plugins.scale_op import ScaleSignature

SIGNATURE = ScaleSignature(size=37, factor=2.0)
SM80 = Target.parse("cuda:sm_80")

#: y[i] = 2 * x[i] for i < 37, passing x through dynamic shared memory at its 96 KiB end
#: (above the 48 KiB a kernel gets without opting in). Kernel name filled in per export.
PTX = """
.version 7.0
.target sm_80
.address_size 64
.extern .shared .align 16 .b8 boo_dynamic_smem[];

.visible .entry {name}(
    .param .u64 {name}_param_0,
    .param .u64 {name}_param_1
)
{{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<8>;

    ld.param.u64 %rd1, [{name}_param_0];
    ld.param.u64 %rd2, [{name}_param_1];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mad.lo.s32 %r4, %r1, %r2, %r3;
    setp.ge.s32 %p1, %r4, 37;
    @%p1 bra DONE;
    mul.wide.s32 %rd3, %r4, 4;
    add.s64 %rd4, %rd1, %rd3;
    ld.global.f32 %f1, [%rd4];
    mov.u32 %r5, boo_dynamic_smem;
    shl.b32 %r6, %r3, 2;
    sub.s32 %r7, 98300, %r6;
    add.s32 %r7, %r5, %r7;
    st.shared.f32 [%r7], %f1;
    ld.shared.f32 %f2, [%r7];
    add.f32 %f3, %f2, %f2;
    add.s64 %rd5, %rd2, %rd3;
    st.global.f32 [%rd5], %f3;
DONE:
    ret;
}}
"""

SHARED_BYTES = 98304


def external(signature: ScaleSignature = SIGNATURE) -> Substitution:
    """A source substitution running PTX with 64 threads a block, one block, 96 KiB of
    dynamic shared memory."""
    [executable] = executables_of(signature, SM80).executables
    [export] = executable.exports
    source = external_source(executable, ["objects/scale.ptx"], workgroup_size=(64, 1, 1), workgroup_count=(1, 1, 1),
                             workgroup_local_memory=SHARED_BYTES)
    return Substitution("external-ptx", {f"sources/{executable.name}.mlir": source,
                                         "objects/scale.ptx": PTX.format(name=export.kernel_name)})


@pytest.fixture
def scale(scale_registry, private_cache):
    return private_cache


def test_iree_s_own_ptx_substituted_as_an_object_compiles(scale, tmp_path):
    dump = dump_kernel(SIGNATURE, SM80, tmp_path / "dump")
    [ptx] = (dump.directory / "binaries").iterdir()
    [export] = dump.executables[0].exports
    assert ptx.suffix == ".ptx" and f".entry {export.kernel_name}(" in ptx.read_text()
    substitution = Substitution("own", {f"binaries/{ptx.name}": ptx.read_bytes()})
    kernel = KernelRequest.create(SIGNATURE, SM80, substitution=substitution).fetch()
    command = (kernel.directory / "compile_command.txt").read_text()
    assert f"--iree-hal-substitute-executable-objects-from={kernel.directory}/substitution/binaries" in command


def test_a_ptx_without_the_kernel_iree_launches_is_refused(scale):
    [executable] = executables_of(SIGNATURE, SM80).executables
    [export] = executable.exports
    substitution = Substitution("renamed", {f"binaries/{executable.name}.ptx": PTX.format(name="my_gemm")})
    with pytest.raises(SubstitutionError, match=rf"renamed:binaries/{executable.name.replace('$', '.')}.ptx defines "
                                                rf"no kernel {export.kernel_name}: IREE launches each export .* by "
                                                "that name .* the file defines: my_gemm"):
        KernelRequest.create(SIGNATURE, SM80, substitution=substitution).fetch()


def test_an_external_variant_sets_block_grid_and_more_than_48k_of_shared_memory(scale):
    kernel = KernelRequest.create(SIGNATURE, SM80, substitution=external()).fetch()
    # IREE 3.13's CUDA executable (a flatbuffer in the module) stores each export's block
    # dimensions and then the dynamic shared memory the runtime opts the kernel into.
    assert struct.pack("<4I", 64, 1, 1, SHARED_BYTES) in kernel.vmfb
    dump = dump_kernel(SIGNATURE, SM80, scale / "dump", substitution=external())
    [export] = dump.executables[0].exports
    assert (export.workgroup_size, export.workgroup_count, export.workgroup_local_memory) == \
        ((64, 1, 1), (1, 1, 1), SHARED_BYTES)
    assert dump.index["substitution"]["label"] == "external-ptx"
    # The direct launch path reads the same facts from its launch plan (external_source writes
    # a public executable, which IREE keeps public).
    plan = plan_for_entry(kernel.directory, kernel.vmfb, SIGNATURE.func_name)
    assert isinstance(plan, LaunchPlan), plan
    [launched] = plan.kernels
    assert (launched.name, launched.block, launched.shared_memory) == (export.kernel_name, (64, 1, 1), SHARED_BYTES)
    assert "boo_dynamic_smem" in plan.modules[launched.module]


def test_an_object_a_source_refers_to_must_be_there(scale):
    substitution = external()
    files = {name: data for name, data in substitution.files.items() if not name.startswith("objects/")}
    with pytest.raises(SubstitutionError, match=r"substitution file external-ptx:sources/.*\.mlir refers to object "
                                                "'objects/scale.ptx', which is not in the substitution"):
        KernelRequest.create(SIGNATURE, SM80, substitution=Substitution("external-ptx", files)).fetch()


#: y[i] = 2 * x[i], taking a buffer of zeroed counters and a scratch buffer between x and y
#: (the kernel an extern module launches: x, counters, scratch, y).
PTX_WITH_BUFFERS = PTX.replace("    .param .u64 {name}_param_1\n",
                               "    .param .u64 {name}_param_1,\n    .param .u64 {name}_param_2,\n"
                               "    .param .u64 {name}_param_3\n").replace(
    "ld.param.u64 %rd2, [{name}_param_1];", "ld.param.u64 %rd2, [{name}_param_3];")
COUNTER_WORDS, SCRATCH_BYTES = 48, 4096


def own_module(signature: ScaleSignature = SIGNATURE) -> Substitution:
    """A library's substitution bringing its own module: one launch of its kernel with 48
    zeroed counters and 4 KiB of scratch."""
    mlir = extern_module(signature, "scale_with_buffers", "objects/scale.ptx", workgroup_size=(64, 1, 1),
                         workgroup_count=(1, 1, 1), workgroup_local_memory=SHARED_BYTES,
                         zeroed_words=(COUNTER_WORDS,), scratch_bytes=(SCRATCH_BYTES,))
    formulation = Formulation("library_scale", mlir=lambda: mlir, flags=EXTERN_FLAGS)
    return Substitution("own-module", {"objects/scale.ptx": PTX_WITH_BUFFERS.format(name="scale_with_buffers")},
                        formulation=formulation, origin="a library")


def test_a_library_brings_its_own_module_with_zeroed_counters_and_scratch(scale):
    substitution = own_module()
    [planned, *_] = plan_kernels([Formulation("default")], library=[substitution])
    assert planned.formulation is substitution.own_formulation and planned.substitution is substitution
    kernel = planned.request(SIGNATURE, SM80).fetch()
    plan = plan_for_entry(kernel.directory, kernel.vmfb, SIGNATURE.func_name)
    assert isinstance(plan, LaunchPlan), plan
    # Every launch: the counters zeroed, then the kernel on x, the counters, the scratch and y.
    fill, dispatch = plan.commands
    assert (fill.op, fill.pattern, fill.length) == ("fill", 0, 4 * COUNTER_WORDS)
    assert isinstance(dispatch, Dispatch) and dispatch.grid == (1, 1, 1)
    x, counters, scratch, y = (plan.slots[b.slot] for b in dispatch.bindings)
    assert (x.arg, y.arg) == (0, 1)  # y straight into the caller's output: no copy after the launch
    assert counters.transient is not None and scratch.transient is not None
    assert dispatch.bindings[1].slot == fill.slot and dispatch.bindings[1].length == 4 * COUNTER_WORDS
    assert dispatch.bindings[2].length == SCRATCH_BYTES
    assert (counters.transient, counters.offset + dispatch.bindings[1].offset) != \
        (scratch.transient, scratch.offset + dispatch.bindings[2].offset)
    [launched] = plan.kernels
    assert (launched.name, launched.block, launched.shared_memory) == ("scale_with_buffers", (64, 1, 1), SHARED_BYTES)
    # The module is part of the key: the same files with another module are another kernel.
    mlir_text = substitution.own_formulation.mlir()
    other = replace(substitution, formulation=Formulation("library_scale", mlir=lambda: mlir_text + "\n",
                                                          flags=EXTERN_FLAGS))
    assert KernelRequest.create(SIGNATURE, SM80, other.own_formulation, substitution=other).key != \
        planned.request(SIGNATURE, SM80).key

def test_a_tuned_winner_from_a_library_s_own_module_is_found_again(scale):
    substitution = own_module()
    record = SimpleNamespace(formulation="library_scale", config=None, flags=(), label="library_scale with own-module",
                             substitution=substitution.digest, library=(substitution.digest,))
    [winner, *rest] = plan_kernels([Formulation("default")], library=[substitution], tuned=record)
    assert winner.tuned and winner.formulation is substitution.own_formulation and winner.substitution is substitution
    assert [k.formulation.name for k in rest] == ["default"]


def test_a_module_a_substitution_brings_must_give_its_mlir_and_make_it():
    files = {"objects/scale.ptx": "x"}
    with pytest.raises(SubstitutionError, match="must give its MLIR"):
        Substitution("no-mlir", files, formulation=Formulation("library_scale"))
    with pytest.raises(SubstitutionError, match=r"'broken': its formulation's mlir\(\) failed: .*ZeroDivisionError"):
        Substitution("broken", files, formulation=Formulation("library_scale", mlir=lambda: 1 // 0))
    with pytest.raises(SubstitutionError, match="must map a str path to bytes"):  # its files are still checked
        Substitution("no-files", {"objects/scale.ptx": 3}, formulation=Formulation("x", mlir=lambda: ""))

"""Substitutions for CUDA, cross-compiled (no GPU): objects in place of IREE's PTX, and a
source whose variant runs a kernel built elsewhere, with its own launch geometry."""

from __future__ import annotations

import struct

import pytest

from boo_core import Target
from boo_core.errors import SubstitutionError
from boo_core.kernels.launch_plan import LaunchPlan, plan_for_entry
from boo_core.kernels.request import KernelRequest
from boo_core.substitute import Substitution, dump_kernel, executables_of, external_source

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

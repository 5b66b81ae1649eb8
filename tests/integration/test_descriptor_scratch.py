"""The Hopper library's rewrite giving a Triton kernel that builds tensor maps on the device
their memory from its own module (boo_kernels_hopper.descriptor_scratch), on PTX shaped as
Triton 3.6 writes it for sm_90a (the GPU tests run the real kernels)."""

from __future__ import annotations

import re

import pytest

scratch = pytest.importorskip("boo_kernels_hopper.descriptor_scratch")
ptx = pytest.importorskip("boo_kernels_hopper.ptx")

# Two bindings, then Triton's global and profile scratch; the program's scratch at
# param_2 + (linear program id) * 256, as Triton computes it.
TRITON_PTX = """//
.version 8.7
.target sm_90a
.address_size 64

\t// .globl\tkern
.extern .shared .align 16 .b8 global_smem[];
.visible .entry kern(
\t.param .u64 .ptr .global .align 1 kern_param_0,
\t.param .u64 .ptr .global .align 1 kern_param_1,
\t.param .u64 .ptr .global .align 1 kern_param_2,
\t.param .u64 .ptr .global .align 1 kern_param_3
)
.reqntid 256
{
\t.reg .pred \t%p<4>;
\t.reg .b32 \t%r<40>;
\t.reg .b64 \t%rd<20>;
\tld.param.b64 \t%rd1, [kern_param_0];
\tld.param.b64 \t%rd3, [kern_param_1];
\tmov.u32 \t%r25, %ctaid.x;
\tld.param.b64 \t%rd11, [kern_param_2];
\tmov.u32 \t%r30, %ctaid.y;
\tmov.u32 \t%r31, %ctaid.z;
\tmov.u32 \t%r32, %nctaid.x;
\tmov.u32 \t%r33, %nctaid.y;
\tmad.lo.s32 \t%r34, %r31, %r33, %r30;
\tmad.lo.s32 \t%r35, %r34, %r32, %r25;
\tshl.b32 \t%r36, %r35, 8;
\tcvt.s64.s32 \t%rd12, %r36;
\tadd.s64 \t%rd5, %rd11, %rd12;
\t// begin inline asm
\t{
\t.reg .pred complete;
\t}
\t// end inline asm
\tst.global.b32 \t[%rd3], %r25;
\tret;
$L__tmp1:
}
"""


def rewritten(**overrides) -> str:
    arguments = dict(ptx=TRITON_PTX, name="kern", parameter=2, per_program=256, warps=8, slots=160)
    return scratch.give_descriptor_scratch(**{**arguments, **overrides})


def test_the_scratch_parameter_becomes_an_area_of_the_modules_own_memory():
    text = rewritten()
    assert ".global .align 128 .b8 boo_descriptor_scratch[40960];" in text  # 160 areas of 256 bytes
    assert ".global .align 4 .b32 boo_descriptor_owners[160];" in text
    assert "[kern_param_2]" not in text and "mov.b64 \t%rd11, %boo_scratch_base;" in text
    # the module's memory is declared before the entry, the claim opens the entry's body
    assert text.index("boo_descriptor_scratch[") < text.index(".visible .entry kern(")
    body = text[text.index(".reqntid 256\n{") + len(".reqntid 256\n{"):]
    claim = body[:body.index("ld.param.b64 \t%rd1")]
    assert "atom.acquire.gpu.global.cas.b32 \t%boo_r2, [%boo_rd2], 0, 8;" in claim  # owned by 8 warps
    assert "atom.global.inc.u32 \t%boo_r1, [%boo_rd0], 159;" in claim  # the ticket wraps at the last area
    assert claim.count("bar.sync \t0;") == 2  # every thread reads the area's number, then Triton's code runs
    # Triton's offset for the program is taken off the area's address: it adds it back
    assert "mul.wide.u32 \t%boo_rd5, %boo_r5, 256;" in claim and "sub.s64 \t%boo_scratch_base" in claim


def test_each_warp_frees_its_share_of_the_area_just_before_the_kernel_returns():
    text = rewritten()
    end = text[text.index("st.global.b32"):]
    release = "@%boo_q red.release.gpu.global.add.s32 \t[%boo_scratch_owner], -1;"
    assert release in end and end.index(release) < end.index("ret;")
    assert "mov.u32 \t%boo_lane, %laneid;" in end  # lane 0 of each warp: 8 decrements free it


def test_the_rewritten_kernel_takes_its_bindings_alone():
    text = ptx.to_iree_abi(rewritten(), "kern", "export_entry", 2)
    params = re.search(r"\.entry export_entry\((.*?)\)", text, re.S).group(1)
    assert params.split() == [".param", ".u64", ".ptr", ".global", ".align", "1", "export_entry_param_0,",
                              ".param", ".u64", ".ptr", ".global", ".align", "1", "export_entry_param_1"]
    with pytest.raises(RuntimeError, match="uses its parameter"):  # not rewritten: the scratch is still read
        ptx.to_iree_abi(TRITON_PTX, "kern", "export_entry", 2)


@pytest.mark.parametrize(("change", "message"), [
    (lambda t: t.replace("\tret;\n", "\t@%p1 ret;\n\tret;\n"), "one unconditional ret"),
    (lambda t: t.replace("\tret;\n", "\t@%p1 ret;\n"), "one unconditional ret"),
    (lambda t: t.replace("\tret;\n", "\texit;\n\tret;\n"), "one unconditional ret"),
    (lambda t: t.replace(".extern .shared .align 16 .b8 global_smem[];\n", ""), "global_smem"),
    (lambda t: t.replace("[kern_param_2]", "[kern_param_1]"), "never loads its scratch parameter 2"),
    (lambda t: t.replace(".entry kern(", ".entry other("), "no .entry kern"),
])
def test_ptx_of_another_shape_is_refused_not_guessed_at(change, message):
    with pytest.raises(ValueError, match=message):
        rewritten(ptx=change(TRITON_PTX))


def test_areas_must_hold_whole_tensor_maps():
    with pytest.raises(ValueError):
        rewritten(per_program=200)  # a tensor map is 128 bytes, 128-byte aligned
    with pytest.raises(ValueError):
        rewritten(slots=0)


def test_there_are_more_areas_than_programs_a_hopper_gpu_keeps_resident():
    assert scratch.slots_for(256, 196_648) == 160  # one such program an SM: 160 SMs' worth
    assert scratch.slots_for(256, 98_320) == 320  # two
    assert scratch.slots_for(128, 1_024) == 160 * 16  # threads bound it: 2048 per SM
    assert scratch.slots_for(32, 0) == 160 * 32  # and the 32 programs an SM keeps at most

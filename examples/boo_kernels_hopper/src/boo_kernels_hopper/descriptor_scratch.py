"""Memory for tensor maps a kernel builds on the device, under IREE's CUDA kernel ABI.

A Triton kernel that calls ``tl.make_tensor_descriptor`` writes each 128-byte tensor map
(what the Tensor Memory Accelerator reads) into *global scratch*: a pointer Triton appends to
the kernel's parameters, to memory its launcher allocates, each program at ``linear program
id * per_program`` bytes from it. IREE launches a kernel with its bindings' pointers alone,
so :func:`give_descriptor_scratch` rewrites the PTX to take that memory from the module
itself, safely however many launches of the kernel run at once (on several streams, in CUDA
graphs, through IREE's runtime or BOO's):

* the module holds ``slots`` areas of ``per_program`` bytes and one owner word per area;
* thread 0 of each program takes a free area: it starts at a ticket it increments (so that
  programs spread over the areas) and claims the first area whose owner word it changes from
  0 to the program's warp count (an acquiring compare-and-swap), then tells the other
  threads through the first word of shared memory, before Triton's code uses it;
* Triton's load of the scratch parameter becomes the area's address less what Triton adds
  for the program's id, so every address it computes lands in the area;
* at its ``ret``, lane 0 of each warp takes one from the owner word (a releasing reduction):
  the area is free again once every warp has finished, its tensor-map loads all complete.

``slots`` must exceed the programs that can be resident at once (:func:`slots_for`); were it
not, a program would wait for an area to be freed, never take one in use.
"""

from __future__ import annotations

import re

SCRATCH = "boo_descriptor_scratch"
OWNERS = "boo_descriptor_owners"
TICKET = "boo_descriptor_ticket"
#: Shared memory per SM of a Hopper GPU, and the most programs one SM keeps resident.
SHARED_PER_SM = 228 * 1024
RESIDENT_PER_SM = 32
#: More SMs than any Hopper GPU has (an H100 SXM or H200 has 132).
MAX_SMS = 160


def slots_for(threads: int, shared_bytes: int) -> int:
    """Areas enough for every program of a kernel of ``threads`` threads and ``shared_bytes``
    of shared memory that a Hopper GPU can keep resident at once."""
    per_sm = min(RESIDENT_PER_SM, 2048 // threads, SHARED_PER_SM // max(shared_bytes, 1))
    return MAX_SMS * max(per_sm, 1)


def give_descriptor_scratch(ptx: str, name: str, parameter: int, per_program: int, warps: int, slots: int) -> str:
    """``ptx`` with kernel ``name`` taking its global scratch (its parameter number
    ``parameter``, ``per_program`` bytes a program) from ``slots`` areas of its own module
    (module docstring); ``warps``: the kernel's warps per program. ValueError where the PTX
    is not shaped as this expects (nothing is guessed)."""
    if per_program <= 0 or per_program % 128 or slots < 1 or warps < 1:
        raise ValueError(f"cannot give {per_program} bytes a program in {slots} areas to {warps} warps")
    entry = re.search(rf"\.visible\s+\.entry\s+{re.escape(name)}\s*\(.*?\)[^{{]*\{{", ptx, re.S)
    if entry is None:
        raise ValueError(f"no .entry {name} in the PTX")
    if not re.search(r"\.extern\s+\.shared\s+\.align\s+\d+\s+\.b8\s+global_smem\[\]", ptx):
        raise ValueError("the kernel declares no global_smem to pass the area's number through")
    body_end = _closing_brace(ptx, entry.end() - 1)
    body = ptx[entry.end():body_end]
    loads = re.compile(rf"ld\.param\.[bu]64\s+(%rd\d+),\s*\[{re.escape(name)}_param_{parameter}\];")
    if not loads.search(body):
        raise ValueError(f"{name} never loads its scratch parameter {parameter}")
    returns = re.findall(r"^\s*(@!?%\w+\s+)?ret(\.uni)?;", body, re.M)
    if len(returns) != 1 or returns[0][0] or re.search(r"^\s*(@!?%\w+\s+)?exit;", body, re.M):
        raise ValueError(f"{name} must end at one unconditional ret to free its area")
    for symbol in (SCRATCH, OWNERS, TICKET):
        if symbol in ptx:
            raise ValueError(f"the PTX already uses {symbol}")
    body = loads.sub(lambda m: f"mov.b64 \t{m.group(1)}, %boo_scratch_base;", body)
    body = re.sub(r"^(\s*)ret(\.uni)?;", lambda m: _release() + m.group(0), body, count=1, flags=re.M)
    module_memory = (f".global .align 128 .b8 {SCRATCH}[{slots * per_program}];\n"
                     f".global .align 4 .b32 {OWNERS}[{slots}];\n"
                     f".global .align 4 .b32 {TICKET};\n")
    return (ptx[:entry.start()] + module_memory + ptx[entry.start():entry.end()]
            + _claim(per_program, warps, slots) + body + ptx[body_end:])


def _closing_brace(text: str, opening: int) -> int:
    depth = 0
    for index in range(opening, len(text)):
        depth += {"{": 1, "}": -1}.get(text[index], 0)
        if depth == 0:
            return index
    raise ValueError("the kernel's body does not close")


def _claim(per_program: int, warps: int, slots: int) -> str:
    """Every thread: %boo_scratch_base (the area's address less the program's offset in
    Triton's scratch) and %boo_scratch_owner (the area's owner word)."""
    return f"""
	.reg .b64 	%boo_scratch_base;
	.reg .b64 	%boo_scratch_owner;
	{{
	.reg .pred 	%boo_p<3>;
	.reg .b32 	%boo_r<8>;
	.reg .b64 	%boo_rd<6>;
	mov.u32 	%boo_r0, %tid.x;
	setp.ne.u32 	%boo_p0, %boo_r0, 0;
	@%boo_p0 bra 	$BOO_AREA_KNOWN;
	mov.u64 	%boo_rd0, {TICKET};
	atom.global.inc.u32 	%boo_r1, [%boo_rd0], {slots - 1};
$BOO_AREA_TRY:
	mul.wide.u32 	%boo_rd1, %boo_r1, 4;
	mov.u64 	%boo_rd2, {OWNERS};
	add.s64 	%boo_rd2, %boo_rd2, %boo_rd1;
	atom.acquire.gpu.global.cas.b32 	%boo_r2, [%boo_rd2], 0, {warps};
	setp.eq.u32 	%boo_p1, %boo_r2, 0;
	@%boo_p1 bra 	$BOO_AREA_TAKEN;
	add.u32 	%boo_r1, %boo_r1, 1;
	setp.eq.u32 	%boo_p2, %boo_r1, {slots};
	@%boo_p2 mov.u32 	%boo_r1, 0;
	bra.uni 	$BOO_AREA_TRY;
$BOO_AREA_TAKEN:
	st.shared.u32 	[global_smem], %boo_r1;
$BOO_AREA_KNOWN:
	bar.sync 	0;
	ld.shared.u32 	%boo_r1, [global_smem];
	bar.sync 	0;
	mul.wide.u32 	%boo_rd1, %boo_r1, 4;
	mov.u64 	%boo_scratch_owner, {OWNERS};
	add.s64 	%boo_scratch_owner, %boo_scratch_owner, %boo_rd1;
	mul.wide.u32 	%boo_rd3, %boo_r1, {per_program};
	mov.u64 	%boo_rd4, {SCRATCH};
	add.s64 	%boo_rd4, %boo_rd4, %boo_rd3;
	mov.u32 	%boo_r3, %ctaid.x;
	mov.u32 	%boo_r4, %ctaid.y;
	mov.u32 	%boo_r5, %ctaid.z;
	mov.u32 	%boo_r6, %nctaid.x;
	mov.u32 	%boo_r7, %nctaid.y;
	mad.lo.s32 	%boo_r5, %boo_r5, %boo_r7, %boo_r4;
	mad.lo.s32 	%boo_r5, %boo_r5, %boo_r6, %boo_r3;
	mul.wide.u32 	%boo_rd5, %boo_r5, {per_program};
	sub.s64 	%boo_scratch_base, %boo_rd4, %boo_rd5;
	}}
"""


def _release() -> str:
    """Lane 0 of each warp, at the kernel's end: one warp fewer holds the area."""
    return """	{
	.reg .pred 	%boo_q;
	.reg .b32 	%boo_lane;
	mov.u32 	%boo_lane, %laneid;
	setp.eq.u32 	%boo_q, %boo_lane, 0;
	@%boo_q red.release.gpu.global.add.s32 	[%boo_scratch_owner], -1;
	}
"""

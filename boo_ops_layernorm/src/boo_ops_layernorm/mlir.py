"""Hand-written MLIR for the layernorm kernels on the CPU: linalg on ``(rows, row_length)``
views of the tensors, with the tiling set on each op.

Why not the export of :meth:`LayerNormSignature.reference`? With ``hooks.CPU_FLAGS`` IREE
fuses the exported forward into one dispatch, but tiles its reductions 8 rows x 16 columns
and reduces every 8x16 tile across vector lanes on each step: 4096x1024 float32 took 1.6x
PyTorch's time. One row at a time, 64 columns per step, keeps the sums in vector registers
and runs at PyTorch's speed (both are then memory-bound). The exported backward is four
dispatches that materialize ``xhat`` and ``dy * weight`` and tile the column sums of dw/db
poorly (about 4x PyTorch). The one here takes about 1.5x PyTorch's time: dx and dw/db are
separate dispatches (a row and a column reduction do not fuse), so dy and x are read twice.

* forward: mean (the sum of x / n, which cannot overflow for finite x), variance (the sum of
  squared deviations / n, which overflows only where the variance does), rstd (NaN where the
  variance is not finite), y = (x - mean) * rstd [* w] [+ b]: one dispatch.
* backward dx: one row reduction with two results (``sum g`` and ``sum g * xhat``, with
  ``g = dy * weight`` and ``xhat = (x - mean) * rstd`` recomputed from the inputs), then
  ``dx = rstd * (g - mean(g) - xhat * mean(g * xhat))``: one dispatch.
* backward dw, db: column sums in two stages, partial sums over blocks of consecutive rows
  (one block per workgroup, vectorized along the row), then a small sum over the blocks.

Everything accumulates in float32; the reference stays the numerics oracle.
"""

from __future__ import annotations

import torch

from .signature import LayerNormSignature

_ELEMENT = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
#: Columns per vector step along a row, and rows per workgroup.
VECTOR_COLUMNS = 64
ROWS_PER_WORKGROUP = 32
#: Rows per block in the first stage of dw/db: the largest divisor of the row count up to
#: this. On 4096x1024, blocks of 16 rows took 1.5 ms, one column sum over all rows 2.2 ms.
MAX_BLOCK_ROWS = 16

_PIPELINE = "#iree_codegen.translation_info<pipeline = #iree_cpu.pipeline<DoubleTilingExpert>>"


def _lowering(config: str) -> str:
    return f"lowering_config = #iree_cpu.lowering_config<{config}>"


def _root(config: str) -> str:
    """The attribute of a dispatch's root op: its tiling and the codegen pipeline."""
    return (f"compilation_info = #iree_codegen.compilation_info<lowering_config = #iree_cpu.lowering_config<{config}>, "
            f"translation_info = {_PIPELINE}>")


# Tilings of the row-wise ops: one row per step, VECTOR_COLUMNS columns.
_ROW_REDUCTION_ROOT = _root(f"distribution = [{ROWS_PER_WORKGROUP}, 0], vector_common_parallel = [1, 0], "
                            f"vector_reduction = [0, {VECTOR_COLUMNS}]")
_ROW_REDUCTION = _lowering(f"vector_common_parallel = [1, 0], vector_reduction = [0, {VECTOR_COLUMNS}]")
_ROW_ELEMENTWISE = _lowering(f"vector_common_parallel = [1, 0], vector_inner_parallel = [0, {VECTOR_COLUMNS}]")
_PER_ROW = _lowering("vector_common_parallel = [1]")
# Partial column sums, loops (block, column, row in block): one block per workgroup, 16
# columns per vector, one row per step (IREE's own tiling made this stage 7x slower).
_PARTIALS_ROOT = _root("distribution = [1, {n}, 0], vector_common_parallel = [1, 16, 0], vector_reduction = [0, 0, 1]")


def block_rows(rows: int) -> int:
    """Rows per block of the partial column sums: the largest divisor of ``rows`` up to 16."""
    return next(k for k in range(min(rows, MAX_BLOCK_ROWS), 0, -1) if rows % k == 0)


def kernel_mlir(signature: LayerNormSignature) -> str:
    """The kernel of ``signature`` in BOO's calling convention (a public function named
    ``signature.func_name``, inputs then outputs written in place)."""
    return (_Forward if signature.mode == "fwd" else _Backward)(signature).function()


def _vtensor(shape: tuple[int, ...], element: str, value: bool = True) -> str:
    return f"!torch.{'vtensor' if value else 'tensor'}<[{','.join(map(str, shape))}],{element}>"


def _tensor(shape: tuple[int, ...], element: str) -> str:
    return f"tensor<{'x'.join(map(str, shape))}x{element}>"


def _float(value: float) -> str:
    """An MLIR float literal (MLIR wants a digit after the point: ``1.0e-05``, not ``1e-05``)."""
    return f"{value:.17e}"


def _results(name: str, count: int) -> tuple[str, list[str]]:
    """How an op with ``count`` results is named, and how its results are referred to."""
    if count == 1:
        return name, [name]
    return f"{name}:{count}", [f"{name}#{i}" for i in range(count)]


ROW = "(i, j) -> (i, j)"
ROW_STAT = "(i, j) -> (i)"
COLUMN = "(i, j) -> (j)"


class _Writer:
    """Writes one function: the torch boundary (views to and from ``(rows, row_length)``) and
    helpers for linalg ops. Subclasses write the body; methods append lines in order."""

    def __init__(self, signature: LayerNormSignature) -> None:
        self.sig = signature
        self.t = _ELEMENT[signature.dtype]
        self.rows, self.n = signature.rows, signature.row_length
        self.lines: list[str] = []
        self.constants: set[int] = set()
        self.params: list[str] = []

    def emit(self, line: str) -> None:
        self.lines.append("  " + line)

    def body(self) -> None:
        raise NotImplementedError

    def function(self) -> str:
        self.emit("%zero = arith.constant 0.000000e+00 : f32")
        self.emit(f"%inv_n = arith.constant {_float(1.0 / self.n)} : f32")
        self.body()
        lines = "\n".join(self.lines)
        return f"func.func @{self.sig.func_name}({', '.join(self.params)}) {{\n{lines}\n  return\n}}\n"

    # -- torch boundary ---------------------------------------------------------------------------

    def int_list(self, name: str, dims: tuple[int, ...]) -> str:
        for d in sorted(set(dims) - self.constants):
            self.constants.add(d)
            self.emit(f"%int{d} = torch.constant.int {d}")
        types = ", ".join("!torch.int" for _ in dims)
        self.emit(f"{name} = torch.prim.ListConstruct {', '.join(f'%int{d}' for d in dims)} : ({types}) -> "
                  "!torch.list<int>")
        return name

    def argument(self, arg: str, shape: tuple[int, ...], new: tuple[int, ...], element: str) -> str:
        """Declare input ``arg`` of ``shape``; return it viewed with shape ``new``, as a builtin tensor."""
        self.params.append(f"{arg}: {_vtensor(shape, element)}")
        dims = self.int_list(f"{arg}_dims", new)
        self.emit(f"{arg}_v = torch.aten.view {arg}, {dims} : {_vtensor(shape, element)}, !torch.list<int> -> "
                  f"{_vtensor(new, element)}")
        self.emit(f"{arg}_b = torch_c.to_builtin_tensor {arg}_v : {_vtensor(new, element)} -> {_tensor(new, element)}")
        return f"{arg}_b"

    def output(self, out: str, out_shape: tuple[int, ...], element: str) -> None:
        """Declare output ``out`` (written in place by :meth:`store`)."""
        self.params.append(f"{out}: {_vtensor(out_shape, element, value=False)}")

    def store(self, value: str, shape: tuple[int, ...], out: str, out_shape: tuple[int, ...], element: str) -> None:
        """Write builtin tensor ``value`` into output ``out``, viewed back to ``out_shape``."""
        self.emit(f"{out}_t = torch_c.from_builtin_tensor {value} : {_tensor(shape, element)} -> "
                  f"{_vtensor(shape, element)}")
        dims = self.int_list(f"{out}_dims", out_shape)
        self.emit(f"{out}_v = torch.aten.view {out}_t, {dims} : {_vtensor(shape, element)}, !torch.list<int> -> "
                  f"{_vtensor(out_shape, element)}")
        self.emit(f"torch.overwrite.tensor.contents {out}_v overwrites {out} : {_vtensor(out_shape, element)}, "
                  f"{_vtensor(out_shape, element, value=False)}")

    # -- linalg -----------------------------------------------------------------------------------

    def zeros(self, name: str, shape: tuple[int, ...]) -> str:
        ty = _tensor(shape, "f32")
        self.emit(f"{name}_e = tensor.empty() : {ty}")
        self.emit(f"{name} = linalg.fill ins(%zero : f32) outs({name}_e : {ty}) -> {ty}")
        return name

    def empty(self, name: str, shape: tuple[int, ...], element: str) -> str:
        self.emit(f"{name} = tensor.empty() : {_tensor(shape, element)}")
        return name

    def generic(self, result: str, maps: list[str], iterators: list[str], ins: list[tuple[str, str]],
                outs: list[tuple[str, str]], args: list[str], attribute: str | None = None) -> None:
        """Open a linalg.generic and its block; the caller writes the region and closes it."""
        affine = ", ".join(f"affine_map<{m}>" for m in maps)
        kinds = ", ".join(f'"{k}"' for k in iterators)
        attrs = f" attrs = {{{attribute}}}" if attribute else ""
        self.emit(f"{result} = linalg.generic {{indexing_maps = [{affine}], iterator_types = [{kinds}]}} "
                  f"ins({', '.join(v for v, _ in ins)} : {', '.join(ty for _, ty in ins)}) "
                  f"outs({', '.join(v for v, _ in outs)} : {', '.join(ty for _, ty in outs)}){attrs} {{")
        self.emit(f"^bb0({', '.join(args)}):")

    def close(self, yields: list[str], result_types: list[str]) -> None:
        """Yield float32 values or values of the tensors' type (per ``result_types``), end the op."""
        element = [ty.rsplit("x", 1)[1].rstrip(">") for ty in result_types]
        self.region(f"linalg.yield {', '.join(yields)} : {', '.join(element)}")
        self.emit(f"}} -> ({', '.join(result_types)})")

    def region(self, line: str) -> None:
        self.emit("  " + line)

    def as_f32(self, value: str) -> str:
        """Region code widening an element of the tensors' type to float32."""
        if self.t == "f32":
            return value
        self.region(f"{value}_f = arith.extf {value} : {self.t} to f32")
        return f"{value}_f"

    def narrowed(self, value: str) -> str:
        """Region code rounding a float32 value to the tensors' element type."""
        if self.t == "f32":
            return value
        self.region(f"{value}_t = arith.truncf {value} : f32 to {self.t}")
        return f"{value}_t"



class _Forward(_Writer):
    """``(x[, weight][, bias]) -> (y, mean, rstd)``."""

    def body(self) -> None:
        sig, t, rows, n = self.sig, self.t, self.rows, self.n
        X, R, W = _tensor((rows, n), t), _tensor((rows,), "f32"), _tensor((n,), t)
        x = self.argument("%x", sig.input_shape, (rows, n), t)
        params = [(self.argument(f"%{name}", sig.normalized_shape, (n,), t), W)
                  for name, present in (("weight", sig.weight), ("bias", sig.bias)) if present]
        for name, shape, element in (("%y", sig.input_shape, t), ("%mean_out", sig.stats_shape, "f32"),
                                     ("%rstd_out", sig.stats_shape, "f32")):
            self.output(name, shape, element)
        zeros = self.zeros("%row_zeros", (rows,))

        # mean = sum(x / n): it cannot overflow for finite x (sum(x) / n can).
        self.generic("%mean", [ROW, ROW_STAT], ["parallel", "reduction"], [(x, X)], [(zeros, R)],
                     [f"%v: {t}", "%s: f32"], _ROW_REDUCTION)
        self.region(f"%vn = arith.mulf {self.as_f32('%v')}, %inv_n : f32")
        self.region("%s1 = arith.addf %vn, %s : f32")
        self.close(["%s1"], [R])

        self.generic("%squares", [ROW, ROW_STAT, ROW_STAT], ["parallel", "reduction"], [(x, X), ("%mean", R)],
                     [(zeros, R)], [f"%v: {t}", "%m: f32", "%q: f32"], _ROW_REDUCTION_ROOT)
        self.region(f"%c = arith.subf {self.as_f32('%v')}, %m : f32")
        self.region("%c2 = arith.mulf %c, %c : f32")
        self.region("%c2n = arith.mulf %c2, %inv_n : f32")  # summing squares / n: overflows only when var does
        self.region("%q1 = arith.addf %c2n, %q : f32")
        self.close(["%q1"], [R])
        self.emit(f"%eps = arith.constant {_float(sig.eps)} : f32")
        # A variance that is not finite (squared deviations overflow float32, or x holds inf
        # or NaN) gives NaN, never a finite y computed from rstd = 0.
        self.emit("%inf = arith.constant 0x7F800000 : f32")
        self.emit("%nan = arith.constant 0x7FC00000 : f32")
        self.per_row("%rstd", "%squares", ["%ve = arith.addf %s, %eps : f32", "%r0 = math.rsqrt %ve : f32",
                                           "%finite = arith.cmpf olt, %s, %inf : f32",
                                           "%r = arith.select %finite, %r0, %nan : f32"], "%r")

        empty = self.empty("%y_e", (rows, n), t)
        maps = [ROW, ROW_STAT, ROW_STAT] + [COLUMN] * len(params) + [ROW]
        names = ["%w", "%b"] if sig.weight and sig.bias else ["%w"] if sig.weight else ["%b"] if sig.bias else []
        self.generic("%normalized", maps, ["parallel", "parallel"], [(x, X), ("%mean", R), ("%rstd", R), *params],
                     [(empty, X)], [f"%v: {t}", "%m: f32", "%r: f32", *(f"{p}: {t}" for p in names), f"%o: {t}"],
                     _ROW_ELEMENTWISE)
        self.region(f"%c = arith.subf {self.as_f32('%v')}, %m : f32")
        value = "%xh"
        self.region(f"{value} = arith.mulf %c, %r : f32")
        if sig.weight:
            self.region(f"%scaled = arith.mulf {value}, {self.as_f32('%w')} : f32")
            value = "%scaled"
        if sig.bias:
            self.region(f"%shifted = arith.addf {value}, {self.as_f32('%b')} : f32")
            value = "%shifted"
        self.close([self.narrowed(value)], [X])

        self.store("%normalized", (rows, n), "%y", sig.input_shape, t)
        self.store("%mean", (rows,), "%mean_out", sig.stats_shape, "f32")
        self.store("%rstd", (rows,), "%rstd_out", sig.stats_shape, "f32")

    def per_row(self, result: str, source: str, lines: list[str], value: str) -> None:
        """An elementwise op on a per-row float32 value ``%s``."""
        R = _tensor((self.rows,), "f32")
        empty = self.empty(f"{result}_e", (self.rows,), "f32")
        self.generic(result, ["(i) -> (i)", "(i) -> (i)"], ["parallel"], [(source, R)], [(empty, R)],
                     ["%s: f32", "%o: f32"], _PER_ROW)
        for line in lines:
            self.region(line)
        self.close([value], [R])


class _Backward(_Writer):
    """``(dy, x, mean, rstd[, weight]) -> the signature's gradients``."""

    def body(self) -> None:
        sig, t, rows, n = self.sig, self.t, self.rows, self.n
        dy = self.argument("%dy", sig.input_shape, (rows, n), t)
        x = self.argument("%x", sig.input_shape, (rows, n), t)
        mean = self.argument("%mean", sig.stats_shape, (rows,), "f32")
        rstd = self.argument("%rstd", sig.stats_shape, (rows,), "f32")
        weight = self.argument("%w", sig.normalized_shape, (n,), t) if sig.weight else None
        shapes = {"dx": sig.input_shape, "dw": sig.normalized_shape, "db": sig.normalized_shape}
        for g in sig.gradients:
            self.output(f"%{g}_out", shapes[g], t)
        if "dx" in sig.gradients:
            self.store(self.input_gradient(dy, x, mean, rstd, weight), (rows, n), "%dx_out", sig.input_shape, t)
        wanted = [g for g in ("dw", "db") if g in sig.gradients]
        if wanted:
            totals = self.block_totals(self.partial_sums(dy, x, mean, rstd, wanted), len(wanted))
            for grad, total in zip(wanted, totals):
                self.store(total, (n,), f"%{grad}_out", sig.normalized_shape, t)

    def g_and_xhat(self, has_weight: bool) -> tuple[str, str]:
        """Region code for ``dy * weight`` (or dy) and ``(x - mean) * rstd`` from block
        arguments %d, %v, %m, %r and %ww."""
        g = self.as_f32("%d")
        if has_weight:
            self.region(f"%g = arith.mulf {g}, {self.as_f32('%ww')} : f32")
            g = "%g"
        self.region(f"%xc = arith.subf {self.as_f32('%v')}, %m : f32")
        self.region("%xh = arith.mulf %xc, %r : f32")
        return g, "%xh"

    def input_gradient(self, dy: str, x: str, mean: str, rstd: str, weight: str | None) -> str:
        t, rows, n = self.t, self.rows, self.n
        X, R = _tensor((rows, n), t), _tensor((rows,), "f32")
        ins = [(dy, X), (x, X), (mean, R), (rstd, R)] + ([(weight, _tensor((n,), t))] if weight else [])
        maps = [ROW, ROW, ROW_STAT, ROW_STAT] + ([COLUMN] if weight else [])
        args = [f"%d: {t}", f"%v: {t}", "%m: f32", "%r: f32"] + ([f"%ww: {t}"] if weight else [])
        zeros = self.zeros("%row_zeros", (rows,))

        self.generic("%sums:2", maps + [ROW_STAT] * 2, ["parallel", "reduction"], ins, [(zeros, R)] * 2,
                     args + ["%a: f32", "%c: f32"], _ROW_REDUCTION_ROOT)
        g, xhat = self.g_and_xhat(weight is not None)
        self.region(f"%gx = arith.mulf {g}, {xhat} : f32")
        self.region(f"%a1 = arith.addf {g}, %a : f32")
        self.region("%c1 = arith.addf %gx, %c : f32")
        self.close(["%a1", "%c1"], [R, R])

        empty = self.empty("%dx_e", (rows, n), t)
        self.generic("%dx", maps + [ROW_STAT] * 2 + [ROW], ["parallel", "parallel"],
                     ins + [("%sums#0", R), ("%sums#1", R)], [(empty, X)], args + ["%a: f32", "%c: f32", f"%o: {t}"],
                     _ROW_ELEMENTWISE)
        g, xhat = self.g_and_xhat(weight is not None)
        self.region("%am = arith.mulf %a, %inv_n : f32")
        self.region("%cm = arith.mulf %c, %inv_n : f32")
        self.region(f"%t1 = arith.subf {g}, %am : f32")
        self.region(f"%t2 = arith.mulf {xhat}, %cm : f32")
        self.region("%t3 = arith.subf %t1, %t2 : f32")
        self.region("%res = arith.mulf %r, %t3 : f32")
        self.close([self.narrowed("%res")], [X])
        return "%dx"

    def partial_sums(self, dy: str, x: str, mean: str, rstd: str, wanted: list[str]) -> list[str]:
        """Per block of rows: the sums of dy * xhat (dw) and of dy (db), shape (blocks, n)."""
        t, rows, n = self.t, self.rows, self.n
        k = block_rows(rows)
        blocks = rows // k
        X, X3 = _tensor((rows, n), t), _tensor((blocks, k, n), t)
        R, R2, P = _tensor((rows,), "f32"), _tensor((blocks, k), "f32"), _tensor((blocks, n), "f32")
        self.emit(f"%dy3 = tensor.expand_shape {dy} [[0, 1], [2]] output_shape [{blocks}, {k}, {n}] : {X} into {X3}")
        ins, maps, args = [("%dy3", X3)], ["(b, j, k) -> (b, k, j)"], [f"%d: {t}"]
        if "dw" in wanted:
            self.emit(f"%x3 = tensor.expand_shape {x} [[0, 1], [2]] output_shape [{blocks}, {k}, {n}] : {X} into {X3}")
            for name, value in (("%mean2", mean), ("%rstd2", rstd)):
                self.emit(f"{name} = tensor.expand_shape {value} [[0, 1]] output_shape [{blocks}, {k}] : {R} into {R2}")
            ins += [("%x3", X3), ("%mean2", R2), ("%rstd2", R2)]
            maps += ["(b, j, k) -> (b, k, j)", "(b, j, k) -> (b, k)", "(b, j, k) -> (b, k)"]
            args += [f"%v: {t}", "%m: f32", "%r: f32"]
        zeros = self.zeros("%part_zeros", (blocks, n))
        result, parts = _results("%parts", len(wanted))
        self.generic(result, maps + ["(b, j, k) -> (b, j)"] * len(wanted), ["parallel", "parallel", "reduction"], ins,
                     [(zeros, P)] * len(wanted), args + [f"%acc_{g}: f32" for g in wanted],
                     _PARTIALS_ROOT.format(n=n))
        dy_f32, sums = self.as_f32("%d"), []
        if "dw" in wanted:
            self.region(f"%xc = arith.subf {self.as_f32('%v')}, %m : f32")
            self.region("%xh = arith.mulf %xc, %r : f32")
            self.region(f"%dxh = arith.mulf {dy_f32}, %xh : f32")
            self.region("%sum_dw = arith.addf %dxh, %acc_dw : f32")
            sums.append("%sum_dw")
        if "db" in wanted:
            self.region(f"%sum_db = arith.addf {dy_f32}, %acc_db : f32")
            sums.append("%sum_db")
        self.close(sums, [P] * len(wanted))
        return parts

    def block_totals(self, parts: list[str], count: int) -> list[str]:
        """Sum the partial sums over the blocks, rounded to the element type."""
        t, n = self.t, self.n
        blocks = self.rows // block_rows(self.rows)
        P, W, Wt = _tensor((blocks, n), "f32"), _tensor((n,), "f32"), _tensor((n,), t)
        zeros = self.zeros("%total_zeros", (n,))
        result, totals = _results("%totals", count)
        self.generic(result, ["(j, b) -> (b, j)"] * count + ["(j, b) -> (j)"] * count, ["parallel", "reduction"],
                     [(p, P) for p in parts], [(zeros, W)] * count,
                     [f"%p{i}: f32" for i in range(count)] + [f"%s{i}: f32" for i in range(count)])
        for i in range(count):
            self.region(f"%s{i}_1 = arith.addf %p{i}, %s{i} : f32")
        self.close([f"%s{i}_1" for i in range(count)], [W] * count)
        if t == "f32":
            return totals
        rounded = []
        for i, total in enumerate(totals):
            empty = self.empty(f"%rounded{i}_e", (n,), t)
            self.generic(f"%rounded{i}", ["(j) -> (j)", "(j) -> (j)"], ["parallel"], [(total, W)], [(empty, Wt)],
                         ["%s: f32", f"%o: {t}"])
            self.close([self.narrowed("%s")], [Wt])
            rounded.append(f"%rounded{i}")
        return rounded

"""Reading executables out of IREE's printed MLIR."""

from __future__ import annotations

from boo_core.substitute.mlir_text import parse_executable, sanitize_symbol, split_executables

EXPORT0 = ("      hal.executable.export public @k$async_dispatch_0_matmul ordinal(0) layout(#hal.pipeline.layout<"
           'constants = 2, bindings = [#hal.pipeline.binding<storage_buffer, "ReadOnly|Indirect">, '
           "#hal.pipeline.binding<storage_buffer, Indirect>], flags = Indirect>) "
           "count(%arg0: !hal.device, %arg1: index) -> (index, index, index) {")
EXPORT1 = ("      hal.executable.export public @k$async_dispatch_1_copy ordinal(0) layout(#hal.pipeline.layout<"
           "bindings = [#hal.pipeline.binding<storage_buffer>]>) count(%arg0: !hal.device) -> (index, index, index) {")
TRANSLATED = """module {
  hal.executable private @k$async_dispatch_0 {
    hal.executable.variant public @cuda_nvptx_fb target(<"cuda", "cuda-nvptx-fb", {note = "a (b) <c>"}>) {
{export0}
        %c1 = arith.constant 1 : index
        %0 = affine.apply affine_map<()[s0] -> (s0 ceildiv 64)>()[%arg1]
        hal.return %0, %c1, %c1 : index, index, index
      } <workgroup_size = [64 : index, 2 : index, 1 : index], subgroup_size = 32, workgroup_local_memory = 65536>
    }
  }
  hal.executable private @k$async_dispatch_1 {
    hal.executable.variant public @cuda_nvptx_fb target(<"cuda", "cuda-nvptx-fb", {}>) {
{export1}
        %c3 = arith.constant 3 : index
        %c1 = arith.constant 1 : index
        hal.return %c3, %c1, %c1 : index, index, index
      } <workgroup_size = [128 : index, 1 : index, 1 : index]>
    }
  }
}
""".replace("{export0}", EXPORT0).replace("{export1}", EXPORT1)


def test_exports_bindings_and_launch_geometry_are_read():
    executables = split_executables(TRANSLATED)
    assert list(executables) == ["k$async_dispatch_0", "k$async_dispatch_1"]
    first = parse_executable(executables["k$async_dispatch_0"])
    assert (first.variant, first.backend, first.format) == ("cuda_nvptx_fb", "cuda", "cuda-nvptx-fb")
    assert first.target == '<"cuda", "cuda-nvptx-fb", {note = "a (b) <c>"}>'
    [export] = first.exports
    assert export.kernel_name == "k_async_dispatch_0_matmul" and export.constants == 2
    assert [(b.index, b.flags, b.read_only) for b in export.bindings] == [(0, "ReadOnly|Indirect", True),
                                                                         (1, "Indirect", False)]
    assert (export.workgroup_size, export.subgroup_size, export.workgroup_local_memory) == ((64, 2, 1), 32, 65536)
    assert export.workgroup_count is None and "ceildiv 64" in export.count_region  # not constant: not derived
    assert export.count_arguments == "%arg0: !hal.device, %arg1: index"
    [copy] = parse_executable(executables["k$async_dispatch_1"]).exports
    assert copy.workgroup_count == (3, 1, 1) and copy.workgroup_local_memory is None


def test_symbols_are_sanitized_as_iree_does():
    assert sanitize_symbol("conv$async_dispatch_0.x-y") == "conv_async_dispatch_0_x_y"


def test_dumped_executables_are_read_in_the_modules_order(tmp_path):
    from boo_core.substitute.executables import read_dumped_sources

    for index in (10, 2, 1):
        name = f"module_main_dispatch_{index}"
        (tmp_path / f"module_{name}.mlir").write_text(f"hal.executable public @{name} {{\n}}\n")
    assert list(read_dumped_sources(tmp_path)) == [f"module_main_dispatch_{i}" for i in (1, 2, 10)]

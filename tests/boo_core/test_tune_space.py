"""The IREE tile configurations the tuner sweeps for GPU contractions and elementwise dispatches."""

from __future__ import annotations

import math

import pytest

from boo_core.kernels.configs import apply_config, configure_root
from boo_core.tune.space import describe, elementwise_configs, reduction_configs, tile_and_fuse_configs


@pytest.mark.parametrize("m, n, k", [(1024, 1024, 1024), (4096, 4096, 4096), (8192, 4096, 1024), (256, 512, 96)])
def test_every_configuration_divides_the_problem_and_fits_shared_memory(m, n, k):
    configs = tile_and_fuse_configs(m, n, k, "bf16")
    assert 0 < len(configs) <= 32
    for config in configs:
        tile_m, tile_n = config["workgroup"]
        k_step = config["reduction"][0] * 16
        assert m % tile_m == 0 and n % tile_n == 0 and k % k_step == 0, config
        assert config["prefetch_num_stages"] * (tile_m + tile_n) * k_step * 2 <= 160 * 1024, config
        warps = config["workgroup_size"][0] // 32
        sub_m, sub_n = config["subgroup"]
        assert warps in (4, 8) and sub_m * sub_n <= 32 and sub_m * sub_n * warps * 16 * 8 == tile_m * tile_n, config


def test_each_workgroup_tile_gets_a_turn_fullest_waves_first():
    configs = tile_and_fuse_configs(1024, 1024, 1024, "bf16")
    shapes = [tuple(c["workgroup"]) for c in configs]
    distinct = list(dict.fromkeys(shapes))
    assert len(distinct) > 4
    assert shapes[:len(distinct)] == distinct  # one configuration of every tile before a second of any
    assert shapes[len(distinct):2 * len(distinct)] == distinct
    # 128x128 tiles fill 64 of 132 multiprocessors: after the 128x64 and 64x64 ones, which fill
    # about all of them, although a 128x128 tile reuses each loaded byte more.
    assert distinct.index((128, 64)) < distinct.index((64, 64)) < distinct.index((128, 128))
    assert {c["prefetch_num_stages"] for c in configs} == {2, 3, 4}


def test_a_dtype_without_an_mma_intrinsic_has_no_configurations():
    assert tile_and_fuse_configs(1024, 1024, 1024, "f32") == []


@pytest.mark.parametrize("rows, columns, element_bytes", [(100352, 64, 2), (100352, 256, 2), (1568, 2048, 2),
                                                          (6272, 512, 4), (96, 48, 2)])
def test_elementwise_configurations_give_each_thread_one_16_byte_access(rows, columns, element_bytes):
    configs = elementwise_configs(rows, columns, element_bytes)
    assert 0 < len(configs) <= 4
    distances = [abs(math.log2(c["workgroup_size"][0] / 256)) for c in configs]
    assert distances == sorted(distances)  # 256 threads first, then alternately fewer and more
    for config in configs:
        row_tile, column_tile = config["workgroup"]
        assert config["thread"] == [1, 16 // element_bytes], config
        assert rows % row_tile == 0 and columns % column_tile == 0 and column_tile <= 256, config
        threads = config["workgroup_size"][0]
        assert 128 <= threads <= 1024 and threads * config["thread"][1] == row_tile * column_tile, config


def test_rows_a_16_byte_access_cannot_tile_have_no_elementwise_configurations():
    assert elementwise_configs(100, 6, 2) == []  # 6 columns: not a whole 8-element access
    assert elementwise_configs(100, 64, 3) == []  # no dtype of 3 bytes


ELEMENTWISE_ROOT = ('%12 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> '
                    '(d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%6 : tensor<100352x64xbf16>) outs(%7 : '
                    'tensor<100352x64xbf16>) attrs =  {lowering_config = #iree_gpu.lowering_config<{thread = [1, 4], '
                    'workgroup = [4, 32]}>} {\n')
REDUCTION_ROOT = ('%14 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2, d1)>, '
                  'affine_map<(d0, d1, d2) -> (d0, d1)>], iterator_types = ["parallel", "parallel", "reduction"]} '
                  'ins(%11 : tensor<1568x64x256xf32>) outs(%12 : tensor<1568x256xf32>) attrs =  {lowering_config = '
                  '#iree_gpu.lowering_config<{reduction = [0, 0, 8], thread = [1, 1, 0], workgroup = [1, 32, 0]}>} {\n')
ONE_LOOP_ROOT = ('%3 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], '
                 'iterator_types = ["parallel"]} ins(%1 : tensor<256xf32>) outs(%2 : tensor<256xf32>) attrs =  '
                 '{lowering_config = #iree_gpu.lowering_config<{thread = [4], workgroup = [128]}>} {\n')


def test_an_elementwise_configuration_edits_only_elementwise_roots_of_its_rank():
    config = {"workgroup": [32, 64], "thread": [1, 8], "workgroup_size": [256, 1, 1]}
    edited = configure_root(ELEMENTWISE_ROOT, config)
    assert "thread = [1, 8]" in edited and "workgroup = [32, 64]" in edited
    assert configure_root(REDUCTION_ROOT, config) is None  # the kernel's sums keep IREE's tiles
    assert configure_root(ONE_LOOP_ROOT, config) is None


def test_a_configuration_with_more_sizes_than_the_roots_loops_is_not_for_that_root():
    """IREE drops unit dimensions: a CPU configuration written for (channels, plane) meets a
    root with one parallel loop where there is one channel. It fits no root there (an error
    BOO's chain passes over to the next formulation), not a ValueError out of the compile."""
    whole_rows = {"distribution": [1, 20], "vector_common_parallel": [1, 16]}
    assert configure_root(ONE_LOOP_ROOT, whole_rows) is None
    assert apply_config(TRANSLATION + ONE_LOOP_ROOT, whole_rows) is None
    assert "distribution = [1, 20]" in configure_root(ELEMENTWISE_ROOT, whole_rows)


STAGE_ROOT = ('%15 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d3, d2)>, '
              'affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel", '
              '"reduction"]} ins(%11 : tensor<3136x32x64xbf16>) outs(%12 : tensor<3136x2x64xf32>) attrs =  '
              '{lowering_config = #iree_gpu.lowering_config<{reduction = [0, 0, 0, 4], thread = [1, 1, 4, 0], '
              'workgroup = [2, 2, 32, 0]}>} {\n')
TRANSLATION = ('  func.func @f() attributes {translation_info = #iree_codegen.translation_info<pipeline = '
               '#iree_gpu.pipeline<TileAndFuse> workgroup_size = [32, 1, 1] subgroup_size = 32>} {\n')
BOTH = {"workgroup": [32, 64], "thread": [1, 8], "workgroup_size": [256, 1, 1],
        "reductions": {"workgroup": [8, 2, 32], "thread": [1, 1, 4], "workgroup_size": [128, 1, 1]}}


@pytest.mark.parametrize(("root", "tiles", "threads"), [
    (ELEMENTWISE_ROOT, "workgroup = [32, 64]", 256),  # the configuration's own fields
    (STAGE_ROOT, "workgroup = [8, 2, 32, 0]", 128),  # its reductions' fields
])
def test_a_configuration_with_reductions_configures_each_kind_of_root_with_its_own_fields(root, tiles, threads):
    edited = apply_config(TRANSLATION + root, BOTH)
    assert tiles in edited and f"workgroup_size = [{threads}, 1, 1]" in edited
    assert apply_config(TRANSLATION + REDUCTION_ROOT, BOTH) is None  # 2 parallel loops: below the rank of its tiles
    assert apply_config(TRANSLATION + ONE_LOOP_ROOT, BOTH) is None
    assert describe("staged_sums", BOTH, ()) == "staged_sums/wg32x64_th1x8_red(wg8x2x32_th1x1x4)"


@pytest.mark.parametrize("parallel", [(3136, 2, 64), (196, 2, 256), (49, 2, 2048), (784, 2, 128)])
def test_reduction_configurations_tile_the_loops_evenly_with_more_threads_than_iree_gives(parallel):
    configs = reduction_configs(parallel)
    assert configs
    for config in configs:
        assert all(size % tile == 0 for size, tile in zip(parallel, config["workgroup"], strict=True))
        assert config["workgroup"][1:-1] == list(parallel[1:-1])
        threads = math.prod(config["workgroup"]) // config["thread"][-1]
        assert config["workgroup_size"] == [threads, 1, 1] and 64 <= threads <= 256


@pytest.mark.parametrize("parallel", [(3136, 2, 64), (196, 2, 256), (784, 2, 128)])
def test_reduction_configurations_with_whole_middle_loops_give_each_thread_every_term(parallel):
    configs = reduction_configs(parallel, vector=8, whole_middle=True)
    assert configs
    for config in configs:
        assert config["thread"] == [1, 2, 8] and config["workgroup"][1:-1] == [2]
        assert all(size % tile == 0 for size, tile in zip(parallel, config["workgroup"], strict=True))
        threads = config["workgroup"][0] * config["workgroup"][-1] // 8  # the terms within each thread
        assert config["workgroup_size"] == [threads, 1, 1] and 64 <= threads <= 256


def test_no_reduction_configuration_where_the_columns_do_not_split_into_vectors():
    assert reduction_configs((10, 2, 3)) == [] and reduction_configs((64,)) == []

"""The IREE tile configurations the tuner sweeps for GPU contractions."""

from __future__ import annotations

import pytest

from boo_core.tune.space import tile_and_fuse_configs


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

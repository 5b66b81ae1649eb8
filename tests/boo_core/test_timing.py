"""Timers: the CPU timer, and the per-device-type registry a GPU timer plugs into."""

from __future__ import annotations

import pytest
import torch

from boo_core import DeviceError
from boo_core.runtime import timing
from boo_core.runtime.timing import TimingStats, cpu_timer, register_timer, timer_for


def test_cpu_timer_warms_up_then_times_each_call():
    calls = []
    stats = cpu_timer(lambda: calls.append(1), device=torch.device("cpu"), iterations=5, warmup=2)
    assert len(calls) == 7 and stats.iterations == 5
    assert 0 < stats.min <= stats.median <= stats.max and stats.stddev >= 0


def test_statistics():
    stats = TimingStats((4.0, 1.0, 3.0, 2.0))
    assert (stats.min, stats.median, stats.mean, stats.max) == (1.0, 2.5, 2.5, 4.0)
    assert stats.stddev == pytest.approx(1.2909944)
    assert TimingStats((5.0,)).stddev == 0.0


def test_cpu_timer_needs_an_iteration():
    with pytest.raises(ValueError, match="iterations must be at least 1, got 0"):
        cpu_timer(lambda: None, device=torch.device("cpu"), iterations=0, warmup=0)


def test_devices_without_a_timer_are_refused_until_one_is_registered(monkeypatch):
    assert timer_for("cuda:0") is timing.cuda_timer
    with pytest.raises(DeviceError, match=r"no timer for xpu devices yet \(timers exist for: cpu, cuda\); "
                                          r"register one with boo_core.runtime.timing.register_timer"):
        timer_for("xpu:0")
    monkeypatch.setattr(timing, "_TIMERS", dict(timing._TIMERS))
    register_timer("xpu", cpu_timer)
    assert timer_for(torch.device("xpu", 1)) is cpu_timer


def test_unknown_device_string():
    with pytest.raises(DeviceError, match="unknown device 'gpu0': expected cpu or cuda:N"):
        timer_for("gpu0")

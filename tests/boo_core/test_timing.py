"""Timers: the CPU timer, and the per-device-type timers a plugin adds to (``boo_timers``)."""

from __future__ import annotations

import pytest
import torch

from boo_core import DeviceError
from boo_core.plugin import hookimpl
from boo_core.runtime import timing
from boo_core.runtime.timing import TimingStats, cpu_timer, timer_for
from boo_core.testing import isolated_registry


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


class TimerPlugin:
    def __init__(self, timers):
        self.timers = timers

    @hookimpl
    def boo_timers(self):
        return self.timers


def test_devices_without_a_timer_are_refused_until_a_plugin_adds_one(caplog):
    with isolated_registry():
        assert timer_for("cuda:0") is timing.cuda_timer
        with pytest.raises(DeviceError, match=r"no timer for xpu devices yet \(timers exist for: cpu, cuda\); "
                                              r"a plugin adds one with the boo_timers hook"):
            timer_for("xpu:0")
    with isolated_registry({"xpu": TimerPlugin({"xpu": cpu_timer}), "cuda": TimerPlugin({"cuda": cpu_timer})}):
        with caplog.at_level("WARNING"):
            assert timer_for(torch.device("xpu", 1)) is cpu_timer
        assert timer_for("cuda:0") is timing.cuda_timer  # BOO's own timer is not displaced
        assert 'plugin "cuda" (registered explicitly): a timer for cuda devices exists already; its timer is skipped' \
            in caplog.text


def test_unknown_device_string():
    with pytest.raises(DeviceError, match="unknown device 'gpu0': expected cpu or cuda:N"):
        timer_for("gpu0")

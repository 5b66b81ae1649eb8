"""Plugin discovery and isolation, on real entry points.

Fake distributions are real ``*.dist-info`` folders on ``sys.path``: importlib.metadata finds
them exactly as it finds installed ones. boo-ops-conv, installed in the test environment,
is discovered the same way.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from boo_core import BooOpRegistry, OpRegistry, PluginError, UnknownOpError
from boo_core.plugins.manager import BooPlugins
from boo_core.testing import write_fake_distribution

FAKE = "tests.boo_core.fake_plugins"


@pytest.fixture
def site(tmp_path, monkeypatch):
    """Returns ``add(name, version, entry_points)``: a fake distribution on sys.path."""
    directory = tmp_path / "site"

    def add(name: str, version: str, entry_points: dict[str, str], where=None):
        target = where or directory
        write_fake_distribution(target, name, version, entry_points)
        monkeypatch.syspath_prepend(str(target))

    return add


def load(**kwargs) -> OpRegistry:
    kwargs.setdefault("disabled", frozenset())
    return OpRegistry.load(BooPlugins(**kwargs))


def test_installed_conv_distribution_is_discovered_through_its_entry_point():
    registry = load()
    entry = registry.get_op("conv")
    assert entry.plugin.distribution == "boo-ops-conv"
    assert entry.distribution.startswith("boo-ops-conv ")
    assert registry.resolve_base("convbfp16").op is entry


def test_fake_distribution_is_discovered_with_its_name_and_version(site):
    site("boo-test-scale", "1.2.3", {"scale": f"{FAKE}.scale_op"})
    registry = load()
    assert registry.get_op("scale").distribution == "boo-test-scale 1.2.3"
    assert registry.parse_command("scale -n 5").size == 5
    assert registry.failures == []


def test_plugin_that_fails_to_import_is_isolated_and_reported(site):
    site("boo-test-scale", "1.0", {"scale": f"{FAKE}.scale_op"})
    site("boo-test-broken", "0.3", {"broken": f"{FAKE}.broken_import"})
    registry = load()
    assert registry.parse_command("scale -n 2").size == 2  # the others keep working
    [failure] = registry.failures
    assert failure.plugin.distribution == "boo-test-broken"
    assert str(failure) == ('Error importing plugin "broken" (boo-test-broken 0.3): '
                            "ImportError: this plugin is broken on purpose")
    with pytest.raises(UnknownOpError, match=r'plugins that failed to load: "broken" \(boo-test-broken 0.3\)'):
        registry.parse_command("nosuchop -n 1")


def test_strict_mode_turns_an_import_failure_into_an_error(site, boo_env):
    site("boo-test-broken", "0.3", {"broken": f"{FAKE}.broken_import"})
    boo_env(BOO_STRICT_PLUGINS="1")
    with pytest.raises(PluginError, match=r'Error importing plugin "broken" \(boo-test-broken 0.3\): '
                                          r"ImportError: this plugin is broken on purpose \(BOO_STRICT_PLUGINS=1\)"):
        OpRegistry.load(BooPlugins(disabled=frozenset()))


def test_plugin_whose_registration_raises_is_isolated_and_strict_mode_raises(site):
    site("boo-test-scale", "1.0", {"scale": f"{FAKE}.scale_op"})
    site("boo-test-badreg", "2.0", {"badreg": f"{FAKE}.broken_register"})
    registry = load()
    assert [f.stage for f in registry.failures] == ["registering"]
    assert "registration exploded on purpose" in str(registry.failures[0])
    assert registry.get_op("scale")
    with pytest.raises(PluginError, match=r'Error registering plugin "badreg" \(boo-test-badreg 2.0\)'):
        load(strict=True)


def test_misspelt_hook_name_is_reported_not_ignored(site):
    site("boo-test-typo", "1.0", {"typo": f"{FAKE}.misspelt_hook"})
    registry = load()
    [failure] = registry.failures
    assert failure.stage == "validating"
    assert "boo_register_opz" in str(failure)


def test_register_rejects_something_that_is_not_an_opspec(site):
    site("boo-test-dict", "1.0", {"dictop": f"{FAKE}.wrong_register_type"})
    [failure] = load().failures
    assert "register() takes a boo_core.OpSpec, got dict" in str(failure)


def test_two_plugins_claiming_one_keyword_give_an_error_naming_both(site):
    site("boo-test-scale", "1.0", {"scale": f"{FAKE}.scale_op"})
    site("boo-test-clash", "9.9", {"clash": f"{FAKE}.scale_clash"})
    registry = load()
    message = (r"command keyword of 'scale' is claimed by plugin \"(scale|clash)\" \(boo-test-(scale 1.0|clash 9.9)\) "
               r"and plugin \"(scale|clash)\" \(boo-test-(scale 1.0|clash 9.9)\)")
    with pytest.raises(PluginError, match=message):
        registry.parse_command("scale -n 3")
    assert any("command keyword 'scale' is claimed by" in c for c in registry.conflicts())
    # Unrelated ops keep working; strict mode refuses the conflict at load time.
    assert registry.parse_command("conv -n 1 -c 3 -H 8 -W 8 -k 2 -F 1").input_shape == (1, 3, 8, 8)
    with pytest.raises(PluginError, match=r"command keyword 'scale' is claimed by .*BOO_STRICT_PLUGINS=1"):
        load(strict=True)


def test_duplicate_entry_points_from_one_distribution_load_once(site, tmp_path):
    # An editable install can put the same distribution on sys.path twice.
    site("boo-test-scale", "1.0", {"scale": f"{FAKE}.scale_op"}, where=tmp_path / "a")
    site("boo-test-scale", "1.0", {"scale": f"{FAKE}.scale_op"}, where=tmp_path / "b")
    registry = load()
    assert registry.failures == []
    assert [e.name for e in registry.list_ops()].count("scale") == 1


def test_same_plugin_name_from_two_distributions_loads_both_and_reports_what_they_both_claim(site):
    # Neither displaces the other by sys.path order: both load, and the keyword both claim
    # is refused with an error naming both distributions.
    site("boo-test-scale", "1.0", {"scale": f"{FAKE}.scale_op"})
    site("boo-test-other", "1.0", {"scale": f"{FAKE}.scale_clash"})
    registry = load()
    assert registry.failures == []
    assert {e.plugin.distribution for e in registry.list_ops() if e.spec.keywords == ("scale",)} == {
        "boo-test-scale", "boo-test-other"}
    with pytest.raises(PluginError, match=r"boo-test-(scale|other) 1.0.*and plugin .*boo-test-(scale|other) 1.0"):
        registry.parse_command("scale -n 3")


def test_disable_autoload_then_register_explicitly(boo_env, fresh_default_registry):
    from .fake_plugins import scale_op

    boo_env(BOO_DISABLE_PLUGIN_AUTOLOAD="1")
    assert BooOpRegistry.list_ops() == []
    with pytest.raises(UnknownOpError, match="no BOO ops are installed"):
        BooOpRegistry.parse_command("conv -n 1 -F 1")
    [entry] = BooOpRegistry.register_plugin(scale_op, "scale")
    assert entry.distribution == "(plugin scale)"
    assert BooOpRegistry.parse_command("scale -n 4").size == 4


def test_explicit_registration_errors_raise(fresh_default_registry, boo_env):
    from .fake_plugins import broken_register, scale_op

    boo_env(BOO_DISABLE_PLUGIN_AUTOLOAD="1")
    with pytest.raises(PluginError, match=r'Error registering plugin "bad" \(registered explicitly\): '
                                          "RuntimeError: registration exploded on purpose"):
        BooOpRegistry.register_plugin(broken_register, "bad")
    BooOpRegistry.register_plugin(scale_op, "scale")
    with pytest.raises(PluginError, match=r"plugin name 'scale' is already taken"):
        BooOpRegistry.register_plugin(scale_op, "scale")


def test_disabled_plugins_are_skipped_by_name(boo_env):
    boo_env(BOO_DISABLE_PLUGINS="conv, other")
    registry = OpRegistry.load(BooPlugins())
    assert "conv" not in [e.name for e in registry.list_ops()]
    with pytest.raises(UnknownOpError, match=r"unknown op 'conv'; "):
        registry.parse_command("conv -n 1")


def test_only_the_plugins_named_in_boo_load_plugins_load(boo_env):
    boo_env(BOO_LOAD_PLUGINS="conv,layernorm")
    registry = OpRegistry.load(BooPlugins())
    assert sorted(e.name for e in registry.list_ops()) == ["cbainfer", "conv", "layernorm"]  # conv's plugin: two ops
    with pytest.raises(UnknownOpError, match=r"unknown op 'gemm'; "):
        registry.parse_command("gemm -m 4 -n 4 -k 4")
    boo_env(BOO_LOAD_PLUGINS="conv,layernorm", BOO_DISABLE_PLUGINS="layernorm")  # skipping still wins
    assert [e.name for e in OpRegistry.load(BooPlugins()).list_ops()] == ["cbainfer", "conv"]


def test_plugins_load_lazily_once_not_at_import():
    code = (
        "import sys, boo_core\n"
        "assert 'boo_ops_conv' not in sys.modules, 'loaded at import'\n"
        "from boo_core import BooOpRegistry\n"
        "first = BooOpRegistry.default()\n"
        "assert 'boo_ops_conv' in sys.modules\n"
        "assert BooOpRegistry.default() is first\n"
        "print([e.name for e in BooOpRegistry.list_ops()])\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "'conv'" in result.stdout

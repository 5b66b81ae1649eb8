"""Substituting a kernel's executables on the CPU: the round trip through dump, edit,
substitute and back; the cache key; verification that is always on; errors naming files."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from boo_core import Formulation, Target, clear_launchables, get_launchable
from boo_core.errors import SubstitutionError
from boo_core.kernels.request import KernelRequest
from boo_core.settings import get_settings
from boo_core.substitute import Substitution, dump_kernel, executables_of
from boo_core.verify.verdicts import VERDICTS_FILE

from .fake_plugins.scale_op import ScaleSignature
from .substitutions import NUDGED, NUDGED_VALUE, edited_source, scale_substitution, write_source

SIGNATURE = ScaleSignature(size=37, factor=2.0)


@pytest.fixture
def scale(scale_registry, private_cache):
    return private_cache


def test_dump_edit_substitute_and_back(scale, tmp_path):
    assert not get_settings().verifies("cpu")  # BOO_VERIFY=auto: CPU kernels are not verified...
    x = torch.randn(37)
    original = get_launchable(SIGNATURE)
    assert torch.equal(original(x), x * 2) and original.substitution is None and not original.verified

    dump = dump_kernel(SIGNATURE, Target.parse("cpu"), tmp_path / "dump")
    [source] = (dump.directory / "sources").iterdir()
    substitution = tmp_path / "mine" / "sources"
    substitution.mkdir(parents=True)
    (substitution / source.name).write_text(source.read_text().replace("2.000000e+00", NUDGED))

    substituted = get_launchable(SIGNATURE, substitutions=tmp_path / "mine")
    y = substituted(x)
    assert torch.equal(y, x * NUDGED_VALUE) and not torch.equal(y, x * 2)  # changed, predictably
    assert substituted.verified  # ...but a substituted one always is
    assert substituted.substitution.name == "mine"
    assert substituted.cache_directory != original.cache_directory  # a kernel of its own
    meta = json.loads((substituted.cache_directory / "meta.json").read_text())
    assert meta["substitution"]["digest"] == Substitution.from_directory(tmp_path / "mine").digest
    assert (substituted.cache_directory / VERDICTS_FILE).is_file()
    assert (substituted.cache_directory / "substitution" / "sources" / source.name).is_file()

    clear_launchables()
    back = get_launchable(SIGNATURE)  # no substitution: the original kernel, from the cache
    assert torch.equal(back(x), x * 2)
    assert back.cache_directory == original.cache_directory and back.cache_hit


def test_a_substitution_naming_a_formulation_replaces_that_formulations_executables(private_cache, tmp_path):
    """The op's first formulation is another one: the substitution still applies where it
    says, not to the first (which would refuse it: its executables are not the files')."""
    from boo_core.testing import isolated_registry

    from .fake_plugins.scale_op import ScalePlugin
    from .fake_plugins.wrong_kernel import triple

    chain = lambda s, t: (triple(s), Formulation("default"))  # noqa: E731
    with isolated_registry({"scale": ScalePlugin(formulations=chain)}):
        name, text = edited_source(executables_of(SIGNATURE, "cpu", "default"), NUDGED)
        files = {f"sources/{name}.mlir": text}
        kernel = get_launchable(SIGNATURE, substitutions=Substitution("nudged", files, formulation="default"))
        assert kernel.formulation == "default" and kernel.substitution.name == "nudged" and kernel.verified
        x = torch.randn(37)
        assert torch.equal(kernel(x), x * NUDGED_VALUE)
        with pytest.raises(SubstitutionError, match="replaces executables of formulation default, not triple"):
            get_launchable(SIGNATURE, formulation="triple", substitutions=Substitution("nudged", files,
                                                                                       formulation="default"))


def test_a_substitution_that_computes_wrong_is_refused_with_its_verdict(scale, tmp_path):
    wrong = scale_substitution(tmp_path / "triple", SIGNATURE, "3.000000e+00")
    with pytest.raises(SubstitutionError, match=r"substitution triple of scale_fwd_f32_n37_f2 is refused: it failed "
                                                r"verification on cpu .*y: max abs error .* FAIL"):
        get_launchable(SIGNATURE, substitutions=wrong)
    clear_launchables()
    with pytest.raises(SubstitutionError, match=r"refused: it failed verification before \(fail: y: "):
        get_launchable(SIGNATURE, substitutions=wrong)  # the recorded verdict: refused without a compile


def test_verification_is_forced_even_with_boo_verify_off(scale, boo_env, tmp_path):
    boo_env(BOO_VERIFY="0")
    with pytest.raises(SubstitutionError, match="is refused: it failed verification"):
        get_launchable(SIGNATURE, substitutions=scale_substitution(tmp_path / "s", SIGNATURE, "3.000000e+00"))


def test_the_environment_names_a_root_of_per_kernel_directories(scale, boo_env, tmp_path):
    scale_substitution(tmp_path / "root" / "cpu" / SIGNATURE.func_name, SIGNATURE, NUDGED)
    boo_env(BOO_SUBSTITUTIONS=str(tmp_path / "root"))
    x = torch.randn(37)
    assert torch.equal(get_launchable(SIGNATURE)(x), x * NUDGED_VALUE)
    other = ScaleSignature(size=5, factor=2.0)  # no directory of its own: not substituted
    assert get_launchable(other).substitution is None


def test_the_key_holds_the_content_not_the_path(scale, tmp_path):
    first = scale_substitution(tmp_path / "a", SIGNATURE, NUDGED)
    second = shutil.copytree(first, tmp_path / "elsewhere" / "b")
    cpu = Target.parse("cpu")

    def key(directory):
        return KernelRequest.create(SIGNATURE, cpu, substitution=Substitution.from_directory(directory)).key

    plain = KernelRequest.create(SIGNATURE, cpu).key
    assert key(first).digest == key(second).digest != plain.digest
    assert "substitution" not in plain.material  # unsubstituted kernels keep their keys
    [source] = (second / "sources").iterdir()
    source.write_text(source.read_text().replace(NUDGED, "2.00000048e+00"))
    assert key(second).digest != key(first).digest


@pytest.fixture
def source(scale):
    return edited_source(executables_of(SIGNATURE, "cpu"), NUDGED)


def test_a_file_named_after_no_executable_is_an_error_naming_it(source, tmp_path):
    name, text = source
    write_source(tmp_path / "s", "not_an_executable", text)
    with pytest.raises(SubstitutionError, match=rf"substitution file {tmp_path}/s/sources/not_an_executable.mlir "
                                                r"names no executable of scale_fwd_f32_n37_f2 .*its executables "
                                                r"are: scale_fwd_f32_n37_f2\$async_dispatch_0"):
        get_launchable(SIGNATURE, substitutions=tmp_path / "s")


def test_a_file_iree_rejects_is_an_error_naming_it(source, tmp_path):
    name, text = source
    write_source(tmp_path / "s", name, text.replace("arith.mulf", "arith.mulfx"))
    with pytest.raises(SubstitutionError, match=r"(?s)iree-compile rejected substitution s:.*"
                                                rf"{tmp_path}/s/sources/scale_fwd_f32_n37_f2\$async_dispatch_0.mlir:"
                                                r"\d+:\d+: error: custom op 'arith.mulfx' is unknown"):
        get_launchable(SIGNATURE, substitutions=tmp_path / "s")


def test_missing_or_empty_directories_are_errors(scale, tmp_path):
    with pytest.raises(SubstitutionError, match=f"substitution directory {tmp_path}/absent does not exist"):
        get_launchable(SIGNATURE, substitutions=tmp_path / "absent")
    (tmp_path / "empty" / "notes").mkdir(parents=True)
    (tmp_path / "empty" / "notes" / "README").write_text("nothing here")
    with pytest.raises(SubstitutionError, match=rf"substitution {tmp_path}/empty: no file replaces an executable: "
                                                "put files in sources/, configurations/, binaries/"):
        get_launchable(SIGNATURE, substitutions=tmp_path / "empty")


def test_files_that_iree_would_mishandle_are_refused(source, tmp_path):
    name, text = source
    write_source(tmp_path / "twice", name, text)
    write_source(tmp_path / "twice", name, text, stage="configurations")
    with pytest.raises(SubstitutionError, match=r"files .*twice/configurations/.*\.mlir and .*twice/sources/.*\.mlir "
                                                r"both replace executable"):
        get_launchable(SIGNATURE, substitutions=tmp_path / "twice")
    (tmp_path / "object" / "binaries").mkdir(parents=True)
    (tmp_path / "object" / "binaries" / f"{name}.o").write_bytes(b"\x7fELF")
    with pytest.raises(SubstitutionError, match=r"binaries/scale_fwd_f32_n37_f2\$async_dispatch_0.o: IREE 3.13 "
                                                "cannot link an object in place of an llvm-cpu executable"):
        get_launchable(SIGNATURE, substitutions=tmp_path / "object")
    (tmp_path / "text" / "sources").mkdir(parents=True)
    (tmp_path / "text" / "sources" / f"{name}.txt").write_text(text)
    with pytest.raises(SubstitutionError, match=r"sources/ takes .mlir or .mlirbc files"):
        get_launchable(SIGNATURE, substitutions=tmp_path / "text")


def test_a_configured_source_can_be_substituted_too(scale, tmp_path):
    dump = dump_kernel(SIGNATURE, Target.parse("cpu"), tmp_path / "dump")
    [configured] = (dump.directory / "configurations").iterdir()
    assert "translation_info" in configured.read_text()  # the lowering configuration IREE chose
    write_source(tmp_path / "s", configured.stem, configured.read_text().replace("2.000000e+00", NUDGED),
                 stage="configurations")
    x = torch.randn(37)
    assert torch.equal(get_launchable(SIGNATURE, substitutions=tmp_path / "s")(x), x * NUDGED_VALUE)

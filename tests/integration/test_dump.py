"""``boo dump`` for every installed op, on the CPU and cross-compiled for cuda:sm_80."""

from __future__ import annotations

import json

import pytest

from boo_core.tools.cli import main

COMMANDS = {
    "bnorm": "bnorm -n 2 -c 8 -H 4 -W 4 -m 1 -F 1 -s 1 -r 1",
    "conv": "conv -n 1 -c 4 -H 8 -W 8 -k 4 -y 3 -x 3 -p 1 -q 1 -F 1",
    "layernorm": "layernorm -X 4x64 -o 1 -m 1 -F 1",
    "matmul": "gemm -m 16 -n 8 -k 32",
    "softmax": "softmax -n 1 -c 8 -H 2 -W 2 -F 1",
}
BINARY = {"cpu": ".so", "cuda-sm_80": ".ptx"}


@pytest.mark.parametrize("op", sorted(COMMANDS))
def test_dump_every_installed_op_for_the_cpu_and_cuda(op, fresh_default_registry, private_cache, tmp_path, capsys):
    assert main(["dump", "--to", str(tmp_path), "--target", "cpu", "--target", "cuda:sm_80",
                 *COMMANDS[op].split()]) == 0, capsys.readouterr().out
    kernels = [d for target in BINARY for d in (tmp_path / target).iterdir()]
    assert len(kernels) == 2
    for kernel in kernels:
        index = json.loads((kernel / "index.json").read_text())
        assert index["op"] == op and (kernel / "index.txt").is_file() and (kernel / "kernel.vmfb").is_file()
        assert index["executables"], f"{kernel}: no executables"
        for executable in index["executables"]:
            files = executable["files"]
            name = executable["name"]
            assert files["sources"] == [f"sources/{name}.mlir"]  # named as a substitution file must be
            assert files["configurations"] == [f"configurations/{name}.mlir"]
            assert files["binaries"] == [f"binaries/{name}{BINARY[kernel.parent.name]}"]
            assert files["benchmarks"] == [f"benchmarks/{name}.mlir"]
            for export in executable["exports"]:
                assert export["bindings"] and all(b["tensor"] for b in export["bindings"])
                assert len(export["workgroup_size"]) == 3 and len(export["workgroup_count"]) == 3
                if kernel.parent.name == "cuda-sm_80":
                    ptx = (kernel / files["binaries"][0]).read_text()
                    assert f".entry {export['kernel_name']}(" in ptx
                    assert export["pipeline"]  # the lowering IREE chose


def test_a_configured_formulation_is_dumped_as_it_is_built(fresh_default_registry, private_cache, tmp_path, capsys):
    """A formulation's configuration (the staged batch norm's elementwise pass: 256
    threads, 16-byte accesses) is applied in the dump, not only in the cached kernel."""
    from boo_core import Target
    from boo_core.signatures.installed import installed_ops

    command = "bnormbfp16 -n 2 -c 64 -H 8 -W 8 -m 1 -F 1 -s 1 -r 1 -L NHWC"
    target = Target.parse("cuda:sm_80")
    registry = installed_ops()
    signature = registry.parse_command(command)
    formulation = registry.formulations(signature, target)[0]
    assert formulation.config, "the test needs a configured formulation"
    assert main(["dump", "--to", str(tmp_path), "--target", "cuda:sm_80", *command.split()]) == 0, \
        capsys.readouterr().out
    kernel = tmp_path / "cuda-sm_80" / signature.func_name
    index = json.loads((kernel / "index.json").read_text())
    assert index["formulation"] == formulation.name
    sizes = [e["workgroup_size"] for x in index["executables"] for e in x["exports"]]
    assert formulation.config["workgroup_size"] in sizes, sizes
    assert "--iree-hal-substitute-executable-configurations-from=" in (kernel / "compile_commands.txt").read_text()


def test_a_substitution_replacing_the_configured_executable_builds_without_the_configuration(
        fresh_default_registry, private_cache, tmp_path, capsys):
    """The staged batch norm's configuration is for its elementwise pass: with that
    executable replaced by an object (a kernel library's), it fits none of IREE's left, and
    the kernel builds with IREE's own choices for them instead of failing."""
    from boo_core import Target
    from boo_core.signatures.installed import installed_ops
    from boo_core.substitute import executables_of, external_source

    command = "bnormbfp16 -n 2 -c 64 -H 8 -W 8 -m 1 -F 0 -b 1 -s 1 -L NHWC"
    registry = installed_ops()
    signature = registry.parse_command(command)
    formulation = registry.formulations(signature, Target.parse("cuda:sm_80"))[0]
    assert formulation.config, "the test needs a configured formulation"
    found = executables_of(signature, "cuda:sm_80", formulation.name)
    elementwise = next(e for e in found.executables if "elementwise" in e.exports[0].name)
    entry = elementwise.exports[0].kernel_name
    params = ", ".join(f".param .u64 {entry}_{i}" for i in range(len(elementwise.exports[0].bindings)))
    root = tmp_path / "subs" / "cuda-sm_80" / signature.func_name
    (root / "sources").mkdir(parents=True)
    (root / "objects").mkdir()
    (root / "objects" / "pass.ptx").write_text(  # an entry that returns at once: this test runs nothing
        f".version 7.0\n.target sm_80\n.address_size 64\n\n.visible .entry {entry}({params})\n{{\n\tret;\n}}\n")
    (root / "sources" / f"{elementwise.name}.mlir").write_text(
        external_source(elementwise, ["objects/pass.ptx"], workgroup_size=(32, 1, 1), workgroup_count=(1, 1, 1)))
    assert main(["dump", "--to", str(tmp_path / "dump"), "--target", "cuda:sm_80", "--formulation", formulation.name,
                 "--substitutions", str(tmp_path / "subs"), *command.split()]) == 0, capsys.readouterr().out
    index = json.loads((tmp_path / "dump" / "cuda-sm_80" / signature.func_name / "index.json").read_text())
    exports = {x["name"]: x["exports"][0] for x in index["executables"]}
    assert exports[elementwise.name]["workgroup_size"] == [32, 1, 1]  # the object's launch, not the configuration's
    assert formulation.config["workgroup_size"] not in [e["workgroup_size"] for e in exports.values()]

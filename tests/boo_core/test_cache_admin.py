"""boo cache info / clear, in process: entries described from meta.json, broken ones too."""

from __future__ import annotations

import json

from boo_core import CompileError, Formulation, clear_launchables, get_launchable
from boo_core.kernels import cache
from boo_core.kernels.compiler import compiler_version
from boo_core.kernels.request import KernelRequest
from boo_core.runtime.devices import Target
from boo_core.testing import isolated_registry
from boo_core.tools.cache_admin import clear, scan, summary_lines
from boo_core.tools.cli import main

from .fake_plugins.broken_mlir import NONSENSE
from .fake_plugins.scale_op import ScalePlugin, ScaleSignature


def broken_for_size_5(signature, target):
    """The scale op's formulations: MLIR that does not compile for size 5, the export otherwise."""
    if signature.size == 5:
        return (Formulation("broken", mlir=lambda: NONSENSE),)
    return (Formulation("default"),)


BROKEN_FOR_SIZE_5 = ScalePlugin(formulations=broken_for_size_5)


def fill(cache_dir):
    """Four good entries (three cpu, one cuda), one failed compile, and a stranger's files."""
    with isolated_registry({"scale": BROKEN_FOR_SIZE_5}):
        for size in (2, 3, 4):
            get_launchable(ScaleSignature(size))
        KernelRequest.create(ScaleSignature(2), Target.parse("cuda:sm_80")).fetch()
        try:
            get_launchable(ScaleSignature(5))
        except CompileError:
            pass
    (cache_dir / "notes").mkdir()
    (cache_dir / "README").write_text("not BOO's")


def by_name(entries):
    return {e.directory.name.split("-")[0]: e for e in entries}


def test_info_describes_entries_failed_compiles_and_the_broken_ones(private_cache):
    fill(private_cache)
    entries = scan(private_cache)
    assert len(entries) == 5 and all(e.size > 0 for e in entries)
    good = [e for e in entries if not e.problem and not e.failure]
    assert sorted(e.target for e in good) == ["cpu", "cpu", "cpu", "cuda:sm_80"]
    assert {e.compiler for e in good} == {compiler_version()} and {e.formulation for e in good} == {"default"}
    [failed] = [e for e in entries if e.failure]
    assert failed.directory.name.startswith("scale_fwd_f32_n5_f2-") and not failed.problem
    assert failed.failure == "iree-compile failed (exit 1)." and failed.log.endswith("compile_log.txt")
    assert failed.state.startswith("compile failed (iree-compile failed (exit 1).; log: ")

    names = {e.directory.name: e.directory for e in good if e.target == "cpu"}
    n2, n3, n4 = (names[k] for k in sorted(names))
    (n2 / "meta.json").unlink()
    with open(n3 / "kernel.vmfb", "r+b") as f:
        f.truncate(10)
    (n4 / "meta.json").write_text("[]")
    (n4 / ".kernel.vmfb.abc.tmp").write_bytes(b"left by a killed compile")
    problems = sorted(e.problem for e in scan(private_cache) if e.problem)
    assert problems[0] == "incomplete: no meta.json"
    assert problems[1].startswith("kernel.vmfb is 10 bytes, meta.json says ") and problems[1].endswith("(truncated?)")
    assert problems[2] == "unreadable meta.json (not a JSON object with a key)"

    lines = summary_lines(scan(private_cache), tuned=2)
    assert lines[0].startswith("entries: 5 (1 complete, 1 failed compiles, 3 broken), ")
    assert lines[1] == "targets: cuda:sm_80 (1)"
    assert lines[2] == f"compiler versions: {compiler_version()} (1)"
    assert "tuned kernels: 2 (boo tune records)" in lines
    assert sum(line.startswith("broken: ") for line in lines) == 3
    assert sum(line.startswith("compile failed: ") for line in lines) == 1

    [cuda] = [e.directory for e in scan(private_cache) if e.target == "cuda:sm_80"]
    meta = json.loads((cuda / "meta.json").read_text())
    (cuda / "meta.json").write_text(json.dumps({**meta, "format": 99}))
    (n3 / "kernel.vmfb").unlink()
    problems = {e.directory: e.problem for e in scan(private_cache)}
    assert problems[cuda] == f"cache format 99 (this BOO reads format {cache.CACHE_FORMAT})"
    assert problems[n3] == "kernel.vmfb is missing"

    removed = clear(private_cache, broken_only=True)
    assert len(removed) == 5 and scan(private_cache) == []


def test_clear_one_target_then_everything_but_never_a_strangers_files(private_cache):
    fill(private_cache)
    meta = json.loads(next(e.directory for e in scan(private_cache) if e.target == "cuda:sm_80").joinpath(
        "meta.json").read_text())
    assert meta["key"]["target"]["arch"] == "sm_80"
    removed = clear(private_cache, Target.parse("cuda:sm_80"))
    assert [e.target for e in removed] == ["cuda:sm_80"]
    assert len(scan(private_cache)) == 4
    assert clear(private_cache, Target.parse("rocm:gfx942")) == []
    assert len(clear(private_cache)) == 4 and scan(private_cache) == []
    # BOO's lock files stay (removing one another process waits on would break the lock), and
    # so does the integrity key (removing it would make every other process's kernels unproven).
    assert sorted(p.name for p in private_cache.iterdir()) == [".integrity-key", ".locks", "README", "notes"]


def test_clear_broken_removes_a_killed_writers_leftovers_but_keeps_the_complete_entry(private_cache, capsys):
    fill(private_cache)
    good = sorted(e.directory for e in scan(private_cache) if e.target == "cpu" and not e.problem)
    kept, truncated = good[0], good[1]
    files = sorted(p.name for p in kept.iterdir())
    (kept / ".kernel.vmfb.abc123.tmp").write_bytes(b"left by a killed compile")
    (kept / ".verdicts.json.def456.tmp").write_bytes(b"{")
    with open(truncated / "kernel.vmfb", "r+b") as f:
        f.truncate(10)
    [info] = [e for e in scan(private_cache) if e.directory == kept]
    assert (info.problem, info.only_leftovers) == ("2 leftover temporary files", True)

    assert main(["cache", "clear", "--broken"]) == 0
    out = capsys.readouterr().out
    assert "removed 2 entries broken or failed (" in out  # the truncated entry and the failed compile
    assert "removed leftover temporary files (25 B) from 1 complete entry, which stays" in out
    assert kept.is_dir() and sorted(p.name for p in kept.iterdir()) == files
    assert not truncated.exists()
    [again] = [e for e in scan(private_cache) if e.directory == kept]
    assert not again.problem and not again.failure
    clear_launchables()
    with isolated_registry({"scale": BROKEN_FOR_SIZE_5}):  # still served from the cache
        assert kept.name.startswith("scale_fwd_f32_n2_") and get_launchable(ScaleSignature(2)).cache_hit

"""Writes below the cache directory (``boo_core.kernels.owned``): only into directories of
this user's alone, never through a link, relative to descriptors. The hostile co-user's
side is ``test_co_user.py``; here, what this user's own process does with what it finds."""

from __future__ import annotations

import os
import stat

import pytest

from boo_core.errors import CacheUnwritable
from boo_core.kernels import owned


def test_a_write_replaces_a_link_at_its_name_and_never_follows_it(tmp_path):
    root, outside = tmp_path / "cache", tmp_path / "outside.txt"
    outside.write_text("untouched\n")
    (root / "entry").mkdir(parents=True)
    (root / "entry" / "meta.json").symlink_to(outside)
    owned.write(root, root / "entry" / "meta.json", "new\n")
    assert outside.read_text() == "untouched\n"
    assert not (root / "entry" / "meta.json").is_symlink() and (root / "entry" / "meta.json").read_text() == "new\n"
    assert stat.S_IMODE((root / "entry" / "meta.json").stat().st_mode) == owned.FILE_MODE


def test_a_link_where_a_directory_goes_is_replaced_by_a_directory(tmp_path):
    root, elsewhere = tmp_path / "cache", tmp_path / "elsewhere"
    elsewhere.mkdir()
    root.mkdir()
    (root / "tuning").symlink_to(elsewhere)
    owned.append(root, root / "tuning" / "progress" / "x.jsonl", "line\n")
    assert list(elsewhere.iterdir()) == []
    assert (root / "tuning").is_dir() and not (root / "tuning").is_symlink()
    assert (root / "tuning" / "progress" / "x.jsonl").read_text() == "line\n"


def test_a_directory_others_can_write_is_made_this_users_alone(tmp_path):
    root = tmp_path / "cache"
    (root / "entry").mkdir(parents=True)
    (root / "entry").chmod(0o777)
    owned.write(root, root / "entry" / "kernel.vmfb", b"\0")
    assert stat.S_IMODE((root / "entry").stat().st_mode) & 0o022 == 0


def test_removing_a_tree_never_removes_what_its_links_name(tmp_path):
    root, outside = tmp_path / "cache", tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("kept\n")
    tree = root / "entry" / "substitution"
    (tree / "sources").mkdir(parents=True)
    (tree / "sources" / "a.mlir").write_text("x")
    (tree / "sources" / "linked").symlink_to(outside)
    (tree / "file-link").symlink_to(outside / "keep.txt")
    owned.remove_tree(root, tree)
    assert not tree.exists() and (outside / "keep.txt").read_text() == "kept\n"
    owned.remove_tree(root, tree)  # nothing there: nothing to do


def test_paths_outside_the_cache_directory_are_refused(tmp_path):
    root = tmp_path / "cache"
    with pytest.raises(ValueError, match="is not below the cache directory"):
        owned.write(root, root / ".." / "escaped.txt", "x")
    with pytest.raises(ValueError, match="is not below the cache directory"):
        owned.write(root, tmp_path / "elsewhere" / "escaped.txt", "x")
    assert not (tmp_path / "escaped.txt").exists() and not (tmp_path / "elsewhere").exists()


def test_a_cache_directory_that_cannot_be_made_is_unwritable_naming_it(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(CacheUnwritable, match=rf"cannot create {blocker}/cache: Not a directory"):
        owned.write(blocker / "cache", blocker / "cache" / "entry" / "meta.json", "x")
    assert os.path.getsize(blocker) == 0

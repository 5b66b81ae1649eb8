"""boo_core.files: what BOO reads of files others may have placed is bounded and checked."""

from __future__ import annotations

import os
import stat

import pytest

from boo_core.files import FileRefused, read_bytes, read_text


def test_a_regular_file_within_its_limit_is_read(tmp_path):
    path = tmp_path / "spec.mlir"
    path.write_bytes(b"x" * 100)
    assert read_bytes(path, 100) == b"x" * 100


@pytest.mark.parametrize("special", ["/dev/zero", "fifo", "directory"])
def test_anything_but_a_regular_file_is_refused_without_reading_it(tmp_path, special):
    if special == "fifo":
        path = tmp_path / "commands.txt"
        os.mkfifo(path)  # opening it for reading would block until a writer came
    elif special == "directory":
        path = tmp_path
    else:
        path = special
    with pytest.raises(FileRefused, match=r"tuning spec .* is (a|an) \w+.*not a regular file"):
        read_bytes(path, 1 << 20, what="tuning spec")


def test_a_file_over_its_limit_is_refused_naming_both_sizes(tmp_path):
    path = tmp_path / "results.csv"
    path.write_bytes(b"0" * 2048)
    with pytest.raises(FileRefused, match=r"results CSV .* is 2 KiB, more than the 1 KiB"):
        read_bytes(path, 1024, what="results CSV")


def test_a_symbolic_link_is_refused_where_none_may_be(tmp_path):
    (tmp_path / "real").write_bytes(b"{}")
    (tmp_path / "meta.json").symlink_to(tmp_path / "real")
    assert read_bytes(tmp_path / "meta.json", 10) == b"{}"
    with pytest.raises(FileRefused, match="is a symbolic link"):
        read_bytes(tmp_path / "meta.json", 10, follow_symlinks=False)


def test_a_trusted_file_must_be_the_owners_and_writable_by_no_one_else(tmp_path):
    path = tmp_path / "record.json"
    path.write_bytes(b"{}")
    os.chmod(path, 0o644)
    assert read_bytes(path, 10, owner=os.geteuid()) == b"{}"
    with pytest.raises(FileRefused, match=rf"belongs to uid {os.geteuid()}\b.*not to uid {os.geteuid() + 1}\b"):
        read_bytes(path, 10, owner=os.geteuid() + 1)
    os.chmod(path, 0o664)
    with pytest.raises(FileRefused, match=r"writable by other users \(mode 0664\)"):
        read_bytes(path, 10, owner=os.geteuid())
    assert stat.S_IMODE(path.stat().st_mode) == 0o664


def test_text_drops_a_byte_order_mark_and_refuses_what_is_not_utf8(tmp_path):
    path = tmp_path / "commands.txt"
    path.write_bytes(b"\xef\xbb\xbfgemm -m 4\n")
    assert read_text(path, 100) == "gemm -m 4\n"
    path.write_bytes(b"gemm \xff\n")
    with pytest.raises(FileRefused, match=r"commands file .* is not UTF-8 text \(byte 5"):
        read_text(path, 100, what="commands file")

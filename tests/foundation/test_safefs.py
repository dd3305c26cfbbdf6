"""safefs: the host never follows what a sandboxed process left behind."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from cuda_agent import safefs
from cuda_agent.safefs import UnsafePath


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "secret"
    path.write_text("TOP-SECRET")
    return path


@pytest.fixture
def box(tmp_path: Path) -> Path:
    path = tmp_path / "box"
    path.mkdir()
    return path


def test_reads_regular_files_within_the_limit(box: Path) -> None:
    (box / "a").mkdir()
    (box / "a" / "f.txt").write_text("hello")
    assert safefs.read_text(box, "a/f.txt", 10) == "hello"
    with pytest.raises(UnsafePath, match="more than the 3"):
        safefs.read_bytes(box, "a/f.txt", 3)


@pytest.mark.parametrize("where", ["f", "d/f"])
def test_links_are_never_followed(box: Path, secret: Path, where: str) -> None:
    (box / "d").mkdir()
    (box / where).symlink_to(secret)
    with pytest.raises(UnsafePath, match="symbolic link"):
        safefs.read_bytes(box, where, 100)
    assert not safefs.exists(box, where)


def test_linked_directory_component_is_refused(box: Path, secret: Path) -> None:
    (box / "d").symlink_to(secret.parent)
    with pytest.raises(UnsafePath, match="symbolic link"):
        safefs.read_bytes(box, "d/secret", 100)


def test_fifo_and_devices_are_refused_without_blocking(box: Path) -> None:
    os.mkfifo(box / "fifo")
    (box / "zero").symlink_to("/dev/zero")
    done = threading.Event()

    def read() -> None:
        with pytest.raises(UnsafePath, match="not a regular file"):
            safefs.read_bytes(box, "fifo", 100)
        done.set()

    threading.Thread(target=read, daemon=True).start()
    assert done.wait(5), "reading a FIFO blocked"
    with pytest.raises(UnsafePath):
        safefs.read_bytes(box, "zero", 100)


@pytest.mark.parametrize("bad", ["/etc/passwd", "../secret", "a/../../secret", ""])
def test_paths_leaving_the_root_are_refused(box: Path, bad: str) -> None:
    with pytest.raises(UnsafePath, match="not a relative path"):
        safefs.read_bytes(box, bad, 100)


def test_write_replaces_a_planted_link_instead_of_writing_through_it(box: Path, secret: Path) -> None:
    (box / "out.txt").symlink_to(secret)
    safefs.write_text(box, "out.txt", "mine")
    assert secret.read_text() == "TOP-SECRET"
    assert not (box / "out.txt").is_symlink() and (box / "out.txt").read_text() == "mine"


def test_write_through_a_linked_parent_is_refused(box: Path, secret: Path) -> None:
    (box / "sub").symlink_to(secret.parent)
    with pytest.raises(UnsafePath):
        safefs.write_text(box, "sub/new.txt", "x")
    assert not (secret.parent / "new.txt").exists()


def test_copy_tree_copies_content_and_refuses_links(box: Path, secret: Path, tmp_path: Path) -> None:
    (box / "lib").mkdir()
    (box / "lib" / "k.so").write_bytes(b"\x7fELF")
    os.chmod(box / "lib" / "k.so", 0o755)
    os.link(secret, box / "hard")  # a hard link is copied as content, never shared
    copied = safefs.copy_tree(box, tmp_path / "out", max_bytes=1000, max_files=10)
    assert copied == 4 + len("TOP-SECRET")
    assert os.access(tmp_path / "out" / "lib" / "k.so", os.X_OK)
    (tmp_path / "out" / "hard").write_text("changed")
    assert secret.read_text() == "TOP-SECRET"

    (box / "lib" / "evil").symlink_to(secret)
    with pytest.raises(UnsafePath, match="symbolic link"):
        safefs.copy_tree(box, tmp_path / "out2", max_bytes=1000, max_files=10)
    (box / "lib" / "evil").unlink()
    with pytest.raises(UnsafePath, match="more than 1 files"):
        safefs.walk_files(box, max_files=1)


def test_copy_tree_bounds_total_bytes(box: Path, tmp_path: Path) -> None:
    for i in range(3):
        (box / f"f{i}").write_bytes(b"x" * 100)
    with pytest.raises(UnsafePath, match="bytes"):
        safefs.copy_tree(box, tmp_path / "out", max_bytes=250, max_files=10)


def test_remove_tree_never_follows_links(box: Path, secret: Path) -> None:
    (box / "d").mkdir()
    (box / "d" / "link").symlink_to(secret.parent)
    safefs.remove_tree(box)
    assert not box.exists() and secret.read_text() == "TOP-SECRET"

"""What a build leaves in its writable directories is hostile: the host never follows, blocks on or copies it whole.

A kernelbench candidate's model_new.py runs in the build sandbox, so it can plant anything it can create there
in the extension directory that becomes the artifact: links (to host files it cannot see but the host can), FIFOs,
hard links, huge or many files. Each test plants one and checks that the build fails with a diagnostic naming the
problem, and that nothing of the host's content reaches the result or the artifact.
"""

from __future__ import annotations

import io
import os
import stat
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cuda_agent.compile import ArtifactError, compile_candidate, materialize_artifact, unpack_artifact
from cuda_agent.compile.store import TORCH_EXT_SANDBOX_DIR, copy_artifact_tree
from cuda_agent.contracts.candidate import CandidateForm, CandidateSource
from cuda_agent.contracts.common import CompileStatus, Device
from cuda_agent.contracts.compile import CompileRequest, CompileResult
from cuda_agent.safefs import UnsafePath
from cuda_agent.settings import get_settings

pytestmark = pytest.mark.sandbox

SECRET = "HOST-SECRET-7f3a"
EXT = str(TORCH_EXT_SANDBOX_DIR)


@pytest.fixture(autouse=True)
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("CUDA_AGENT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("CUDA_HOME", "/usr/local/cuda")
    monkeypatch.setenv("CUDA_AGENT_COMPILE_DISK_BYTES", str(64 * 1024**2))
    get_settings.cache_clear()
    yield tmp_path / "data"
    get_settings.cache_clear()


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "secret.txt"  # root-only, outside everything the sandbox sees
    path.write_text(SECRET)
    path.chmod(0o600)
    return path


def build(source: str) -> CompileResult:
    candidate = CandidateSource(form=CandidateForm.KERNELBENCH, files={"model_new.py": source})
    return compile_candidate(CompileRequest(candidate=candidate, device=Device.CPU, timeout_s=60))


def assert_refused(result: CompileResult, data_dir: Path, reason: str) -> None:
    assert result.status is CompileStatus.COMPILE_ERROR, result.message
    assert result.diagnostics[0].code == "unsafe_output" and reason in result.message, result.message
    assert SECRET not in result.model_dump_json()
    artifacts = data_dir / "artifacts"
    assert not any(p.name != ".staging" for p in artifacts.iterdir()), "an artifact was published"
    assert not any((artifacts / ".staging").iterdir()), "a staging directory was left behind"


@pytest.mark.parametrize("target", ["secret", "/etc/shadow", "/dev/zero"])
def test_planted_symlink_is_refused(target: str, secret: Path, data_dir: Path) -> None:
    link_to = str(secret) if target == "secret" else target
    result = build(f"import os\nos.symlink({link_to!r}, {EXT!r} + '/leak.so')\n")
    assert_refused(result, data_dir, "symbolic link")


def test_planted_link_to_a_directory_is_refused(secret: Path, data_dir: Path) -> None:
    result = build(f"import os\nos.symlink({str(secret.parent)!r}, {EXT!r} + '/ext')\n")
    assert_refused(result, data_dir, "symbolic link")


def test_planted_fifo_does_not_block_and_is_refused(data_dir: Path) -> None:
    started = time.monotonic()
    result = build(f"import os\nos.mkfifo({EXT!r} + '/ext.so')\n")
    assert_refused(result, data_dir, "not a regular file")
    assert time.monotonic() - started < 30


def test_device_nodes_cannot_be_planted_and_are_refused_on_copy(tmp_path: Path) -> None:
    # The sandbox has no capability to make device nodes ...
    result = build(f"import os, stat\nos.mknod({EXT!r} + '/zero', stat.S_IFCHR | 0o666, os.makedev(1, 5))\n")
    assert result.status is CompileStatus.COMPILE_ERROR and "PermissionError" in result.message, result.message
    # ... and one in a tree the host copies (an artifact from elsewhere, say) is refused, not read.
    if os.geteuid() != 0:
        pytest.skip("making a device node needs root")
    src = tmp_path / "ext"
    src.mkdir()
    os.mknod(src / "zero", stat.S_IFCHR | 0o600, os.makedev(1, 5))
    with pytest.raises(UnsafePath, match="not a regular file"):
        copy_artifact_tree(src, tmp_path / "copy")


def test_hard_links_become_independent_copies(data_dir: Path) -> None:
    # A hard link to a host file cannot be made (it is on another mount, or invisible); one inside the directory
    # is copied as content, so the artifact never shares an inode with what the sandbox wrote.
    source = (
        "import os\n"
        "try:\n"
        f"    os.link('/etc/passwd', {EXT!r} + '/passwd')\n"
        "    print('LINKED')\n"
        "except OSError as e:\n"
        "    print('link refused', e.errno)\n"
        f"open({EXT!r} + '/a.txt', 'w').write('one')\n"
        f"os.link({EXT!r} + '/a.txt', {EXT!r} + '/b.txt')\n"
    )
    result = build(source)
    assert result.status is CompileStatus.OK, result.message
    assert "LINKED" not in result.log and "link refused" in result.log
    ext = data_dir / "artifacts" / result.cache_key / "torch_extensions"
    a, b = (ext / "a.txt").stat(), (ext / "b.txt").stat()
    assert a.st_ino != b.st_ino and a.st_nlink == b.st_nlink == 1
    assert not (ext / "passwd").exists()


def test_sparse_huge_file_is_refused_not_copied(data_dir: Path) -> None:
    # 256 MiB that take no disk: under the disk quota (64 MiB here) and the file size limit, over what the host
    # copies (the disk quota again).
    result = build(f"import os\nos.truncate(open({EXT!r} + '/ext.so', 'wb').name, 256 * 1024**2)\n")
    assert_refused(result, data_dir, "allowed")


def test_many_files_hit_the_build_disk_quota(data_dir: Path) -> None:
    source = f"for i in range(1000):\n    open({EXT!r} + f'/f{{i}}', 'wb').write(b'x' * (1 << 20))\n"
    started = time.monotonic()
    result = build(source)
    assert result.status is CompileStatus.COMPILE_ERROR, result.message
    assert "disk quota" in result.message and result.diagnostics[0].code == "resource_limit"
    assert time.monotonic() - started < 30


def test_artifact_with_a_link_is_refused_on_materialize(tmp_path: Path) -> None:
    """An archive from another host may carry an in-tree link (tar's data filter allows those)."""
    key = "ab" * 32
    record = build("pass\n").model_copy(update={"cache_key": key, "artifact_key": key})
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        body = (
            '{"form": "kernelbench", "device": "cpu", "arch": null, "result": ' + record.model_dump_json() + "}"
        ).encode()
        info = tarfile.TarInfo("build.json")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
        link = tarfile.TarInfo("torch_extensions/ext.so")
        link.type, link.linkname = tarfile.SYMTYPE, "../build.json"
        tar.addfile(link)
    unpack_artifact(key, buf.getvalue())
    with pytest.raises(ArtifactError, match="symbolic link"):
        materialize_artifact(key, tmp_path / "eval")

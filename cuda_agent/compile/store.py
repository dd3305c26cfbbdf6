"""Content-addressed artifact store under ``settings.artifacts_dir/<key>/``.

An artifact directory appears whole or not at all: builds write into a staging directory on the same
filesystem and rename it into place, so a killed build never leaves half an artifact behind.

Layout of an artifact:
    build.json             the BuildRecord (form, device, arch, the successful CompileResult)
    kernels/               PROJECT: libkernels.so + manifest.json (what load_kernels opens)
    torch_extensions/      KERNELBENCH: TORCH_EXTENSIONS_DIR after the build (ninja finds it up to date)
    extension/             WORKDIR: cuda_extension.so, the Python module model_new.py imports
"""

from __future__ import annotations

import io
import os
import re
import tarfile
import uuid
from pathlib import Path

import httpx
from pydantic import BaseModel, Field

from cuda_agent import safefs
from cuda_agent.compile.evict import mark_used, within_budget
from cuda_agent.contracts.candidate import EXTENSION_DIR_ENV, CandidateForm
from cuda_agent.contracts.common import Device
from cuda_agent.contracts.compile import CompileResult
from cuda_agent.settings import get_settings

RECORD_NAME = "build.json"
# KERNELBENCH builds bake absolute paths into build.ninja; the build and every later load see the extension
# directory at this one path inside the sandbox, so ninja finds it up to date instead of rebuilding.
TORCH_EXT_SANDBOX_DIR = Path("/cuda_agent_torch_extensions")
EXTENSION_DIR = "extension"  # WORKDIR: the artifact's folder holding the built module
_KEY = re.compile(r"[0-9a-f]{64}")
# Bounds on what is read back from a build's directories: a record holds at most a 64 KiB log and diagnostics;
# an extension directory holds a handful of sources, objects and one library per extension.
RECORD_MAX_BYTES = 16 * 1024**2
ARTIFACT_MAX_FILES = 10_000


class ArtifactError(RuntimeError):
    """An artifact is missing, malformed or could not be fetched; the message names the key."""


class BuildRecord(BaseModel):
    form: CandidateForm
    device: Device
    arch: str | None
    torch_cuda_arch_list: str | None = None
    result: CompileResult


class CandidateRuntime(BaseModel):
    """What the eval child needs to run a compiled candidate without rebuilding it."""

    env: dict[str, str] = Field(description="Environment variables to add to the candidate process.")
    extra_binds: list[tuple[Path, Path]] = Field(
        default_factory=list, description="(host, sandbox) read-write binds: pass as SandboxSpec.extra_binds."
    )


def artifacts_root() -> Path:
    return get_settings().artifacts_dir


def check_key(key: str) -> str:
    if not _KEY.fullmatch(key):
        raise ArtifactError(f"malformed artifact key {key!r}")
    return key


def artifact_dir(key: str) -> Path:
    return artifacts_root() / check_key(key)


def has_artifact(key: str) -> bool:
    return safefs.exists(artifact_dir(key), RECORD_NAME)


def read_record(key: str) -> BuildRecord:
    """The artifact's record; reading it (a cache hit, a load) makes the artifact the last one evicted."""
    if not has_artifact(key):
        raise ArtifactError(f"artifact {key} does not exist here")
    mark_used(artifact_dir(key))
    return _parse_record(artifact_dir(key), key)


def _parse_record(directory: Path, key: str) -> BuildRecord:
    try:
        return BuildRecord.model_validate_json(safefs.read_bytes(directory, RECORD_NAME, RECORD_MAX_BYTES))
    except (OSError, ValueError) as exc:  # UnsafePath and pydantic's ValidationError are ValueErrors
        raise ArtifactError(f"artifact {key}: unreadable {RECORD_NAME}: {exc}") from None


def copy_artifact_tree(src: Path, dst: Path) -> int:
    """Copy a directory a build wrote (or an artifact made of one) without following anything planted in it:
    links, FIFOs and device nodes are refused (``safefs.UnsafePath``), hard links become independent copies, and
    the total is bounded by the build's disk quota. Modification times are kept: ninja compares them, and a
    fresh mtime on a source would make the extension rebuild where it should only load."""
    copied = safefs.copy_tree(src, dst, max_bytes=get_settings().compile_disk_bytes, max_files=ARTIFACT_MAX_FILES)
    for rel in safefs.walk_files(dst, max_files=ARTIFACT_MAX_FILES):
        # Only the time stamp is taken from ``src``; nothing that writes ``src`` runs any more.
        info = os.stat(src / rel, follow_symlinks=False)
        os.utime(dst / rel, ns=(info.st_atime_ns, info.st_mtime_ns), follow_symlinks=False)
    return copied


def new_staging() -> Path:
    path = artifacts_root() / ".staging" / uuid.uuid4().hex
    path.mkdir(parents=True)
    return path


def publish(key: str, staging: Path, record: BuildRecord) -> Path:
    """Move a finished staging directory into place; a concurrent identical build may have won, which is fine."""
    safefs.write_text(staging, RECORD_NAME, record.model_dump_json(indent=1))
    final = artifact_dir(key)
    try:
        os.rename(staging, final)
    except OSError:
        if not has_artifact(key):
            raise
        safefs.remove_tree(staging)
    return final


def pack_artifact(key: str) -> bytes:
    """The artifact as tar.gz, for GPU workers on other hosts."""
    root = artifact_dir(key)
    if not has_artifact(key):
        raise ArtifactError(f"artifact {key} does not exist here")
    mark_used(root)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(root, arcname=".")
    return buf.getvalue()


def unpack_artifact(key: str, data: bytes) -> Path:
    """Install a packed artifact (atomically); untrusted archives cannot escape the directory."""
    check_key(key)
    if has_artifact(key):
        return artifact_dir(key)
    staging = new_staging()
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            tar.extractall(staging, filter="data")
        record = _parse_record(staging, key)
    except (tarfile.TarError, OSError, ArtifactError) as exc:
        safefs.remove_tree(staging)
        raise ArtifactError(f"artifact {key}: bad archive: {exc}") from None
    final = publish(key, staging, record)
    # A GPU worker on another host keeps a copy of every artifact it fetched: bounded like the service's own.
    within_budget([artifacts_root()], keep={final})
    return final


def ensure_artifact(key: str, base_url: str | None = None, timeout_s: float = 120.0) -> Path:
    """The local artifact directory, fetched from ``GET {base_url}/v1/artifacts/{key}`` when missing."""
    if has_artifact(key):
        return artifact_dir(key)
    base_url = base_url or get_settings().compile_service_url
    if not base_url:
        raise ArtifactError(f"artifact {key} is not here and no compile_service_url is configured to fetch it")
    url = f"{base_url.rstrip('/')}/v1/artifacts/{key}"
    try:
        service_key = get_settings().service_api_key
        headers = {"Authorization": f"Bearer {service_key.get_secret_value()}"} if service_key else {}
        response = httpx.get(url, headers=headers, timeout=timeout_s, follow_redirects=True)
        response.raise_for_status()
    except httpx.HTTPError as exc:
        raise ArtifactError(f"artifact {key}: fetch from {url} failed: {exc}") from None
    return unpack_artifact(key, response.content)


def materialize_artifact(key: str, dest_dir: Path, base_url: str | None = None) -> CandidateRuntime:
    """Copy what the candidate process needs into ``dest_dir`` (writable) and say how to expose it.

    PROJECT: ``dest_dir/kernels`` with the library and manifest; env ``CUDA_AGENT_KERNELS_DIR`` points there.
    WORKDIR: ``dest_dir/extension`` with cuda_extension.so; env ``CUDA_AGENT_EXTENSION_DIR`` points there.
    KERNELBENCH: ``dest_dir/torch_extensions``, bound at ``TORCH_EXT_SANDBOX_DIR`` (the path it was built at) with
    env ``TORCH_EXTENSIONS_DIR`` and the same ``TORCH_CUDA_ARCH_LIST``, so ``load_inline`` only loads. The copy is
    writable because torch takes a lock file in it; copying keeps mtimes, which ninja compares. A link, FIFO or
    device node in the artifact (an archive from elsewhere may carry one) fails with ``ArtifactError``.
    """
    root = ensure_artifact(key, base_url)
    record = read_record(key)
    dest_dir.mkdir(parents=True, exist_ok=True)
    name = {CandidateForm.PROJECT: "kernels", CandidateForm.WORKDIR: EXTENSION_DIR}.get(record.form, "torch_extensions")
    target = dest_dir / name
    try:
        copy_artifact_tree(root / name, target)
    except safefs.UnsafePath as exc:
        raise ArtifactError(f"artifact {key}: {exc}") from None
    if record.form is CandidateForm.PROJECT:
        return CandidateRuntime(env={"CUDA_AGENT_KERNELS_DIR": str(target)})
    if record.form is CandidateForm.WORKDIR:
        return CandidateRuntime(env={EXTENSION_DIR_ENV: str(target)})
    env = {"TORCH_EXTENSIONS_DIR": str(TORCH_EXT_SANDBOX_DIR), "MAX_JOBS": "2"}
    if record.torch_cuda_arch_list:
        env["TORCH_CUDA_ARCH_LIST"] = record.torch_cuda_arch_list
    return CandidateRuntime(env=env, extra_binds=[(target, TORCH_EXT_SANDBOX_DIR)])

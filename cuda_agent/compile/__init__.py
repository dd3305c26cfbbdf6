"""Candidate builds: sandboxed, content-addressed, with diagnostics an agent can act on.

``compile_candidate`` builds either form; the artifact store moves results to GPU workers, where
``materialize_artifact`` prepares a candidate process that only loads what was built here.
"""

from cuda_agent.compile.builder import compile_candidate, scratch_roots
from cuda_agent.compile.diagnostics import classify, parse_diagnostics, parse_resources
from cuda_agent.compile.store import (
    TORCH_EXT_SANDBOX_DIR,
    ArtifactError,
    CandidateRuntime,
    artifact_dir,
    ensure_artifact,
    has_artifact,
    materialize_artifact,
    pack_artifact,
    unpack_artifact,
)

__all__ = [
    "TORCH_EXT_SANDBOX_DIR",
    "ArtifactError",
    "CandidateRuntime",
    "artifact_dir",
    "classify",
    "compile_candidate",
    "ensure_artifact",
    "has_artifact",
    "materialize_artifact",
    "pack_artifact",
    "parse_diagnostics",
    "parse_resources",
    "scratch_roots",
    "unpack_artifact",
]

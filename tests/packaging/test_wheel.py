"""The built wheel carries the agent's documents: an installed agent prompts with the full candidate contract.

A checkout can read files next to the source; an installed package (the images install into site-packages) has
only what the wheel ships. So the wheel is built from a copy of the package sources, installed into a fresh venv,
and the opening prompt of an environment is built there, outside the checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = ROOT / "cuda_agent" / "agent" / "docs" / "candidate_contract.md"

# Runs inside the venv, from a directory outside the checkout, so `cuda_agent` can only come from the wheel.
PROMPT_SCRIPT = """
import json, sys
from pathlib import Path
import cuda_agent
from cuda_agent.agent.environment import KernelEnv
env = KernelEnv("import torch\\n", workspace_dir=Path(sys.argv[1]))
messages = env.reset()
print(json.dumps({"package": cuda_agent.__file__, "prompt": messages[1]["content"]}))
"""


@pytest.mark.slow  # builds the wheel and installs it in a fresh virtual environment
def test_installed_wheel_prompts_with_the_full_contract(tmp_path: Path) -> None:
    # Build from a copy: building in the checkout would leave build/ and egg-info behind in a shared tree.
    source = tmp_path / "source"
    source.mkdir()
    shutil.copy(ROOT / "pyproject.toml", source)
    for package in ("cuda_agent", "services"):
        shutil.copytree(ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    wheels = tmp_path / "wheels"
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    run = {"check": True, "capture_output": True, "text": True, "env": env, "cwd": tmp_path}
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(source)],
        **run,
    )
    (wheel,) = wheels.glob("cuda_agent-*.whl")

    # System site-packages lend torch and the other dependencies; the checkout's editable install stays behind
    # the venv's own copy, which --force-reinstall puts into the venv.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], **run)
    python = str(venv / "bin" / "python")
    subprocess.run([python, "-m", "pip", "install", "--no-deps", "--force-reinstall", str(wheel)], **run)

    out = subprocess.run([python, "-c", PROMPT_SCRIPT, str(tmp_path / "workspace")], **run)
    built = json.loads(out.stdout)
    assert Path(built["package"]).is_relative_to(venv), built["package"]
    assert CONTRACT.read_text(encoding="utf-8") in built["prompt"]
    assert "Each correctness trial's seed, one of them unpredictable" in built["prompt"]

"""Run the chosen parts against one stack and collect a report per part."""

from __future__ import annotations

import time
from collections.abc import Callable

from cuda_agent.contracts.common import Device
from cuda_agent.selftest.attacks import ATTACKS
from cuda_agent.selftest.badinput import run_badinput_part
from cuda_agent.selftest.faults import run_faults_part
from cuda_agent.selftest.hacks import HACKS, run_hacks_part
from cuda_agent.selftest.load import run_load_part
from cuda_agent.selftest.report import PartReport
from cuda_agent.selftest.sandbox import run_sandbox_part
from cuda_agent.selftest.stack import Stack
from cuda_agent.selftest.tenancy import run_tenancy_part

Part = Callable[[Stack, PartReport, "set[str] | None"], None]

# In the order they run: faults restart workers and Redis, and bad input fills a queue nobody drains, so they
# come after the parts that judge verdicts.
PARTS: dict[str, Part] = {
    "tenancy": lambda stack, report, only: run_tenancy_part(stack, report),
    "sandbox": run_sandbox_part,
    "hacks": run_hacks_part,
    "faults": lambda stack, report, only: run_faults_part(stack, report),
    "badinput": lambda stack, report, only: run_badinput_part(stack, report),
    "load": lambda stack, report, only: run_load_part(stack, report),
}
DEFAULT_PARTS = tuple(p for p in PARTS if p != "load")


class UnknownName(ValueError):
    """A part, attack or hack name that does not exist; the message lists what does."""


def run_selftest(
    parts: list[str],
    device: Device = Device.CPU,
    *,
    only: set[str] | None = None,
    keep: bool = False,
    on_part: Callable[[PartReport], None] | None = None,
) -> list[PartReport]:
    """Start a stack, run ``parts`` (in PARTS order), stop the stack. ``only`` narrows the sandbox and hacks parts
    to the named attacks and hacks; ``keep`` keeps the stack's temp dir (service logs) for diagnosis."""
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        raise UnknownName(f"unknown part(s) {', '.join(unknown)}; choose from {', '.join(PARTS)}")
    unknown = sorted((only or set()) - {a.name for a in ATTACKS} - {h.name for h in HACKS})
    if unknown:
        raise UnknownName(f"unknown attack or hack name(s) {', '.join(unknown)}; see cuda_agent/selftest/attacks.py")
    reports = []
    started = time.monotonic()
    with Stack(device, keep=keep) as stack:
        startup = PartReport("stack", duration_s=time.monotonic() - started)
        startup.add("services, workers, database and broker started", True)
        startup.notes["logs"] = str(stack.logs) if keep else "removed (--keep to keep)"
        reports.append(startup)
        for name in (p for p in PARTS if p in parts):
            report = PartReport(name)
            began = time.monotonic()
            try:
                PARTS[name](stack, report, only)
            except Exception as exc:  # a part that crashed is a failed part, and the others still run
                report.add(f"{name} crashed", False, f"{type(exc).__name__}: {exc}")
            report.duration_s = time.monotonic() - began
            reports.append(report)
            if on_part:
                on_part(report)
    return reports

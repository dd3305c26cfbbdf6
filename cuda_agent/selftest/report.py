"""What a selftest run found: one check per attempt, grouped by part, printed as one table."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table


@dataclass
class Check:
    """One attempt: an attack, a hack, a fault, a route. ``held`` is the property the part asserts."""

    name: str
    held: bool
    reason: str = ""  # why it failed, one line; empty when it held

    def __post_init__(self) -> None:
        self.reason = " ".join(self.reason.split())[:300]


@dataclass
class PartReport:
    part: str
    checks: list[Check] = field(default_factory=list)
    duration_s: float = 0.0
    notes: dict[str, Any] = field(default_factory=dict)  # figures a part measures, e.g. p99 latency

    @property
    def tried(self) -> int:
        return len(self.checks)

    @property
    def held(self) -> int:
        return sum(c.held for c in self.checks)

    @property
    def failed(self) -> int:
        return self.tried - self.held

    def add(self, name: str, held: bool, reason: str = "") -> Check:
        check = Check(name, held, "" if held else reason or "no reason given")
        self.checks.append(check)
        return check


def passed(reports: list[PartReport]) -> bool:
    """True when every part tried something and nothing failed."""
    return all(r.tried > 0 and r.failed == 0 for r in reports)


def render(reports: list[PartReport], console: Console) -> None:
    """The table (part | tried | held | failed | time), then each failure with its one-line reason."""
    table = Table("part", "tried", "held", "failed", "time", "notes")
    for r in reports:
        failed = f"[red]{r.failed}[/red]" if r.failed else "0"
        notes = ", ".join(f"{k} {v}" for k, v in r.notes.items())
        table.add_row(r.part, str(r.tried), str(r.held), failed, f"{r.duration_s:.0f} s", notes)
    console.print(table)
    for r in reports:
        for c in r.checks:
            if not c.held:
                console.print(f"[red]FAILED[/red] {r.part}/{c.name}: {c.reason}", highlight=False)
        if r.tried == 0:
            console.print(f"[red]FAILED[/red] {r.part}: tried nothing", highlight=False)


def to_json(reports: list[PartReport]) -> dict[str, Any]:
    return {
        "passed": passed(reports),
        "parts": [
            {
                "part": r.part,
                "tried": r.tried,
                "held": r.held,
                "failed": r.failed,
                "duration_s": round(r.duration_s, 2),
                "notes": r.notes,
                "checks": [asdict(c) for c in r.checks],
            }
            for r in reports
        ],
    }

"""Decontamination and deduplication by normalized-AST similarity of the ``Model`` class.

Normalization makes two Models that differ only in spelling compare equal: docstrings dropped; every identifier
that is ours to choose (locals, arguments, ``self`` attributes) renamed to one placeholder while the names that
carry meaning (``nn.Conv2d``, ``F.relu``, ``torch.matmul``) stay; numbers replaced by a placeholder (sizes live
in constants and vary between copies). Statements become units; where order carries no meaning it is removed:
``__init__``'s assignments are sorted, and each ``forward`` statement is keyed by its data-flow depth (computed
before renaming), so reordered independent lines compare equal while a reordered chain of dependent ones does not.
Similarity is difflib's ratio over the unit sequences: one operator swapped in a two-operator Model gives 0.8,
a renamed, reordered copy 1.0.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

# Module names whose attributes are the operators themselves: kept, never renamed.
_LIBRARY_NAMES = frozenset({"torch", "nn", "F", "functional", "math", "super"})
_BARRIERS = (ast.Return, ast.If, ast.For, ast.While, ast.With, ast.Try)


class _Renamer(ast.NodeTransformer):
    def visit_Name(self, node: ast.Name) -> ast.AST:
        return node if node.id in _LIBRARY_NAMES else ast.copy_location(ast.Name(id="_", ctx=node.ctx), node)

    def visit_arg(self, node: ast.arg) -> ast.AST:
        return ast.copy_location(ast.arg(arg="_"), node)

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        ours = isinstance(node.value, ast.Name) and node.value.id == "self"  # self.<attr> is our naming; x.view is not
        self.generic_visit(node)
        if ours:
            return ast.copy_location(ast.Attribute(value=node.value, attr="_", ctx=node.ctx), node)
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if isinstance(node.value, int | float | complex) and not isinstance(node.value, bool):
            return ast.copy_location(ast.Constant(value=0), node)
        return node


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def _unit(stmt: ast.stmt) -> str:
    return ast.dump(_Renamer().visit(ast.parse(ast.unparse(stmt)).body[0]), annotate_fields=False)


def _names(node: ast.AST, ctx: type[ast.expr_context]) -> set[str]:
    found = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ctx):
            found.add(n.id)
        elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ctx) and isinstance(n.value, ast.Name):
            found.add(f"{n.value.id}.{n.attr}")
    return found


def _ordered_units(body: list[ast.stmt], sort_all: bool) -> list[str]:
    stmts = [s for s in body if not _is_docstring(s)]
    if sort_all:
        return sorted(_unit(s) for s in stmts)
    # Keyed by (segment, data-flow depth): control flow and return are barriers nothing moves across.
    depth_of: dict[str, int] = {}
    keyed: list[tuple[int, int, str]] = []
    segment = 0
    for stmt in stmts:
        if isinstance(stmt, _BARRIERS):
            keyed.append((segment + 1, 0, _unit(stmt)))
            segment += 2
            continue
        depth = 1 + max((depth_of[n] for n in _names(stmt, ast.Load) if n in depth_of), default=0)
        keyed.append((segment, depth, _unit(stmt)))
        for name in _names(stmt, ast.Store):
            depth_of[name] = depth
    return [unit for _, _, unit in sorted(keyed)]


def model_units(source: str) -> list[str] | None:
    """The normalized statement units of ``class Model``; None when the source has no parsable Model."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    if model is None:
        return None
    units = [f"bases:{len(model.bases)}"]
    methods = sorted(
        (n for n in model.body if isinstance(n, ast.FunctionDef)),
        key=lambda f: (f.name != "__init__", f.name != "forward", f.name),
    )
    for fn in methods:
        # __init__ builds independent submodules: order is meaningless there. Method names other than the
        # two the format fixes are ours to choose.
        label = fn.name if fn.name in ("__init__", "forward") else "method"
        units.append(f"def {label}/{len(fn.args.args)}")
        units += _ordered_units(fn.body, sort_all=fn.name == "__init__")
    return units


def similarity(a: list[str], b: list[str]) -> float:
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def units_hash(units: list[str]) -> str:
    return hashlib.sha256("\n".join(units).encode()).hexdigest()


@dataclass(frozen=True)
class Match:
    name: str
    score: float


class Deduplicator:
    """Holds the evaluation set and the problems kept so far; answers whether a new one is too close to either."""

    def __init__(self, threshold: float = 0.9) -> None:
        self.threshold = threshold
        self._eval: list[tuple[str, list[str]]] = []
        self._kept: list[tuple[str, list[str]]] = []
        self._kept_hashes: dict[str, str] = {}

    def load_eval_dir(self, directory: Path) -> int:
        """Add every KernelBench-format ``*.py`` below ``directory``; files without a parsable Model are skipped."""
        added = 0
        for path in sorted(directory.rglob("*.py")):
            units = model_units(path.read_text(errors="replace"))
            if units is None:
                log.info("decontamination: %s has no parsable Model, skipped", path)
                continue
            self._eval.append((str(path.relative_to(directory)), units))
            added += 1
        return added

    def _closest(self, units: list[str], pool: list[tuple[str, list[str]]]) -> Match | None:
        best: Match | None = None
        matcher = difflib.SequenceMatcher(None, autojunk=False)
        matcher.set_seq2(units)
        for name, other in pool:
            matcher.set_seq1(other)
            # real_quick_ratio and quick_ratio bound ratio from above: most pairs are ruled out without it.
            if matcher.real_quick_ratio() <= self.threshold or matcher.quick_ratio() <= self.threshold:
                continue
            score = matcher.ratio()
            if score > self.threshold and (best is None or score > best.score):
                best = Match(name, score)
        return best

    def contamination(self, source: str) -> Match | None:
        """The evaluation problem this one is too similar to, or None."""
        units = model_units(source)
        return None if units is None else self._closest(units, self._eval)

    def duplicate(self, source: str) -> Match | None:
        """The kept problem this one duplicates (exactly, after normalization, or nearly), or None."""
        units = model_units(source)
        if units is None:
            return None
        exact = self._kept_hashes.get(units_hash(units))
        if exact is not None:
            return Match(exact, 1.0)
        return self._closest(units, self._kept)

    def keep(self, name: str, source: str) -> None:
        units = model_units(source)
        if units is not None:
            self._kept.append((name, units))
            self._kept_hashes.setdefault(units_hash(units), name)

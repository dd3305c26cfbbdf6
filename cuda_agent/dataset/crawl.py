"""Seed crawl: a catalogue of primitive operators from ``torch.nn`` modules and ``torch.nn.functional``.

Everything here is found by introspection and probing, not listed by hand: constructor and call signatures come
from ``inspect`` (or, for C builtins of ``torch.nn.functional``, the signature line their docstring opens with);
the ranks and dtypes an operator accepts come from calling it on small CPU tensors; stochasticity comes from
calling it twice on the same input under different RNG states, backed by its name and docstring. The one table
kept by hand is ``PARAM_ROLES``: how a required constructor argument is bound when composing (``in_channels`` is the
input's dimension 1, ``out_channels`` a free size...). An operator with a required argument the table does not
know is skipped with that reason, so the catalogue says exactly what it left out and why.
"""

from __future__ import annotations

import ast
import functools
import inspect
import re
import warnings
from collections.abc import Callable
from enum import StrEnum
from typing import Any

import torch
import torch.nn.functional as F
from pydantic import BaseModel, Field
from torch import nn

PROBE_RANKS = (1, 2, 3, 4, 5)
PROBE_DTYPES = ("float32", "float64", "bfloat16", "float16")
# Every non-batch dimension of a probe tensor is PROBE_SIZE, and every size-bound constructor argument gets it
# too, so that in_channels, in_features and normalized_shape all match whatever dimension they read.
PROBE_BATCH = 2
PROBE_SIZE = 4


class ParamRole(StrEnum):
    """How the composer fills a required argument."""

    INPUT_CHANNELS = "input_channels"  # the input's dimension 1
    INPUT_FEATURES = "input_features"  # the input's last dimension
    OUTPUT_SIZE = "output_size"  # a free size drawn by the composer
    KERNEL = "kernel"  # a small odd kernel drawn by the composer
    GROUPS = "groups"  # a divisor of the input's channels
    FIXED = "fixed"  # the constant in PARAM_ROLES


# name -> (role, value used when probing / for FIXED). Names are matched on required arguments only: an argument
# with a default keeps its default.
PARAM_ROLES: dict[str, tuple[ParamRole, Any]] = {
    "in_channels": (ParamRole.INPUT_CHANNELS, PROBE_SIZE),
    "num_features": (ParamRole.INPUT_CHANNELS, PROBE_SIZE),
    "num_channels": (ParamRole.INPUT_CHANNELS, PROBE_SIZE),
    "in_features": (ParamRole.INPUT_FEATURES, PROBE_SIZE),
    "normalized_shape": (ParamRole.INPUT_FEATURES, PROBE_SIZE),
    "out_channels": (ParamRole.OUTPUT_SIZE, PROBE_SIZE),
    "out_features": (ParamRole.OUTPUT_SIZE, PROBE_SIZE),
    "kernel_size": (ParamRole.KERNEL, 3),
    "num_groups": (ParamRole.GROUPS, 2),
    "groups": (ParamRole.GROUPS, 2),
    "output_size": (ParamRole.FIXED, 2),
    "upscale_factor": (ParamRole.FIXED, 2),
    "downscale_factor": (ParamRole.FIXED, 2),
    "size": (ParamRole.FIXED, 3),
    "norm_type": (ParamRole.FIXED, 2.0),
    "threshold": (ParamRole.FIXED, 0.1),
    "value": (ParamRole.FIXED, 0.0),
    "padding": (ParamRole.FIXED, 1),
    "pad": (ParamRole.FIXED, [1, 1]),  # a list, not a tuple: the catalogue round-trips through JSON
    "dim": (ParamRole.FIXED, -1),
}

# Containers, whole networks and layers made of other layers are not primitive operators.
_NOT_PRIMITIVE = re.compile(
    r"^(Module|Sequential|ModuleList|ModuleDict|ParameterList|ParameterDict|Container|DataParallel|Identity"
    r"|Transformer.*|MultiheadAttention|RNN.*|LSTM.*|GRU.*|AdaptiveLogSoftmaxWithLoss|Lazy.*|SyncBatchNorm)$"
)
STOCHASTIC_NAME = re.compile(r"dropout|rrelu|gumbel|fractional", re.IGNORECASE)
_STOCHASTIC_DOC = re.compile(r"\brandom(ly|ized)?\b|\bstochastic\b", re.IGNORECASE)


class OperatorKind(StrEnum):
    MODULE = "module"
    FUNCTIONAL = "functional"


class OperatorParam(BaseModel):
    name: str
    role: ParamRole
    value: Any = Field(description="The probing value; the composed value for FIXED.")


class OperatorSpec(BaseModel):
    """One primitive operator: how to build it, what it accepts, whether it is deterministic."""

    name: str = Field(description="Qualified name, e.g. torch.nn.Conv2d or torch.nn.functional.gelu.")
    kind: OperatorKind
    provenance: str = Field(description="torch#<version> the operator was crawled from.")
    signature: str = Field(description="Constructor signature (module) or call signature (functional).")
    call_signature: str = Field(description="forward() signature (module) or the call signature (functional).")
    params: list[OperatorParam] = Field(description="Required arguments besides the input, with their binding.")
    ranks: list[int] = Field(description="Input ranks a probe accepted (float32).")
    dtypes: list[str] = Field(description="Floating dtypes a probe accepted (at the lowest accepted rank).")
    stochastic: bool
    stochastic_evidence: str | None = Field(None, description="Why it counts as stochastic.")

    @property
    def short_name(self) -> str:
        return self.name.rsplit(".", 1)[-1]


class SkippedOperator(BaseModel):
    name: str
    reason: str


class Catalogue(BaseModel):
    provenance: str
    operators: list[OperatorSpec]
    skipped: list[SkippedOperator]

    def get(self, name: str) -> OperatorSpec:
        for op in self.operators:
            if op.name == name:
                return op
        raise KeyError(f"operator {name!r} is not in the catalogue")


def torch_provenance() -> str:
    return f"torch#{torch.__version__.split('+')[0]}"


def _call_params(fn: Callable[..., Any]) -> tuple[str, list[inspect.Parameter]]:
    """(signature text, parameters) of a functional; C builtins carry theirs on the first docstring line."""
    try:
        sig = inspect.signature(fn)
        return f"{fn.__name__}{sig}", list(sig.parameters.values())
    except (TypeError, ValueError):
        pass
    first = (fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else ""
    match = re.match(r"^(\w+)\((.*)\)\s*->\s*Tensor$", first)
    if not match:
        raise ValueError("no signature (not introspectable, no signature line in its docstring)")
    try:
        tree = ast.parse(f"def {match.group(1)}({match.group(2)}): pass")
    except SyntaxError:
        raise ValueError(f"unparsable docstring signature {first!r}") from None
    args = tree.body[0].args  # type: ignore[attr-defined]
    n_defaults = len(args.defaults)
    params = []
    for i, a in enumerate(args.args):
        has_default = i >= len(args.args) - n_defaults
        params.append(
            inspect.Parameter(
                a.arg,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                default=None if has_default else inspect.Parameter.empty,
            )
        )
    return first.split(" ->")[0], params


def _bind_required(params: list[inspect.Parameter]) -> list[OperatorParam]:
    """Bindings of the required parameters (and of an implicit ``dim``); ValueError naming the first required one no
    role is known for."""
    bound = []
    for p in params:
        if p.name == "dim" and p.default is None:
            # Softmax and kin default to an implicit, deprecated dimension choice: name one.
            bound.append(OperatorParam(name=p.name, role=ParamRole.FIXED, value=PARAM_ROLES["dim"][1]))
            continue
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.default is not inspect.Parameter.empty:
            continue
        if p.name not in PARAM_ROLES:
            raise ValueError(f"required argument {p.name!r} has no known binding")
        role, value = PARAM_ROLES[p.name]
        bound.append(OperatorParam(name=p.name, role=role, value=value))
    return bound


def build_callable(op: OperatorSpec, kwargs: dict[str, Any]) -> Callable[[torch.Tensor], Any]:
    """The operator as a one-input callable with ``kwargs`` for its required arguments."""
    if op.kind is OperatorKind.MODULE:
        module: Callable[[torch.Tensor], Any] = getattr(nn, op.short_name)(**kwargs)
        return module
    fn = getattr(F, op.short_name)
    return functools.partial(fn, **kwargs)


def _probe_input(rank: int, dtype: torch.dtype) -> torch.Tensor:
    shape = (PROBE_BATCH, *([PROBE_SIZE] * (rank - 1))) if rank > 1 else (PROBE_SIZE,)
    return torch.randn(shape, generator=torch.Generator().manual_seed(rank)).to(dtype)


def _accepts(make: Callable[[], Callable[[torch.Tensor], Any]], x: torch.Tensor) -> bool:
    try:
        out = make()(x.clone())
    except Exception:  # probing: any failure means "not accepted"
        return False
    return isinstance(out, torch.Tensor) and out.is_floating_point() and out.numel() > 0


def _differs_between_runs(make: Callable[[], Callable[[torch.Tensor], Any]], x: torch.Tensor) -> bool:
    fn = make()  # one instance, so parameters are equal across the two calls and only the RNG state differs
    torch.manual_seed(0)
    first = fn(x.clone())
    torch.manual_seed(1)
    second = fn(x.clone())
    return not torch.equal(first, second)


def _probe(
    name: str,
    kind: OperatorKind,
    signature: str,
    call_signature: str,
    params: list[OperatorParam],
    make: Callable[[], Callable[[torch.Tensor], Any]],
    doc: str,
) -> OperatorSpec | SkippedOperator:
    ranks = [r for r in PROBE_RANKS if _accepts(make, _probe_input(r, torch.float32))]
    if not ranks:
        return SkippedOperator(name=name, reason="no float32 probe of rank 1-5 accepted (or output not a tensor)")
    dtypes = ["float32"] + [d for d in PROBE_DTYPES[1:] if _accepts(make, _probe_input(ranks[0], getattr(torch, d)))]
    evidence = None
    if _differs_between_runs(make, _probe_input(ranks[0], torch.float32)):
        evidence = "two calls on the same input under different RNG states differ"
    elif STOCHASTIC_NAME.search(name.rsplit(".", 1)[-1]):
        evidence = "its name names a random operator"
    elif _STOCHASTIC_DOC.search(doc.strip().split("\n\n")[0]):
        evidence = "its documentation describes it as random"
    return OperatorSpec(
        name=name,
        kind=kind,
        provenance=torch_provenance(),
        signature=signature,
        call_signature=call_signature,
        params=params,
        ranks=ranks,
        dtypes=dtypes,
        stochastic=evidence is not None,
        stochastic_evidence=evidence,
    )


def _crawl_module(cls: type[nn.Module]) -> OperatorSpec | SkippedOperator:
    name = f"torch.nn.{cls.__name__}"
    if _NOT_PRIMITIVE.match(cls.__name__):
        return SkippedOperator(
            name=name,
            reason="not a primitive single-process operator (container, network, layer of layers, lazy, distributed)",
        )
    if issubclass(cls, nn.modules.loss._Loss):
        return SkippedOperator(name=name, reason="a loss: takes a target besides the input")
    sig = inspect.signature(cls.__init__)
    try:
        params = _bind_required(list(sig.parameters.values())[1:])
    except ValueError as exc:
        return SkippedOperator(name=name, reason=str(exc))
    kwargs = {p.name: p.value for p in params}
    forward = inspect.signature(cls.forward)
    tensor_args = [p for p in list(forward.parameters.values())[1:] if p.default is inspect.Parameter.empty]
    if len(tensor_args) != 1:
        return SkippedOperator(name=name, reason=f"forward takes {len(tensor_args)} required inputs, not one")
    return _probe(
        name,
        OperatorKind.MODULE,
        f"{cls.__name__}{sig}",
        f"forward{forward}",
        params,
        lambda: cls(**kwargs),
        cls.__doc__ or "",
    )


def _crawl_functional(fn_name: str) -> OperatorSpec | SkippedOperator:
    name = f"torch.nn.functional.{fn_name}"
    fn = getattr(F, fn_name)
    if fn_name.endswith("_"):
        return SkippedOperator(name=name, reason="in-place variant (the out-of-place one is catalogued)")
    try:
        signature, params = _call_params(fn)
    except ValueError as exc:
        return SkippedOperator(name=name, reason=str(exc))
    if not params or params[0].name != "input":
        return SkippedOperator(name=name, reason="first argument is not a single input tensor")
    try:
        bound = _bind_required(params[1:])
    except ValueError as exc:
        return SkippedOperator(name=name, reason=str(exc))
    kwargs = {p.name: p.value for p in bound}
    return _probe(
        name,
        OperatorKind.FUNCTIONAL,
        signature,
        signature,
        bound,
        lambda: functools.partial(fn, **kwargs),
        fn.__doc__ or "",
    )


@functools.cache
def crawl() -> Catalogue:
    """The catalogue of this process's torch (cached: the crawl probes a few hundred small calls)."""
    operators: list[OperatorSpec] = []
    skipped: list[SkippedOperator] = []
    module_classes = sorted(
        (obj for obj in vars(nn).values() if isinstance(obj, type) and issubclass(obj, nn.Module)),
        key=lambda c: c.__name__,
    )
    functionals = sorted(n for n, obj in vars(F).items() if not n.startswith("_") and inspect.isroutine(obj))
    with torch.no_grad(), warnings.catch_warnings():
        # Probing calls deprecated and ill-shaped forms on purpose (dropout on a 1-D input...): their warnings are
        # the expected noise of a probe, not news.
        warnings.simplefilter("ignore")
        results = [_crawl_module(c) for c in module_classes] + [_crawl_functional(n) for n in functionals]
    for result in results:
        (operators if isinstance(result, OperatorSpec) else skipped).append(result)  # type: ignore[arg-type]
    return Catalogue(provenance=torch_provenance(), operators=operators, skipped=skipped)

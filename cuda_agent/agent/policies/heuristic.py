"""The `heuristic` policy: a non-LLM kernel author for elementwise problems, from templates.

It reads the problem from the opening user message, translates ``Model.forward``'s single ``return`` expression
(tensor arguments, numeric constants, + - * /, and common activations) into one fused C expression, writes a
PROJECT-form candidate (an OpenMP loop for device cpu, a grid-stride CUDA kernel otherwise), compiles, verifies
and finishes. Problems it cannot translate end at once with a finish summary saying why. It assumes float32
inputs of one shape; anything else fails verification, which is the honest outcome.
"""

from __future__ import annotations

import ast
import json
import math
import re
from typing import Any

from cuda_agent.contracts.agent import AssistantTurn, ToolCall

LAUNCHER = "fused_elementwise"
_PROBLEM = re.compile(r"## The problem \(`model.py`\)\n```python\n(?P<src>.*)\n```", re.DOTALL)
_DEVICE = re.compile(r"Target device: \*\*(?P<device>\w+)\*\*")
_TORCH_PREFIXES = ("torch.", "F.", "torch.nn.functional.", "nn.functional.")

# Unary functions: C expression template over the argument {0}.
_UNARY = {
    "relu": "fmaxf({0}, 0.0f)",
    "sigmoid": "(1.0f / (1.0f + expf(-({0}))))",
    "tanh": "tanhf({0})",
    "exp": "expf({0})",
    "log": "logf({0})",
    "abs": "fabsf({0})",
    "sqrt": "sqrtf({0})",
    "rsqrt": "(1.0f / sqrtf({0}))",
    "sin": "sinf({0})",
    "cos": "cosf({0})",
    "neg": "(-({0}))",
    "square": "(({0}) * ({0}))",
    "silu": "(({0}) / (1.0f + expf(-({0}))))",
    "gelu": "(0.5f * ({0}) * (1.0f + erff(({0}) * 0.70710678118654752f)))",
    "softplus": "(({0}) > 20.0f ? ({0}) : log1pf(expf({0})))",
    "hardtanh": "fminf(fmaxf({0}, -1.0f), 1.0f)",
    "relu6": "fminf(fmaxf({0}, 0.0f), 6.0f)",
}
_BINARY_FUNCS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "subtract": "-", "multiply": "*", "divide": "/"}
_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}


class Unsupported(ValueError):
    """The problem is not an elementwise expression this template author handles."""


def _func_name(func: ast.expr) -> str | None:
    dotted = ast.unparse(func)
    for prefix in _TORCH_PREFIXES:
        if dotted.startswith(prefix) and "." not in dotted[len(prefix) :]:
            return dotted[len(prefix) :]
    return None


def _constant(node: ast.expr) -> float:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_constant(node.operand)
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return float(node.value)
    raise Unsupported(f"expected a numeric constant, got {ast.unparse(node)}")


def _c_float(value: float) -> str:
    if not math.isfinite(value):
        raise Unsupported(f"non-finite constant {value}")
    return f"{value!r}f" if "." in repr(value) or "e" in repr(value) else f"{value!r}.0f"


class _Translator:
    def __init__(self, args: list[str]) -> None:
        self.args = args
        self.used: list[str] = []

    def expr(self, node: ast.expr) -> str:
        if isinstance(node, ast.Name) and node.id in self.args:
            if node.id not in self.used:
                self.used.append(node.id)
            return f"{node.id}[i]"
        if isinstance(node, ast.Constant):
            return _c_float(_constant(node))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return f"(-{self.expr(node.operand)})"
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return f"({self.expr(node.left)} {_BINOPS[type(node.op)]} {self.expr(node.right)})"
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            return f"powf({self.expr(node.left)}, {_c_float(_constant(node.right))})"
        if isinstance(node, ast.Call):
            return self.call(node)
        raise Unsupported(f"cannot translate {ast.unparse(node)!r}")

    def call(self, node: ast.Call) -> str:
        # Method form (x.relu()) is the function applied to the receiver.
        if isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name | ast.Call | ast.BinOp):
            receiver = node.func.value
            if not (isinstance(receiver, ast.Name) and receiver.id in ("torch", "F")):
                return self.apply(node.func.attr, [receiver, *node.args], node.keywords, ast.unparse(node))
        func = _func_name(node.func)
        if func is None:
            raise Unsupported(f"unknown function {ast.unparse(node.func)!r}")
        return self.apply(func, list(node.args), node.keywords, ast.unparse(node))

    def apply(self, name: str, args: list[ast.expr], keywords: list[ast.keyword], text: str) -> str:
        kw = {k.arg: k.value for k in keywords if k.arg is not None}
        kw.pop("inplace", None)
        if name in _UNARY and len(args) == 1 and not kw:
            return _UNARY[name].format(self.expr(args[0]))
        if name in _BINARY_FUNCS and len(args) == 2 and not kw:
            return f"({self.expr(args[0])} {_BINARY_FUNCS[name]} {self.expr(args[1])})"
        if name == "leaky_relu" and len(args) <= 2:
            slope = _constant(args[1] if len(args) == 2 else kw.pop("negative_slope", ast.Constant(0.01)))
            x = self.expr(args[0])
            return f"({x} > 0.0f ? {x} : {_c_float(slope)} * {x})"
        if name in ("clamp", "clip") and len(args) >= 1:
            lo = args[1] if len(args) > 1 else kw.get("min")
            hi = args[2] if len(args) > 2 else kw.get("max")
            out = self.expr(args[0])
            if lo is not None:
                out = f"fmaxf({out}, {_c_float(_constant(lo))})"
            if hi is not None:
                out = f"fminf({out}, {_c_float(_constant(hi))})"
            return out
        raise Unsupported(f"unsupported call {text!r}")


def translate(problem_source: str) -> tuple[list[str], list[str], str]:
    """(forward parameters, tensors the kernel reads, C expression of out[i]) for an elementwise problem."""
    try:
        tree = ast.parse(problem_source)
    except SyntaxError as exc:
        raise Unsupported(f"problem does not parse: {exc.msg}") from None
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    forward = (
        next((n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "forward"), None) if model else None
    )
    if forward is None:
        raise Unsupported("no Model.forward found")
    params = [a.arg for a in forward.args.args[1:]]
    if forward.args.vararg or forward.args.kwarg or forward.args.kwonlyargs:
        raise Unsupported("forward takes *args/**kwargs/keyword-only arguments")
    body = [s for s in forward.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
        raise Unsupported("forward is not a single return expression")
    translator = _Translator(params)
    expression = translator.expr(body[0].value)
    if not translator.used:
        raise Unsupported("the expression reads no input tensor")
    return params, translator.used, expression


def render_candidate(params: list[str], used: list[str], expression: str, device: str) -> dict[str, str]:
    """kernels/<file> and model_new.py of the PROJECT form for ``out[i] = expression``."""
    inputs = ", ".join(f"const float* __restrict__ {name}" for name in used)
    c_inputs = ", ".join(f"const float* {name}" for name in used)
    if device == "cpu":
        kernel_path = "kernels/elementwise.cpp"
        kernel = f"""#include <cmath>
#include <cstdint>

extern "C" void {LAUNCHER}({c_inputs}, float* out, int64_t n) {{
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = {expression};
}}
"""
    else:
        kernel_path = "kernels/elementwise.cu"
        names = ", ".join(used)
        kernel = f"""#include <cstdint>
#include <cuda_runtime.h>

__global__ void {LAUNCHER}_kernel({inputs}, float* __restrict__ out, int64_t n) {{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = {expression};
}}

extern "C" void {LAUNCHER}({c_inputs}, float* out, int64_t n, cudaStream_t stream) {{
    if (n == 0) return;
    const int threads = 256;
    int64_t blocks = (n + threads - 1) / threads;
    if (blocks > 65535) blocks = 65535;  // grid-stride loop covers the rest
    {LAUNCHER}_kernel<<<(unsigned)blocks, threads, 0, stream>>>({names}, out, n);
}}
"""
    contiguous = "\n".join(f"        {name} = {name}.contiguous()" for name in used)
    model_new = f"""import torch
import torch.nn as nn

from cuda_agent.kernels import load_kernels


class ModelNew(nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()
        self.lib = load_kernels()

    def forward(self, {", ".join(params)}):
{contiguous}
        out = torch.empty_like({used[0]})
        self.lib.{LAUNCHER}({", ".join(used)}, out, out.numel())
        return out
"""
    return {kernel_path: kernel, "model_new.py": model_new}


class HeuristicPolicy:
    name = "heuristic"
    model = None

    def __init__(self) -> None:
        self._step = 0

    def act(self, conversation: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AssistantTurn:
        step = self._step
        self._step += 1
        opening = next((m.get("content") or "" for m in conversation if m["role"] == "user"), "")
        last = conversation[-1].get("content") or "" if conversation[-1]["role"] == "tool" else ""
        if step == 0:
            problem, device = _PROBLEM.search(opening), _DEVICE.search(opening)
            if problem is None or device is None:
                return _turn(step, "finish", summary="could not find the problem or the target device in the prompt")
            try:
                params, used, expression = translate(problem.group("src"))
            except Unsupported as exc:
                return _turn(step, "finish", summary=f"heuristic author: {exc}")
            files = render_candidate(params, used, expression, device.group("device"))
            calls = [("write_file", {"path": path, "content": text}) for path, text in files.items()]
            return _turns(step, [*calls, ("compile", {})], f"Elementwise: out[i] = {expression}")
        if step == 1 and last.startswith("compile: ok"):
            return _turn(step, "verify")
        if step == 1:
            return _turn(step, "finish", summary="the template did not compile")
        return _turn(step, "finish", summary="fused elementwise kernel from a template")


def _turns(step: int, calls: list[tuple[str, dict[str, Any]]], content: str | None = None) -> AssistantTurn:
    return AssistantTurn(
        content=content,
        tool_calls=[
            ToolCall(id=f"heuristic_{step}_{i}", name=name, arguments=json.dumps(args))
            for i, (name, args) in enumerate(calls)
        ],
    )


def _turn(step: int, name: str, **args: Any) -> AssistantTurn:
    return _turns(step, [(name, args)])

"""The heuristic policy end to end on device cpu: real g++ builds, verified by the platform's evaluation; and the
CUDA it writes builds with nvcc (no GPU needed to compile)."""

from __future__ import annotations

import warnings

import pytest

from cuda_agent.agent import KernelEnv, create_policy, run_rollout
from cuda_agent.author import author_problem
from cuda_agent.author.emit import Variant
from cuda_agent.contracts.agent import RolloutConfig, TerminationReason
from cuda_agent.contracts.candidate import CandidateForm, CandidateSource
from cuda_agent.contracts.common import CompileStatus, Device, TolerancePreset
from cuda_agent.contracts.compile import CompileRequest
from cuda_agent.dataset.compose import ComposedProblem, ComposeOptions, compose_one
from cuda_agent.dataset.crawl import crawl
from cuda_agent.eval.tolerance import admits_tf32
from cuda_agent.verify import LocalBackend
from tests.author import problems

CPU = RolloutConfig(device=Device.CPU, timing_trials=3, warmup=1, correctness_trials=2, measure_baselines=False)


# About 20 s each: three in the default suite (a product with an epilogue, a 16-bit product and a softmax, tensors
# held as attributes), the rest in the slow tier (CI runs both).
@pytest.mark.sandbox
@pytest.mark.parametrize(
    "source",
    [
        pytest.param(problems.GELU_RESIDUAL, id="gelu_residual", marks=pytest.mark.slow),
        pytest.param(problems.LINEAR_RELU, id="linear_relu"),
        pytest.param(problems.RMSNORM, id="rmsnorm", marks=pytest.mark.slow),
        pytest.param(problems.SOFTMAX, id="softmax", marks=pytest.mark.slow),
        pytest.param(problems.SUM_SUBTRACT, id="sum_subtract", marks=pytest.mark.slow),
        pytest.param(problems.BF16_LINEAR_SOFTMAX, id="bf16_linear_softmax"),
        pytest.param(problems.FP16_NORM_CAST, id="fp16_norm_cast", marks=pytest.mark.slow),
        pytest.param(problems.TENSOR_ATTRIBUTES, id="tensor_attributes"),
        pytest.param(problems.EINOPS_HEADS, id="einops_heads", marks=pytest.mark.slow),
    ],
)
def test_heuristic_returns_a_verified_cpu_candidate(source: str) -> None:
    traj = run_rollout(KernelEnv(source, config=CPU), create_policy("heuristic"))
    assert traj.termination is TerminationReason.FINISHED, traj.termination_detail
    assert [c.name for c in traj.turns[0].assistant.tool_calls] == ["write_file", "write_file", "verify"]
    assert any(e.kind == "verify" for t in traj.turns for e in t.reward_events)
    assert traj.best is not None and traj.best.result.correct, traj.turns[0].observations[-1].content
    assert "kernels/author.cpp" in traj.best.candidate.files
    # The summary keeps every variant's figure, in the order tried (a benchmark table's record of the search).
    verified = sum(e.kind == "verify" for t in traj.turns for e in t.reward_events)
    tried = traj.termination_detail.split("; tried: ")[1].split("; ")
    assert len(tried) == verified and all(t.endswith(" ms") or " = not correct (" in t for t in tried), tried


@pytest.mark.sandbox
def test_a_rollout_ended_by_a_limit_keeps_the_variants_verified_so_far() -> None:
    """Cancelled (as a wall clock ends it) after the first variant's verification, before the policy could finish:
    the trajectory's detail still holds that variant's figure."""
    checks = iter([False, True])
    traj = run_rollout(KernelEnv(problems.SOFTMAX, config=CPU), create_policy("heuristic"), cancel=lambda: next(checks))
    assert traj.termination is TerminationReason.CANCELLED and traj.best is not None
    limit, note = traj.termination_detail.split("; ", 1)
    assert limit == "cancelled by the caller" and note.startswith("kernel author: best variant ")
    tried = note.split("; tried: ")[1].split("; ")
    assert len(tried) == 1 and tried[0].endswith(" ms"), tried


def test_unsupported_problem_ends_with_the_op_and_no_candidate() -> None:
    traj = run_rollout(KernelEnv(problems.SORT, config=CPU), create_policy("heuristic"))
    assert traj.termination is TerminationReason.FINISHED and traj.best is None and len(traj.turns) == 1
    assert traj.termination_detail == "unsupported: aten.sort"


def test_the_kernelbench_form_is_declined_with_the_forms_it_writes() -> None:
    config = CPU.model_copy(update={"form": CandidateForm.KERNELBENCH})
    traj = run_rollout(KernelEnv(problems.SOFTMAX, config=config), create_policy("heuristic"))
    assert traj.termination is TerminationReason.FINISHED and traj.best is None and len(traj.turns) == 1
    assert "not the kernelbench form" in traj.termination_detail and "project" in traj.termination_detail


@pytest.mark.sandbox
@pytest.mark.parametrize("source", [problems.SOFTMAX, problems.LINEAR_RELU, problems.GELU_RESIDUAL])
def test_generated_cuda_compiles_with_nvcc(source: str) -> None:
    _, files = author_problem(source, "cuda").variants[0]
    request = CompileRequest(candidate=CandidateSource(form=CandidateForm.PROJECT, files=files), device=Device.CUDA)
    result = LocalBackend().compile(request)
    assert result.status is CompileStatus.OK, result.log[-3000:]


@pytest.mark.sandbox
@pytest.mark.slow
@pytest.mark.parametrize(
    ("source", "knob"),
    [
        (problems.RMSNORM, "cache=regs"),
        (problems.LONG_ROWS, "cache=smem"),
        (problems.CONV_BIAS_RELU, "conv=exact"),
        (problems.CONV_BIAS_RELU, "conv=tf32"),
        (problems.CONV_ONLY, "conv=direct"),
        (problems.CONV_TRANSPOSE, "conv=exact"),
        (problems.CONV_BIAS_RELU, "conv=fastest"),
        (problems.CONV_TRANSPOSE, "conv=fastest"),
        (problems.LINEAR_RELU, "gemm=cublas_tf32"),
        (problems.LINEAR_RELU, "micro=8"),
    ],
    ids=[
        "row_in_registers",
        "row_in_shared_memory",
        "cudnn_exact",
        "cudnn_tf32",
        "direct_when_alone",
        "cudnn_transposed_1d",
        "cudnn_timed",
        "cudnn_timed_transposed",
        "cublas_tf32",
        "gemm_in_registers",
    ],
)
def test_generated_library_calls_and_knobs_compile_with_nvcc(source: str, knob: str) -> None:
    variants = author_problem(source, "cuda", tf32=True).variants
    files = next(files for label, files in variants if knob in label.split())
    request = CompileRequest(candidate=CandidateSource(form=CandidateForm.PROJECT, files=files), device=Device.CUDA)
    result = LocalBackend().compile(request)
    assert result.status is CompileStatus.OK, result.log[-3000:]
    if knob.startswith("conv"):
        assert ("cudnnConvolution" in files["kernels/author.cu"]) is (knob != "conv=direct")
        assert ("cudnnFindConvolution" in files["kernels/author.cu"]) is (knob == "conv=fastest")
    if knob == "conv=direct":  # the convolution alone: every variant runs it on our kernels
        assert all({"conv=direct", "conv=implicit"} & set(label.split()) for label, _ in variants)
        assert not any("cudnnConvolution" in f["kernels/author.cu"] for _, f in variants)
    if knob == "cache=regs":  # the row read once into registers (16 bytes at a time), its later passes read them
        source = files["kernels/author.cu"]
        assert "load4(&c_in0[4 * q], in0 + o * 256LL + r0, aligned);" in source and "ld_in0 = c_in0[k]" in source
    if knob == "cache=smem":  # 160 KB of row: the kernel opts into more than the default 48 KB
        assert "s_in0[r] = in0[" in files["kernels/author.cu"] and "ld_in0 = s_in0[r]" in files["kernels/author.cu"]
        assert "cudaFuncAttributeMaxDynamicSharedMemorySize, 160000" in files["kernels/author.cu"]


@pytest.mark.sandbox
@pytest.mark.slow
def test_split_rows_build_under_the_candidate_rules() -> None:
    """A batch norm's four long rows (a block each, first) split across blocks (emit.split_rows): a launch a pass
    (8 blocks a row), or one cooperative launch whose blocks keep their segments (6 a row, their counters of
    arrived blocks among the tensors, and the launches a pass behind it); each launcher takes the partial results'
    buffers (double*) among its tensors and builds with nvcc."""
    variants = dict(author_problem(problems.BATCHNORM_TRAINING, "cuda").variants)
    unsplit, split, segments = (
        variants[Variant(rows=rows, cache=cache).label()]
        for rows, cache in (("block", "none"), ("auto", "none"), ("auto", "segment"))
    )
    assert "combine_partials<" not in unsplit["kernels/author.cu"] and "_segments" not in split["kernels/author.cu"]
    assert (
        "combine_partials<double>(" in split["kernels/author.cu"]
        and "_pass0<<<dim3(8, 4)" in split["kernels/author.cu"]
    )
    source = segments["kernels/author.cu"]
    assert "cudaLaunchCooperativeKernel(k0_add_segments" in source and "_pass0<<<dim3(6, 4)" in source
    assert "int32_t* bk0_add_arrivals, cudaStream_t stream)" in source
    for files in (split, segments):
        request = CompileRequest(candidate=CandidateSource(form=CandidateForm.PROJECT, files=files), device=Device.CUDA)
        result = LocalBackend().compile(request)
        assert result.status is CompileStatus.OK, result.log[-3000:]


@pytest.mark.sandbox
@pytest.mark.slow
@pytest.mark.parametrize(
    ("source", "knob", "code"),
    [
        (problems.STANDARDIZE_COLUMNS, "cache=none", "tile_reduce<float>"),
        (problems.SOFTMAX_CUMSUM, "cache=none", "block_exclusive_scan<float>"),
        (problems.SOFTMAX_CUMSUM, "cache=regs", "const float ld_in0 = c_in0[k];"),
        (problems.SOFTMAX, "rows=warp", "float c_in0[17] = {};"),
        (problems.SOFTMAX_CUMSUM, "rows=warp", "warp_exclusive_scan<float>"),
        (problems.BMM_TRANSPOSED, "gemm=pipelined", "float as[2][16][132]"),
        (problems.OWN_CONV, "conv=implicit", "x_group["),
        (problems.BMM_TRANSPOSED, "gemm=tf32x3", "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"),
        (problems.OWN_CONV, "gemm=tf32x3", "mma_tf32(part[j], a_small, b_big[h][j]);"),
        (problems.LINEAR_RELU, "gemm=tf32x3", "cp_async_wait<1>();"),
        (problems.CONV_BIAS_RELU, "gemm=tf32x3", "const float ep_v = acc[i][j][e];"),
        (problems.LONG_K, "gemm=tf32x3", "const float4 h = held[(i * 4 + j) * 256];"),
        (problems.CONV_TRANSPOSE_PHASES, "gemm=tf32x3", "k0_conv_p3(in0, p0, p1, out0, stream);"),
        (problems.BMM_TRANSPOSED, "gemm=wgmma", "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32"),
        (problems.LINEAR_RELU, "gemm=wgmma", "const float ep_v = acc[j * 4 + e];"),
        (problems.LONG_K, "gemm=wgmma", "for (int p = 0; p < 8; ++p) sum += bk0_mm_parts[p * 4608LL + o];"),
        (problems.TAP_MAJOR_CONV, "gemm=wgmma", "if (tap_in) gb[i] = x_group[x_step"),
        (problems.CONV_TRANSPOSE_PHASES, "gemm=wgmma", "k0_conv_p3_split_a<<<"),
        (problems.BMM_TRANSPOSED, "gemm=f16x3", "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16"),
        (problems.LONG_K, "gemm=f16x3", "const float unscale_a = 1.0f / f16_scale(bk0_mm_largest[0])"),
        (problems.BF16_CONV_RELU, "conv=exact", "CUDNN_DATA_BFLOAT16"),
        (problems.SDPA, "gemm=cublas", "const float alpha = 0.17677669529663687f"),
        (problems.INTEGER_ARITHMETIC, "vec=4", " % "),
        (problems.SOFTMAX, "math=fast", "__expf("),
    ],
    ids=[
        "column_tiles",
        "block_scan",
        "block_scan_in_registers",
        "warp_rows_in_registers",
        "warp_scan",
        "pipelined_gemm",
        "implicit_gemm_conv",
        "tf32x3_gemm",
        "tf32x3_conv",
        "tf32x3_staged_gemm",
        "conv_epilogue",
        "tf32x3_two_level_sums",
        "transposed_conv_phases",
        "wgmma_gemm",
        "wgmma_epilogue",
        "wgmma_k_parts",
        "wgmma_tap_major_conv",
        "wgmma_conv_phases",
        "f16x3_gemm",
        "f16x3_k_parts",
        "bf16_cudnn_conv",
        "scaled_product",
        "integer_arithmetic",
        "fast_math",
    ],
)
def test_emitted_kernels_compile_with_nvcc(source: str, knob: str, code: str) -> None:
    """The default layouts of column statistics (32 columns a block) and of a scan along contiguous rows (a block
    a row, chunk by chunk, its operand read once into registers where it fits), a warp per short row (its 513
    elements in 17 registers a lane; a scan chunk by chunk as a block's), our pipelined GEMM and convolution, a
    pipelined GEMM and implicit convolution on TF32 tensor cores (three products each), the same GEMM's K steps
    staged by asynchronous copies (operands of 16-byte groups), its sums in two levels over a long K, a
    convolution's bias and activation as its epilogue, a transposed convolution as a product per phase, the same
    GEMM on Hopper's warpgroup MMA (with an epilogue, its K cut into parts) and convolutions there (tap-major,
    a product per phase), GEMMs there of float16 parts, a bfloat16 convolution on
    cuDNN, a product scaled by its operands' factors, integer arithmetic (which host compilers take where nvcc
    does not) and float math on the special-function units."""
    files = next(files for label, files in author_problem(source, "cuda").variants if knob in label.split())
    assert code in files["kernels/author.cu"]
    request = CompileRequest(candidate=CandidateSource(form=CandidateForm.PROJECT, files=files), device=Device.CUDA)
    result = LocalBackend().compile(request)
    assert result.status is CompileStatus.OK, result.log[-3000:]


@pytest.mark.sandbox
def test_the_warpgroup_product_is_refused_by_name_where_the_gpu_lacks_it() -> None:
    """wgmma exists on Hopper built for its arch-specific instructions (sm_90a) only: built for another arch, the
    variant's build fails saying so, and the search goes on to the next variant."""
    variants = author_problem(problems.LINEAR_RELU, "cuda").variants
    files = next(files for label, files in variants if "gemm=wgmma" in label)
    request = CompileRequest(
        candidate=CandidateSource(form=CandidateForm.PROJECT, files=files), device=Device.CUDA, arch="sm_90"
    )
    result = LocalBackend().compile(request)
    assert result.status is CompileStatus.COMPILE_ERROR and "wgmma needs sm_90a" in result.message, result.message


@pytest.mark.sandbox
@pytest.mark.parametrize(
    ("source", "knob"),
    [(problems.BF16_LINEAR_SOFTMAX, "gemm=wmma"), (problems.FP16_NORM_CAST, "cache=regs")],
    ids=["bf16", "fp16"],
)
def test_16_bit_floats_compile_with_nvcc(source: str, knob: str) -> None:
    """Stored 16-bit, computed in float: cuBLAS with 16-bit operands (bf16), our GEMM kernel on tensor cores and a
    row cached in registers, converted on load and store by name (torch's build flags switch the operators off)."""
    variants = author_problem(source, "cuda", tf32=True).variants
    assert not any("cublas_tf32" in label for label, _ in variants)  # no TF32 variant of a 16-bit product
    for label, files in [variants[0], next((label, f) for label, f in variants if knob in label.split())]:
        request = CompileRequest(candidate=CandidateSource(form=CandidateForm.PROJECT, files=files), device=Device.CUDA)
        result = LocalBackend().compile(request)
        assert result.status is CompileStatus.OK, (label, result.log[-3000:])
        text = files["kernels/author.cu"]
        assert "float_to_" in text and "_to_float(" in text, label
    if knob == "gemm=wmma":
        assert "CUDA_R_16BF" in variants[0][1]["kernels/author.cu"]


@pytest.mark.sandbox
def test_16_bit_products_on_mma_compile_with_nvcc() -> None:
    """The staged mma.sync kernel (cp.async, ldmatrix, m16n8k16) where a 16-bit product's operands have 16-byte
    groups: first where it runs alone, then Hopper's warpgroup product, then the WMMA kernel."""
    variants = author_problem(problems.BF16_GEMM_GROUPS, "cuda").variants[:3]
    assert [label.split()[3] for label, _ in variants] == ["gemm=mma", "gemm=wgmma", "gemm=wmma"]
    for (_, files), code in zip(variants, ("mma_bf16(", "wgmma_bf16(part"), strict=False):
        assert code in files["kernels/author.cu"]
        request = CompileRequest(candidate=CandidateSource(form=CandidateForm.PROJECT, files=files), device=Device.CUDA)
        result = LocalBackend().compile(request)
        assert result.status is CompileStatus.OK, result.log[-3000:]


@pytest.mark.sandbox
@pytest.mark.slow
def test_composed_problems_compile_with_nvcc() -> None:
    """The CUDA back end on problems written for no one (the dataset composer's chains): the CPU tests check what
    the kernels compute, this that nvcc accepts what they are written in (integer abs, hoisted coordinates...)."""
    catalogue, options = crawl(), ComposeOptions()
    built = 0
    for index in range(12):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            problem = compose_one(11, index, catalogue, options)
            if not isinstance(problem, ComposedProblem):
                continue
            variants = author_problem(problem.code, "cuda").variants
        for label, files in variants[:1]:
            candidate = CandidateSource(form=CandidateForm.PROJECT, files=files)
            result = LocalBackend().compile(CompileRequest(candidate=candidate, device=Device.CUDA))
            assert result.status is CompileStatus.OK, (problem.ops, label, result.message)
            built += 1
    assert built >= 8


def test_tensor_core_variants_only_where_the_tolerance_admits_them() -> None:
    assert not admits_tf32(TolerancePreset.KERNELBENCH) and admits_tf32(TolerancePreset.PAPER)
    for source in (problems.LINEAR_RELU, problems.CONV_BIAS_RELU):
        exact = [label for label, _ in author_problem(source, "cuda").variants]
        loose = [label for label, _ in author_problem(source, "cuda", tf32=True).variants]
        assert not any(_single_tf32(label) for label in exact)
        assert [label for label in loose if _single_tf32(label)] == [loose[-1]]  # one variant, tried last


def _single_tf32(label: str) -> bool:
    """A variant multiplying float32 operands in TF32 once (the vendor libraries' tensor-core mode)."""
    return bool({"gemm=cublas_tf32", "conv=tf32"} & set(label.split()))


def test_float32_products_try_three_tf32_products_early_at_any_tolerance() -> None:
    """3xTF32 keeps float32's accuracy (the emulated tests hold it to the float32 tolerance, single TF32 fails
    them), as do three products of scaled float16 parts: a float32 product or convolution tries those second, on
    Hopper's warpgroup MMA, then 3xTF32 there and on mma.sync, after the vendor library or, where our kernels run
    alone, after ours on the FMA units (a first variant found wrong ends the search). A 16-bit product has tensor
    cores already (WMMA) and no use for them."""
    for source in (problems.LINEAR_RELU, problems.BMM_TRANSPOSED, problems.CONV_BIAS_RELU, problems.OWN_CONV):
        labels = [set(label.split()) for label, _ in author_problem(source, "cuda").variants]
        assert "gemm=f16x3" in labels[1] and "gemm=wgmma" in labels[2] and "gemm=tf32x3" in labels[3]
        assert not {"gemm=tf32x3", "gemm=f16x3"} & labels[0]
    for source in (problems.CONV_BIAS_RELU, problems.OWN_CONV):  # our convolution, as that product
        labels = [set(label.split()) for label, _ in author_problem(source, "cuda").variants]
        assert all("conv=implicit" in labels[i] for i in (1, 2, 3))
    assert not any("gemm=tf32x3" in label for label, _ in author_problem(problems.BF16_GEMM_ODD, "cuda").variants)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "source",
    [
        problems.GELU_RESIDUAL,
        problems.RMSNORM,
        problems.SOFTMAX,
        problems.SUM_SUBTRACT,
        problems.LINEAR_RELU,
        problems.CONV_BIAS_RELU,
        problems.CONV_ONLY,
        problems.CONV_TRANSPOSE,
        problems.CONV_WIDE,
        problems.TENSOR_ATTRIBUTES,
        problems.RECURRENCES,
    ],
    ids=[
        "gelu_residual",
        "rmsnorm",
        "softmax",
        "sum_subtract",
        "linear_relu",
        "conv_relu",
        "conv_only",
        "convt",
        "conv_wide",
        "tensor_attributes",
        "recurrences",
    ],
)
def test_heuristic_returns_a_verified_cuda_candidate(source: str) -> None:
    config = RolloutConfig(device=Device.CUDA, timing_trials=20, warmup=3)
    traj = run_rollout(KernelEnv(source, config=config), create_policy("heuristic", budget_s=60.0))
    assert traj.termination is TerminationReason.FINISHED, traj.termination_detail
    assert traj.best is not None and traj.best.result.correct, traj.turns[0].observations[-1].content
    assert "kernels/author.cu" in traj.best.candidate.files


@pytest.mark.gpu
@pytest.mark.parametrize(
    "source",
    [
        problems.RMSNORM,
        problems.SOFTMAX,
        problems.LONG_ROWS,
        problems.BF16_LINEAR_SOFTMAX,
        problems.BF16_GEMM_ODD,
        problems.BF16_GEMM_GROUPS,
        problems.BMM_TRANSPOSED,
        problems.STANDARDIZE_COLUMNS,
        problems.SOFTMAX_CUMSUM,
        problems.COLUMN_CUMSUM,
        problems.LONG_COLUMN_CUMSUM,
        problems.BF16_CONV_RELU,
        problems.SDPA,
        problems.REVERSE_CUMSUM,
        problems.OWN_CONV,
        problems.LINEAR_RELU,
        problems.CONV_BIAS_RELU,
        problems.DEPTHWISE_BIAS,
        problems.LONG_K,
        problems.CONV_TRANSPOSE_PHASES,
        problems.BATCHNORM_TRAINING,
        problems.TAP_MAJOR_CONV,
        problems.BILINEAR_SAMPLE_LOGCUMSUMEXP,
    ],
    ids=[
        "rmsnorm",
        "softmax",
        "long_rows",
        "bf16_linear_softmax",
        "bf16_gemm",
        "bf16_gemm_mma",
        "bmm_transposed",
        "standardize_columns",
        "softmax_cumsum",
        "column_cumsum",
        "long_column_cumsum",
        "bf16_conv_relu",
        "sdpa",
        "reverse_cumsum",
        "own_conv",
        "linear_relu_epilogue",
        "conv_bias_relu_epilogue",
        "depthwise_bias",
        "long_k",
        "conv_transpose_phases",
        "batchnorm_training_split_rows",
        "tap_major_conv_relu",
        "bilinear_sample_logcumsumexp",
    ],
)
def test_every_variant_is_correct_on_cuda(source: str) -> None:
    """Not only the fastest: each variant the search times (block sizes, a row per thread, per warp, per block or 32
    columns per block, scans per thread, per warp, per block or per column tile, the row cached in registers or
    shared memory, our GEMM kernels: mma.sync staged, WMMA, pipelined, register-blocked, tiled, 3xTF32 staged (its
    sums in two levels over a long K) on mma.sync and on wgmma; our convolutions: implicit GEMM, direct, with their
    epilogues; cuDNN's timed choice; rows split across blocks) computes the reference's outputs."""
    config = RolloutConfig(device=Device.CUDA, timing_trials=5, warmup=1)
    traj = run_rollout(KernelEnv(source, config=config), create_policy("heuristic", budget_s=600.0))
    verdicts = [o.content for t in traj.turns for o in t.observations if o.content.startswith("verify:")]
    assert len(verdicts) == len(author_problem(source, "cuda").variants), verdicts
    assert all(v.startswith("verify: correct") for v in verdicts), verdicts


@pytest.mark.gpu
@pytest.mark.sandbox
@pytest.mark.usefixtures("shared_cache")
@pytest.mark.parametrize("source", [problems.LINEAR_RELU, problems.CONV_BIAS_RELU], ids=["linear_relu", "conv_relu"])
def test_heuristic_in_the_workdir_form_is_verified_under_the_paper_rules(source: str) -> None:
    """The released environment's layout and rules: generated binding, the reference's state loaded into a ModelNew
    that declares it, no torch operator in Python."""
    config = RolloutConfig(device=Device.CUDA, timing_trials=20, warmup=3, form=CandidateForm.WORKDIR)
    traj = run_rollout(KernelEnv(source, config=config), create_policy("heuristic", budget_s=90.0))
    assert traj.termination is TerminationReason.FINISHED, traj.termination_detail
    assert traj.best is not None and traj.best.result.correct, traj.turns[0].observations[-1].content
    assert traj.best.candidate.form is CandidateForm.WORKDIR and "kernels/author.cu" in traj.best.candidate.files
    assert traj.best.result.fingerprint is not None
    assert traj.best.result.fingerprint.tolerance is TolerancePreset.PAPER

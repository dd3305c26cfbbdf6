"""Small problems in the KernelBench format for the author's tests (sizes chosen for a fast CPU run)."""

from __future__ import annotations

HEADER = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n"


def problem(init: str, forward: str, inputs: str, init_inputs: str = "[]", args: str = "x") -> str:
    return (
        f"{HEADER}class Model(nn.Module):\n    def __init__(self, *args):\n        super().__init__()\n{init}\n"
        f"    def forward(self, {args}):\n{forward}\n\n\n"
        f"def get_inputs():\n    return {inputs}\n\n\ndef get_init_inputs():\n    return {init_inputs}\n"
    )


GELU_RESIDUAL = problem(
    "        pass",
    "        y = F.gelu(x) * 0.5\n        return y + r",
    "[torch.randn(64, 300), torch.randn(64, 300)]",
    args="x, r",
)
RMSNORM = problem(
    "        self.weight = nn.Parameter(torch.randn(256))",
    "        scale = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6)\n        return x * scale * self.weight",
    "[torch.randn(4, 32, 256)]",
)
SOFTMAX = problem("        pass", "        return torch.softmax(x, dim=-1)", "[torch.randn(128, 513)]")
SUM_SUBTRACT = problem(
    "        pass", "        s = x.sum(dim=1, keepdim=True)\n        return x - s / 7.0", "[torch.randn(16, 40, 24)]"
)
LAYERNORM = problem("        self.norm = nn.LayerNorm(96)", "        return self.norm(x)", "[torch.randn(32, 96)]")
# Rows too long for a thread's registers at any block size (40,000 floats, 160 KB): a cached row goes to shared
# memory, past the 48 KB a kernel gets without opting in.
LONG_ROWS = problem("        self.norm = nn.LayerNorm(40000)", "        return self.norm(x)", "[torch.randn(4, 40000)]")
# Four rows of 65,536 (a channel's values over dims 0, 2 and 3): each split across 8 blocks (emit.split_rows)
BATCHNORM_TRAINING = problem(
    "        self.bn = nn.BatchNorm2d(4)", "        return self.bn(x)", "[3.0 + torch.randn(8, 4, 64, 128)]"
)
LINEAR_RELU = problem(
    "        self.fc = nn.Linear(48, 40)", "        return torch.relu(self.fc(x))", "[torch.randn(24, 48)]"
)
SORT = problem("        pass", "        return torch.sort(x, dim=1)[0]", "[torch.randn(8, 32)]")
CONV_BIAS_RELU = problem(
    "        self.conv = nn.Conv2d(8, 16, 3, padding=1)",
    "        return torch.relu(self.conv(x))",
    "[torch.randn(4, 8, 20, 18)]",
)
# No bias and no epilogue: nothing but the convolution, which then runs on our own kernel (a library call alone
# is not custom work).
CONV_ONLY = problem(
    "        self.conv = nn.Conv2d(6, 12, 3, stride=2, bias=False)",
    "        return self.conv(x)",
    "[torch.randn(3, 6, 17, 16)]",
)
CONV_TRANSPOSE = problem(
    "        self.conv = nn.ConvTranspose1d(8, 4, 4, stride=2, padding=1)",
    "        return torch.tanh(self.conv(x))",
    "[torch.randn(5, 8, 33)]",
)
# 576 products per output: TF32's rounding (PyTorch's default for cuDNN convolutions) alone would exceed the fp32
# tolerance, so this verifies only against a reference computed in full fp32.
CONV_WIDE = problem(
    "        self.conv = nn.Conv2d(64, 64, 3, padding=1)",
    "        return torch.relu(self.conv(x))",
    "[torch.randn(8, 64, 32, 32)]",
)
# 16-bit floats: stored as such, computed in float (a product, its epilogue, a row reduction, a rounding cast).
BF16_LINEAR_SOFTMAX = problem(
    "        self.fc = nn.Linear(64, 48).to(torch.bfloat16)",
    "        return torch.softmax(torch.relu(self.fc(x)) * 2.0, dim=-1)",
    "[torch.randn(40, 64, dtype=torch.bfloat16)]",
)
FP16_NORM_CAST = problem(
    "        self.norm = nn.LayerNorm(96).to(torch.float16)",
    "        return (self.norm(x).float() * y).to(torch.float16)",
    "[torch.randn(32, 96, dtype=torch.float16), torch.randn(32, 96)]",
    args="x, y",
)
# Products alone (our GEMM kernels, every tile), at sizes no tile divides.
BF16_GEMM_ODD = problem(
    "        pass",
    "        return a @ b",
    "[torch.randn(100, 50, dtype=torch.bfloat16), torch.randn(50, 70, dtype=torch.bfloat16)]",
    args="a, b",
)
# Tensors held as plain attributes (an LSTM's initial state, as public problems write it): moved to the input's
# device by forward itself, one unread
TENSOR_ATTRIBUTES = problem(
    "        self.lstm = nn.LSTM(6, 8, batch_first=True)\n        self.h0 = torch.randn(1, 3, 8)\n"
    "        self.c0 = torch.randn(1, 3, 8)\n        self.unread = torch.randn(1000)",
    "        self.h0 = self.h0.to(x.device)\n        self.c0 = self.h0.to(x.device)\n"
    "        out, _ = self.lstm(x, (self.h0, self.c0))\n        return out[:, -1, :] * 2.0",
    "[torch.randn(3, 5, 6)]",
)
# Recurrent layers of every mode: both directions, without biases, from given states, batch-first, several layers;
# a hidden size of 20 (3 groups of 8 units), more groups than the emulator's cooperative launch has blocks
RECURRENCES = problem(
    "        self.lstm = nn.LSTM(6, 8, 2, bidirectional=True, bias=False)\n"
    "        self.gru = nn.GRU(6, 5, batch_first=True, bidirectional=True)\n"
    "        self.rnn = nn.RNN(6, 7, nonlinearity='relu')\n        self.tanh = nn.RNN(6, 20, 2)",
    "        out, (h, c) = self.lstm(x, (h0, c0))\n"
    "        return out, h, c, self.gru(x.transpose(0, 1))[0], self.rnn(x)[1], self.tanh(x)[0]",
    "[torch.randn(9, 3, 6), torch.randn(4, 3, 8), torch.randn(4, 3, 8)]",
    args="x, h0, c0",
)
# ... and with 16-byte groups (sizes and strides multiples of 8): on mma.sync, ragged tiles, B read along k
BF16_GEMM_GROUPS = problem(
    "        pass",
    "        return a @ b.t()",
    "[torch.randn(200, 72, dtype=torch.bfloat16), torch.randn(136, 72, dtype=torch.bfloat16)]",
    args="a, b",
)
BMM_TRANSPOSED = problem(
    "        pass",
    "        return torch.bmm(a, b.transpose(1, 2))",
    "[torch.randn(3, 130, 37), torch.randn(3, 66, 37)]",
    args="a, b",
)
# A depthwise convolution with its bias: our direct kernel with the bias as its epilogue, or cuDNN's
DEPTHWISE_BIAS = problem(
    "        self.c = nn.Conv2d(16, 16, 3, padding=1, groups=16)",
    "        return self.c(x)",
    "[torch.randn(4, 16, 20, 24)]",
)
# A transposed convolution with strides deep enough for our product: one product per phase of the outputs
CONV_TRANSPOSE_PHASES = problem(
    "        self.c = nn.ConvTranspose2d(16, 32, 4, stride=2, padding=1)",
    "        return torch.tanh(self.c(x))",
    "[torch.randn(2, 16, 9, 10)]",
)
# A long K: the staged 3xTF32 product's sums in two levels (emit.SPLIT_SUMS_K)
LONG_K = problem("        pass", "        return a @ b", "[torch.randn(64, 4096), torch.randn(4096, 72)]", args="a, b")
# Column statistics (reduced dims not the last): a tile of 32 columns per block, 70 of them (the last tile part
# empty); x.mean(0) and the mean inside x.std(0) are one reduction.
STANDARDIZE_COLUMNS = problem(
    "        pass", "        return (x - x.mean(dim=0)) / (x.std(dim=0) + 1e-5)", "[3.0 + 2.0 * torch.randn(3000, 70)]"
)
# A scan down the columns (not the last dim): 32 columns a block, each warp a segment of the 300 rows.
COLUMN_CUMSUM = problem("        pass", "        return torch.cumsum(x, dim=1)", "[torch.randn(3, 300, 70)]")
# Few long columns: a thread's scan loads 32 rows ahead, the next chunk while it scans this one (emit._scan_ahead)
LONG_COLUMN_CUMSUM = problem("        pass", "        return torch.cumsum(x, dim=1)", "[torch.randn(2, 4096, 96)]")
# A scan after row statistics, in rows no block size divides (the last chunk part empty).
SOFTMAX_CUMSUM = problem(
    "        pass", "        return torch.softmax(x, dim=-1).cumsum(dim=-1)", "[torch.randn(64, 1000)]"
)
# A 16-bit convolution (cuDNN in bfloat16 with float sums, or ours), its bias and activation fused after.
BF16_CONV_RELU = problem(
    "        self.conv = nn.Conv2d(8, 16, 3, padding=1).to(torch.bfloat16)",
    "        return torch.relu(self.conv(x))",
    "[torch.randn(4, 8, 20, 20, dtype=torch.bfloat16)]",
)
# SDPA's decomposition: q and k scaled (the product's factor instead), a fully-masked-row check (any), the output
# reshaped in place.
SDPA = problem(
    "        pass",
    "        return F.scaled_dot_product_attention(q, k, v)",
    "[torch.randn(2, 4, 70, 32), torch.randn(2, 4, 70, 32), torch.randn(2, 4, 70, 32)]",
    args="q, k, v",
)
# A suffix sum: the scan stores its flipped output itself.
REVERSE_CUMSUM = problem("        pass", "        return x.flip(-1).cumsum(-1).flip(-1)", "[torch.randn(40, 3000)]")
# A convolution alone (no bias): our own kernels, as a product (implicit GEMM) and a thread per output.
OWN_CONV = problem(
    "        self.c = nn.Conv2d(8, 32, 3, stride=2, padding=1, groups=2, bias=False)",
    "        return self.c(x)",
    "[torch.randn(4, 8, 33, 30)]",
)
# Input channels a group in whole K steps of the 3xTF32 product (emit.tap_major): its K tap-major, a bias and relu
# as its epilogue, ragged tiles of 48 channels and 2 x 23 x 21 positions.
TAP_MAJOR_CONV = problem(
    "        self.c = nn.Conv2d(64, 96, 3, padding=1, groups=2)",
    "        return torch.relu(self.c(x))",
    "[torch.randn(2, 64, 23, 21)]",
)
# Ops brought in by decompositions and a scan of their own: nn.Bilinear (a product, then row sums against the
# second operand), bicubic interpolation and grid_sample (gathers at computed positions), logcumsumexp (a scan of
# log(exp(a) + exp(b)), rows led by -inf).
BILINEAR_SAMPLE_LOGCUMSUMEXP = problem(
    "        self.b = nn.Bilinear(40, 24, 16)",
    "        return (self.b(x[:, 0, :8, :40].reshape(-1, 40), y), F.interpolate(x, scale_factor=2, mode='bicubic'),\n"
    "                F.grid_sample(x, g, align_corners=False),\n"
    "                torch.logcumsumexp(torch.cat([torch.full_like(x[..., :1], float('-inf')), x], -1), dim=-1))",
    "[torch.randn(2, 3, 24, 40), torch.randn(16, 24), 2.4 * torch.rand(2, 16, 12, 2) - 1.2]",
    args="x, y, g",
)
# Integer arithmetic on the device: a roll's wrapped indices, remainder and fmod of integers of either sign.
INTEGER_ARITHMETIC = problem(
    "        pass",
    "        return torch.roll(x, shifts=3, dims=1), torch.remainder(i, 7) - torch.fmod(i, -5)",
    "[torch.randn(6, 40), torch.randint(-50, 50, (6, 40))]",
    args="x, i",
)
# einops' rearrange (the public suite's state-space models import it): its reshapes and permutes are traced as views.
EINOPS_HEADS = problem(
    "        pass",
    '        q = rearrange(x, "b n (h d) -> b h n d", h=4)\n'
    '        return rearrange(torch.softmax(q * 0.5, dim=-1), "b h n d -> b n (h d)")',
    "[torch.randn(3, 40, 64)]",
).replace(HEADER, HEADER.rstrip("\n") + "\nfrom einops import rearrange\n\n\n", 1)

# NaN among the values (about 1 in 100: some rows have none): torch's max, min, clamp, relu and max pooling give NaN
# where one is (C's fmax and fmin, the other operand), and a softmax's row with one is NaN throughout.
_WITH_NAN = "torch.randn({0}).masked_fill(torch.rand({0}) < 0.01, float('nan'))"
NAN_EXTREMA = problem(
    "        pass",
    "        return (torch.maximum(x, y), torch.clamp(x, -0.5, 0.5), torch.relu(x), x.amax(dim=-1), x.amin(dim=0),\n"
    "                torch.softmax(x, dim=-1), F.max_pool2d(x.view(2, 3, 16, 16), 3, 2, 1))",
    f"[{_WITH_NAN.format('24, 64')}, torch.randn(24, 64)]",
    args="x, y",
)
# Pooling windows of rows of whole quads (16 bytes), their outputs' rows too: max_pool2d padded, a 1-d average of a
# view counting only the taps inside the input, and a strided, dilated window in ceil mode.
POOL_WINDOWS = problem(
    "        pass",
    "        a = F.max_pool2d(x, 3, stride=2, padding=1)\n"
    "        b = F.avg_pool1d(x.view(2, 36, 16), 4, stride=2, padding=1, count_include_pad=False)\n"
    "        c = F.max_pool2d(y, 3, stride=(2, 3), padding=1, dilation=(1, 2), ceil_mode=True)\n"
    "        return a, torch.relu(b) * 2.0 - 1.0, c",
    "[torch.randn(2, 3, 12, 16), torch.randn(2, 3, 10, 24)]",
    args="x, y",
)

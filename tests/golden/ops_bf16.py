"""Golden rows: bfloat16 (issue 27). Each row's inputs are float32 (bf16-representable or not:
both sides round them with the same round-to-nearest-even); its fn casts the floating ones to
bfloat16 inside, so PyTorch computes every op in bf16 (its bf16 kernels: float32 math in
registers, one rounding per op, float32 accumulation in reductions and GEMMs) and the outputs
are bf16. Gradients flow back through the casts to the float32 inputs. The C++ rows:
tests/backend/cpu/test_bf16.cpp, which runs each row on cpu and xla under both bf16 compute paths (native
oneDNN bf16 and float32 on bf16 storage).

Tolerances: bf16 keeps 8 significant bits (a relative step of 2^-8 = 0.0039); two
implementations that round once per op may differ by one step per op in a chain, and GEMMs,
softmax and norms accumulate in a different order: rtol 2e-2 (about 5 steps), atol 2e-2 for
values near 0 (gradients sum several rounded products).
"""
import torch
import torch.nn.functional as F

from gen_ops import Row

BF = torch.bfloat16
TOL = dict(rtol=2e-2, atol=2e-2, why="bfloat16: 8 significant bits, one rounding per op on both sides")


def b(x):
    return x.to(BF)


def randn(*shapes, scale=1.0, shift=0.0):
    return lambda g: [torch.randn(*s, generator=g) * scale + shift for s in shapes]


def pos(*shapes):
    return lambda g: [torch.rand(*s, generator=g) + 0.5 for s in shapes]


def sdpa_qkv(x):
    """Causal attention over q, k, v = x[:, :, 0], x[:, :, 1], x[:, :, 2] ([B, T, H, E] each) as
    [B, H, T, E] views; the heads merged back: [B, T, H * E]."""
    q, k, v = (x[:, :, i].transpose(1, 2) for i in range(3))
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return o.transpose(1, 2).reshape(x.shape[0], x.shape[1], -1)


def rows():
    # ---- casts (exact: no tolerance)
    yield Row("cast_to_bf16", lambda x: b(x), lambda g: [torch.cat([torch.randn(64, generator=g) * 100,
                                                                   torch.tensor([1.00390625, 1.01171875, -3.0e38, 1e-40, float("inf"), float("nan")])])])
    yield Row("cast_roundtrip_f32", lambda x: b(x).float(), randn((5, 7)))
    yield Row("cast_to_int64", lambda x: b(x).long(), lambda g: [torch.randn(20, generator=g) * 50], grad=[])
    yield Row("cast_from_int64", lambda x: x.to(BF), [torch.tensor([0, 1, -7, 255, 257, 1000001, -65535])])
    # ---- elementwise, one rounding per op
    yield Row("add", lambda x, y: b(x) + b(y), randn((4, 5), (4, 5)), **TOL)
    yield Row("sub_broadcast", lambda x, y: b(x) - b(y), randn((3, 4, 5), (5,)), **TOL)
    yield Row("mul_scalar_add", lambda x: b(x) * 0.5 + 1.0, randn((6, 7)), **TOL)
    yield Row("div", lambda x, y: b(x) / b(y), lambda g: [torch.randn(4, 6, generator=g), torch.rand(4, 6, generator=g) + 0.5], **TOL)
    yield Row("add_float32_promotes", lambda x, y: b(x) + y, randn((4, 5), (4, 5)), **TOL)
    yield Row("add_int64_stays_bf16", lambda x, i: b(x) + i,
              lambda g: [torch.randn(3, 4, generator=g), torch.randint(-3, 4, (3, 4), generator=g)], **TOL)
    yield Row("exp", lambda x: torch.exp(b(x)), randn((5, 6)), **TOL)
    yield Row("log", lambda x: torch.log(b(x)), pos((5, 6)), **TOL)
    yield Row("sqrt", lambda x: torch.sqrt(b(x)), pos((5, 6)), **TOL)
    yield Row("tanh", lambda x: torch.tanh(b(x)), randn((5, 6)), **TOL)
    yield Row("sigmoid", lambda x: torch.sigmoid(b(x)), randn((5, 6), scale=2.0), **TOL)
    yield Row("relu", lambda x: torch.relu(b(x)), randn((5, 6)), **TOL)
    yield Row("gelu", lambda x: F.gelu(b(x)), randn((8, 16), scale=2.0), **TOL)
    yield Row("gelu_tanh", lambda x: F.gelu(b(x), approximate="tanh"), randn((8, 16), scale=2.0), **TOL)
    yield Row("silu", lambda x: F.silu(b(x)), randn((5, 6)), **TOL)
    yield Row("pow_scalar", lambda x: b(x) ** 2, randn((5, 6)), **TOL)
    yield Row("maximum", lambda x, y: torch.maximum(b(x), b(y)), randn((4, 5), (4, 5)), **TOL)
    yield Row("lt", lambda x, y: b(x) < b(y), randn((4, 5), (4, 5)), grad=[])
    yield Row("where", lambda c, x, y: torch.where(c > 0, b(x), b(y)), randn((4, 5), (4, 5), (4, 5)), grad=[1, 2], **TOL)
    yield Row("chain_fused", lambda x, y: torch.tanh(b(x) * b(y) + 1.0) * 2.0, randn((16, 33), (16, 33)), **TOL)
    # ---- reductions: float32 accumulation, one rounding
    yield Row("sum_all", lambda x: b(x).sum(), randn((40, 50)), **TOL)
    yield Row("sum_dim", lambda x: b(x).sum(1), randn((6, 300)), **TOL)
    yield Row("sum_rows", lambda x: b(x).sum(0), randn((260, 24)), **TOL)  # long columns: Bf16Sum in test_bf16.cpp
    yield Row("mean_dims", lambda x: b(x).mean((0, 2)), randn((3, 4, 5)), **TOL)
    yield Row("amax_dim", lambda x: b(x).amax(1), randn((5, 7)), **TOL)
    yield Row("softmax", lambda x: F.softmax(b(x), -1), randn((6, 10), scale=3.0), **TOL)
    yield Row("log_softmax", lambda x: F.log_softmax(b(x), 1), randn((6, 10), scale=3.0), **TOL)
    yield Row("cumsum", lambda x: torch.cumsum(b(x), 1), randn((3, 8)), **TOL)
    # ---- norms, losses
    yield Row("layer_norm", lambda x, w, bb: F.layer_norm(b(x), (16,), b(w), b(bb)),
              lambda g: [torch.randn(4, 5, 16, generator=g) * 2 + 1, torch.rand(16, generator=g) + 0.5,
                         torch.randn(16, generator=g)], **TOL)
    yield Row("cross_entropy", lambda x, t: F.cross_entropy(b(x), t),
              lambda g: [torch.randn(8, 10, generator=g) * 2, torch.randint(0, 10, (8,), generator=g)], **TOL)
    yield Row("nll_loss_sum", lambda x, t: F.nll_loss(F.log_softmax(b(x), 1), t, reduction="sum"),
              lambda g: [torch.randn(6, 5, generator=g), torch.randint(0, 5, (6,), generator=g)], **TOL)
    yield Row("mse_loss", lambda x, y: F.mse_loss(b(x), b(y)), randn((6, 7), (6, 7)), **TOL)
    # ---- products (oneDNN bf16 with float32 accumulation, or float32 on widened operands)
    yield Row("matmul", lambda x, y: b(x) @ b(y), randn((16, 64), (64, 24)), **TOL)
    yield Row("matmul_batched_transposed", lambda x, y: b(x) @ b(y).transpose(-1, -2), randn((3, 8, 32), (3, 12, 32)), **TOL)
    yield Row("linear", lambda x, w, bb: F.linear(b(x), b(w), b(bb)), randn((2, 5, 48), (20, 48), (20,)), **TOL)
    yield Row("linear_relu", lambda x, w, bb: torch.relu(F.linear(b(x), b(w), b(bb))), randn((7, 32), (16, 32), (16,)), **TOL)
    yield Row("conv2d", lambda x, w, bb: F.conv2d(b(x), b(w), b(bb), padding=1), randn((2, 3, 8, 8), (4, 3, 3, 3), (4,)), **TOL)
    yield Row("conv2d_strided_groups", lambda x, w, bb: F.conv2d(b(x), b(w), b(bb), stride=2, padding=1, groups=2),
              randn((2, 4, 9, 9), (6, 2, 3, 3), (6,)), **TOL)
    yield Row("conv_transpose2d",
              lambda x, w, bb: F.conv_transpose2d(b(x), b(w), b(bb), stride=2, padding=1, output_padding=1),
              randn((2, 4, 5, 5), (4, 3, 3, 3), (3,)), **TOL)
    yield Row("conv2d_relu_max_pool2d", lambda x, w: F.max_pool2d(torch.relu(F.conv2d(b(x), b(w), padding=1)), 2),
              randn((2, 3, 8, 8), (8, 3, 3, 3)), **TOL)
    yield Row("max_pool2d", lambda x: F.max_pool2d(b(x), 2), randn((2, 3, 6, 6)), **TOL)
    yield Row("avg_pool2d", lambda x: F.avg_pool2d(b(x), 2), randn((2, 3, 6, 6)), **TOL)
    yield Row("sdpa_causal", lambda q, k, v: F.scaled_dot_product_attention(b(q), b(k), b(v), is_causal=True),
              randn((2, 3, 8, 16), (2, 3, 8, 16), (2, 3, 8, 16)), **TOL)
    # two blocks of 128 queries and keys (the kernel's online softmax across key blocks), S != L
    yield Row("sdpa_blocks", lambda q, k, v: F.scaled_dot_product_attention(b(q), b(k), b(v)),
              randn((1, 2, 140, 16), (1, 2, 200, 16), (1, 2, 200, 16)), **TOL)
    # the GPT's layout: q, k, v strided views of one [B, T, 3, H, E] projection, causal, two blocks
    yield Row("sdpa_causal_qkv_views", lambda x: sdpa_qkv(b(x)), randn((1, 136, 3, 2, 16)), **TOL)
    # ---- index ops
    yield Row("embedding", lambda w, i: F.embedding(i, b(w)),
              lambda g: [torch.randn(10, 6, generator=g), torch.randint(0, 10, (4, 5), generator=g)], **TOL)
    yield Row("gather", lambda x, i: torch.gather(b(x), 1, i),
              lambda g: [torch.randn(4, 7, generator=g), torch.randint(0, 7, (4, 3), generator=g)], **TOL)
    yield Row("cat_transpose", lambda x, y: torch.cat([b(x).t(), b(y)], 0), randn((5, 3), (2, 5)), **TOL)

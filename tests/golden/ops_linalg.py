"""Golden rows: matmul (1-D, 2-D, batched, broadcast batch dims, empty) and linear (with and
without bias, 1-D to 3-D inputs), with non-contiguous operands."""
import torch
import torch.nn.functional as F

from gen_ops import Row


def randn(*shapes):
    return lambda g: [torch.randn(s, generator=g) for s in shapes]


def rows():
    yield Row("matmul_2d", torch.matmul, randn((3, 4), (4, 5)))
    yield Row("matmul_dot", torch.matmul, randn((6,), (6,)))
    yield Row("matmul_vec_mat", torch.matmul, randn((4,), (4, 3)))
    yield Row("matmul_mat_vec", torch.matmul, randn((3, 4), (4,)))
    yield Row("matmul_batched", torch.matmul, randn((2, 3, 4), (2, 4, 5)))
    yield Row("matmul_batched_2d", torch.matmul, randn((2, 3, 4), (4, 5)))
    yield Row("matmul_2d_batched", torch.matmul, randn((3, 4), (2, 4, 5)))
    yield Row("matmul_broadcast_batch", torch.matmul, randn((2, 1, 3, 4), (3, 4, 2)))
    yield Row("matmul_vec_batched", torch.matmul, randn((4,), (2, 4, 3)))
    yield Row("matmul_batched_vec", torch.matmul, randn((2, 3, 4), (4,)))
    yield Row("matmul_transposed", lambda a, b: a.t() @ b.t(), randn((4, 3), (5, 4)))
    yield Row("matmul_strided", lambda a, b: a[..., ::2] @ b.transpose(1, 2), randn((2, 3, 8), (2, 5, 4)))
    yield Row("matmul_batched_permuted", lambda a, b: a.permute(1, 0, 2) @ b, randn((3, 2, 4), (2, 4, 3)))
    yield Row("matmul_special", torch.matmul,
              lambda g: [torch.tensor([[1.0, float("inf"), 2.0], [0.5, -1.0, 3.0]]), torch.randn(3, 2, generator=g)])
    yield Row("matmul_zero_inner", torch.matmul, randn((2, 0), (0, 3)))
    yield Row("matmul_empty_batch", torch.matmul, randn((0, 2, 3), (3, 4)))
    yield Row("linear", F.linear, randn((3, 4), (5, 4), (5,)))
    yield Row("linear_no_bias", F.linear, randn((3, 4), (5, 4)))
    yield Row("linear_3d", F.linear, randn((2, 3, 4), (2, 4), (2,)))
    yield Row("linear_1d", F.linear, randn((4,), (3, 4), (3,)))
    yield Row("linear_transposed_weight", lambda x, w, b: F.linear(x, w.t(), b), randn((3, 4), (4, 6), (6,)))
    yield Row("linear_transposed_input", lambda x, w: F.linear(x.transpose(0, 1), w), randn((5, 2, 3), (4, 3)))
    yield Row("linear_strided_input", lambda x, w, b: F.linear(x[:, ::2], w, b), randn((3, 8), (2, 4), (2,)))
    yield Row("linear_empty_batch", F.linear, randn((0, 4), (3, 4), (3,)))

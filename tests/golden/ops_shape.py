"""Golden rows: views and data movement (reshape/view, permute, transpose, expand, squeeze,
unsqueeze, flatten, slice with steps, narrow, cat, stack, index_select, gather, tril/triu,
contiguous copies of views), with non-contiguous inputs, inf/nan values and empty tensors."""
import torch

from gen_ops import Row


def randn(*shapes):
    return lambda g: [torch.randn(s, generator=g) for s in shapes]


def special(*shape):
    """Random values with inf, -inf and nan among them (data movement passes them through)."""
    def make(g):
        x = torch.randn(*shape, generator=g)
        flat = x.view(-1)
        flat[0], flat[3], flat[-1] = float("inf"), float("-inf"), float("nan")
        return [x]
    return make


def with_index(shape, index_shape, high):
    return lambda g: [torch.randn(*shape, generator=g), torch.randint(0, high, index_shape, generator=g)]


def rows():
    # ---- reshape / view
    yield Row("reshape", lambda x: x.reshape(4, 6), randn((2, 3, 4)))
    yield Row("reshape_infer", lambda x: x.reshape(3, -1), randn((2, 3, 4)))
    yield Row("reshape_of_transposed", lambda x: x.t().reshape(-1), randn((3, 4)))
    yield Row("reshape_to_0d", lambda x: x.reshape(()), randn((1, 1)))
    yield Row("view", lambda x: x.view(6, 4), randn((2, 3, 4)))
    yield Row("view_special", lambda x: x.view(2, 6), special(3, 4))
    # ---- permute / transpose
    yield Row("permute", lambda x: x.permute(2, 0, 1), randn((2, 3, 4)))
    yield Row("permute_of_strided_slice", lambda x: x[:, ::2].permute(1, 0), randn((3, 7)))
    yield Row("transpose", lambda x: x.transpose(0, 2), randn((2, 3, 4)))
    yield Row("transpose_negative", lambda x: x.transpose(-1, -2), special(2, 3, 4))
    yield Row("t", lambda x: x.t(), randn((3, 5)))
    # ---- expand
    yield Row("expand", lambda x: x.expand(2, 3, 4), randn((3, 1)))
    yield Row("expand_keep", lambda x: x.expand(3, -1), randn((1, 4)))
    yield Row("expand_0d", lambda x: x.expand(2, 3), randn(()))
    yield Row("expand_of_transposed", lambda x: x.t().expand(2, 4, 3), randn((3, 4)))
    # ---- squeeze / unsqueeze / flatten
    yield Row("squeeze_dim", lambda x: x.squeeze(1), randn((2, 1, 3)))
    yield Row("squeeze_dim_not_one", lambda x: x.squeeze(0), randn((2, 1, 3)))
    yield Row("squeeze_all", lambda x: x.squeeze(), randn((1, 2, 1, 3, 1)))
    yield Row("unsqueeze", lambda x: x.unsqueeze(1), randn((2, 3)))
    yield Row("unsqueeze_end", lambda x: x.unsqueeze(-1), randn((2, 3)))
    yield Row("flatten", lambda x: x.flatten(), randn((2, 3, 4)))
    yield Row("flatten_range_of_permuted", lambda x: x.permute(0, 2, 1, 3).flatten(1, 2), randn((2, 3, 4, 2)))
    # ---- slice / narrow
    yield Row("slice_step", lambda x: x[1:7:3], randn((7, 3)))
    yield Row("slice_negative_step2", lambda x: x[:, -6:-1:2], randn((3, 8)))
    yield Row("slice_clamped", lambda x: x[:, 2:100], randn((3, 5)))
    yield Row("slice_of_transposed", lambda x: x.t()[1::2], special(3, 6))
    yield Row("narrow", lambda x: x.narrow(1, 2, 3), randn((4, 6)))
    yield Row("narrow_negative_start", lambda x: x.narrow(0, -3, 2), randn((5, 3)))
    # ---- cat / stack
    yield Row("cat_dim0", lambda a, b, c: torch.cat([a, b, c], 0), randn((2, 3), (1, 3), (3, 3)))
    yield Row("cat_dim1_transposed", lambda a, b: torch.cat([a, b.t()], 1), randn((2, 3), (4, 2)))
    yield Row("cat_negative_dim", lambda a, b: torch.cat([a, b], -1), randn((2, 3, 2), (2, 3, 1)))
    yield Row("cat_zero_size", lambda a, b: torch.cat([a, b], 0), randn((0, 3), (2, 3)))
    yield Row("cat_legacy_empty", lambda a, b: torch.cat([a, b], 0), randn((0,), (2, 3)), grad=[1])
    yield Row("stack", lambda a, b, c: torch.stack([a, b, c], 0), randn((2, 3), (2, 3), (2, 3)))
    yield Row("stack_last_transposed", lambda a, b: torch.stack([a.t(), b], -1), randn((3, 2), (2, 3)))
    # ---- index_select / gather
    yield Row("index_select_dim0_repeats", lambda x, i: x.index_select(0, i), with_index((5, 3), (7,), 5))
    yield Row("index_select_dim1_transposed", lambda x, i: x.t().index_select(1, i), with_index((4, 3), (5,), 3))
    yield Row("index_select_empty_index", lambda x, i: x.index_select(0, i),
              lambda g: [torch.randn(3, 2, generator=g), torch.zeros(0, dtype=torch.long)])
    yield Row("gather_dim0", lambda x, i: x.gather(0, i), with_index((3, 4), (5, 4), 3))
    yield Row("gather_dim1_smaller_index", lambda x, i: x.gather(1, i), with_index((3, 5), (2, 7), 5))
    yield Row("gather_3d_transposed", lambda x, i: x.transpose(0, 2).gather(1, i), with_index((4, 3, 2), (2, 2, 3), 3))
    # ---- tril / triu
    yield Row("tril", lambda x: torch.tril(x), randn((4, 5)))
    yield Row("tril_diagonal_batched", lambda x: torch.tril(x, 1), randn((2, 3, 4)))
    yield Row("triu_negative_diagonal", lambda x: torch.triu(x, -1), randn((5, 3)))
    yield Row("triu_special", lambda x: torch.triu(x), special(4, 4))
    yield Row("tril_of_transposed", lambda x: torch.tril(x.t(), -1), randn((4, 3)))
    # ---- contiguous copies of views
    yield Row("contiguous_of_transposed", lambda x: x.t().contiguous(), randn((3, 4)))
    yield Row("contiguous_of_strided_slice", lambda x: x[::2, 1:].contiguous(), special(5, 4))
    yield Row("clone", lambda x: x.clone(), special(2, 3))
    # ---- empty tensors
    yield Row("reshape_zero_size", lambda x: x.reshape(2, 0, 2), randn((0, 4)))
    yield Row("permute_zero_size", lambda x: x.permute(1, 0), randn((0, 3)))
    yield Row("slice_to_empty", lambda x: x[:, 3:3], randn((2, 4)))
    yield Row("expand_zero_size", lambda x: x.expand(3, 0), randn((1, 0)))

"""Golden rows: scatter (src and value forms), scatter_add (repeated indices accumulate),
one_hot and embedding. Overwriting scatter rows use indices unique along `dim`: with repeats
the written value is unspecified (PyTorch's documentation)."""
import torch
import torch.nn.functional as F

from gen_ops import Row


def unique_along(g, n, count, other, dim):
    """An index with `count` distinct values in [0, n) along dim (0 or 1), `other` along the other dim."""
    cols = [torch.randperm(n, generator=g)[:count] for _ in range(other)]
    return torch.stack(cols, 1 if dim == 0 else 0)


def rows():
    # ---- scatter (overwrite)
    yield Row("scatter_dim0", lambda x, i, s: x.scatter(0, i, s),
              lambda g: [torch.randn(3, 5, generator=g), unique_along(g, 3, 2, 5, 0), torch.randn(2, 5, generator=g)])
    yield Row("scatter_dim1_src_larger", lambda x, i, s: x.scatter(1, i, s),
              lambda g: [torch.randn(4, 6, generator=g), unique_along(g, 6, 4, 3, 1), torch.randn(4, 5, generator=g)],
              grad=[0])  # PyTorch's src gradient fails when src is larger than index (axle's: tests/ops/test_ops.cpp)
    yield Row("scatter_negative_dim_transposed", lambda x, i, s: x.t().scatter(-1, i, s.t()),
              lambda g: [torch.randn(5, 3, generator=g), unique_along(g, 5, 3, 2, 1), torch.randn(3, 2, generator=g)])
    yield Row("scatter_value", lambda x, i: x.scatter(0, i, -2.5),
              lambda g: [torch.randn(4, 3, generator=g), unique_along(g, 4, 2, 3, 0)])
    yield Row("scatter_special_values", lambda x, i, s: x.scatter(1, i, s),
              lambda g: [torch.tensor([[float("nan"), 1.0, 2.0], [3.0, float("inf"), 4.0]]),
                         torch.tensor([[0], [1]]), torch.tensor([[float("-inf")], [float("nan")]])])
    yield Row("scatter_0d", lambda x, i, s: x.scatter(0, i, s),
              lambda g: [torch.randn((), generator=g), torch.tensor([0]), torch.randn(1, generator=g)])
    yield Row("scatter_int64", lambda x, i, s: x.scatter(1, i, s),
              lambda g: [torch.randint(-9, 9, (2, 5), generator=g), unique_along(g, 5, 3, 2, 1),
                         torch.randint(-9, 9, (2, 3), generator=g)])
    yield Row("scatter_int32_index", lambda x, i, s: x.scatter(0, i, s),
              lambda g: [torch.randn(3, 2, generator=g), unique_along(g, 3, 3, 2, 0).int(), torch.randn(3, 2, generator=g)])
    # ---- scatter_add (repeats accumulate)
    yield Row("scatter_add_repeated", lambda x, i, s: x.scatter_add(0, i, s),
              lambda g: [torch.randn(3, 4, generator=g), torch.randint(0, 3, (6, 4), generator=g),
                         torch.randn(6, 4, generator=g)])
    yield Row("scatter_add_dim2_src_larger", lambda x, i, s: x.scatter_add(2, i, s),
              lambda g: [torch.randn(2, 3, 4, generator=g), torch.randint(0, 4, (2, 2, 5), generator=g),
                         torch.randn(2, 3, 6, generator=g)], grad=[0])  # as scatter_dim1_src_larger
    yield Row("scatter_add_transposed", lambda x, i, s: x.t().scatter_add(1, i, s.t()),
              lambda g: [torch.randn(5, 3, generator=g), torch.randint(0, 5, (3, 6), generator=g),
                         torch.randn(6, 3, generator=g)])
    yield Row("scatter_add_empty_index", lambda x, i, s: x.scatter_add(0, i, s),
              lambda g: [torch.randn(3, 4, generator=g), torch.zeros(0, 4, dtype=torch.long), torch.randn(2, 4, generator=g)],
              grad=[0])
    yield Row("scatter_add_int64", lambda x, i, s: x.scatter_add(0, i, s),
              lambda g: [torch.randint(-9, 9, (4,), generator=g), torch.randint(0, 4, (7,), generator=g),
                         torch.randint(-9, 9, (7,), generator=g)])
    # ---- one_hot
    yield Row("one_hot", lambda x: F.one_hot(x, 6), lambda g: [torch.randint(0, 6, (2, 3), generator=g)])
    yield Row("one_hot_inferred", lambda x: F.one_hot(x), lambda g: [torch.tensor([1, 3, 0, 3, 2])])
    yield Row("one_hot_0d", lambda x: F.one_hot(x, 4), lambda g: [torch.tensor(2)])
    yield Row("one_hot_empty", lambda x: F.one_hot(x, 3), lambda g: [torch.zeros(0, 2, dtype=torch.long)])
    # ---- embedding (gradient: repeated rows accumulate)
    yield Row("embedding", lambda w, i: F.embedding(i, w),
              lambda g: [torch.randn(10, 4, generator=g), torch.randint(0, 10, (2, 7), generator=g)])
    yield Row("embedding_1d_repeats", lambda w, i: F.embedding(i, w),
              lambda g: [torch.randn(5, 3, generator=g), torch.tensor([4, 0, 4, 4, 1])])
    yield Row("embedding_transposed_weight", lambda w, i: F.embedding(i, w.t()),
              lambda g: [torch.randn(3, 6, generator=g), torch.randint(0, 6, (4,), generator=g)])

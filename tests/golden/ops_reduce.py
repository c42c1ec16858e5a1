"""Golden rows: the reductions (sum, mean, amax/amin, max/min in both forms, argmax/argmin,
logsumexp, var, std, softmax, log_softmax, cumsum, prod, sort/argsort/topk), with ties (PyTorch's
gradient split), zeros (prod), +-inf / nan where PyTorch defines the result, empty tensors and
non-contiguous views (made inside the row's fn). The C++ rows: tests/golden/reduce.cpp."""
import torch

from gen_ops import Row

INF, NAN = float("inf"), float("nan")


def randn(*shape, scale=1.0):
    return lambda g: [torch.randn(*shape, generator=g) * scale]


def pick(shape, values):
    """Random picks from `values` (ties on purpose)."""
    v = torch.tensor(values, dtype=torch.float32)
    return lambda g: [v[torch.randint(len(values), shape, generator=g)]]


def rows():
    # ---- sum / mean
    yield Row("sum_all", lambda x: x.sum(), randn(3, 4, 5))
    yield Row("sum_dim1", lambda x: x.sum(1), randn(3, 4, 5))
    yield Row("sum_dims_keepdim", lambda x: x.sum((0, 2), keepdim=True), randn(3, 4, 5))
    yield Row("sum_transposed", lambda x: x.permute(2, 0, 1).sum(-1), randn(3, 4, 5))
    yield Row("sum_strided", lambda x: x[:, ::3].sum(0), randn(4, 9))
    yield Row("sum_empty_dim", lambda x: x.sum(0), [torch.zeros(0, 3)])  # zeros
    yield Row("sum_empty_all", lambda x: x.sum(), [torch.zeros(2, 0)])
    yield Row("sum_int64", lambda x: x.sum(1), [torch.tensor([[1, -2, 3], [4, 5, -6]])])
    yield Row("sum_int32_to_int64", lambda x: x.sum(), [torch.tensor([7, -2, 3], dtype=torch.int32)])
    yield Row("sum_bool", lambda x: x.sum(0), [torch.tensor([[True, False], [True, True]])])
    yield Row("sum_inf_nan", lambda x: x.sum(1), [torch.tensor([[INF, 1.0], [INF, -INF], [NAN, 1.0]])])
    yield Row("sum_large", lambda x: x.sum(), randn(40, 500))  # 20000 values: both sum pairwise
    yield Row("mean_all", lambda x: x.mean(), randn(3, 4, 5))
    yield Row("mean_dims", lambda x: x.mean((0, -1)), randn(3, 4, 5))
    yield Row("mean_keepdim_transposed", lambda x: x.t().mean(1, keepdim=True), randn(4, 6))
    yield Row("mean_int64", lambda x: x.float().mean(), [torch.tensor([1, 2, 4])])

    # ---- amax / amin: the gradient split evenly between tied extremes
    yield Row("amax_all", lambda x: x.amax(), randn(3, 4, 5))
    yield Row("amax_dim", lambda x: x.amax(1), randn(3, 4, 5))
    yield Row("amin_dims_keepdim", lambda x: x.amin((0, 2), keepdim=True), randn(3, 4, 5))
    yield Row("amax_ties", lambda x: x.amax(1), pick((5, 6), [-1, 0, 1]))
    yield Row("amin_ties_dims", lambda x: x.amin((0, 1)), pick((3, 4, 2), [-1, 0, 1]))
    yield Row("amax_transposed", lambda x: x.t().amax(0), randn(5, 4))
    yield Row("amax_inf", lambda x: x.amax(1), [torch.tensor([[-INF, -INF], [INF, 1.0], [-INF, 2.0]])])
    yield Row("amax_nan", lambda x: x.amax(1), [torch.tensor([[NAN, 1.0, 2.0], [0.0, 3.0, 1.0]])])  # nan wins
    yield Row("amax_int64", lambda x: x.amax(0), [torch.tensor([[1, -5], [3, 2]])])
    # ---- full max() / min(): the same even split
    yield Row("max_all", lambda x: x.max(), randn(4, 5))
    yield Row("max_all_ties", lambda x: x.max(), pick((4, 5), [0, 1]))
    yield Row("min_all_ties", lambda x: x.min(), pick((4, 5), [0, 1]))
    # ---- max(x, dim) / min(x, dim): the first of tied extremes, which alone gets the gradient
    yield Row("max_dim", lambda x: tuple(x.max(1)), randn(3, 5))
    yield Row("max_dim_keepdim", lambda x: tuple(x.max(0, keepdim=True)), randn(3, 5))
    yield Row("min_dim", lambda x: tuple(x.min(-1)), randn(2, 3, 4))
    yield Row("max_dim_ties", lambda x: tuple(x.max(1)), pick((5, 6), [-1, 0, 1]))
    yield Row("min_dim_ties", lambda x: tuple(x.min(0)), pick((6, 5), [-1, 0, 1]))
    yield Row("max_dim_transposed", lambda x: tuple(x.t().max(1)), randn(5, 3))
    # ---- argmax / argmin: the first of tied extremes; nan counts as the extreme
    yield Row("argmax", lambda x: x.argmax(1), randn(3, 5), grad=[])
    yield Row("argmin_keepdim", lambda x: x.argmin(0, keepdim=True), randn(3, 5), grad=[])
    yield Row("argmax_ties", lambda x: x.argmax(1), pick((6, 7), [0, 1, 2]), grad=[])
    yield Row("argmin_ties", lambda x: x.argmin(0), pick((7, 6), [0, 1, 2]), grad=[])
    yield Row("argmax_nan", lambda x: x.argmax(1), [torch.tensor([[1.0, NAN, 3.0, NAN], [INF, 0.0, INF, -1.0]])], grad=[])
    yield Row("argmin_nan", lambda x: x.argmin(1), [torch.tensor([[1.0, NAN, -3.0], [-INF, 0.0, -INF]])], grad=[])
    yield Row("argmax_int64", lambda x: x.argmax(0), [torch.tensor([[1, 5], [3, 5], [3, -1]])], grad=[])

    # ---- logsumexp
    yield Row("logsumexp", lambda x: torch.logsumexp(x, 1), randn(3, 5, scale=3.0))
    yield Row("logsumexp_dims_keepdim", lambda x: torch.logsumexp(x, (0, 2), keepdim=True), randn(3, 4, 5))
    yield Row("logsumexp_large", lambda x: torch.logsumexp(x, 1), lambda g: [torch.rand(3, 5, generator=g) * 20 + 80])
    yield Row("logsumexp_minus_inf", lambda x: torch.logsumexp(x, 1), [torch.tensor([[-INF, 0.0, 1.0], [-INF, -INF, 2.0]])])
    yield Row("logsumexp_transposed", lambda x: torch.logsumexp(x.t(), 0), randn(4, 3))

    # ---- var / std with correction
    yield Row("var_all", lambda x: x.var(), randn(3, 4, 5))
    yield Row("var_dim_biased", lambda x: x.var(1, correction=0), randn(3, 4, 5))
    yield Row("var_dims_keepdim_correction2", lambda x: x.var((0, 2), correction=2, keepdim=True), randn(3, 4, 5))
    yield Row("var_transposed", lambda x: x.t().var(1), randn(5, 4))
    yield Row("var_offset", lambda x: x.var(1), lambda g: [torch.randn(4, 6, generator=g) + 100])
    yield Row("std_all", lambda x: x.std(), randn(3, 4, 5))
    yield Row("std_dim_biased", lambda x: x.std(1, correction=0), randn(3, 4, 5))
    yield Row("std_dims_keepdim", lambda x: x.std((0, 2), keepdim=True), randn(3, 4, 5))
    yield Row("std_transposed", lambda x: x.t().std(0), randn(4, 5))
    yield Row("std_constant", lambda x: x.std(1), [torch.tensor([[2.0, 2.0, 2.0], [1.0, 2.0, 3.0]])])  # gradient 0 where std is 0
    yield Row("std_single_element", lambda x: x.std(1), [torch.tensor([[2.0], [3.0]])])  # 0 / 0: nan

    # ---- softmax / log_softmax
    yield Row("softmax", lambda x: torch.softmax(x, 1), randn(3, 5, scale=3.0))
    yield Row("softmax_dim0", lambda x: torch.softmax(x, 0), randn(4, 3, 2))
    yield Row("softmax_transposed", lambda x: torch.softmax(x.t(), -1), randn(5, 3))
    yield Row("softmax_minus_inf", lambda x: torch.softmax(x, 1), [torch.tensor([[-INF, 0.0, 1.0], [2.0, -INF, -INF]])])
    yield Row("softmax_large", lambda x: torch.softmax(x, 1), lambda g: [torch.rand(2, 6, generator=g) * 50 + 50])
    yield Row("softmax_empty", lambda x: torch.softmax(x, 1), [torch.zeros(0, 4)])
    yield Row("log_softmax", lambda x: torch.log_softmax(x, 1), randn(3, 5, scale=3.0))
    yield Row("log_softmax_dim0", lambda x: torch.log_softmax(x, 0), randn(4, 3, 2))
    yield Row("log_softmax_strided", lambda x: torch.log_softmax(x[:, ::2], 1), randn(3, 8))
    yield Row("log_softmax_minus_inf", lambda x: torch.log_softmax(x, 1), [torch.tensor([[-INF, 0.0, 1.0], [0.5, 1.0, 2.0]])])

    # ---- cumsum
    yield Row("cumsum_dim0", lambda x: torch.cumsum(x, 0), randn(4, 3))
    yield Row("cumsum_dim1", lambda x: torch.cumsum(x, 1), randn(2, 5, 3))
    yield Row("cumsum_last_transposed", lambda x: torch.cumsum(x.t(), -1), randn(5, 4))
    yield Row("cumsum_strided", lambda x: torch.cumsum(x[::2], 0), randn(8, 3))
    yield Row("cumsum_inf_nan", lambda x: torch.cumsum(x, 0), [torch.tensor([1.0, INF, -INF, 2.0, NAN, 3.0])])
    yield Row("cumsum_int32", lambda x: torch.cumsum(x, 0), [torch.tensor([1, -2, 3, 4], dtype=torch.int32)])  # -> int64
    yield Row("cumsum_bool", lambda x: torch.cumsum(x, 1), [torch.tensor([[True, False, True], [False, True, True]])])
    yield Row("cumsum_empty", lambda x: torch.cumsum(x, 0), [torch.zeros(0, 3)])
    yield Row("cumsum_0d", lambda x: torch.cumsum(x, 0), [torch.tensor(2.5)])
    yield Row("cumsum_long", lambda x: torch.cumsum(x, 1), randn(3, 2000))

    # ---- prod: its gradient is exact with zeros (the product of the others)
    yield Row("prod_all", lambda x: x.prod(), lambda g: [torch.rand(3, 4, generator=g) + 0.5])
    yield Row("prod_dim", lambda x: x.prod(1), randn(3, 4, 2))
    # float32 products overflow as PyTorch's (in float32: 1e30 * 1e30 is inf before * 1e-30)
    yield Row("prod_float32_overflow", lambda x: x.prod(), [torch.tensor([1e30, 1e30, 1e-30])], grad=[])
    yield Row("prod_dim_keepdim", lambda x: x.prod(-1, keepdim=True), randn(3, 5))
    yield Row("prod_transposed", lambda x: x.t().prod(1), randn(4, 3))
    yield Row("prod_one_zero", lambda x: x.prod(1), [torch.tensor([[2.0, 0.0, 3.0, -1.0], [1.5, 2.0, 0.5, -2.0]])])
    yield Row("prod_two_zeros", lambda x: x.prod(1), [torch.tensor([[0.0, 2.0, 0.0, 3.0], [0.0, 1.0, 2.0, 4.0]])])
    yield Row("prod_all_zero", lambda x: x.prod(), [torch.tensor([[1.0, 2.0], [0.0, 4.0]])])
    yield Row("prod_inf", lambda x: x.prod(1), [torch.tensor([[INF, 2.0], [INF, 0.0], [NAN, 1.0]])], grad=[])
    yield Row("prod_int64", lambda x: x.prod(0), [torch.tensor([[1, -2, 3], [4, 5, -6]])])
    yield Row("prod_int32_all", lambda x: x.prod(), [torch.tensor([2, -3, 4], dtype=torch.int32)])  # -> int64
    yield Row("prod_bool", lambda x: x.prod(1), [torch.tensor([[True, True], [True, False]])])  # -> int64
    yield Row("prod_empty", lambda x: x.prod(1), [torch.zeros(2, 0)])  # ones
    yield Row("prod_empty_all", lambda x: x.prod(), [torch.zeros(0)])

    # ---- sort / argsort / topk (axle always stable: PyTorch's stable=True)
    yield Row("sort", lambda x: tuple(torch.sort(x, 1)), randn(3, 6))
    yield Row("sort_descending_dim0", lambda x: tuple(torch.sort(x, 0, descending=True)), randn(5, 3))
    yield Row("sort_transposed", lambda x: tuple(torch.sort(x.t(), -1)), randn(6, 4))
    yield Row("sort_ties_stable", lambda x: tuple(torch.sort(x, dim=1, stable=True)), pick((4, 8), [-1, 0, 1]))
    yield Row("sort_ties_descending_stable", lambda x: tuple(torch.sort(x, dim=1, descending=True, stable=True)),
              pick((4, 8), [-1, 0, 1]))
    yield Row("sort_inf_nan", lambda x: tuple(torch.sort(x, stable=True)), [torch.tensor([3.0, NAN, -INF, 1.0, INF, NAN, -1.0])])
    yield Row("sort_descending_inf_nan", lambda x: tuple(torch.sort(x, descending=True, stable=True)),
              [torch.tensor([3.0, NAN, -INF, 1.0, INF, NAN, -1.0])])
    yield Row("sort_int64", lambda x: tuple(torch.sort(x, stable=True)), [torch.tensor([[3, 1, 2, 1], [0, -5, 0, 7]])])
    yield Row("sort_empty", lambda x: tuple(torch.sort(x, 1)), [torch.zeros(3, 0)])
    yield Row("argsort", lambda x: torch.argsort(x, 1), randn(3, 6), grad=[])
    yield Row("argsort_descending_ties", lambda x: torch.argsort(x, dim=0, descending=True, stable=True), pick((7, 3), [0, 1, 2]), grad=[])
    yield Row("topk", lambda x: tuple(torch.topk(x, 3)), randn(4, 7))
    yield Row("topk_smallest_dim0", lambda x: tuple(torch.topk(x, 2, 0, largest=False)), randn(5, 3))
    yield Row("topk_transposed", lambda x: tuple(torch.topk(x.t(), 2, 1)), randn(6, 3))
    yield Row("topk_k0", lambda x: tuple(torch.topk(x, 0)), randn(2, 4))
    yield Row("sort_0d", lambda x: tuple(torch.sort(x)), [torch.tensor(2.5)])
    yield Row("topk_0d", lambda x: tuple(torch.topk(x, 1)), [torch.tensor(-1.5)])
    yield Row("prod_0d_dim", lambda x: x.prod(0), [torch.tensor(-1.5)])
    yield Row("topk_nan", lambda x: tuple(torch.topk(x, 2)), [torch.tensor([1.0, NAN, 3.0, -INF])])  # nan the largest
    # Ties: PyTorch picks any of the tied elements (documented as unspecified), axle the first
    # (stable); the values agree, the indices and with them the gradient's positions may not.
    yield Row("topk_ties_values", lambda x: torch.topk(x, 3)[0], pick((4, 8), [0, 1, 2]), grad=[])

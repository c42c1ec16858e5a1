"""Golden rows: the elementwise ops of ops.def (unary, binary with broadcasting, comparisons,
where, cast, copy), their ties and kinks (PyTorch's gradient conventions), +-inf / nan where
PyTorch defines the result, empty tensors and non-contiguous views (made inside the row's fn).
The C++ rows: tests/golden/elementwise.cpp."""
import torch
import torch.nn.functional as F

from gen_ops import Row

INF, NAN = float("inf"), float("nan")
# The edge values every unary op sees once: -inf, inf, nan, 0, -0, and two ordinary values.
EDGES = [-INF, INF, NAN, 0.0, -0.0, 1.0, -2.5]


def randn(*shape, scale=1.0):
    return lambda g: [torch.randn(*shape, generator=g) * scale]


def positive(*shape):
    return lambda g: [torch.rand(*shape, generator=g) * 2 + 0.2]


def pick(shape, values):
    """Random picks from `values` (ties on purpose)."""
    v = torch.tensor(values, dtype=torch.float32)
    return lambda g: v[torch.randint(len(values), shape, generator=g)]


def edges():
    return [torch.tensor(EDGES)]


UNARY = [
    ("neg", torch.neg), ("exp", torch.exp), ("abs", torch.abs), ("relu", torch.relu),
    ("gelu", F.gelu), ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh")), ("sigmoid", torch.sigmoid),
    ("tanh", torch.tanh), ("sin", torch.sin), ("cos", torch.cos), ("expm1", torch.expm1), ("erf", torch.erf),
    ("silu", F.silu), ("softplus", F.softplus), ("square", torch.square),
    ("clamp", lambda x: torch.clamp(x, -0.5, 0.7)), ("clamp_min_only", lambda x: torch.clamp(x, min=0.1)),
    ("clamp_max_only", lambda x: torch.clamp(x, max=-0.2)),
    ("leaky_relu", F.leaky_relu), ("leaky_relu_02", lambda x: F.leaky_relu(x, 0.2)),
    ("hardtanh", F.hardtanh), ("hardtanh_0_6", lambda x: F.hardtanh(x, 0.0, 6.0)),
]
# Defined for positive inputs (log1p: x > -1).
POSITIVE = [("log", torch.log), ("sqrt", torch.sqrt), ("rsqrt", torch.rsqrt), ("log1p", torch.log1p)]

BINARY = [
    ("add", torch.add), ("sub", torch.sub), ("mul", torch.mul), ("maximum", torch.maximum),
    ("minimum", torch.minimum),
]
COMPARE = [("eq", torch.eq), ("ne", torch.ne), ("lt", torch.lt), ("le", torch.le), ("gt", torch.gt), ("ge", torch.ge)]


def rows():
    # ---- unary: random, a non-contiguous view, the edge values
    for name, f in UNARY:
        yield Row(name, f, randn(3, 5, scale=2.0))
        yield Row(f"{name}_transposed", lambda x, f=f: f(x.t()), randn(4, 3, scale=2.0))
        # PyTorch's cpu gelu gives nan at +inf (its vectorized erf / tanh), not a defined result: left out
        yield Row(f"{name}_edges", f, [torch.tensor([e for e in EDGES if e != INF])] if name.startswith("gelu") else edges())
    for name, f in POSITIVE:
        yield Row(name, f, positive(3, 5))
        yield Row(f"{name}_strided", lambda x, f=f: f(x[:, ::2]), positive(3, 6))
        # log(0) = -inf, log(-1) = nan, sqrt(-0) = -0 (gradient -inf), as PyTorch.
        yield Row(f"{name}_edges", f, edges())
    yield Row("neg_int64", torch.neg, [torch.tensor([-3, 0, 7], dtype=torch.int64)])
    yield Row("abs_int32", torch.abs, [torch.tensor([-3, 0, 7, -1], dtype=torch.int32)])
    yield Row("exp_int64", torch.exp, [torch.tensor([-2, 0, 3], dtype=torch.int64)])
    yield Row("relu_empty", torch.relu, [torch.zeros(0, 3)])

    # ---- kinks and ties: PyTorch's gradient there
    kinks = [-1.0, -0.5, 0.0, 0.5, 0.7, 1.0, 6.0, 0.1, -0.2]
    yield Row("abs_at_zero", torch.abs, [torch.tensor([0.0, -0.0, 1.0, -1.0])])  # gradient 0 at 0
    yield Row("relu_at_zero", torch.relu, [torch.tensor([0.0, -0.0, 1.0, -1.0])])  # gradient 0 at 0
    yield Row("leaky_relu_at_zero", F.leaky_relu, [torch.tensor([0.0, -0.0, 1.0, -1.0])])  # slope at 0
    yield Row("clamp_at_bounds", lambda x: torch.clamp(x, -0.5, 0.7), [torch.tensor(kinks)])  # 0 at the bounds
    yield Row("clamp_min_above_max", lambda x: torch.clamp(x, 0.5, -0.5), [torch.tensor(kinks)])  # max; no gradient
    yield Row("hardtanh_at_bounds", F.hardtanh, [torch.tensor(kinks)])  # 0 at the bounds
    yield Row("hardtanh_0_6_at_bounds", lambda x: F.hardtanh(x, 0.0, 6.0), [torch.tensor(kinks)])

    # ---- binary: same shape, broadcasting both ways, views, ties, edges, empty
    for name, f in BINARY:
        yield Row(name, f, lambda g: [torch.randn(3, 4, generator=g), torch.randn(3, 4, generator=g)])
        yield Row(f"{name}_broadcast", f, lambda g: [torch.randn(2, 3, 1, generator=g), torch.randn(4, generator=g)])
        yield Row(f"{name}_transposed", lambda a, b, f=f: f(a.t(), b[:, 1::2]),
                  lambda g: [torch.randn(5, 3, generator=g), torch.randn(3, 10, generator=g)])
    # a == b: half of the gradient to each operand (PyTorch), also under broadcasting
    for name, f in [("maximum", torch.maximum), ("minimum", torch.minimum)]:
        yield Row(f"{name}_ties", f, lambda g: [pick((4, 5), [-1, 0, 1])(g), pick((4, 5), [-1, 0, 1])(g)])
        yield Row(f"{name}_ties_broadcast", f, lambda g: [pick((4, 5), [-1, 0, 1])(g), pick((5,), [-1, 0, 1])(g)])
        # nan wins, and both operands get the whole gradient there (PyTorch's formula)
        yield Row(f"{name}_edges", f, [torch.tensor([NAN, 1.0, NAN, INF, -INF, INF, 2.0]),
                                       torch.tensor([1.0, NAN, NAN, INF, INF, -INF, 2.0])])
    yield Row("div", torch.div, lambda g: [torch.randn(3, 4, generator=g), torch.rand(3, 4, generator=g) + 0.5])
    yield Row("div_broadcast", torch.div, lambda g: [torch.randn(2, 1, 4, generator=g), torch.rand(3, 1, generator=g) + 0.5])
    yield Row("div_edges", torch.div, [torch.tensor([1.0, -1.0, 0.0, INF, NAN, 3.0]),
                                       torch.tensor([0.0, 0.0, 0.0, INF, 1.0, -INF])])
    yield Row("div_int64", torch.div, [torch.tensor([7, -7, 3, 0]), torch.tensor([2, 2, -4, 5])])
    yield Row("pow", torch.pow, lambda g: [torch.rand(3, 4, generator=g) * 2 + 0.2, torch.randn(3, 4, generator=g)])
    yield Row("pow_broadcast", torch.pow, lambda g: [torch.rand(3, 1, generator=g) * 2 + 0.2, torch.randn(4, generator=g)])
    # 0^0 = 1 (d/da 0), 0^b (d/db 0 for b >= 0, -inf for b < 0), negative bases (d/db nan)
    yield Row("pow_edges", torch.pow, [torch.tensor([0.0, 0.0, -2.0, 2.0, 0.0, -1.0, -3.0]),
                                       torch.tensor([0.0, 2.0, 2.0, 0.0, -1.0, 0.5, 3.0])])
    yield Row("pow_scalar", lambda x: torch.pow(x, 2.5), positive(3, 4))
    yield Row("pow_scalar_3_negative_base", lambda x: torch.pow(x, 3.0), randn(3, 4))
    yield Row("pow_scalar_1", lambda x: torch.pow(x, 1.0), randn(2, 3))  # axle: a copy
    yield Row("pow_scalar_2", lambda x: torch.pow(x, 2.0), randn(2, 3))  # axle: x * x
    yield Row("add_empty", torch.add, [torch.zeros(0, 3), torch.randn(3)])
    yield Row("mul_int64_broadcast", torch.mul, [torch.tensor([[1, -2, 3]]), torch.tensor([[2], [-3]])])
    yield Row("add_int32_int64", torch.add, [torch.tensor([1, 2], dtype=torch.int32), torch.tensor([3, 4])])
    yield Row("add_scalar", lambda x: x + 2.5, randn(3, 4))
    yield Row("sub_scalar", lambda x: x - 0.25, randn(3, 4))
    yield Row("mul_scalar", lambda x: x * -3.0, randn(3, 4))
    yield Row("div_scalar", lambda x: x / 4.0, randn(3, 4))
    yield Row("mul_int64_float_scalar", lambda x: x * 0.5, [torch.tensor([1, 2, -3])])  # -> float32

    # ---- comparisons (ties on purpose), broadcasting, nan compares false (ne: true)
    for name, f in COMPARE:
        yield Row(name, f, lambda g: [pick((4, 5), [-1, 0, 1])(g), pick((4, 5), [-1, 0, 1])(g)], grad=[])
        yield Row(f"{name}_broadcast", f, lambda g: [pick((3, 1), [-1, 0, 1])(g), pick((4,), [-1, 0, 1])(g)], grad=[])
        yield Row(f"{name}_edges", f, [torch.tensor([NAN, NAN, 1.0, INF, -INF, 0.0]),
                                       torch.tensor([NAN, 1.0, NAN, INF, INF, -0.0])], grad=[])
        yield Row(f"{name}_scalar", lambda x, f=f: f(x, 0.0), lambda g: [pick((3, 4), [-1, 0, 1])(g)], grad=[])
    yield Row("lt_int64", torch.lt, [torch.tensor([1, 2, 3]), torch.tensor([2, 2, 2])])

    # ---- where
    yield Row("where", torch.where, lambda g: [torch.rand(3, 4, generator=g) > 0.5, torch.randn(3, 4, generator=g),
                                                torch.randn(3, 4, generator=g)])
    yield Row("where_broadcast", torch.where, lambda g: [torch.rand(3, 1, generator=g) > 0.5, torch.randn(4, generator=g),
                                                          torch.randn(2, 1, 1, generator=g)])
    yield Row("where_transposed", lambda c, a, b: torch.where(c.t(), a.t(), b),
              lambda g: [torch.rand(4, 3, generator=g) > 0.5, torch.randn(4, 3, generator=g), torch.randn(3, 4, generator=g)])
    yield Row("where_inf_other", torch.where, [torch.tensor([True, False, True]), torch.tensor([1.0, 2.0, 3.0]),
                                               torch.tensor([-INF, -INF, NAN])])
    yield Row("where_int64", torch.where, [torch.tensor([True, False, True]), torch.tensor([1, 2, 3]),
                                           torch.tensor([-4, -5, -6])])

    # ---- cast and copy
    cast_src = [torch.tensor([-2.7, -0.5, 0.0, 0.5, 2.7, 100.9])]
    yield Row("cast_float_to_int64", lambda x: x.to(torch.int64), cast_src, grad=[])  # truncates toward 0
    yield Row("cast_float_to_int32", lambda x: x.to(torch.int32), cast_src, grad=[])
    yield Row("cast_float_to_bool", lambda x: x.to(torch.bool), cast_src, grad=[])
    yield Row("cast_int64_to_float", lambda x: x.to(torch.float32), [torch.tensor([-3, 0, 5, 1 << 20])])
    yield Row("cast_bool_to_float", lambda x: x.to(torch.float32), [torch.tensor([True, False, True])])
    yield Row("cast_bool_to_int64", lambda x: x.to(torch.int64), [torch.tensor([True, False, True])])
    yield Row("cast_int64_to_bool", lambda x: x.to(torch.bool), [torch.tensor([-1, 0, 2])])
    yield Row("cast_float_to_float", lambda x: x.to(torch.float32) * 2, randn(2, 3))  # gradient passes
    yield Row("clone_transposed", lambda x: x.t().clone(), randn(3, 4))
    yield Row("contiguous_transposed", lambda x: x.t().contiguous() * 1.5, randn(3, 4))

    # ---- clamp (issue 26): integer dtypes kept (a float bound promotes, bool with whole bounds
    # is int64), and tensor bounds: broadcast, one bound alone (maximum / minimum), both with
    # PyTorch 2.15's gradient at every tie of x, min and max and with NaN
    yield Row("clamp_int64", lambda x: torch.clamp(x, -2, 5), [torch.tensor([-9, -2, 0, 3, 5, 6, 2**40])])
    yield Row("clamp_int64_min_only", lambda x: torch.clamp(x, min=0), [torch.tensor([-3, 0, 4])])
    yield Row("clamp_int32_max_only", lambda x: torch.clamp(x, max=1), [torch.tensor([-3, 0, 4], dtype=torch.int32)])
    yield Row("clamp_int64_float_bound", lambda x: torch.clamp(x, 0.5, 3), [torch.tensor([-1, 0, 1, 3, 4])])
    yield Row("clamp_bool", lambda x: torch.clamp(x, 0, 1), [torch.tensor([True, False, True])])
    yield Row("clamp_tensor", torch.clamp, lambda g: [torch.randn(3, 4, generator=g), torch.randn(4, generator=g) - 0.5,
                                                     torch.randn(3, 1, generator=g) + 0.5])
    yield Row("clamp_tensor_min_only", lambda x, lo: torch.clamp(x, min=lo),
              lambda g: [torch.randn(3, 4, generator=g), torch.randn(4, generator=g)])
    yield Row("clamp_tensor_max_only", lambda x, hi: torch.clamp(x, max=hi),
              lambda g: [torch.randn(2, 3, generator=g), torch.randn(2, 1, generator=g)])
    yield Row("clamp_tensor_one_bound_edges", lambda x, lo: torch.clamp(x, min=lo),
              [torch.tensor([0.0, 1.0, 2.0, NAN, 1.0]), torch.tensor([1.0, 1.0, 1.0, 1.0, NAN])])
    grid = [(a, b, c) for a in (0.0, 1.0, 2.0) for b in (0.0, 1.0, 2.0) for c in (0.0, 1.0, 2.0)]
    grid += [(NAN, 0.0, 2.0), (1.0, NAN, 2.0), (1.0, 0.0, NAN), (3.0, NAN, 2.0), (-1.0, 0.0, NAN), (NAN, 2.0, 0.0),
             (INF, 0.0, 2.0), (-INF, 0.0, 2.0), (1.0, -INF, INF)]
    yield Row("clamp_tensor_ties", torch.clamp, [torch.tensor([t[i] for t in grid]) for i in range(3)])
    yield Row("clamp_tensor_transposed", lambda x, lo, hi: torch.clamp(x.t(), lo, hi),
              lambda g: [torch.randn(4, 3, generator=g), torch.full((1,), -0.3), torch.randn(3, 4, generator=g).abs()])
    yield Row("clamp_tensor_int64", torch.clamp, [torch.tensor([-5, 0, 3, 9]), torch.tensor([-1, 1, 1, 10]),
                                                  torch.tensor([4, 4, 2, 8])])
    yield Row("clamp_tensor_int64_float_bound", torch.clamp,
              lambda g: [torch.tensor([-2, 0, 1, 3]), torch.randn(4, generator=g), torch.full((4,), 1.5)], grad=[1, 2])

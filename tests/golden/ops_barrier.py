"""Golden rows: optimization_barrier, the identity on each operand with identity gradients
(PyTorch has no barrier: the rows compute the identity it must equal)."""
import torch

from gen_ops import Row


def randn(*shapes):
    return lambda g: [torch.randn(s, generator=g) for s in shapes]


def rows():
    yield Row("barrier_identity", lambda x: x.clone(), randn((2, 3)))
    yield Row("barrier_two_outputs", lambda a, b: (a.clone(), b.clone()), randn((2, 3), (4,)))
    yield Row("barrier_then_mul", lambda a, b: a * b, randn((2, 3), (3,)))
    yield Row("barrier_of_transposed", lambda x: x.t() * 2, randn((3, 4)))
    yield Row("barrier_special", lambda x: x.clone(),
              lambda g: [torch.tensor([float("inf"), float("-inf"), float("nan"), 0.0, -0.0, 1e-40])])
    yield Row("barrier_int64", lambda i: i.clone(), lambda g: [torch.randint(-9, 9, (5,), generator=g)])
    yield Row("barrier_empty", lambda x: x.clone(), randn((0, 3)))

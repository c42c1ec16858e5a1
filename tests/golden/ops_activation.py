"""Golden rows: the activations (functional forms; the nn modules call the same ops)."""
import torch
import torch.nn.functional as F

from gen_ops import Row


def randn(*shape):
    return lambda g: [torch.randn(*shape, generator=g)]


def rows():
    yield Row("silu", F.silu, randn(3, 5))
    yield Row("silu_transposed", lambda x: F.silu(x.t()), randn(5, 3))
    yield Row("softplus", F.softplus, lambda g: [torch.randn(4, 6, generator=g) * 10])
    yield Row("softplus_beta2_threshold5", lambda x: F.softplus(x, beta=2, threshold=5),
              lambda g: [torch.randn(4, 6, generator=g) * 4])
    yield Row("leaky_relu", F.leaky_relu, randn(4, 6))
    yield Row("leaky_relu_slope02", lambda x: F.leaky_relu(x, 0.2), randn(2, 3, 4))
    yield Row("hardtanh", F.hardtanh, lambda g: [torch.randn(4, 6, generator=g) * 2])
    yield Row("hardtanh_0_6", lambda x: F.hardtanh(x, 0.0, 6.0), lambda g: [torch.randn(4, 6, generator=g) * 5])
    yield Row("masked_fill", lambda x, m: x.masked_fill(m, -1.5),
              lambda g: [torch.randn(3, 4, generator=g), torch.rand(3, 4, generator=g) > 0.5])
    yield Row("masked_fill_broadcast_inf", lambda x, m: x.masked_fill(m, float("-inf")),
              lambda g: [torch.randn(2, 3, 4, generator=g), torch.rand(3, 1, generator=g) > 0.5])

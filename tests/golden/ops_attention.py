"""Golden rows: scaled_dot_product_attention without dropout: causal or not, odd and unequal
lengths, a bool and a float attn_mask (broadcast over batch and heads), a custom scale,
broadcast batch dims and the usual [N, L, H, E] -> [N, H, L, E] transposed layout."""
import torch
import torch.nn.functional as F

from gen_ops import Row

SOFTMAX = ("the fused kernel's online softmax (running max and sum over key tiles, its own exp "
           "polynomial) rounds in another order than PyTorch's math path")


def qkv(q, k, v, *extra):
    return lambda g: [torch.randn(s, generator=g) for s in (q, k, v)] + [e(g) for e in extra]


def bool_mask(shape):
    def make(g):
        m = torch.rand(shape, generator=g) > 0.4
        m[..., 0] = True  # every query row attends to at least one key
        return m
    return make


def float_mask(shape):
    return lambda g: torch.randn(shape, generator=g) * 2


def rows():
    tol = {}  # the default tolerance holds; SOFTMAX explains a looser one if a row needs it
    sdpa = F.scaled_dot_product_attention
    yield Row("sdpa", sdpa, qkv((2, 3, 5, 4), (2, 3, 7, 4), (2, 3, 7, 6)), **tol)
    yield Row("sdpa_3d", sdpa, qkv((2, 5, 8), (2, 5, 8), (2, 5, 3)), **tol)
    yield Row("sdpa_causal_odd", lambda q, k, v: sdpa(q, k, v, is_causal=True), qkv((1, 2, 7, 4), (1, 2, 7, 4), (1, 2, 7, 4)),
              **tol)
    yield Row("sdpa_causal_shorter_queries", lambda q, k, v: sdpa(q, k, v, is_causal=True),
              qkv((2, 1, 3, 4), (2, 1, 5, 4), (2, 1, 5, 2)), **tol)
    yield Row("sdpa_causal_longer_queries", lambda q, k, v: sdpa(q, k, v, is_causal=True),
              qkv((1, 2, 5, 4), (1, 2, 3, 4), (1, 2, 3, 4)), **tol)
    yield Row("sdpa_scale", lambda q, k, v: sdpa(q, k, v, scale=0.3), qkv((2, 2, 3, 5), (2, 2, 4, 5), (2, 2, 4, 5)), **tol)
    yield Row("sdpa_bool_mask", lambda q, k, v, m: sdpa(q, k, v, attn_mask=m),
              qkv((2, 2, 5, 4), (2, 2, 7, 4), (2, 2, 7, 3), bool_mask((5, 7))), **tol)
    yield Row("sdpa_bool_mask_per_batch", lambda q, k, v, m: sdpa(q, k, v, attn_mask=m),
              qkv((2, 3, 4, 4), (2, 3, 6, 4), (2, 3, 6, 4), bool_mask((2, 1, 4, 6))), **tol)
    yield Row("sdpa_float_mask", lambda q, k, v, m: sdpa(q, k, v, attn_mask=m),
              qkv((2, 2, 5, 4), (2, 2, 7, 4), (2, 2, 7, 3), float_mask((2, 1, 5, 7))), **tol)
    yield Row("sdpa_float_mask_inf", lambda q, k, v, m: sdpa(q, k, v, attn_mask=m),
              qkv((1, 2, 4, 4), (1, 2, 4, 4), (1, 2, 4, 4), lambda g: torch.triu(torch.full((4, 4), float("-inf")), 1)),
              **tol)
    # A query row with every key masked: PyTorch 2.x gives zeros there (and zero gradients), not nan.
    yield Row("sdpa_bool_mask_fully_masked_row", lambda q, k, v, m: sdpa(q, k, v, attn_mask=m),
              qkv((1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 5, 4), lambda g: torch.tensor([[True] * 5, [False] * 5, [True, False] * 2 + [True]])),
              **tol)
    yield Row("sdpa_float_mask_fully_masked_row", lambda q, k, v, m: sdpa(q, k, v, attn_mask=m),
              qkv((1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 5, 4),
                  lambda g: torch.tensor([[0.0] * 5, [float("-inf")] * 5, [0.5, -1.0, 0.0, 2.0, 0.0]])), **tol)
    yield Row("sdpa_transposed_layout",
              lambda q, k, v: sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True),
              qkv((2, 5, 3, 4), (2, 5, 3, 4), (2, 5, 3, 4)), **tol)
    yield Row("sdpa_broadcast_batch", sdpa, qkv((2, 3, 4, 4), (1, 3, 5, 4), (1, 3, 5, 4)), **tol)
    yield Row("sdpa_single_key", sdpa, qkv((1, 1, 3, 4), (1, 1, 1, 4), (1, 1, 1, 5)), **tol)

"""Golden rows: pad (constant with negative sizes, reflect, replicate), interpolate (nearest
with size, scale_factor and recompute_scale_factor; bilinear with align_corners false and
true) and einsum (explicit and implicit outputs, "...", diagonals, several operands)."""
import torch
import torch.nn.functional as F

from gen_ops import Row

SUM_ORDER = "float32 sums of products in another order than PyTorch's (bmm over a different blocking)"


def randn(*shapes):
    return lambda g: [torch.randn(s, generator=g) for s in shapes]


def special(*shape):
    def make(g):
        x = torch.randn(*shape, generator=g)
        flat = x.view(-1)
        flat[1], flat[-2] = float("inf"), float("nan")
        return [x]
    return make


def rows():
    # ---- pad: constant
    yield Row("pad_constant", lambda x: F.pad(x, (1, 2), value=0.5), randn((2, 3, 4)))
    yield Row("pad_constant_two_dims", lambda x: F.pad(x, (2, 0, 1, 3)), randn((2, 3, 4)))
    yield Row("pad_constant_negative", lambda x: F.pad(x, (-1, 2, 1, -2)), randn((2, 3, 4)))
    yield Row("pad_constant_all_dims_transposed", lambda x: F.pad(x.transpose(0, 2), (1, 0, 0, 1, 2, 1), value=-1.0),
              randn((2, 3, 2)))
    yield Row("pad_constant_inf_value", lambda x: F.pad(x, (1, 1), value=float("-inf")), randn((3, 2)))
    yield Row("pad_constant_special", lambda x: F.pad(x, (0, 2, 1, 0)), special(3, 4))
    yield Row("pad_constant_empty", lambda x: F.pad(x, (1, 1)), randn((0, 3)))
    yield Row("pad_constant_int64", lambda x: F.pad(x, (2, 1), value=7), lambda g: [torch.randint(-9, 9, (2, 3), generator=g)])
    # ---- pad: reflect
    yield Row("pad_reflect_1d", lambda x: F.pad(x, (2, 4), mode="reflect"), randn((2, 3, 5)))
    yield Row("pad_reflect_1d_unbatched", lambda x: F.pad(x, (3, 1), mode="reflect"), randn((2, 4)))
    yield Row("pad_reflect_2d", lambda x: F.pad(x, (1, 3, 3, 2), mode="reflect"), randn((2, 2, 4, 5)))
    yield Row("pad_reflect_2d_unbatched_transposed", lambda x: F.pad(x.transpose(1, 2), (1, 2, 2, 1), mode="reflect"),
              randn((2, 4, 3)))
    yield Row("pad_reflect_3d", lambda x: F.pad(x, (1, 1, 2, 0, 0, 1), mode="reflect"), randn((1, 2, 3, 3, 2)))
    yield Row("pad_reflect_negative", lambda x: F.pad(x, (-1, 3), mode="reflect"), randn((1, 2, 5)))
    yield Row("pad_reflect_empty_batch", lambda x: F.pad(x, (1, 1), mode="reflect"), randn((0, 2, 3)))
    # ---- pad: replicate
    yield Row("pad_replicate_1d", lambda x: F.pad(x, (3, 2), mode="replicate"), randn((2, 2, 3)))
    yield Row("pad_replicate_2d", lambda x: F.pad(x, (2, 1, 1, 3), mode="replicate"), randn((2, 2, 3, 4)))
    yield Row("pad_replicate_3d", lambda x: F.pad(x, (1, 1, 0, 2, 1, 0), mode="replicate"), randn((1, 2, 2, 3, 2)))
    yield Row("pad_replicate_negative", lambda x: F.pad(x, (2, -1, -1, 1), mode="replicate"), randn((1, 3, 4)))
    yield Row("pad_replicate_special", lambda x: F.pad(x, (1, 2), mode="replicate"), special(1, 2, 4))
    # ---- interpolate: nearest
    yield Row("nearest_size_1d", lambda x: F.interpolate(x, size=7), randn((2, 3, 5)))
    yield Row("nearest_size_down", lambda x: F.interpolate(x, size=(3, 2)), randn((1, 2, 5, 4)))
    yield Row("nearest_scale_2", lambda x: F.interpolate(x, scale_factor=2), randn((2, 2, 3, 4)))
    yield Row("nearest_scale_fraction", lambda x: F.interpolate(x, scale_factor=(1.5, 1.7)), randn((1, 2, 5, 3)))
    yield Row("nearest_scale_recompute", lambda x: F.interpolate(x, scale_factor=(1.5, 1.7), recompute_scale_factor=True),
              randn((1, 2, 5, 3)))
    yield Row("nearest_scale_down", lambda x: F.interpolate(x, scale_factor=0.6), randn((1, 2, 7, 6)))
    yield Row("nearest_5d", lambda x: F.interpolate(x, size=(3, 2, 5)), randn((1, 2, 2, 5, 4)))
    yield Row("nearest_transposed", lambda x: F.interpolate(x.transpose(2, 3), size=(5, 4)), randn((1, 2, 3, 2)))
    yield Row("nearest_special", lambda x: F.interpolate(x, scale_factor=2), special(1, 2, 2, 3))
    # ---- interpolate: bilinear (channels >= 2: PyTorch runs its channels-last kernel for C = 1)
    for ac in (False, True):
        tag = "align" if ac else "noalign"
        yield Row(f"bilinear_up_{tag}", lambda x, ac=ac: F.interpolate(x, size=(5, 7), mode="bilinear", align_corners=ac),
                  randn((2, 2, 3, 4)))
        yield Row(f"bilinear_down_{tag}", lambda x, ac=ac: F.interpolate(x, size=(3, 2), mode="bilinear", align_corners=ac),
                  randn((1, 3, 7, 5)))
        yield Row(f"bilinear_scale_{tag}", lambda x, ac=ac: F.interpolate(x, scale_factor=(1.5, 2.5), mode="bilinear",
                                                                           align_corners=ac), randn((1, 2, 4, 3)))
        yield Row(f"bilinear_to_one_{tag}", lambda x, ac=ac: F.interpolate(x, size=(1, 3), mode="bilinear", align_corners=ac),
                  randn((1, 2, 4, 3)))
    yield Row("bilinear_scale_recompute", lambda x: F.interpolate(x, scale_factor=0.6, mode="bilinear",
                                                                  recompute_scale_factor=True), randn((2, 2, 6, 5)))
    yield Row("bilinear_scale_down", lambda x: F.interpolate(x, scale_factor=0.6, mode="bilinear"), randn((2, 2, 6, 5)))
    yield Row("bilinear_transposed", lambda x: F.interpolate(x.transpose(2, 3), scale_factor=2, mode="bilinear"),
              randn((1, 2, 3, 4)))
    yield Row("bilinear_special", lambda x: F.interpolate(x, size=(3, 5), mode="bilinear"), special(1, 2, 2, 3))
    yield Row("bilinear_same_size", lambda x: F.interpolate(x, size=(3, 4), mode="bilinear"), randn((1, 2, 3, 4)))
    # ---- pad: circular (issue 26): the left pad copies the end, the right pad the start; a
    # negative side crops first and the other side wraps around what is kept
    yield Row("pad_circular_1d", lambda x: F.pad(x, (2, 3), mode="circular"), randn((2, 3, 5)))
    yield Row("pad_circular_1d_unbatched", lambda x: F.pad(x, (1, 2), mode="circular"), randn((2, 4)))
    yield Row("pad_circular_2d", lambda x: F.pad(x, (1, 2, 2, 1), mode="circular"), randn((1, 2, 3, 4)))
    yield Row("pad_circular_3d", lambda x: F.pad(x, (1, 0, 2, 1, 1, 1), mode="circular"), randn((1, 2, 2, 3, 3)))
    yield Row("pad_circular_full_wrap", lambda x: F.pad(x, (5, 5), mode="circular"), randn((1, 2, 5)))
    yield Row("pad_circular_negative_left", lambda x: F.pad(x, (-1, 2), mode="circular"), randn((1, 2, 5)))
    yield Row("pad_circular_negative_right", lambda x: F.pad(x, (2, -1, 1, -2), mode="circular"), randn((1, 2, 4, 5)))
    yield Row("pad_circular_transposed", lambda x: F.pad(x.transpose(2, 3), (1, 1, 2, 0), mode="circular"),
              randn((1, 2, 4, 3)))
    # ---- interpolate: nearest-exact (floor((j + 0.5) * scale))
    yield Row("nearest_exact_size_1d", lambda x: F.interpolate(x, size=7, mode="nearest-exact"), randn((2, 3, 5)))
    yield Row("nearest_exact_size_down", lambda x: F.interpolate(x, size=(3, 2), mode="nearest-exact"), randn((1, 2, 5, 4)))
    yield Row("nearest_exact_scale_fraction", lambda x: F.interpolate(x, scale_factor=(1.5, 1.7), mode="nearest-exact"),
              randn((1, 2, 5, 3)))
    yield Row("nearest_exact_scale_down", lambda x: F.interpolate(x, scale_factor=0.6, mode="nearest-exact"),
              randn((1, 2, 7, 6)))
    yield Row("nearest_exact_5d", lambda x: F.interpolate(x, size=(3, 2, 5), mode="nearest-exact"), randn((1, 2, 2, 5, 4)))
    # ---- interpolate: linear (3-D) and trilinear (5-D)
    for ac in (False, True):
        tag = "align" if ac else "noalign"
        yield Row(f"linear_up_{tag}", lambda x, ac=ac: F.interpolate(x, size=9, mode="linear", align_corners=ac),
                  randn((2, 3, 4)))
        yield Row(f"linear_down_{tag}", lambda x, ac=ac: F.interpolate(x, size=3, mode="linear", align_corners=ac),
                  randn((1, 2, 8)))
        yield Row(f"trilinear_{tag}", lambda x, ac=ac: F.interpolate(x, size=(3, 5, 2), mode="trilinear", align_corners=ac),
                  randn((1, 2, 2, 3, 4)))
    yield Row("linear_scale", lambda x: F.interpolate(x, scale_factor=1.7, mode="linear"), randn((1, 2, 5)))
    # ---- interpolate: bicubic (A = -0.75, borders clamped)
    for ac in (False, True):
        tag = "align" if ac else "noalign"
        yield Row(f"bicubic_up_{tag}", lambda x, ac=ac: F.interpolate(x, size=(5, 7), mode="bicubic", align_corners=ac),
                  randn((2, 2, 3, 4)))
        yield Row(f"bicubic_down_{tag}", lambda x, ac=ac: F.interpolate(x, size=(3, 2), mode="bicubic", align_corners=ac),
                  randn((1, 2, 7, 5)))
    yield Row("bicubic_scale", lambda x: F.interpolate(x, scale_factor=(1.5, 2.5), mode="bicubic"), randn((1, 2, 4, 3)))
    yield Row("bicubic_same_size", lambda x: F.interpolate(x, size=(3, 4), mode="bicubic"), randn((1, 2, 3, 4)))
    yield Row("bicubic_transposed", lambda x: F.interpolate(x.transpose(2, 3), scale_factor=2, mode="bicubic"),
              randn((1, 2, 3, 4)))
    # ---- interpolate: area (adaptive average pooling to the output size)
    yield Row("area_1d", lambda x: F.interpolate(x, size=3, mode="area"), randn((2, 2, 7)))
    yield Row("area_2d", lambda x: F.interpolate(x, size=(3, 4), mode="area"), randn((1, 2, 5, 7)))
    yield Row("area_2d_up", lambda x: F.interpolate(x, size=(5, 4), mode="area"), randn((1, 2, 3, 3)))
    yield Row("area_scale", lambda x: F.interpolate(x, scale_factor=0.5, mode="area"), randn((1, 2, 6, 5)))
    yield Row("area_3d", lambda x: F.interpolate(x, size=(2, 3, 2), mode="area"), randn((1, 2, 3, 5, 4)))
    # ---- interpolate: antialias (bilinear and bicubic; downsampling widens the filter)
    for mode in ("bilinear", "bicubic"):
        yield Row(f"{mode}_antialias_down", lambda x, m=mode: F.interpolate(x, size=(4, 3), mode=m, antialias=True),
                  randn((1, 2, 9, 10)))
        yield Row(f"{mode}_antialias_scale", lambda x, m=mode: F.interpolate(x, scale_factor=0.4, mode=m, antialias=True),
                  randn((1, 2, 8, 11)))
        yield Row(f"{mode}_antialias_up", lambda x, m=mode: F.interpolate(x, size=(6, 5), mode=m, antialias=True),
                  randn((1, 2, 3, 4)))
        yield Row(f"{mode}_antialias_one_dim", lambda x, m=mode: F.interpolate(x, size=(5, 3), mode=m, antialias=True),
                  randn((1, 2, 5, 8)))
    yield Row("bilinear_antialias_align", lambda x: F.interpolate(x, size=(3, 4), mode="bilinear", antialias=True,
                                                                  align_corners=True), randn((1, 2, 7, 9)))
    # ---- einsum
    yield Row("einsum_matmul", lambda a, b: torch.einsum("ij,jk->ik", a, b), randn((3, 4), (4, 5)))
    yield Row("einsum_implicit", lambda a, b: torch.einsum("ij,jk", a, b), randn((3, 4), (4, 2)))
    yield Row("einsum_implicit_order", lambda x: torch.einsum("bA", x), randn((2, 3)))
    yield Row("einsum_batched", lambda a, b: torch.einsum("bij,bjk->bik", a, b), randn((2, 3, 4), (2, 4, 5)))
    yield Row("einsum_transposed_operands", lambda a, b: torch.einsum("ji,kj->ik", a.t(), b.t()), randn((4, 3), (3, 5)))
    yield Row("einsum_ellipsis_broadcast", lambda a, b: torch.einsum("...ij,...jk->...ik", a, b), randn((2, 1, 3, 4), (3, 4, 2)))
    yield Row("einsum_ellipsis_implicit", lambda a, b: torch.einsum("...i,...i", a, b), randn((2, 3), (4, 1, 3)))
    yield Row("einsum_ellipsis_summed", lambda x: torch.einsum("...ij->ij", x), randn((2, 3, 4)))
    yield Row("einsum_ellipsis_middle", lambda x: torch.einsum("i...j->j...i", x), randn((2, 3, 4, 5)))
    yield Row("einsum_diagonal", lambda x: torch.einsum("ii->i", x), randn((4, 4)))
    yield Row("einsum_trace_batched", lambda x: torch.einsum("bii", x), randn((2, 3, 3)))
    yield Row("einsum_diagonal_with_other", lambda a, b: torch.einsum("iji,j->ij", a, b), randn((3, 2, 3), (2,)))
    yield Row("einsum_outer", lambda a, b: torch.einsum("i,j->ij", a, b), randn((3,), (4,)))
    yield Row("einsum_dot", lambda a, b: torch.einsum("i,i", a, b), randn((5,), (5,)))
    yield Row("einsum_sum_permute", lambda x: torch.einsum("ijk->kj", x), randn((2, 3, 4)))
    yield Row("einsum_three", lambda a, b, c: torch.einsum("ij,jk,kl->il", a, b, c), randn((2, 3), (3, 4), (4, 2)))
    yield Row("einsum_bilinear", lambda a, b, c: torch.einsum("bn,anm,bm->ba", a, b, c), randn((2, 3), (4, 3, 5), (2, 5)))
    yield Row("einsum_attention_scores", lambda q, k: torch.einsum("bhqd,bhkd->bhqk", q, k), randn((2, 2, 3, 4), (2, 2, 5, 4)),
              )
    yield Row("einsum_broadcast_label", lambda a, b: torch.einsum("ij,j->i", a, b), randn((2, 1), (3,)))
    yield Row("einsum_empty_dim", lambda a, b: torch.einsum("ij,jk->ik", a, b), randn((2, 0), (0, 3)))

"""Golden rows: max_pool2d (padding, stride, ceil_mode, dilation, ties, -inf, NaN), avg_pool2d
(count_include_pad false/true, with ceil_mode) and adaptive_avg_pool2d (divisible or not)."""
import torch
import torch.nn.functional as F

from gen_ops import Row


def randn(*shapes):
    return lambda g: [torch.randn(*s, generator=g) for s in shapes]


def ties(*shape):
    """Small integers: many equal values in every window (max-pool ties)."""
    return lambda g: [torch.randint(0, 3, shape, generator=g).float()]


def nhwc(x):
    """x stored [N, H, W, C], seen as [N, C, H, W]: a channels-last view."""
    return x.permute(0, 3, 1, 2)


def with_inf(g):
    x = torch.randn(1, 2, 6, 6, generator=g)
    x[0, 0, :3, :3] = float("-inf")  # a whole window of -inf
    x[0, 1, 2, :] = float("-inf")
    x[0, 1, 4, 4] = float("inf")
    return [x]


def with_nan(g):
    x = torch.randn(1, 2, 4, 6, generator=g)
    x[0, 0, 0, 1] = float("nan")
    x[0, 0, 1, 0] = float("nan")  # two NaNs in one window: the last takes the gradient
    x[0, 1, 3, 5] = float("nan")
    return [x]


def with_nan_nhwc(g):
    x = torch.randn(2, 6, 7, 3, generator=g)
    x[0, 0, 1, 0] = float("nan")
    x[0, 1, 0, 0] = float("nan")
    x[1, 3, 3, 2] = float("nan")
    x[1, 5, 6, 1] = float("nan")
    return [x]


def with_inf_nhwc(g):
    x = torch.randn(2, 6, 6, 3, generator=g)
    x[0, :3, :3, 0] = float("-inf")  # whole windows of -inf (one with padding)
    x[1, :, 2, 1] = float("-inf")
    x[1, 4, 4, 2] = float("inf")
    return [x]


def rows():
    # ---- max_pool2d
    yield Row("max_pool2d", lambda x: F.max_pool2d(x, 2), randn((2, 3, 6, 6)))
    yield Row("max_pool2d_floor", lambda x: F.max_pool2d(x, 2), randn((1, 2, 5, 7)))
    yield Row("max_pool2d_stride_padding", lambda x: F.max_pool2d(x, 3, stride=2, padding=1), randn((2, 2, 7, 6)))
    yield Row("max_pool2d_overlap_asymmetric", lambda x: F.max_pool2d(x, (3, 2), stride=(1, 2), padding=(1, 0)),
              randn((2, 1, 5, 7)))
    yield Row("max_pool2d_ceil", lambda x: F.max_pool2d(x, 2, ceil_mode=True), randn((1, 2, 5, 7)))
    yield Row("max_pool2d_ceil_padding", lambda x: F.max_pool2d(x, 3, stride=2, padding=1, ceil_mode=True),
              randn((1, 3, 6, 6)))
    yield Row("max_pool2d_ceil_dropped_window", lambda x: F.max_pool2d(x, 2, stride=2, padding=1, ceil_mode=True),
              randn((1, 2, 4, 5)))
    # ceil_mode: a kernel wider than the input (its one window starts inside and overhangs)
    yield Row("max_pool2d_ceil_kernel_past_input", lambda x: F.max_pool2d(x, 3, stride=2, ceil_mode=True),
              randn((1, 2, 2, 2)))
    yield Row("max_pool2d_dilation", lambda x: F.max_pool2d(x, 3, stride=1, padding=1, dilation=2), randn((1, 2, 7, 7)))
    yield Row("max_pool2d_dilation_ceil_asymmetric",
              lambda x: F.max_pool2d(x, (2, 3), stride=2, padding=1, dilation=(2, 1), ceil_mode=True),
              randn((2, 1, 8, 9)))
    yield Row("max_pool2d_ties", lambda x: F.max_pool2d(x, 2), ties(2, 2, 6, 6))
    yield Row("max_pool2d_ties_overlapping", lambda x: F.max_pool2d(x, 3, stride=1, padding=1), ties(1, 2, 5, 6))
    yield Row("max_pool2d_ties_dilation_ceil", lambda x: F.max_pool2d(x, 2, stride=2, dilation=2, ceil_mode=True),
              ties(1, 2, 7, 7))
    yield Row("max_pool2d_ties_channels_last_2x2", lambda x: F.max_pool2d(nhwc(x), 2), ties(2, 6, 6, 3))
    yield Row("max_pool2d_ties_channels_last_3x3", lambda x: F.max_pool2d(nhwc(x), 3, stride=2, padding=1),
              ties(2, 6, 7, 3))
    yield Row("max_pool2d_ties_channels_last_ceil", lambda x: F.max_pool2d(nhwc(x), 3, stride=2, ceil_mode=True),
              ties(1, 6, 6, 4))
    yield Row("max_pool2d_neg_inf", lambda x: F.max_pool2d(x, 3, stride=3), with_inf)
    yield Row("max_pool2d_neg_inf_padded", lambda x: F.max_pool2d(x, 2, stride=1, padding=1), with_inf)
    yield Row("max_pool2d_neg_inf_channels_last", lambda x: F.max_pool2d(nhwc(x), 3, stride=2, padding=1),
              with_inf_nhwc)
    yield Row("max_pool2d_nan", lambda x: F.max_pool2d(x, 2), with_nan)
    yield Row("max_pool2d_nan_overlapping", lambda x: F.max_pool2d(x, 3, stride=1, padding=1), with_nan)
    yield Row("max_pool2d_nan_channels_last", lambda x: F.max_pool2d(nhwc(x), 3, stride=2, padding=1), with_nan_nhwc)
    yield Row("max_pool2d_transposed_view", lambda x: F.max_pool2d(x.transpose(2, 3), 2, stride=1), randn((2, 2, 5, 4)))
    yield Row("max_pool2d_unbatched", lambda x: F.max_pool2d(x, 2, padding=1), randn((3, 5, 5)))
    yield Row("max_pool2d_empty_batch", lambda x: F.max_pool2d(x, 2), randn((0, 2, 4, 4)))
    # ---- avg_pool2d
    yield Row("avg_pool2d", lambda x: F.avg_pool2d(x, 2), randn((2, 3, 6, 6)))
    yield Row("avg_pool2d_pad_included", lambda x: F.avg_pool2d(x, 3, stride=2, padding=1), randn((1, 2, 5, 5)))
    yield Row("avg_pool2d_pad_excluded", lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False),
              randn((1, 2, 5, 5)))
    yield Row("avg_pool2d_asymmetric", lambda x: F.avg_pool2d(x, (2, 3), stride=(2, 1), padding=(1, 0)),
              randn((2, 1, 6, 5)))
    yield Row("avg_pool2d_ceil_pad_included", lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True),
              randn((1, 2, 6, 6)))
    yield Row("avg_pool2d_ceil_pad_excluded",
              lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
              randn((1, 2, 6, 6)))
    yield Row("avg_pool2d_ceil_kernel_past_input", lambda x: F.avg_pool2d(x, 3, stride=2, ceil_mode=True),
              randn((1, 2, 2, 3)))
    yield Row("avg_pool2d_ceil_no_padding", lambda x: F.avg_pool2d(x, 2, ceil_mode=True), randn((2, 2, 5, 7)))
    yield Row("avg_pool2d_ceil_no_padding_excluded", lambda x: F.avg_pool2d(x, 2, ceil_mode=True, count_include_pad=False),
              randn((2, 2, 5, 7)))
    yield Row("avg_pool2d_ceil_equals_floor", lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True),
              randn((1, 2, 7, 7)))
    yield Row("avg_pool2d_ceil_asymmetric",
              lambda x: F.avg_pool2d(x, (3, 2), stride=(2, 3), padding=(1, 1), ceil_mode=True),
              randn((2, 2, 8, 7)))
    yield Row("avg_pool2d_channels_last", lambda x: F.avg_pool2d(nhwc(x), 3, stride=2, padding=1), randn((2, 6, 7, 3)))
    yield Row("avg_pool2d_channels_last_ceil", lambda x: F.avg_pool2d(nhwc(x), 3, stride=2, padding=1, ceil_mode=True),
              randn((2, 6, 6, 3)))
    yield Row("avg_pool2d_transposed_view_excluded",
              lambda x: F.avg_pool2d(x.transpose(2, 3), 2, stride=1, padding=1, count_include_pad=False),
              randn((1, 2, 4, 5)))
    yield Row("avg_pool2d_unbatched", lambda x: F.avg_pool2d(x, 2), randn((3, 4, 6)))
    yield Row("avg_pool2d_empty_batch", lambda x: F.avg_pool2d(x, 2), randn((0, 2, 4, 4)))
    # ---- adaptive_avg_pool2d: window i of H is [floor(i*H/oh), ceil((i+1)*H/oh))
    yield Row("adaptive_avg_pool2d_divisible", lambda x: F.adaptive_avg_pool2d(x, (3, 3)), randn((2, 2, 6, 6)))
    yield Row("adaptive_avg_pool2d_uneven", lambda x: F.adaptive_avg_pool2d(x, (3, 4)), randn((1, 2, 5, 7)))
    yield Row("adaptive_avg_pool2d_uneven_tall", lambda x: F.adaptive_avg_pool2d(x, (4, 3)), randn((2, 3, 7, 5)))
    yield Row("adaptive_avg_pool2d_larger_than_input", lambda x: F.adaptive_avg_pool2d(x, (5, 4)), randn((1, 2, 4, 3)))
    yield Row("adaptive_avg_pool2d_global", lambda x: F.adaptive_avg_pool2d(x, 1), randn((2, 3, 4, 5)))
    yield Row("adaptive_avg_pool2d_channels_last", lambda x: F.adaptive_avg_pool2d(nhwc(x), (2, 3)), randn((2, 5, 7, 3)))
    yield Row("adaptive_avg_pool2d_unbatched", lambda x: F.adaptive_avg_pool2d(x, (2, 2)), randn((3, 5, 5)))
    # ---- max_pool2d with indices (flat h * W + w of the input plane) and max_unpool2d (issue 26)
    yield Row("max_pool2d_indices", lambda x: F.max_pool2d(x, 2, return_indices=True), randn((2, 3, 6, 6)))
    yield Row("max_pool2d_indices_stride_padding_ceil",
              lambda x: F.max_pool2d(x, 3, stride=2, padding=1, ceil_mode=True, return_indices=True), randn((1, 2, 7, 6)))
    yield Row("max_pool2d_indices_dilation", lambda x: F.max_pool2d(x, 2, stride=1, dilation=2, return_indices=True),
              randn((1, 2, 5, 6)))
    yield Row("max_pool2d_indices_ties", lambda x: F.max_pool2d(x, 3, stride=1, return_indices=True), ties(1, 2, 5, 5))
    yield Row("max_pool2d_indices_nan", lambda x: F.max_pool2d(x, 2, return_indices=True), with_nan)
    yield Row("max_pool2d_indices_channels_last", lambda x: F.max_pool2d(nhwc(x), 2, return_indices=True),
              randn((2, 4, 6, 3)))
    yield Row("max_pool2d_indices_unbatched", lambda x: F.max_pool2d(x, 2, return_indices=True), randn((3, 4, 6)))
    yield Row("max_unpool2d", lambda x: F.max_unpool2d(*F.max_pool2d(x, 2, return_indices=True), 2), randn((2, 2, 4, 6)))
    yield Row("max_unpool2d_output_size",
              lambda x: F.max_unpool2d(*F.max_pool2d(x, 2, return_indices=True), 2, output_size=(5, 7)), randn((1, 2, 5, 7)))
    yield Row("max_unpool2d_stride_padding",
              lambda x: F.max_unpool2d(*F.max_pool2d(x, 3, stride=2, padding=1, return_indices=True), 3, stride=2,
                                       padding=1, output_size=x.shape[-2:]), randn((1, 2, 7, 6)))
    yield Row("max_unpool2d_unbatched", lambda x: F.max_unpool2d(*F.max_pool2d(x, 2, return_indices=True), 2),
              randn((2, 4, 4)))

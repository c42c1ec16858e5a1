"""Golden rows: conv2d and conv_transpose2d (weight [in, out/groups, kh, kw], as PyTorch's)."""
import torch
import torch.nn.functional as F

from gen_ops import Row


def randn(*shapes):
    return lambda g: [torch.randn(*s, generator=g) for s in shapes]


def nhwc(x):
    """x stored [N, H, W, C], seen as [N, C, H, W]: a channels-last view."""
    return x.permute(0, 3, 1, 2)


def rows():
    # ---- conv2d
    yield Row("conv2d", lambda x, w, b: F.conv2d(x, w, b), randn((2, 3, 6, 6), (4, 3, 3, 3), (4,)))
    yield Row("conv2d_stride_padding_no_bias", lambda x, w: F.conv2d(x, w, stride=2, padding=1),
              randn((2, 2, 7, 6), (3, 2, 3, 3)))
    yield Row("conv2d_dilation", lambda x, w, b: F.conv2d(x, w, b, padding=2, dilation=2),
              randn((1, 2, 7, 7), (2, 2, 3, 3), (2,)))
    yield Row("conv2d_groups", lambda x, w, b: F.conv2d(x, w, b, groups=2), randn((2, 4, 5, 5), (6, 2, 3, 3), (6,)))
    yield Row("conv2d_depthwise", lambda x, w: F.conv2d(x, w, padding=1, groups=3), randn((1, 3, 5, 5), (3, 1, 3, 3)))
    yield Row("conv2d_asymmetric", lambda x, w, b: F.conv2d(x, w, b, stride=(2, 1), padding=(0, 1), dilation=(1, 2)),
              randn((2, 2, 5, 8), (3, 2, 2, 3), (3,)))
    yield Row("conv2d_stride3_floor", lambda x, w, b: F.conv2d(x, w, b, stride=3), randn((1, 2, 8, 7), (2, 2, 3, 3), (2,)))
    yield Row("conv2d_channels_last_input", lambda x, w, b: F.conv2d(nhwc(x), w, b, padding=1),
              randn((2, 5, 6, 3), (4, 3, 3, 3), (4,)))
    yield Row("conv2d_transposed_view", lambda x, w: F.conv2d(x.transpose(2, 3), w, stride=(1, 2)),
              randn((2, 3, 7, 5), (2, 3, 2, 2)))
    yield Row("conv2d_unbatched", lambda x, w, b: F.conv2d(x, w, b, padding=1), randn((3, 4, 4), (2, 3, 3, 3), (2,)))
    yield Row("conv2d_empty_batch", lambda x, w, b: F.conv2d(x, w, b), randn((0, 2, 4, 4), (3, 2, 3, 3), (3,)))
    # ---- conv_transpose2d
    yield Row("conv_transpose2d", lambda x, w, b: F.conv_transpose2d(x, w, b), randn((2, 3, 4, 4), (3, 2, 3, 3), (2,)))
    yield Row("conv_transpose2d_stride2_up", lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2),
              randn((2, 4, 3, 3), (4, 2, 2, 2), (2,)))
    yield Row("conv_transpose2d_stride_padding_output_padding",
              lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1),
              randn((1, 2, 3, 4), (2, 3, 3, 3)))
    yield Row("conv_transpose2d_padding", lambda x, w, b: F.conv_transpose2d(x, w, b, padding=(2, 1)),
              randn((2, 2, 4, 5), (2, 3, 3, 3), (3,)))
    yield Row("conv_transpose2d_groups", lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, groups=2),
              randn((2, 4, 3, 3), (4, 3, 3, 3), (6,)))
    yield Row("conv_transpose2d_depthwise", lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1, groups=3),
              randn((1, 3, 4, 4), (3, 1, 3, 3)))
    yield Row("conv_transpose2d_dilation", lambda x, w, b: F.conv_transpose2d(x, w, b, dilation=2, padding=1),
              randn((2, 2, 4, 4), (2, 2, 3, 3), (2,)))
    # output_padding >= stride is allowed where it is < dilation
    yield Row("conv_transpose2d_output_padding_past_stride",
              lambda x, w, b: F.conv_transpose2d(x, w, b, stride=(2, 1), output_padding=(2, 0), dilation=(3, 1)),
              randn((1, 2, 3, 3), (2, 2, 3, 3), (2,)))
    yield Row("conv_transpose2d_asymmetric",
              lambda x, w, b: F.conv_transpose2d(x, w, b, stride=(1, 2), padding=(1, 0), output_padding=(0, 1)),
              randn((2, 2, 3, 4), (2, 3, 2, 3), (3,)))
    yield Row("conv_transpose2d_all_options",
              lambda x, w, b: F.conv_transpose2d(x, w, b, stride=(3, 2), padding=(1, 2), output_padding=(2, 1),
                                                 groups=2, dilation=(2, 3)),
              randn((2, 4, 3, 4), (4, 2, 3, 2), (4,)))
    yield Row("conv_transpose2d_channels_last_input", lambda x, w, b: F.conv_transpose2d(nhwc(x), w, b, stride=2),
              randn((2, 3, 4, 3), (3, 4, 3, 3), (4,)))
    yield Row("conv_transpose2d_transposed_view", lambda x, w: F.conv_transpose2d(x.transpose(2, 3), w, stride=2),
              randn((1, 2, 5, 3), (2, 2, 2, 3)))
    yield Row("conv_transpose2d_unbatched", lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, output_padding=1),
              randn((2, 3, 3), (2, 3, 3, 3), (3,)))
    yield Row("conv_transpose2d_empty_batch", lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2),
              randn((0, 2, 3, 3), (2, 3, 3, 3), (3,)))

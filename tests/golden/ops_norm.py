"""Golden rows: batch_norm (training: the updated running statistics are outputs too; eval),
layer_norm and group_norm."""
import torch
import torch.nn.functional as F

from gen_ops import Row


def randn(*shapes):
    return lambda g: [torch.randn(*s, generator=g) for s in shapes]


def bn_inputs(x_shape, c, scale=1.0):
    def make(g):
        x = torch.randn(*x_shape, generator=g) * scale + 0.5
        w = torch.rand(c, generator=g) + 0.5
        b = torch.randn(c, generator=g)
        rm = torch.randn(c, generator=g) * 0.1
        rv = torch.rand(c, generator=g) + 0.5
        return [x, w, b, rm, rv]
    return make


def bn_train(momentum, eps, view=lambda x: x):
    """(y, running_mean, running_var) after one training step; the statistics are cloned first
    (batch_norm updates them in place, and the row's inputs must stay as they were)."""
    def fn(x, w, b, rm, rv):
        rm, rv = rm.clone(), rv.clone()
        y = F.batch_norm(view(x), rm, rv, w, b, training=True, momentum=momentum, eps=eps)
        return y, rm, rv
    return fn


def nhwc(x):
    return x.permute(0, 3, 1, 2)


def rows():
    # ---- batch_norm
    yield Row("batch_norm_train", bn_train(0.1, 1e-5), bn_inputs((4, 3, 3, 3), 3), grad=[0, 1, 2])
    yield Row("batch_norm_train_2d_momentum", bn_train(0.3, 1e-3), bn_inputs((6, 4), 4, 2.0), grad=[0, 1, 2])
    yield Row("batch_norm_train_3d", bn_train(0.1, 1e-5), bn_inputs((3, 2, 5), 2), grad=[0, 1, 2])
    yield Row("batch_norm_train_channels_last", bn_train(0.1, 1e-5, nhwc), bn_inputs((2, 4, 3, 3), 3), grad=[0, 1, 2])
    yield Row("batch_norm_train_no_running_stats",
              lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
              lambda g: bn_inputs((4, 3, 2, 2), 3)(g)[:3])
    yield Row("batch_norm_eval",
              lambda x, w, b, rm, rv: F.batch_norm(x, rm, rv, w, b, training=False, eps=1e-5),
              bn_inputs((3, 3, 2, 2), 3), grad=[0, 1, 2])
    yield Row("batch_norm_eval_no_affine",
              lambda x, rm, rv: F.batch_norm(x, rm, rv, training=False, eps=1e-3),
              lambda g: [bn_inputs((5, 4), 4)(g)[i] for i in (0, 3, 4)], grad=[0])
    # ---- layer_norm
    yield Row("layer_norm", lambda x, w, b: F.layer_norm(x, (4,), w, b),
              lambda g: [torch.randn(2, 3, 4, generator=g) * 2, torch.rand(4, generator=g) + 0.5,
                         torch.randn(4, generator=g)])
    yield Row("layer_norm_2dims_eps", lambda x, w, b: F.layer_norm(x, (3, 4), w, b, eps=1e-3),
              lambda g: [torch.randn(2, 3, 4, generator=g), torch.rand(3, 4, generator=g) + 0.5,
                         torch.randn(3, 4, generator=g)])
    yield Row("layer_norm_no_affine", lambda x: F.layer_norm(x, (5,)), randn((3, 5)))
    yield Row("layer_norm_transposed_view", lambda x, w, b: F.layer_norm(x.transpose(0, 1), (3,), w, b),
              randn((3, 4), (3,), (3,)))
    yield Row("layer_norm_broadcast_batch", lambda x, w, b: F.layer_norm(x, (6,), w, b),
              randn((2, 1, 3, 6), (6,), (6,)))
    # ---- group_norm
    yield Row("group_norm", lambda x, w, b: F.group_norm(x, 3, w, b),
              lambda g: [torch.randn(2, 6, 3, 3, generator=g) * 2, torch.rand(6, generator=g) + 0.5,
                         torch.randn(6, generator=g)])
    yield Row("group_norm_one_group", lambda x, w, b: F.group_norm(x, 1, w, b), randn((2, 4, 3, 2), (4,), (4,)))
    yield Row("group_norm_instance", lambda x, w, b: F.group_norm(x, 4, w, b), randn((3, 4, 2, 3), (4,), (4,)))
    yield Row("group_norm_no_affine_eps", lambda x: F.group_norm(x, 2, eps=1e-3), randn((3, 4, 5)))
    yield Row("group_norm_2d", lambda x, w, b: F.group_norm(x, 2, w, b), randn((5, 6), (6,), (6,)))
    yield Row("group_norm_channels_last", lambda x, w, b: F.group_norm(nhwc(x), 2, w, b),
              randn((2, 3, 4, 6), (6,), (6,)))

"""The aten ops of CNN training lowered to axle (python/csrc/lower_nn.cpp): each op's forward and
gradients (through torch.autograd) on `xla` against PyTorch's cpu results, non-contiguous inputs
included; then 5 training steps of an mlp, a cnn, a cnn with BatchNorm and a small ResNet on xla
and on cpu from the same weights and batches, with no CPU fallback inside the steps.

Tolerances: op results rtol 1e-5 with atol 1e-5 x (the reference's largest magnitude), for the
elements near zero where a relative bound means nothing (sums of many products in another order);
integer results (pooling indices, masks) exactly; training losses rtol 1e-4."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import axle._C as C

DEV = torch.device("xla:0")
RTOL = 1e-5


def fallbacks():
    return {k: v for k, v in C._counters().items() if k.startswith("aten::")}


def close(got, want, rtol=RTOL, what=""):
    got = got.cpu()
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    if not want.is_floating_point():
        assert torch.equal(got, want), what
        return
    scale = want.abs().nan_to_num(0.0, 0.0, 0.0).max().item() if want.numel() else 0.0
    torch.testing.assert_close(got, want, rtol=rtol, atol=rtol * max(scale, 1.0), equal_nan=True,
                               msg=lambda m: f"{what}: {m}")


def check(fn, *inputs, grad=True, rtol=RTOL, view=None, seed=0, const=()):
    """fn on cpu and on xla copies of `inputs` (floats not in `const` requiring grad); `view`
    (optional) makes the operands from the leaves on both devices (a non-contiguous view).
    Compares every output and, with `grad`, every leaf's gradient of sum(out * r), r random."""
    wants = [grad and t.is_floating_point() and i not in const for i, t in enumerate(inputs)]
    cpu = [t.detach().clone().requires_grad_(w) for t, w in zip(inputs, wants)]
    xla = [t.detach().to(DEV).requires_grad_(w) for t, w in zip(inputs, wants)]
    view = view or (lambda *a: a)
    out_c, out_x = fn(*view(*cpu)), fn(*view(*xla))
    outs_c = out_c if isinstance(out_c, (tuple, list)) else (out_c,)
    outs_x = out_x if isinstance(out_x, (tuple, list)) else (out_x,)
    for i, (a, b) in enumerate(zip(outs_x, outs_c)):
        close(a, b.detach(), rtol, f"output {i}")
    if not grad:
        return
    g = torch.Generator().manual_seed(seed)
    loss_c, loss_x = 0, 0
    for a, b in zip(outs_x, outs_c):
        if b.is_floating_point() and b.requires_grad:
            r = torch.randn(b.shape, generator=g)
            loss_c = loss_c + (b * r).sum()
            loss_x = loss_x + (a * r.to(DEV)).sum()
    loss_c.backward()
    loss_x.backward()
    for i, (a, b) in enumerate(zip(xla, cpu)):
        if b.grad is not None:
            close(a.grad, b.grad, rtol, f"grad of input {i}")
        else:
            assert a.grad is None, f"input {i} has a gradient on xla only"


@pytest.fixture(autouse=True)
def no_fallback(request):
    """Every op test runs lowered: no aten::<op> counter moves (a boolean mask's nonzero aside)."""
    before = fallbacks()
    yield
    moved = {k: v - before.get(k, 0) for k, v in fallbacks().items() if v != before.get(k, 0)}
    allowed = {"aten::nonzero"} if "bool_mask" in request.node.name else set()
    assert set(moved) <= allowed, f"CPU fallbacks: {moved}"


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------ convolution

CONV_CASES = [  # (C_in, C_out, k, stride, padding, dilation, groups, bias)
    (1, 8, 3, 1, 1, 1, 1, True),
    (4, 6, 3, 2, 0, 1, 1, False),
    (4, 6, 3, 2, 2, 2, 1, True),
    (4, 8, 3, 1, 1, 1, 2, True),
    (6, 6, 3, 1, 1, 1, 6, False),  # depthwise
    (4, 8, 1, 2, 0, 1, 1, False),  # ResNet's strided 1x1 downsample
]


@pytest.mark.parametrize("ci,co,k,s,p,d,g,bias", CONV_CASES)
def test_conv2d(ci, co, k, s, p, d, g, bias):
    x, w = randn(2, ci, 9, 11, seed=1), randn(co, ci // g, k, k, seed=2)
    b = randn(co, seed=3)
    fn = lambda x, w, b: F.conv2d(x, w, b if bias else None, stride=s, padding=p, dilation=d, groups=g)
    check(fn, x, w, b)
    # non-contiguous: the input is a transposed view of an [N, C, W, H] leaf
    check(fn, x.transpose(2, 3).contiguous(), w, b, view=lambda x, w, b: (x.transpose(2, 3), w, b))


def test_conv2d_rect_and_unbatched():
    x, w, b = randn(3, 8, 10, seed=1), randn(5, 3, 3, 2, seed=2), randn(5, seed=3)
    check(lambda x, w, b: F.conv2d(x, w, b, stride=(2, 1), padding=(1, 0)), x, w, b)


def test_conv1d():
    x, w, b = randn(2, 3, 17, seed=1), randn(4, 3, 5, seed=2), randn(4, seed=3)
    check(lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=2, dilation=1), x, w, b)
    check(lambda x, w, b: F.conv_transpose1d(x, w.transpose(0, 1), b, stride=2, padding=1), x[:, :, :9], w, b)


@pytest.mark.parametrize("s,p,op,g", [(1, 0, 0, 1), (2, 1, 1, 1), (2, 1, 0, 2)])
def test_conv_transpose2d(s, p, op, g):
    x, w, b = randn(2, 4, 5, 6, seed=1), randn(4, 6 // g, 3, 3, seed=2), randn(6, seed=3)
    check(lambda x, w, b: F.conv_transpose2d(x, w, b, stride=s, padding=p, output_padding=op, groups=g), x, w, b)


def test_conv_module_bad_channels_message():
    conv = nn.Conv2d(3, 4, 3).to(DEV)
    with pytest.raises(RuntimeError, match="expected input.*to have 3 channels"):
        conv(torch.zeros(1, 2, 5, 5, device=DEV))


# ------------------------------------------------------------------ pooling

@pytest.mark.parametrize("k,s,p,d,ceil", [(2, None, 0, 1, False), (3, 2, 1, 1, False), (3, 2, 1, 1, True),
                                          (2, 1, 0, 2, False), ((3, 2), (2, 1), (1, 0), 1, False)])
def test_max_pool2d_with_indices(k, s, p, d, ceil):
    x = randn(2, 3, 9, 10, seed=4)
    fn = lambda x: F.max_pool2d(x, k, s, p, d, ceil_mode=ceil, return_indices=True)
    check(fn, x)  # values, the int64 flat indices h*W + w exactly, and the gradient
    check(fn, x.transpose(2, 3).contiguous(), view=lambda x: (x.transpose(2, 3),))


def test_max_pool2d_ties_and_unbatched():
    x = torch.tensor([[[1., 1., 0., 2.], [1., 0., 2., 2.], [3., 3., 3., 3.], [3., 3., 3., 3.]]])
    check(lambda x: F.max_pool2d(x, 2, return_indices=True), x)  # first maximum in window order, as cpu


@pytest.mark.parametrize("k,s,p,ceil,cip,div", [(2, None, 0, False, True, None), (3, 2, 1, False, False, None),
                                                (3, 2, 1, True, True, None), (3, 2, 1, True, False, None),
                                                (2, 2, 1, False, True, 3), ((3, 2), (1, 2), (1, 1), False, True, None)])
def test_avg_pool2d(k, s, p, ceil, cip, div):
    x = randn(2, 3, 9, 10, seed=5)
    fn = lambda x: F.avg_pool2d(x, k, s, p, ceil_mode=ceil, count_include_pad=cip, divisor_override=div)
    check(fn, x)
    check(fn, x.transpose(2, 3).contiguous(), view=lambda x: (x.transpose(2, 3),))


@pytest.mark.parametrize("out", [(1, 1), (3, 3), (2, 5), (7, 7)])
def test_adaptive_avg_pool2d(out):
    x = randn(2, 4, 7, 9, seed=6)
    check(lambda x: F.adaptive_avg_pool2d(x, out), x)
    check(lambda x: F.adaptive_avg_pool2d(x, out), x.transpose(2, 3).contiguous(), view=lambda x: (x.transpose(2, 3),))
    check(lambda x: F.adaptive_avg_pool2d(x, out), randn(4, 7, 9, seed=7))  # unbatched


def test_pool_bad_padding_message():
    x = torch.zeros(1, 1, 6, 6, device=DEV)
    with pytest.raises(RuntimeError, match="pad should be at most half of effective kernel size"):
        F.max_pool2d(x, 2, padding=2)
    with pytest.raises(RuntimeError, match="pad should be at most half of effective kernel size"):
        F.avg_pool2d(x, 2, padding=2)


# ------------------------------------------------------------------ batch norm

@pytest.mark.parametrize("shape", [(4, 3, 5, 6), (8, 5), (4, 3, 7)])
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_train(shape, affine):
    x, w, b = randn(*shape, seed=8) * 2 + 1, randn(shape[1], seed=9), randn(shape[1], seed=10)
    rm_c, rv_c = randn(shape[1], seed=11), randn(shape[1], seed=12).abs() + 0.5
    rm_x, rv_x = rm_c.to(DEV), rv_c.to(DEV)

    def fn(x, w, b):
        on_xla = x.device.type == "xla"
        rm, rv = (rm_x, rv_x) if on_xla else (rm_c, rv_c)
        return F.batch_norm(x, rm, rv, w if affine else None, b if affine else None, training=True, momentum=0.3,
                            eps=1e-4)

    check(fn, x, w, b)
    if len(shape) == 4:  # (both devices' running stats updated once more)
        check(fn, x.transpose(2, 3).contiguous(), w, b, view=lambda x, w, b: (x.transpose(2, 3), w, b))
    close(rm_x, rm_c, what="running_mean")  # momentum update
    close(rv_x, rv_c, what="running_var")  # with the unbiased batch variance


def test_batch_norm_eval_and_no_running_stats():
    x, w, b = randn(4, 3, 5, 6, seed=8), randn(3, seed=9), randn(3, seed=10)
    rm, rv = randn(3, seed=11), randn(3, seed=12).abs() + 0.5
    check(lambda x, w, b: F.batch_norm(x, rm.to(x.device), rv.to(x.device), w, b, training=False), x, w, b)
    check(lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), x, w, b)
    check(lambda x, w, b: F.batch_norm(x, rm.to(x.device), rv.to(x.device), w, b, training=False), x, w, b,
          view=lambda x, w, b: (x.transpose(2, 3), w, b))


def test_batch_norm_aten_forms():
    """The other forms PyTorch has (export / compile paths): each against cpu, running stats included."""
    x, w, b = randn(4, 3, 5, 6, seed=8), randn(3, seed=9), randn(3, seed=10)
    rm, rv = randn(3, seed=11), randn(3, seed=12).abs() + 0.5
    aten = torch.ops.aten

    def with_stats(op, *args):
        def fn(x, w, b):
            m, v = rm.clone().to(x.device), rv.clone().to(x.device)
            out = op(x, w, b, m, v, *args)
            return tuple(out) + (m, v)  # the in-place forms update m and v
        return fn

    check(with_stats(aten._batch_norm_with_update, 0.1, 1e-5), x, w, b)  # -> its _functional form
    check(with_stats(aten._native_batch_norm_legit, True, 0.1, 1e-5), x, w, b)
    check(with_stats(aten._native_batch_norm_legit_functional, True, 0.1, 1e-5), x, w, b)
    check(with_stats(aten._native_batch_norm_legit_no_training, 0.1, 1e-5), x, w, b)
    check(with_stats(aten._batch_norm_no_update, 0.1, 1e-5), x, w, b)
    check(with_stats(aten.native_batch_norm, True, 0.1, 1e-5), x, w, b)
    check(lambda x, w, b: aten._native_batch_norm_legit.no_stats(x, w, b, True, 0.1, 1e-5), x, w, b)


def test_batchnorm2d_module_running_stats():
    torch.manual_seed(0)
    m_c = nn.BatchNorm2d(4, momentum=0.2)
    m_x = copy.deepcopy(m_c).to(DEV)
    for i in range(3):
        x = randn(6, 4, 5, 5, seed=20 + i) * (i + 1)
        close(m_x(x.to(DEV)), m_c(x).detach(), what=f"train step {i}")
    C._sync()
    for name, t in m_c.state_dict().items():
        close(m_x.state_dict()[name], t, what=name)  # running_mean, running_var, num_batches_tracked
    m_c.eval(), m_x.eval()
    x = randn(6, 4, 5, 5, seed=30)
    close(m_x(x.to(DEV)), m_c(x).detach(), what="eval")


def test_batch_norm_one_value_per_channel_message():
    with pytest.raises((RuntimeError, ValueError), match="Expected more than 1 value per channel"):
        nn.BatchNorm1d(3).to(DEV)(torch.zeros(1, 3, device=DEV))


# ------------------------------------------------------------------ softmax, losses, activations

@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_log_softmax(dim):
    x = randn(4, 5, 6, seed=13) * 3
    check(lambda x: F.softmax(x, dim), x)
    check(lambda x: F.log_softmax(x, dim), x)
    check(lambda x: F.log_softmax(x, dim), x.transpose(0, 2).contiguous(), view=lambda x: (x.transpose(0, 2),))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss(reduction, weighted):
    x = F.log_softmax(randn(6, 5, seed=14), 1)
    t = torch.tensor([0, 4, 2, -100, 1, 4])
    w = randn(5, seed=15).abs() + 0.1
    fn = lambda x, t, w: F.nll_loss(x, t, w if weighted else None, reduction=reduction, ignore_index=-100)
    check(fn, x, t, w, const=(2,))  # (PyTorch has no gradient for the weight)
    check(lambda x, t, w: F.nll_loss(x, t, w if weighted else None, reduction=reduction, ignore_index=2), x,
          t.clamp(min=0), w, const=(2,))
    check(fn, x.t().contiguous(), t, w, view=lambda x, t, w: (x.t(), t, w), const=(2,))
    red = {"none": 0, "mean": 1, "sum": 2}[reduction]  # the aten op's (output, total_weight)
    check(lambda x, t, w: torch.ops.aten.nll_loss_forward(x, t, w if weighted else None, red, 4), x,
          t.clamp(min=0), w, const=(2,))


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_nll_loss_2d_and_unbatched(reduction):
    x = F.log_softmax(randn(2, 4, 3, 5, seed=16), 1)
    t = torch.randint(0, 4, (2, 3, 5), generator=torch.Generator().manual_seed(1))
    check(lambda x, t: F.nll_loss(x, t, reduction=reduction), x, t)  # nll_loss2d_forward / backward
    check(lambda x, t: F.nll_loss(x, t, reduction=reduction), x[0, :, 0, 0], t[0, 0, 0])


def test_cross_entropy():
    x, t = randn(8, 10, seed=17), torch.tensor([1, 0, 9, 3, 3, 2, 7, 5])
    check(lambda x, t: F.cross_entropy(x, t), x, t)
    check(lambda x, t: F.cross_entropy(x, t, reduction="sum"), x, t)


def test_relu_threshold_backward():
    x = torch.tensor([-1.0, 0.0, 2.0, -0.0, 3.5, float("nan")])
    check(lambda x: F.relu(x), x)
    check(lambda x: F.threshold(x, 1.0, -2.0), x)
    check(lambda x: F.relu(x.t()), randn(4, 3, seed=18), view=lambda x: (x.t(),))


def test_native_dropout():
    x = randn(64, 50, seed=19)
    p = 0.3
    C._manual_seed(7)
    y, mask = torch.ops.aten.native_dropout(x.to(DEV), p, True)
    C._manual_seed(7)
    y2, mask2 = torch.ops.aten.native_dropout(x.to(DEV), p, True)
    y, mask, y2, mask2 = y.cpu(), mask.cpu(), y2.cpu(), mask2.cpu()
    assert mask.dtype == torch.bool and torch.equal(mask, mask2) and torch.equal(y, y2)  # the seed governs it
    assert abs(mask.float().mean().item() - (1 - p)) < 0.03
    close(y, x * mask / (1 - p))
    g = randn(64, 50, seed=20)
    gx = torch.ops.aten.native_dropout_backward(g.to(DEV), mask.to(DEV), 1 / (1 - p))
    close(gx, torch.ops.aten.native_dropout_backward(g, mask, 1 / (1 - p)))
    y, mask = torch.ops.aten.native_dropout(x.to(DEV), p, False)  # not training: identity, all kept
    close(y, x)
    assert mask.cpu().all()


def test_dropout_module_seeded():
    x = torch.ones(1000, device=DEV)
    torch.manual_seed(3)
    C._manual_seed(3)
    a = F.dropout(x, 0.5).cpu()
    C._manual_seed(3)
    b = F.dropout(x, 0.5).cpu()
    assert torch.equal(a, b) and set(a.unique().tolist()) <= {0.0, 2.0}


# ------------------------------------------------------------------ advanced indexing

def test_index_tensor():
    x = randn(5, 6, 7, seed=21)
    i = torch.tensor([4, 0, 2, 2, -1])
    j = torch.tensor([[1, 5], [0, -2]])
    check(lambda x: x[i.to(x.device)], x)  # duplicates accumulate in the gradient
    check(lambda x: x[:, i.to(x.device)], x)
    check(lambda x: x[:, j.to(x.device), 3:5], x)
    check(lambda x: x[i[:2].to(x.device), j[0].to(x.device)], x)  # adjacent: broadcast in place
    check(lambda x: x[i[:2].to(x.device), :, j[0].to(x.device)], x)  # not adjacent: broadcast dims first
    check(lambda x: x.transpose(0, 2)[i[:3].to(x.device)], x)  # a non-contiguous source


def test_slice_select_backward():
    # PyTorch's composites write through a view of zeros: lowered as values (a lost write otherwise)
    x = randn(5, 6, 7, seed=25)
    check(lambda x: x[:, :, 3:5], x)
    check(lambda x: x[1:, ::2, 1:6:3], x)
    check(lambda x: x[-2], x)
    check(lambda x: x[:, 3], x)


def test_index_bool_mask():
    x = randn(5, 6, seed=22)
    m = x[:, 0] > 0
    check(lambda x: x[m.to(x.device)], x)


def test_index_put():
    x, v = randn(5, 6, seed=23), randn(3, 6, seed=24)
    i = torch.tensor([0, 3, 0])
    for acc in (False, True):
        check(lambda x, v: x.index_put((i[1:].to(x.device),), v[1:], accumulate=acc), x, v)
    check(lambda x, v: x.index_put((i.to(x.device),), v, accumulate=True), x, v)
    check(lambda x, v: torch.ops.aten.index_put(x, [None, i[:2].to(x.device)], v[:2, :5].t(), True), x, v)
    check(lambda x, v: torch.ops.aten.index_put(x.t(), [i[:2].to(x.device)], v[:2, :5], False), x, v)

    def setitem(x, v):
        y = x * 1
        y[i[1:].to(x.device)] = v[1:]  # index_put_ through functionalization
        y[:, 2] += 1
        return y
    check(setitem, x, v)


# ------------------------------------------------------------------ training steps

def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))


def cnn(bn=False):
    norm = (lambda c: [nn.BatchNorm2d(c)]) if bn else (lambda c: [])
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), *norm(32), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), *norm(64), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)), inplace=True)
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNet(nn.Module):
    """ResNet-18's layout (a stem, four stages of two BasicBlocks, global average pooling), narrow."""

    def __init__(self, width=8, classes=10):
        super().__init__()
        w = width
        self.stem = nn.Sequential(nn.Conv2d(1, w, 3, 1, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU(inplace=True),
                                  nn.MaxPool2d(3, 2, 1))
        layers, cin = [], w
        for i, cout in enumerate([w, 2 * w, 4 * w, 8 * w]):
            layers += [BasicBlock(cin, cout, 1 if i == 0 else 2), BasicBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.layers(self.stem(x))), 1))


MODELS = {"mlp": mlp, "cnn": cnn, "cnn_bn": lambda: cnn(bn=True), "resnet": ResNet}


@pytest.mark.parametrize("name", list(MODELS))
def test_training_steps(name):
    torch.manual_seed(0)
    model_c = MODELS[name]()
    model_x = copy.deepcopy(model_c).to(DEV)
    # (lr 0.01: at 0.05 the ResNet's trajectories part after 4 steps, a ReLU input within float
    # rounding of 0 taking the other side, on any two correct implementations)
    opt_c = torch.optim.SGD(model_c.parameters(), lr=0.01, momentum=0.9)
    opt_x = torch.optim.SGD(model_x.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(16, 1, 28, 28, generator=g), torch.randint(0, 10, (16,), generator=g)) for _ in range(5)]
    C._sync()
    C._metrics_reset()
    losses_c, losses_x = [], []
    for x, y in batches:
        opt_c.zero_grad()
        loss = loss_fn(model_c(x), y)
        loss.backward()
        opt_c.step()
        losses_c.append(loss.item())

        opt_x.zero_grad()
        loss = loss_fn(model_x(x.to(DEV)), y.to(DEV))
        loss.backward()
        opt_x.step()
        C._sync()
        losses_x.append(loss)
    assert fallbacks() == {}, f"CPU fallbacks inside the steps: {fallbacks()}"
    losses_x = [l.item() for l in losses_x]
    torch.testing.assert_close(torch.tensor(losses_x), torch.tensor(losses_c), rtol=1e-4, atol=0)
    # the weights and the BatchNorm running statistics after the steps
    state_x = model_x.state_dict()
    for k, v in model_c.state_dict().items():
        close(state_x[k], v, rtol=1e-4, what=k)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_loss(reduction):
    check(lambda x, y: F.mse_loss(x, y, reduction=reduction), randn(4, 5, seed=1), randn(4, 5, seed=2))
    # a broadcast target (PyTorch warns) and a 0-d pair
    check(lambda x, y: F.mse_loss(x, y.expand_as(x), reduction=reduction), randn(3, 2, seed=3), randn(2, seed=4))
    check(lambda x, y: F.mse_loss(x, y, reduction=reduction), randn((), seed=5), randn((), seed=6))

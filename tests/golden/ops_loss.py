"""Golden rows: cross_entropy (reductions, ignore_index, label_smoothing, spatial targets),
nll_loss (every reduction, ignore_index) and mse_loss (every reduction)."""
import torch
import torch.nn.functional as F

from gen_ops import Row


def logits_target(shape, classes, ignored=None, ignore_value=-100):
    """Random logits [N, C, ...] and targets [N, ...], some set to ignore_value."""
    def make(g):
        x = torch.randn(shape, generator=g)
        t = torch.randint(0, classes, (shape[0],) + tuple(shape[2:]), generator=g)
        if ignored:
            t.view(-1)[list(ignored)] = ignore_value
        return [x, t]
    return make


def rows():
    # ---- cross_entropy
    yield Row("cross_entropy", F.cross_entropy, logits_target((4, 5), 5))
    yield Row("cross_entropy_sum", lambda x, t: F.cross_entropy(x, t, reduction="sum"), logits_target((4, 5), 5))
    yield Row("cross_entropy_none", lambda x, t: F.cross_entropy(x, t, reduction="none"), logits_target((4, 5), 5))
    yield Row("cross_entropy_ignore_default", F.cross_entropy, logits_target((6, 4), 4, ignored=(1, 4)))
    yield Row("cross_entropy_ignore_index", lambda x, t: F.cross_entropy(x, t, ignore_index=2),
              logits_target((6, 4), 4, ignored=(0, 3), ignore_value=2))
    yield Row("cross_entropy_ignore_none", lambda x, t: F.cross_entropy(x, t, reduction="none"),
              logits_target((5, 3), 3, ignored=(2,)))
    yield Row("cross_entropy_label_smoothing", lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1),
              logits_target((4, 6), 6))
    yield Row("cross_entropy_label_smoothing_ignore", lambda x, t: F.cross_entropy(x, t, label_smoothing=0.2),
              logits_target((6, 5), 5, ignored=(1, 2)))
    yield Row("cross_entropy_label_smoothing_sum_ignore",
              lambda x, t: F.cross_entropy(x, t, reduction="sum", label_smoothing=0.3, ignore_index=1),
              logits_target((5, 4), 4, ignored=(0,), ignore_value=1))
    yield Row("cross_entropy_label_smoothing_none", lambda x, t: F.cross_entropy(x, t, reduction="none", label_smoothing=0.15),
              logits_target((3, 5), 5, ignored=(1,)))
    yield Row("cross_entropy_spatial", F.cross_entropy, logits_target((2, 3, 4, 4), 3, ignored=(5,)))
    yield Row("cross_entropy_spatial_smoothing_none",
              lambda x, t: F.cross_entropy(x, t, reduction="none", label_smoothing=0.1), logits_target((2, 4, 3), 4))
    yield Row("cross_entropy_transposed_logits", lambda x, t: F.cross_entropy(x.t(), t),
              lambda g: [torch.randn(5, 4, generator=g), torch.randint(0, 5, (4,), generator=g)])
    yield Row("cross_entropy_all_ignored", F.cross_entropy, logits_target((3, 4), 4, ignored=(0, 1, 2)))
    yield Row("cross_entropy_large_logits", F.cross_entropy,
              lambda g: [torch.randn(4, 5, generator=g) * 30, torch.randint(0, 5, (4,), generator=g)])
    # ---- nll_loss
    for red in ("mean", "sum", "none"):
        yield Row(f"nll_loss_{red}", lambda x, t, red=red: F.nll_loss(F.log_softmax(x, 1), t, reduction=red),
                  logits_target((5, 4), 4))
        yield Row(f"nll_loss_ignore_{red}", lambda x, t, red=red: F.nll_loss(F.log_softmax(x, 1), t, reduction=red, ignore_index=0),
                  logits_target((6, 3), 3, ignored=(1, 5), ignore_value=0))
    yield Row("nll_loss_raw_input", F.nll_loss, logits_target((4, 3), 3))
    yield Row("nll_loss_spatial", lambda x, t: F.nll_loss(x, t, reduction="sum"), logits_target((2, 3, 2, 3), 3, ignored=(4,)))
    # ---- mse_loss
    for red in ("mean", "sum", "none"):
        yield Row(f"mse_loss_{red}", lambda a, b, red=red: F.mse_loss(a, b, reduction=red),
                  lambda g: [torch.randn(3, 4, generator=g), torch.randn(3, 4, generator=g)])
    yield Row("mse_loss_transposed", lambda a, b: F.mse_loss(a.t(), b),
              lambda g: [torch.randn(4, 3, generator=g), torch.randn(3, 4, generator=g)])
    yield Row("mse_loss_special", lambda a, b: F.mse_loss(a, b, reduction="none"),
              lambda g: [torch.tensor([1.0, float("inf"), float("nan"), -2.0]), torch.randn(4, generator=g)])
    yield Row("mse_loss_empty", lambda a, b: F.mse_loss(a, b, reduction="sum"),
              lambda g: [torch.randn(0, 3, generator=g), torch.randn(0, 3, generator=g)])

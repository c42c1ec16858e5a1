"""torch_xla's single-process API over axle: each name the seed uses, with what it promises.

Run: PYTHONPATH=python $V/bin/python -m pytest python/tests/test_api.py
Counters are process-wide, so every check compares before and after (or clears first).
"""
import collections
import os
import subprocess
import sys
import textwrap
import warnings

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.dirname(HERE)
if PYDIR not in sys.path:
    sys.path.insert(0, PYDIR)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import torch_xla  # noqa: E402
import torch_xla.core.xla_model as xm  # noqa: E402
import torch_xla.debug.metrics as met  # noqa: E402
import torch_xla.distributed.parallel_loader as pl  # noqa: E402
import torch_xla.runtime as xr  # noqa: E402


def counter(name):
    return met.counter_value(name) or 0


def samples(metric):
    data = met.metric_data(metric)
    return 0 if data is None else data[0]


def xla(t):
    """A cpu tensor moved to xla: device data, no pending graph."""
    return t.to("xla")


# ---- torch_xla ----
def test_device():
    assert torch_xla.device() == torch.device("xla:0")
    assert torch_xla.device(0) == torch.device("xla:0")
    assert torch_xla.devices() == [torch.device("xla:0")]
    assert torch_xla.device_count() == 1
    with pytest.raises(IndexError, match="one xla device"):
        torch_xla.device(1)
    t = torch.ones(2).to(torch_xla.device())
    assert t.device.type == "xla"
    assert torch.equal(t.cpu(), torch.ones(2))


def test_step_syncs_on_entry_and_exit():
    a = xla(torch.arange(6, dtype=torch.float32))
    pending = a * 5  # traced before the step: the entry sync runs it, apart from the step's graph
    before = counter("MarkStep")
    with torch_xla.step():
        y = a * 2 + 1
    assert counter("MarkStep") == before + 2
    executed = samples("ExecuteTime")
    # The step's exit ran the graph: reading the result runs nothing more.
    assert torch.equal(y.cpu(), torch.arange(6, dtype=torch.float32) * 2 + 1)
    assert torch.equal(pending.cpu(), torch.arange(6, dtype=torch.float32) * 5)
    assert samples("ExecuteTime") == executed


def test_step_reraises_the_blocks_error_and_still_cuts_the_step():
    a = xla(torch.ones(3))
    before = counter("MarkStep")
    with pytest.raises(ValueError, match="from the block"):
        with torch_xla.step():
            b = a + 1
            raise ValueError("from the block")
    assert counter("MarkStep") == before + 2
    assert torch.equal(b.cpu(), torch.full((3,), 2.0))
    with torch_xla.step():  # the step machinery is left in order
        c = a * 4
    assert torch.equal(c.cpu(), torch.full((3,), 4.0))


def test_step_as_decorator_and_nested_use():
    a = xla(torch.ones(2))

    @torch_xla.step()
    def work(x):
        return x * 3

    before = counter("MarkStep")
    out = work(a)
    out2 = work(a)
    assert counter("MarkStep") == before + 4
    assert torch.equal(out.cpu(), torch.full((2,), 3.0)) and torch.equal(out2.cpu(), out.cpu())


def test_sync_runs_pending_work():
    a = xla(torch.ones(4))
    y = a.exp()
    before, executed = counter("MarkStep"), samples("ExecuteTime")
    torch_xla.sync()
    assert counter("MarkStep") == before + 1
    assert samples("ExecuteTime") == executed + 1
    torch.testing.assert_close(y.cpu(), torch.ones(4).exp())
    torch_xla.sync(wait=True)


def _mm_relu_sum(a, b):
    return (a @ b).relu().sum()


def test_compile_caches_one_graph_for_repeated_calls():
    f = torch_xla.compile(_mm_relu_sum)
    a, b = xla(torch.randn(3, 3)), xla(torch.randn(3, 3))
    expected = _mm_relu_sum(a.cpu(), b.cpu())
    met.clear_counters()
    outs = [f(a, b) for _ in range(3)]
    assert counter("UncachedCompile") == 1
    assert counter("CachedCompile") == 2
    assert counter("UncachedCompile::_mm_relu_sum") == 1  # the graph carries the function's name
    assert counter("MarkStep") == 3  # each call is a step
    executed = samples("ExecuteTime")
    for o in outs:
        torch.testing.assert_close(o.cpu(), expected)
    assert samples("ExecuteTime") == executed  # the results were computed by the calls
    # A new input shape is a new graph, then cached too.
    c = xla(torch.randn(3, 5))
    f(a, c)
    f(a, c)
    assert counter("UncachedCompile") == 2 and counter("CachedCompile") == 3


def test_compile_name_and_forms():
    a = xla(torch.ones(2))

    @torch_xla.compile
    def plain(x):
        return x + 1

    @torch_xla.compile(name="named_fn")
    def with_args(x):
        return x + 2

    met.clear_counters()
    assert torch.equal(plain(a).cpu(), torch.full((2,), 2.0))
    assert torch.equal(with_args(a).cpu(), torch.full((2,), 3.0))
    names = met.counter_names()
    assert any(n.endswith("::plain") for n in names), names
    assert any(n.endswith("::named_fn") for n in names), names
    assert plain.__name__ == "plain"

    before = counter("MarkStep")
    with torch_xla.compile(name="block"):  # a context manager over a block
        y = a * 7
    assert counter("MarkStep") == before + 1  # the block is one step
    executed = samples("ExecuteTime")
    assert torch.equal(y.cpu(), torch.full((2,), 7.0))
    assert samples("ExecuteTime") == executed


def test_compile_full_graph_read_raises_naming_the_function():
    def reads_a_value(x):
        y = x * 2
        if y.sum().item() > 0:  # a value read inside the function
            return y
        return -y

    f = torch_xla.compile(reads_a_value, full_graph=True)
    a = xla(torch.ones(3))
    with pytest.raises(RuntimeError, match=r"reads_a_value.*full_graph|full_graph.*reads_a_value"):
        f(a)
    # Without full_graph the read is allowed (the graph is split there).
    g = torch_xla.compile(reads_a_value, full_graph=False, name="reads_allowed")
    assert torch.equal(g(a).cpu(), torch.full((3,), 2.0))
    # The failed call left no tracing context behind.
    with torch_xla.step():
        z = a + 1
    assert torch.equal(z.cpu(), torch.full((3,), 2.0))


def test_compile_max_different_graphs():
    f = torch_xla.compile(lambda x: x.sum(), name="limited", max_different_graphs=1)
    f(xla(torch.ones(3)))
    f(xla(torch.ones(3)))  # the same graph again
    with pytest.raises(RuntimeError, match="limited.*max_different_graphs = 1"):
        f(xla(torch.ones(4)))
    with pytest.raises(ValueError, match="max_different_graphs"):
        torch_xla.compile(lambda x: x, max_different_graphs=0)


def test_compile_debug_explains_which_argument_changed():
    # AXLE_DEBUG is read once per process: a child process.
    code = textwrap.dedent("""
        import torch, torch_xla
        def step_fn(data, target):
            return (data * 2).sum() + target.sum()
        c = torch_xla.compile(step_fn, name="train_step")
        t = torch.ones(2).to('xla')
        c(torch.ones(3).to('xla'), t)
        c(torch.ones(4).to('xla'), t)
    """)
    env = dict(os.environ, AXLE_DEBUG="1", PYTHONPATH=PYDIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert ("(tensor argument 0 of compiled function 'train_step') changed from float32[3] to float32[4]"
            in r.stderr), r.stderr


def test_eager_mode():
    from torch_xla.experimental import eager_mode_context

    a = xla(torch.ones(3))
    assert not torch_xla.experimental.is_eager_mode()
    torch_xla.experimental.eager_mode(True)
    try:
        assert torch_xla.experimental.is_eager_mode()
        eager_ops = samples("EagerOpExecuteTime")
        y = a * 3 + 1  # runs at once, op by op
        assert samples("EagerOpExecuteTime") >= eager_ops + 2
        executed = samples("EagerOpExecuteTime") + samples("ExecuteTime")
        assert torch.equal(y.cpu(), torch.full((3,), 4.0))
        assert samples("EagerOpExecuteTime") + samples("ExecuteTime") == executed  # nothing was pending
        # compile() still traces one whole graph under eager mode.
        f = torch_xla.compile(lambda x: (x * 5 - 1).sum(), name="eager_compiled")
        before = samples("EagerOpExecuteTime")
        assert f(a).item() == 12.0
        assert samples("EagerOpExecuteTime") == before
        assert torch_xla.experimental.is_eager_mode()  # compile() restores the mode
    finally:
        torch_xla.experimental.eager_mode(False)
    assert not torch_xla.experimental.is_eager_mode()
    with eager_mode_context(True):
        assert torch_xla.experimental.is_eager_mode()
    assert not torch_xla.experimental.is_eager_mode()


def test_manual_seed_reproducible_on_xla():
    torch.manual_seed(1234)
    a = torch.rand(16, device="xla").cpu()
    cpu_a = torch.rand(4)
    torch.manual_seed(1234)
    b = torch.rand(16, device="xla").cpu()
    cpu_b = torch.rand(4)
    assert torch.equal(a, b)
    assert torch.equal(cpu_a, cpu_b)  # torch's own generator is still seeded
    torch.manual_seed(4321)
    assert not torch.equal(torch.rand(16, device="xla").cpu(), a)
    torch.random.manual_seed(1234)  # the same function under its other name
    assert torch.equal(torch.rand(16, device="xla").cpu(), a)
    torch_xla.manual_seed(1234)
    assert torch.equal(torch.rand(16, device="xla").cpu(), a)
    g = torch.manual_seed(7)  # still returns torch's generator
    assert isinstance(g, torch.Generator) and g.initial_seed() == 7


# ---- metrics ----
def test_metrics():
    a = xla(torch.randn(8))
    met.clear_all()
    assert met.counter_value("MarkStep") is None  # zero reads as None (torch_xla: never created)
    assert met.metric_data("ExecuteTime") is None
    with torch_xla.step():
        y = a * 2
    assert met.counter_value("MarkStep") == 2
    assert "MarkStep" in met.counter_names()
    assert "ExecuteTime" in met.metric_names()
    n, accumulator, sample_list = met.metric_data("ExecuteTime")
    assert n == 1 and accumulator > 0 and sample_list == []
    y.cpu()
    assert met.metric_data("TransferFromDeviceTime")[0] >= 1
    report = met.metrics_report()
    assert "MarkStep" in report and "ExecuteTime" in report
    assert "MarkStep=2" in met.short_metrics_report()
    short = met.short_metrics_report(["MarkStep"], ["ExecuteTime"])
    assert "MarkStep" in short and "ExecuteTime" in short
    met.clear_counters()
    assert met.counter_value("MarkStep") is None
    assert met.metric_data("ExecuteTime")[0] == 1  # timed metrics stay
    with torch_xla.step():
        y = a + 1
    met.clear_metrics()
    assert met.metric_data("ExecuteTime") is None
    assert met.counter_value("MarkStep") == 2  # counters stay
    met.clear_all()
    assert met.counter_names() == [] or "MarkStep" not in met.counter_names()


def test_fallback_ops_are_counted():
    a = xla(torch.randn(5))
    name = "aten::special_bessel_j0"
    before = counter(name)
    values = torch.special.bessel_j0(a)  # no lowering: runs on the cpu
    torch.testing.assert_close(values.cpu(), torch.special.bessel_j0(a.cpu()))
    assert counter(name) == before + 1
    assert name in met.executed_fallback_ops()


# ---- xla_model ----
def test_deprecated_names_warn_and_work():
    with pytest.warns(DeprecationWarning, match=r"torch_xla\.device\(\)"):
        assert xm.xla_device() == torch.device("xla:0")
    with pytest.warns(DeprecationWarning, match=r"torch_xla\.sync\(\).*torch_xla\.step\(\)"):
        before = counter("MarkStep")
        xm.mark_step()
        assert counter("MarkStep") == before + 1
    with pytest.warns(DeprecationWarning, match=r"torch_xla\.runtime\.world_size\(\)"):
        assert xm.xrt_world_size() == 1
    with pytest.warns(DeprecationWarning, match=r"torch_xla\.runtime\.global_ordinal\(\)"):
        assert xm.get_ordinal() == 0
    with pytest.warns(DeprecationWarning, match=r"pl\.MpDeviceLoader\(loader, device\)"):
        pl.ParallelLoader([torch.ones(2)], [torch_xla.device()]).close()


def test_mark_step_inside_step_raises():
    a = xla(torch.ones(2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(RuntimeError, match=r"mark_step.*step\(\)") as info:
            with torch_xla.step():
                b = a + 1
                xm.mark_step()
    assert "torch_xla.step()" in str(info.value)  # the Python names, not only the C++ ones
    assert torch.equal(b.cpu(), torch.full((2,), 2.0))  # the step still ended cleanly
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        xm.mark_step()  # outside a step it works


def test_optimizer_step_is_optimizer_step_on_one_device():
    torch.manual_seed(0)
    m1 = nn.Linear(4, 3)
    m2 = nn.Linear(4, 3)
    m2.load_state_dict(m1.state_dict())
    m1.to("xla")
    m2.to("xla")
    o1 = torch.optim.SGD(m1.parameters(), lr=0.1, momentum=0.9)
    o2 = torch.optim.SGD(m2.parameters(), lr=0.1, momentum=0.9)
    x, y = xla(torch.randn(8, 4)), xla(torch.randn(8, 3))
    for m, o, use_xm in ((m1, o1, True), (m2, o2, False)):
        with torch_xla.step():
            o.zero_grad()
            ((m(x) - y) ** 2).mean().backward()
            if use_xm:
                xm.optimizer_step(o)
            else:
                o.step()
    for p1, p2 in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(p1.cpu(), p2.cpu(), rtol=0, atol=0)

    def closure():
        o1.zero_grad()
        loss = ((m1(x) - y) ** 2).mean()
        loss.backward()
        return loss

    before = counter("MarkStep")
    loss = xm.optimizer_step(o1, optimizer_args={"closure": closure})  # returns optimizer.step()'s value
    assert loss.device.type == "xla"
    assert counter("MarkStep") == before  # no barrier: no sync
    xm.optimizer_step(o1, barrier=True, optimizer_args={"closure": closure})
    assert counter("MarkStep") == before + 1


def test_memory_info_and_ordinals(capsys):
    info = xm.get_memory_info(torch_xla.device())
    assert set(info) == {"bytes_used", "bytes_limit", "peak_bytes_used"}
    assert info["bytes_limit"] > 0 and info["peak_bytes_used"] >= info["bytes_used"] >= 0
    keep = xla(torch.zeros(1 << 20))  # 4 MiB on the device
    torch_xla.sync()
    assert xm.get_memory_info()["bytes_used"] >= info["bytes_used"] + 4 * (1 << 20) - 4096
    del keep
    assert xm.is_master_ordinal() and xm.is_master_ordinal(local=False)
    xm.master_print("hello", "master")
    assert capsys.readouterr().out == "hello master\n"
    assert xm.get_xla_supported_devices() == ["xla:0"]
    assert xm.is_xla_tensor(xla(torch.ones(1))) and not xm.is_xla_tensor(torch.ones(1))


def test_torch_save_of_xla_tensor_names_cpu_and_xm_save(tmp_path):
    m = nn.Linear(3, 2).to("xla")
    for obj in (m.weight.detach(), m.state_dict(), {"model": m.state_dict(), "step": 3}, [m.weight]):
        with pytest.raises(RuntimeError, match=r"\.cpu\(\).*xla_model\.save"):
            torch.save(obj, tmp_path / "x.pt")
    torch.save({k: v.cpu() for k, v in m.state_dict().items()}, tmp_path / "ok.pt")  # the advice works
    assert torch.load(tmp_path / "ok.pt")["weight"].device.type == "cpu"


Pair = collections.namedtuple("Pair", "a b")


def test_xm_save_moves_everything_to_cpu(tmp_path):
    m = nn.Linear(3, 2).to("xla")
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    with torch_xla.step():
        m(xla(torch.randn(4, 3))).sum().backward()
        opt.step()
    pending = m.weight * 2  # a pending value: xm.save syncs it
    data = {"model": m.state_dict(), "opt": opt.state_dict(), "pair": Pair(pending, [m.bias, 5]),
            "param": m.weight, "tuple": (torch.ones(2), "text")}
    xm.save(data, tmp_path / "ckpt.pt")
    loaded = torch.load(tmp_path / "ckpt.pt", weights_only=False)
    torch.testing.assert_close(loaded["model"]["weight"], m.weight.detach().cpu())
    assert loaded["model"]["weight"].device.type == "cpu"
    assert loaded["opt"]["state"][0]["momentum_buffer"].device.type == "cpu"
    assert isinstance(loaded["pair"], Pair)
    torch.testing.assert_close(loaded["pair"].a, (m.weight * 2).detach().cpu())
    assert loaded["pair"].b[1] == 5
    assert isinstance(loaded["param"], nn.Parameter) and loaded["param"].requires_grad
    assert loaded["tuple"][1] == "text"
    # The data given is unchanged: still on xla.
    assert data["model"]["weight"].device.type == "xla"


# ---- runtime ----
def test_runtime():
    assert xr.device_type() == "CPU"
    assert xr.world_size() == 1
    assert xr.global_ordinal() == 0
    assert xr.local_ordinal() == 0
    assert xr.addressable_device_count() == 1
    assert xr.is_spmd() is False


# ---- parallel_loader ----
def _loader(n=5, bs=4):
    ds = torch.utils.data.TensorDataset(torch.arange(n * bs * 3, dtype=torch.float32).reshape(n * bs, 3),
                                        torch.arange(n * bs))
    return torch.utils.data.DataLoader(ds, batch_size=bs)


def test_mp_device_loader_yields_xla_batches_in_order_and_marks_steps():
    src = _loader()
    mp = pl.MpDeviceLoader(src, torch_xla.device())
    assert len(mp) == 5
    expected = list(src)
    before = counter("MarkStep")
    got = []
    for data, target in mp:
        assert data.device.type == "xla" and target.device.type == "xla"
        got.append((data, target))
    assert counter("MarkStep") == before + 5 + 1  # one per batch, one at the end of the epoch
    assert len(got) == 5
    for (d, t), (ed, et) in zip(got, expected):
        assert torch.equal(d.cpu(), ed) and torch.equal(t.cpu(), et)
    assert len(list(mp)) == 5  # a second epoch


def test_mp_device_loader_moves_nested_batches():
    batches = [{"x": torch.ones(2, 2) * i, "meta": ("name", [torch.arange(3)])} for i in range(3)]
    out = list(pl.MpDeviceLoader(batches, "xla", device_prefetch_size=1))
    assert len(out) == 3
    assert out[2]["x"].device.type == "xla" and torch.equal(out[2]["x"].cpu(), torch.ones(2, 2) * 2)
    assert out[0]["meta"][0] == "name" and out[0]["meta"][1][0].device.type == "xla"


class _Failing(torch.utils.data.Dataset):
    def __len__(self):
        return 6

    def __getitem__(self, i):
        if i == 4:
            raise KeyError(f"bad sample {i}")
        return torch.tensor(float(i))


def test_mp_device_loader_reraises_loader_errors_in_the_loop():
    src = torch.utils.data.DataLoader(_Failing(), batch_size=2)  # batches 0, 1 fine; batch 2 fails
    it = iter(pl.MpDeviceLoader(src, torch_xla.device()))
    assert torch.equal(next(it).cpu(), torch.tensor([0.0, 1.0]))
    assert torch.equal(next(it).cpu(), torch.tensor([2.0, 3.0]))
    with pytest.raises(KeyError, match="bad sample 4"):
        next(it)
    with pytest.raises(StopIteration):  # the loader's error ends its epoch
        next(it)


def test_mp_device_loader_reraises_transfer_errors_and_goes_on():
    bad = torch.ones(2, dtype=torch.complex64)  # no xla dtype for it
    batches = [torch.ones(2), bad, torch.full((2,), 3.0)]
    it = iter(pl.MpDeviceLoader(batches, torch_xla.device()))
    assert torch.equal(next(it).cpu(), torch.ones(2))
    with pytest.raises(Exception, match="(?i)complex"):
        next(it)
    assert torch.equal(next(it).cpu(), torch.full((2,), 3.0))  # the next batch still comes
    with pytest.raises(StopIteration):
        next(it)


def test_mp_device_loader_trains_with_step():
    torch.manual_seed(0)
    model = nn.Linear(3, 2).to("xla")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for data, target in pl.MpDeviceLoader(_loader(), torch_xla.device()):
        with torch_xla.step():
            opt.zero_grad()
            loss = F.mse_loss(model(data), (target % 2).float().unsqueeze(1).expand(-1, 2))
            loss.backward()
            xm.optimizer_step(opt)
        assert torch.isfinite(loss.cpu())


def test_parallel_loader_old_api():
    with pytest.warns(DeprecationWarning):
        para = pl.ParallelLoader(_loader(3), [torch_xla.device()])
    per_device = para.per_device_loader(torch_xla.device())
    assert len(per_device) == 3
    batches = list(per_device)
    assert len(batches) == 3 and batches[0][0].device.type == "xla"
    with pytest.raises(ValueError, match="exactly one device"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            pl.ParallelLoader(_loader(1), ["xla:0", "xla:1"])


def test_mp_device_loader_abandoned_epoch_stops_its_thread():
    import gc
    import threading

    mp = pl.MpDeviceLoader(_loader(20, 2), torch_xla.device(), device_prefetch_size=2)
    it = iter(mp)
    next(it)
    del it
    iter(mp)  # a new epoch closes the previous one
    mp._epoch.close()
    del mp
    gc.collect()
    for t in threading.enumerate():
        if t.name == "axle-MpDeviceLoader":
            t.join(timeout=5)
    assert not [t for t in threading.enumerate() if t.name == "axle-MpDeviceLoader" and t.is_alive()]

"""torch_xla's top-level API (``torch_xla.device()``, ``step()``, ``sync()``, ``compile()``) over
axle's lazy runtime (axle._C). One process, one device: ``xla:0``."""
import functools
import threading

import torch
import torch.utils._pytree as _pytree

from axle import _C  # loads the device and applies axle's torch patches

__all__ = ["device", "devices", "device_count", "sync", "step", "compile", "manual_seed"]


def device(index=None):
    """The xla device of this process, ``torch.device('xla:0')`` (axle has one device per process).

    ``index`` may be None or 0; anything else raises IndexError.
    """
    if index not in (None, 0):
        raise IndexError(f"xla device index {index} out of range: this process has one xla device (xla:0)")
    _C._device_requested()  # launch() refuses a parent that asked for the device (seed anti-pattern 1)
    return torch.device("xla", 0)


def devices():
    """Every xla device of this process: ``[torch.device('xla:0')]``."""
    return [device()]


def device_count():
    """The number of xla devices this process addresses: 1."""
    return 1


def sync(wait=False, reset_scope=True):
    """Cuts the pending graph of every live xla tensor, compiles it (or takes it from the cache)
    and runs it; afterwards those tensors hold data. Counts ``MarkStep``.

    ``wait``: also wait for asynchronous executions (AXLE_ASYNC=1) to finish. ``reset_scope`` is
    accepted for torch_xla's signature and has no effect.
    """
    _C._sync()
    if wait:
        _C._wait_device_ops()


class _Step:
    """``with torch_xla.step():`` a step boundary: syncs on entry (the block's graph holds only its
    own work) and on exit, also when the block raises (then the block's exception propagates).
    Usable as a decorator too. ``xm.mark_step()`` inside the block raises: pick one."""

    def __init__(self):
        self._scopes = threading.local()

    def _stack(self):
        st = getattr(self._scopes, "stack", None)
        if st is None:
            st = self._scopes.stack = []
        return st

    def __enter__(self):
        scope = _C._StepScope()
        scope.enter()
        self._stack().append(scope)
        return self

    def __exit__(self, exc_type, exc, tb):
        scope = self._stack().pop()
        scope.exit(unwinding=exc_type is not None)
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def stepped(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)

        return stepped


def step():
    """A step boundary, as a context manager (or decorator): ``with torch_xla.step(): ...`` syncs on
    entry and on exit, so each step runs as one cached graph."""
    return _Step()


def _label_tensors(call, args, kwargs):
    # The k-th xla tensor among the arguments (nested ones included) gets the label
    # "tensor argument k of compiled function '<name>'" in AXLE_DEBUG's compile explanations.
    k = 0
    for leaf in _pytree.tree_leaves((args, kwargs)):
        if isinstance(leaf, torch.Tensor):
            call.label(k, leaf)
            k += 1


def _function_name(f):
    name = getattr(f, "__name__", None)
    if name is None:
        name = type(f).__name__
    return name


class _CompiledRegion:
    """``torch_xla.compile(...)`` without a function: a context manager (``with
    torch_xla.compile(full_graph=True): ...``) whose block runs as one graph, and a decorator
    (``@torch_xla.compile(name="train_step")``)."""

    def __init__(self, full_graph, name, max_different_graphs):
        self._full_graph = bool(full_graph)
        self._name = name
        self._max = max_different_graphs
        self._state = None
        self._calls = threading.local()

    def __call__(self, fn):
        return compile(fn, full_graph=self._full_graph, name=self._name, max_different_graphs=self._max)

    def __enter__(self):
        if self._state is None:
            self._state = _make_state(self._name or "compiled", self._full_graph, self._max)
        call = _C._CompiledCall(self._state)
        call.enter()
        stack = getattr(self._calls, "stack", None)
        if stack is None:
            stack = self._calls.stack = []
        stack.append(call)
        return self

    def __exit__(self, exc_type, exc, tb):
        call = self._calls.stack.pop()
        try:
            if exc_type is None:
                call.finish()
        finally:
            call.exit()
        return False


def _make_state(name, full_graph, max_different_graphs):
    if max_different_graphs is not None:
        max_different_graphs = int(max_different_graphs)
        if max_different_graphs < 1:
            raise ValueError(f"torch_xla.compile: expected max_different_graphs >= 1 (or None: no limit), "
                             f"got {max_different_graphs}")
    return _C._compiled_fn(str(name), bool(full_graph), max_different_graphs or 0)


def compile(f=None, full_graph=False, name=None, max_different_graphs=None):
    """Traces ``f`` lazily and runs all it does as one graph per call, compiled once per input
    signature (shapes, dtypes) and cached (seed Pattern 4).

    A call first syncs pending work (the graph holds only the function's own work), then runs
    ``f`` (lazily, also under eager mode), then runs the graph; the returned tensors hold data.

    - ``full_graph=True``: reading a value inside ``f`` (``.item()``, ``.cpu()``, ``print``, a
      branch on a tensor) raises an error naming the read and the function.
    - ``name``: the graph's name in AXLE_DEBUG messages (default: ``f.__name__``).
    - ``max_different_graphs=N``: a call that would make the function's (N+1)-th distinct graph
      raises, saying what differed from the previous one.

    With AXLE_DEBUG=1 (or PT_XLA_DEBUG=1), each recompile is explained: which tensor argument
    changed and how (shape, dtype).

    ``compile(fn)`` returns the compiled function; ``compile(...)`` without ``f`` returns an
    object usable as a decorator or as a context manager around a block.
    """
    if f is None:
        return _CompiledRegion(full_graph, name, max_different_graphs)
    if not callable(f):
        raise TypeError(f"torch_xla.compile: expected a callable, got {type(f).__name__}")
    state = _make_state(name if name is not None else _function_name(f), full_graph, max_different_graphs)

    @functools.wraps(f)
    def compiled(*args, **kwargs):
        call = _C._CompiledCall(state)
        call.enter()
        try:
            _label_tensors(call, args, kwargs)
            out = f(*args, **kwargs)
            call.finish()
        finally:
            call.exit()
        return out

    compiled._axle_compiled_state = state
    return compiled


def manual_seed(seed, device=None):
    """Seeds axle's generator (the xla device's random numbers); ``torch.manual_seed`` does this too."""
    _C._manual_seed(int(seed) % (1 << 64))


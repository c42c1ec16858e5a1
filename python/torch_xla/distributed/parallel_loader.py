"""torch_xla.distributed.parallel_loader (pl): a DataLoader's batches, already on the xla device,
moved while the step runs (seed Pattern 5).

    mp_loader = pl.MpDeviceLoader(train_loader, torch_xla.device())
    for data, target in mp_loader:          # data, target: xla tensors
        with torch_xla.step():
            ...

A background thread reads the wrapped loader and moves each batch to the device
(``tensor.to(device)`` for every tensor in it, however nested), up to ``device_prefetch_size``
batches ahead of the loop. Batches come in the loader's order. As torch_xla's loader does, taking
a batch marks a step boundary: the loop's ``next()`` syncs before handing out every
``batches_per_execution``-th batch, and once more at the end of the epoch (an epoch of n batches
adds ceil(n / batches_per_execution) + 1 to MarkStep). An exception raised while reading or
moving a batch is raised again in the loop when that batch is reached; one raised by the loader
ends the epoch after it, one raised while moving a batch skips only that batch.

One process has one device here: ``ParallelLoader`` (deprecated) takes a list holding exactly that
device.
"""
import atexit
import queue
import threading
import warnings

import torch

from ..torch_xla import sync as _sync

__all__ = ["MpDeviceLoader", "ParallelLoader", "PerDeviceLoader"]

_BATCH, _ERROR, _END = 0, 1, 2


def _to_device(data, device):
    if isinstance(data, torch.Tensor):
        return data.to(device)
    if isinstance(data, dict):
        items = [(k, _to_device(v, device)) for k, v in data.items()]
        try:
            return type(data)(items)
        except TypeError:
            return dict(items)
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # namedtuple
        return type(data)(*(_to_device(v, device) for v in data))
    if isinstance(data, (list, tuple)):
        return type(data)(_to_device(v, device) for v in data)
    return data


def _check_positive(value, name):
    if int(value) < 1:
        raise ValueError(f"[MpDeviceLoader] expected {name} >= 1, got {value}")
    return int(value)


def _norm_device(device):
    device = torch.device(device)
    if device.type == "xla" and device.index is None:
        return torch.device("xla", 0)
    return device


def _put(q, stop, item):
    while not stop.is_set():
        try:
            q.put(item, timeout=0.05)
            return True
        except queue.Full:
            continue
    return False


# The background threads still running: (stop flag, thread). At exit they are stopped and joined
# before the interpreter finalizes: a daemon thread frozen there inside a C++ call (a transfer)
# would abort the process ("terminate called without an active exception").
_live = set()
_live_lock = threading.Lock()


@atexit.register
def _stop_all():
    with _live_lock:
        live = list(_live)
    for stop, _ in live:
        stop.set()
    for _, thread in live:
        thread.join(timeout=5)


def _work(loader, device, q, stop, input_sharding=None):
    """The background thread: reads `loader`, moves each batch to `device`, queues it."""
    entry = (stop, threading.current_thread())
    with _live_lock:
        _live.add(entry)
    try:
        _produce(loader, device, q, stop, input_sharding)
    finally:
        with _live_lock:
            _live.discard(entry)


def _move(batch, device, input_sharding):
    """A batch on the device; under SPMD sharded by input_sharding (replicated without one)."""
    from .. import runtime

    if input_sharding is None and not runtime.is_spmd():
        return _to_device(batch, device)
    from .spmd import shard_batch

    return shard_batch(batch, input_sharding)


def _produce(loader, device, q, stop, input_sharding=None):
    try:
        it = iter(loader)
        while not stop.is_set():
            try:
                batch = next(it)
            except StopIteration:
                break
            except BaseException as e:  # the loader failed: the error is its last item
                _put(q, stop, (_ERROR, e))
                break
            try:
                item = (_BATCH, _move(batch, device, input_sharding))
            except BaseException as e:  # this batch could not be moved: it travels as its error
                item = (_ERROR, e)
            if not _put(q, stop, item):
                return
    except BaseException as e:  # iter(loader) itself failed
        _put(q, stop, (_ERROR, e))
    _put(q, stop, (_END, None))


class PerDeviceLoader:
    """One epoch of a loader on one device: an iterator of device batches (see the module doc)."""

    def __init__(self, loader, device, device_prefetch_size=8, batches_per_execution=1, input_sharding=None):
        self._loader = loader
        self._device = _norm_device(device)
        self._per_execution = _check_positive(batches_per_execution, "batches_per_execution")
        self._queue = queue.Queue(maxsize=_check_positive(device_prefetch_size, "device_prefetch_size"))
        self._stop = threading.Event()
        self._taken = 0  # batches handed out
        self._ended = False
        self._synced_at = -1  # the value of _taken at the last sync
        # The thread holds the queue and the stop flag, not this object: an abandoned epoch is
        # collected, and its __del__ stops the thread.
        self._thread = threading.Thread(target=_work, args=(loader, self._device, self._queue, self._stop, input_sharding),
                                        name="axle-MpDeviceLoader", daemon=True)
        self._thread.start()

    # ---- the training loop's side ----
    def __iter__(self):
        return self

    def __len__(self):
        return len(self._loader)

    def _sync_once(self):
        if self._synced_at != self._taken:
            self._synced_at = self._taken
            _sync()

    def __next__(self):
        if self._ended:
            raise StopIteration
        if self._taken % self._per_execution == 0:
            self._sync_once()  # the step boundary torch_xla's loader marks
        kind, value = self._queue.get()
        if kind == _END:
            self._ended = True
            self._sync_once()  # the epoch's last batches
            self._thread.join()
            raise StopIteration
        self._taken += 1
        if kind == _ERROR:
            raise value
        return value

    next = __next__

    def close(self):
        """Stops the background thread (an abandoned epoch)."""
        stop = getattr(self, "_stop", None)
        if stop is None:
            return
        stop.set()
        try:
            while True:
                self._queue.get_nowait()
        except queue.Empty:
            pass

    def __del__(self):
        self.close()


class MpDeviceLoader:
    """Wraps ``loader`` (a ``torch.utils.data.DataLoader`` or any iterable of batches; ``len()``
    needs one with a length): each iteration is an epoch of device batches, moved by a
    background thread while the step runs (see the module doc).

    Options (torch_xla's names): ``device_prefetch_size`` (batches moved ahead, default 8),
    ``batches_per_execution`` (batches handed out between two syncs, default 1). torch_xla's
    ``loader_prefetch_size``, ``host_to_device_transfer_threads``, ``batchdim`` and
    ``fixed_batch_size`` are accepted; one thread reads and moves here. ``input_sharding`` (SPMD:
    an ``xs.ShardingSpec``, or a dict of them per batch key) shards each batch as it is moved;
    under SPMD without it, batches arrive replicated (torch_xla's rule).
    """

    def __init__(self, loader, device, **kwargs):
        self._loader = loader
        self._device = _norm_device(device)
        if self._device.type != "xla":
            raise ValueError(f"[MpDeviceLoader] expected an xla device, got {self._device}")
        self._input_sharding = kwargs.pop("input_sharding", None)
        if self._input_sharding is not None:
            from .spmd import check_input_sharding
            check_input_sharding(self._input_sharding)
        self._prefetch = _check_positive(kwargs.pop("device_prefetch_size", 8), "device_prefetch_size")
        self._per_execution = _check_positive(kwargs.pop("batches_per_execution", 1), "batches_per_execution")
        for name in ("loader_prefetch_size", "host_to_device_transfer_threads"):
            if name in kwargs:
                _check_positive(kwargs.pop(name), name)
        kwargs.pop("batchdim", None)
        kwargs.pop("fixed_batch_size", None)
        if kwargs:
            raise TypeError(f"[MpDeviceLoader] unexpected keyword arguments: {', '.join(sorted(kwargs))}")
        self._epoch = None

    def __iter__(self):
        if self._epoch is not None:
            self._epoch.close()  # a new epoch stops one still running
        self._epoch = PerDeviceLoader(self._loader, self._device, device_prefetch_size=self._prefetch,
                                      batches_per_execution=self._per_execution,
                                      input_sharding=self._input_sharding)
        return self._epoch

    def __len__(self):
        return len(self._loader)


class ParallelLoader:
    """Old torch_xla loader (DeprecationWarning: use ``pl.MpDeviceLoader(loader, device)``):
    ``ParallelLoader(loader, [device]).per_device_loader(device)`` is one epoch of device batches.
    One process has one device: ``devices`` must hold exactly it."""

    def __init__(self, loader, devices, batchdim=0, batches_per_execution=1, loader_prefetch_size=16,
                 device_prefetch_size=8, host_to_device_transfer_threads=1, input_sharding=None,
                 fixed_batch_size=False):
        warnings.warn("torch_xla.distributed.parallel_loader.ParallelLoader(loader, [device]) is deprecated: use "
                      "pl.MpDeviceLoader(loader, device)", DeprecationWarning, stacklevel=2)
        devices = [_norm_device(d) for d in devices]
        if len(devices) != 1:
            raise ValueError(f"[ParallelLoader] expected exactly one device (axle runs one device per process), "
                             f"got {len(devices)}: {devices}")
        self._loader = MpDeviceLoader(loader, devices[0], batches_per_execution=batches_per_execution,
                                      loader_prefetch_size=loader_prefetch_size,
                                      device_prefetch_size=device_prefetch_size,
                                      host_to_device_transfer_threads=host_to_device_transfer_threads,
                                      input_sharding=input_sharding)
        self._devices = devices

    def per_device_loader(self, device):
        """The epoch of device batches for ``device`` (the one given at construction)."""
        device = _norm_device(device)
        if device != self._devices[0]:
            raise ValueError(f"[ParallelLoader] per_device_loader({device}): this loader was built for "
                             f"{self._devices[0]}")
        return iter(self._loader)

    def per_device_samples(self):
        return len(self._loader)

    def close(self):
        if self._loader._epoch is not None:
            self._loader._epoch.close()

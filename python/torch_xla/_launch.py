"""``torch_xla.launch``: one process per device, over axle's C++ ``launch``.

The rules are the C++ ones (``axle::launch``, src/dist/launch.cpp), used as they are:

- The process count is ``nprocs`` when given, else ``AXLE_NUM_DEVICES`` (alias
  ``CPU_NUM_DEVICES``), else 1. Each rank is a fresh copy of this program (the same
  interpreter and arguments): it runs the code before ``launch`` again, then, at its own
  ``launch`` call, runs ``fn(index, *args)`` and exits. So, as with torch_xla's ``spawn``
  start method, what comes before ``launch`` must be cheap, deterministic and must not touch
  the xla device (keep it under ``if __name__ == '__main__':``).
- Under an external launcher (torchrun or axle-run: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``;
  Slurm's ``srun``; Open MPI's or MPICH's ``mpirun``; and ``MASTER_ADDR`` / ``MASTER_PORT``
  across hosts) nothing is spawned: this process is one rank and runs ``fn(local rank,
  *args)``. The C++ resolver decides which variables count (docs/distributed.md).
- Every process sees its own device as ``xla:0``.
- A child that fails (exception, non-zero exit, signal) stops every other child; ``launch``
  then raises ``axle.AxleError`` naming the rank and the cause (``rank 1 was killed by signal
  9 (Killed)``). Children die with their parent: none is left behind.
- ``torch_xla.device()`` (or any xla tensor) before ``launch`` in the parent raises the C++
  error naming the anti-pattern.
"""
import os
import select
import signal
import sys
import threading
import traceback
import warnings

import axle

__all__ = ["launch"]

_CHILD_ENV = "AXLE_LAUNCH_RANK"  # set by the parent's axle::launch for each rank it starts


def _line_buffered():
    # The parent relays each child's lines with a "[rank N] " prefix: hand them over whole.
    for s in (sys.stdout, sys.stderr):
        try:
            s.reconfigure(line_buffering=True)
        except (AttributeError, ValueError):
            pass


def _flush():
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except Exception:
            pass


def _forget_launch_env():
    # axle::launch already removed its variables from the C environment before fn ran;
    # os.environ keeps its own copy, which subprocesses (DataLoader workers, tools) would
    # inherit and take for a rank of their own.
    for k in [k for k in os.environ if k.startswith("AXLE_LAUNCH_")]:
        del os.environ[k]


def _launched_children():
    """This process's children that axle::launch started (their environment names a rank)."""
    me = os.getpid()
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                stat = f.read()
            ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
            if ppid != me:
                continue
            with open(f"/proc/{d}/environ", "rb") as f:
                if (_CHILD_ENV + "=").encode() in f.read():
                    pids.append(int(d))
        except (OSError, ValueError):
            continue
    return pids


class _InterruptWatch:
    """Ctrl-C while the parent waits in C++: Python only notes the signal then, so a helper
    thread watching the signal wakeup fd ends the launched children, and launch() raises
    KeyboardInterrupt once the C++ side has reaped them."""

    def __init__(self):
        self.interrupted = False
        self._old = None
        self._thread = None

    def __enter__(self):
        if threading.current_thread() is not threading.main_thread():
            return self
        self._r, self._w = os.pipe()
        os.set_blocking(self._w, False)
        try:
            self._old = signal.set_wakeup_fd(self._w, warn_on_full_buffer=False)
        except ValueError:
            os.close(self._r)
            os.close(self._w)
            return self
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="axle-launch-interrupt", daemon=True)
        self._thread.start()
        return self

    def _watch(self):
        while not self._stop.is_set():
            ready, _, _ = select.select([self._r], [], [], 0.2)
            if not ready:
                continue
            data = os.read(self._r, 64)
            if signal.SIGINT in data or signal.SIGTERM in data:
                self.interrupted = True
                for pid in _launched_children():
                    for kill in (os.killpg, os.kill):
                        try:
                            kill(pid, signal.SIGKILL)
                        except OSError:
                            pass

    def __exit__(self, *exc):
        if self._thread is None:
            return False
        self._stop.set()
        self._thread.join()
        signal.set_wakeup_fd(self._old if self._old is not None else -1)
        os.close(self._r)
        os.close(self._w)
        return False


def launch(fn, args=(), start_method="spawn", debug_single_process=False, *, nprocs=None, timeout_s=300.0):
    """Runs ``fn(index, *args)`` once per device, each in its own process (see the module doc).

    ``start_method``: only ``'spawn'`` (every rank is a freshly started copy of this program).
    ``debug_single_process``: run ``fn(0, *args)`` in this process, spawning nothing.
    axle's own options: ``nprocs`` (the process count; default from the environment) and
    ``timeout_s`` (rendezvous and collective timeout, seconds).
    """
    if not callable(fn):
        raise TypeError(f"torch_xla.launch expects a function, got {type(fn).__name__}")
    if not isinstance(args, tuple):
        args = tuple(args)
    if start_method not in (None, "spawn"):
        warnings.warn(f"torch_xla.launch: start_method={start_method!r} is ignored on axle: every rank is a freshly "
                      "started copy of this program ('spawn')", stacklevel=2)
    in_child = bool(os.environ.get(_CHILD_ENV))  # read before axle::launch clears it
    if in_child:
        _line_buffered()

    def run(index):
        if in_child:
            _forget_launch_env()
        try:
            fn(index, *args)
        except SystemExit as e:
            if e.code not in (None, 0):
                raise
        except BaseException:
            if in_child:
                traceback.print_exc()  # the parent relays it as "[rank N] ..." lines
            raise
        finally:
            _flush()

    n = 0 if nprocs is None else int(nprocs)
    if in_child:
        axle._C._launch(run, n, bool(debug_single_process), float(timeout_s))
        return
    with _InterruptWatch() as watch:
        try:
            axle._C._launch(run, n, bool(debug_single_process), float(timeout_s))
        except axle._C.AxleError as e:
            if watch.interrupted:
                raise KeyboardInterrupt("torch_xla.launch: interrupted; every rank was stopped") from e
            raise
    if watch.interrupted:
        raise KeyboardInterrupt

"""torch_xla.debug.metrics (met): axle's counters and timed metrics under torch_xla's names
(counters MarkStep, UncachedCompile, CachedCompile, CreateXlaTensor, DestroyXlaTensor and one
``aten::<op>`` per CPU fallback; timed metrics CompileTime, ExecuteTime, TransferToDeviceTime,
TransferFromDeviceTime, ...)."""
from axle import _C

__all__ = ["metrics_report", "short_metrics_report", "counter_names", "counter_value", "metric_names",
           "metric_data", "clear_counters", "clear_metrics", "clear_all", "executed_fallback_ops"]

_DEFAULT_SHORT_COUNTERS = ["CachedCompile", "MarkStep"]
_DEFAULT_SHORT_METRICS = ["CompileTime", "ExecuteTime", "TransferToDeviceTime", "TransferFromDeviceTime"]


def metrics_report():
    """Every non-zero counter and timed metric, as text."""
    return _C._metrics_report()


def short_metrics_report(counter_names=None, metric_names=None):
    """A short report. Without arguments: axle's one-line compile/step summary. With names: those
    counters (``name: value``) and timed metrics (``name: total ms over n samples``) that are
    non-zero."""
    if counter_names is None and metric_names is None:
        return _C._short_metrics_report()
    counters = _C._counters()
    timers = _C._timers()
    lines = []
    for name in counter_names or _DEFAULT_SHORT_COUNTERS:
        if name in counters:
            lines.append(f"Counter: {name}\n  Value: {counters[name]}")
    for name in metric_names or _DEFAULT_SHORT_METRICS:
        if name in timers:
            ms, n = timers[name]
            lines.append(f"Metric: {name}\n  TotalSamples: {n}\n  Accumulator: {ms:.3f}ms")
    return "\n".join(lines) + ("\n" if lines else "")


def counter_names():
    """Names of the counters that are non-zero."""
    return sorted(_C._counters())


def counter_value(name):
    """The value of counter ``name``, or None when it is zero (never counted, or cleared); torch_xla
    returns None for a counter that was never created."""
    return _C._counters().get(name)


def metric_names():
    """Names of the timed metrics that have samples."""
    return sorted(_C._timers())


def metric_data(name):
    """``(total_samples, accumulator, samples)`` of timed metric ``name``, or None when it has no
    samples, as torch_xla's: the accumulator is the sum of the samples in nanoseconds (torch_xla's
    unit for timed metrics). axle keeps sums, not individual samples: ``samples`` is empty."""
    data = _C._timers().get(name)
    if data is None:
        return None
    ms, n = data
    return (int(n), float(ms) * 1e6, [])


def clear_counters():
    """Zeroes every counter (timed metrics stay)."""
    _C._clear_counters()


def clear_metrics():
    """Zeroes every timed metric (counters stay)."""
    _C._clear_timers()


def clear_all():
    """Zeroes every counter and timed metric."""
    _C._metrics_reset()


def executed_fallback_ops():
    """The aten ops that fell back to the CPU (their ``aten::<op>`` counters are non-zero)."""
    return sorted(n for n in _C._counters() if n.startswith("aten::"))

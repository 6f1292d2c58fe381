"""Measuring a real run: the storage tracker, phases and peaks, the allocation history, the tensor census, step
timing, the profiler, the device."""

"""Estimating before a run: the fake-tensor replay, the caching-allocator model, kernels' workspaces, step time."""

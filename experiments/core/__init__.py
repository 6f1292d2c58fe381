"""Torch-free facts of the engine: the configuration and its ranges, vocabulary, metrics, capacity, limits, recorded
results."""

"""Panels that one or a few lessons show: timeline, census, fragmentation, leaks, recorded runs,
timing rounds, what fits."""

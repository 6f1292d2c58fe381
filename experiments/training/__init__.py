"""The training step and what it is built from: model families, precision and optimizer strategies, the step, the
gradient guard."""

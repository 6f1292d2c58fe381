"""Results as DataFrames (frames) and the Altair charts drawn from them."""

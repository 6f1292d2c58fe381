"""Jobs: the kinds of job and the worker that runs them for every browser session."""

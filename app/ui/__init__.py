"""What every lesson page is built from: the two-column layout, the sandbox, jobs, results, the
'what to notice' checks, CPU sizing and the URL state."""

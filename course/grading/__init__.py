"""The graded exercises' rules: a grade is plain data (message keys and their arguments),
worded by the app's pages and checked by the tests without a page."""

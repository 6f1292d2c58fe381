"""The course's rules as data and pure functions: which pages and lessons exist, what the lessons
say and check, how exercises are graded. Neither torch nor Streamlit, so the app, the recording
scripts and the tests share them."""

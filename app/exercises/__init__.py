"""The graded exercises' pages; their rules live in course/grading."""

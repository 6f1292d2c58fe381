"""One module per chart: the DataFrame it is drawn from (translated labels) and the Altair chart, together.
common.py holds what they share (sizes, formats, category colours, phase labels)."""

from app import layout, recorded_view, sandbox

meta = layout.lesson_meta("monitoring")
layout.header("monitoring", meta)
left, right = layout.columns()
with left:
    layout.markdown_file("monitoring")
with right:
    sandbox.render("monitoring", meta, driver=True)
    recorded_view.browser("monitoring")

from app import layout, recorded_view, sandbox

meta, _, right = layout.lesson_page("monitoring")
with right:
    sandbox.render("monitoring", meta, driver=True)
    recorded_view.browser("monitoring")

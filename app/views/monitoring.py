from app.features import recorded_view
from app.ui import layout, sandbox

meta, _, right = layout.lesson_page("monitoring")
with right:
    sandbox.render("monitoring", meta, driver=True)
    recorded_view.browser("monitoring")

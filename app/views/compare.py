from app.features import comparison, fit_view, recorded_view
from app.ui import layout

meta, _, right = layout.lesson_page("compare")
with right:
    strategies = comparison.strategy_configs(meta)
    comparison.plan(meta, strategies)
    valid = [(sid, title, cfg) for sid, title, cfg, err in strategies if cfg is not None]
    comparison.recorded_and_live(meta, valid)
    if valid:
        fit_view.render(valid)
    if valid and meta.get("rounds"):
        comparison.rounds_box(meta, valid)
    recorded_view.browser("compare")

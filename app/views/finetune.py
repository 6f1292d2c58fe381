from app.features import cli_result_view, finetune_view, own_model
from course import finetune_lesson

meta, right = own_model.page("finetune", finetune_lesson)
with right:
    own_model.recorded(meta, finetune_lesson, prefix="ft", words={"levers": finetune_view.setup_label})
    cfg = own_model.picker(meta)
    if cfg is not None:
        own_model.estimate(cfg)
    finetune_view.exercise(meta, cfg)
    if cfg is not None:
        own_model.what_fits(meta, cfg)
        own_model.run(cfg)
    cli_result_view.opened()

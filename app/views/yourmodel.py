from app.features import cli_result_view, own_model

meta, right = own_model.page("yourmodel")
with right:
    own_model.recorded(meta)
    cfg = own_model.picker(meta)
    if cfg is not None:
        own_model.estimate(cfg)
        own_model.what_fits(meta, cfg)
        own_model.run(cfg)
    cli_result_view.opened()

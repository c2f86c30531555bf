"""OpenAI-compatible HTTP server: `create_app(engine, model_name)` or `sparkdec serve`."""

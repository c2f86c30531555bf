"""`sparkdec serve`: build the engine, run uvicorn, and drain on SIGTERM or Ctrl-C (new requests get 503,
in-flight requests finish, then exit 0). A second signal starts uvicorn's own graceful shutdown (stop accepting
connections, wait for responses); a third Ctrl-C forces the exit."""
from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

import uvicorn

log = logging.getLogger("sparkdec.server")


def add_serve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--served-model-name", help="model id clients send (default: the model folder's name)")
    p.add_argument("--max-queue", type=int, default=256,
                   help="requests that may wait beyond --max-num-seqs running ones; more get 503")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    p.add_argument("--reasoning-parser", choices=["qwen3"],
                   help="return a chat's <think>...</think> as the message's reasoning_content")
    p.add_argument("--api-key", default=os.environ.get("SPARKDEC_API_KEY") or None,
                   help="require `Authorization: Bearer KEY` on every route but /health and /metrics "
                        "(default: $SPARKDEC_API_KEY; none: open)")
    p.add_argument("--trust-request-chat-template", action="store_true",
                   help="render a chat request's own chat_template (sandboxed, but a template can still loop or "
                        "allocate without bound: only for trusted clients)")
    p.add_argument("--chat-template", help="a Jinja chat template (a file, or the template itself) that replaces "
                                           "the one in the model's tokenizer_config.json")
    p.add_argument("--generation-config", default="auto",
                   help="sampling defaults for the fields a request leaves out (temperature, top_p, top_k, min_p, "
                        "repetition_penalty): auto, the model folder's generation_config.json (vLLM's default); "
                        "none, OpenAI's (temperature 1, no filters); or a folder or file to read them from")


def chat_template(value: str) -> str:
    """--chat-template's template: a file's text, or the value itself when it is a template."""
    path = Path(value).expanduser()
    if path.is_file():
        template = path.read_text()
    elif "{{" in value or "{%" in value:
        template = value
    else:
        raise SystemExit(f"sparkdec serve: --chat-template {value!r} is neither a file nor a Jinja template; "
                         "pass the template file's path")
    import jinja2

    from sparkdec.tokenizer import template_env

    try:
        template_env().parse(template)
    except jinja2.TemplateSyntaxError as exc:
        raise SystemExit(f"sparkdec serve: --chat-template does not compile: {exc} (line {exc.lineno})") from None
    return template


def served_name(args: argparse.Namespace) -> str:
    if args.served_model_name:
        return args.served_model_name
    return Path(args.model).expanduser().resolve().name if args.model else "sparkdec-tiny"


def run_serve(args: argparse.Namespace, engine_kwargs) -> int:
    from sparkdec.engine.llm_engine import DEFAULT_PAIR, Engine, EngineConfig
    from sparkdec.server.app import create_app
    from sparkdec.server.defaults import load_defaults

    if args.max_queue < 0:
        raise SystemExit("sparkdec serve: --max-queue must be >= 0")
    template = chat_template(args.chat_template) if args.chat_template else None
    if args.api_key is not None and not args.api_key.strip():
        raise SystemExit("sparkdec serve: --api-key is empty; pass a key, or leave it out to serve without one")
    folder = Path(args.model).expanduser() if args.model else DEFAULT_PAIR / "target"
    defaults, source = load_defaults(args.generation_config, folder)  # (before the weights: a bad file fails fast)
    engine = Engine(EngineConfig(**engine_kwargs(args)))
    if template is not None:
        if engine.tokenizer is None:
            raise SystemExit("sparkdec serve: --chat-template needs the model's tokenizer.json, which it lacks")
        engine.tokenizer.chat_template = template
    name = served_name(args)
    aliases = (args.model,) if args.model else ()
    app = create_app(engine, name, max_queue=args.max_queue, aliases=aliases, reasoning_parser=args.reasoning_parser,
                     api_key=args.api_key, trust_templates=args.trust_request_chat_template, sampling_defaults=defaults)
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s:     %(message)s")
    spec = "speculative" if engine.drafter is not None and engine.config.speculative else "plain"
    log.info("serving %s (%s decoding, %d KV pages of %d tokens, max model len %d)", name, spec,
             engine.blocks.num_pages, engine.config.page_size, engine.max_model_len)
    if defaults:
        log.info("sampling defaults from %s for the fields a request leaves out: %s (--generation-config none "
                 "for OpenAI's)", source, defaults)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level,
                            timeout_graceful_shutdown=None)
    DrainingServer(config, app.state.server).run()
    return 0


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, state):
        super().__init__(config)
        self.drain = state

    def handle_exit(self, sig, frame) -> None:
        if not self.drain.draining:
            self.drain.draining = True  # new requests get 503; on_tick exits once in-flight ones finish
            return
        super().handle_exit(sig, frame)

    async def on_tick(self, counter: int) -> bool:
        if self.drain.draining and self.drain.inflight == 0 and not self.should_exit:
            log.info("drained: no request in flight, shutting down")
            self.should_exit = True
        return await super().on_tick(counter)

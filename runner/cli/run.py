"""`cann-llm run`: one-shot chat answers, plain completions and the interactive chat loop.

The CLI layer over cann_llm.load(...) -> Model: argument checks before the model loads, the
default model (fetched on first use), streaming to stdout, llama.cpp-style timings on stderr.
The model flags (add_model_arguments, load_model) are shared with `bench`; errors surface as one
line in cli.main (exit 1).
"""

from __future__ import annotations

import argparse
import sys

from .common import RunError, Stream, err as _err, log as _log, one_line_errors, \
    check_device_flag, resolve_model

__all__ = ["register", "add_run_arguments", "cmd_run", "add_model_arguments", "load_model",
           "read_chat_template", "sampling_kwargs", "print_timings"]


def register(commands) -> None:
    run = commands.add_parser(
        "run", help="chat with a model, or answer one prompt (default: SmolLM2-135M-Instruct)",
        description="One-shot chat answer with a prompt (-p or PROMPT), an interactive chat "
                    "without one (or with -i); --raw for plain completion. Timings on stderr.")
    add_run_arguments(run)
    run.set_defaults(handler=cmd_run)


# -- arguments shared by run and bench --------------------------------------------------------

def add_model_arguments(p: argparse.ArgumentParser, ctx_default: int = 4096,
                        ctx_help: str | None = None) -> None:
    one_line_errors(p)
    p.add_argument("-c", "--ctx-size", type=int, default=ctx_default, metavar="N",
                   help=ctx_help or "context size in tokens (0: the model's training context; "
                                    f"default {ctx_default})")
    p.add_argument("-t", "--threads", type=int, default=None, metavar="N",
                   help="host threads (default: all cores; also CANN_LLM_THREADS)")
    p.add_argument("-b", "--batch-size", type=int, default=512, metavar="N",
                   help="prompt tokens per forward pass (default 512)")
    p.add_argument("--device", default="CANN0", metavar="DEV",
                   help="CANN0 (default), CANNn, CPU (the numpy reference), or a comma list "
                        "of CANN devices to split the layers over")
    p.add_argument("--tensor-parallel", type=int, default=1, metavar="N",
                   help="split the model over N devices, Megatron style (heads, FFN columns and "
                        "vocabulary), one process per device as Ray actors (needs the scale "
                        "extra; default 1: one process)")
    p.add_argument("-fa", "--flash-attn", choices=("on", "off"), default="on",
                   help="attention through FLASH_ATTN_EXT (on, default) or SOFT_MAX (off)")
    p.add_argument("-ctk", "--cache-type-k", default="f16", metavar="TYPE",
                   help="KV cache type for K: f16 (default) or f32")
    p.add_argument("-ctv", "--cache-type-v", default="f16", metavar="TYPE",
                   help="KV cache type for V: f16 (default) or f32")
    p.add_argument("--convert", default=None, metavar="TYPE",
                   help="convert weights the device cannot hold to TYPE at load (Q8_0, Q4_1, ...)")
    p.add_argument("--no-check", action="store_true",
                   help="skip the load-time check that weights hold no NaN/inf (a corrupt file)")
    p.add_argument("--no-mmap", action="store_true",
                   help="copy every weight into device memory, even where the device could read "
                        "it from the file's map (acl_host: F32/F16/BF16 weights)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="print load details, graph splits and compute buffer sizes")
    p.add_argument("--profile", default=None, metavar="FILE",
                   help="write a Chrome trace of host stages and device ops to FILE at exit "
                        "(also CANN_LLM_PROFILE; profiled graphs run uncaptured, so slower)")


def _check_model_arguments(args) -> str:
    check_device_flag(args.device)
    if getattr(args, "profile", None):
        from .. import profiler
        profiler.start(args.profile)        # before the load: its clock and device timing
    if args.ctx_size < 0:
        raise RunError(f"-c/--ctx-size must be >= 0 (0: the model's), got {args.ctx_size}")
    if args.threads is not None and args.threads < 1:
        raise RunError(f"-t/--threads must be >= 1, got {args.threads}")
    if args.batch_size < 1:
        raise RunError(f"-b/--batch-size must be >= 1, got {args.batch_size}")
    if args.tensor_parallel < 1:
        raise RunError(f"--tensor-parallel must be >= 1, got {args.tensor_parallel}")
    if args.tensor_parallel > 1 and args.device.upper() != "CANN0":
        raise RunError(f"--tensor-parallel puts one rank on each device Ray gives it (its NPU "
                       f"resource); it cannot be combined with --device {args.device}")
    return args.device.upper()


def read_chat_template(args) -> str | None:
    """The text of --chat-template-file, or None without it (RunError if it cannot be read)."""
    if not getattr(args, "chat_template_file", None):
        return None
    try:
        with open(args.chat_template_file, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise RunError(f"--chat-template-file: {e}") from None


def load_model(args, path: str):
    import cann_llm
    device = _check_model_arguments(args)
    template = read_chat_template(args)
    kwargs = dict(device=device, n_ctx=args.ctx_size, n_threads=args.threads,
                  chat_template=template, n_batch=args.batch_size,
                  type_k=args.cache_type_k, type_v=args.cache_type_v,
                  flash_attn=args.flash_attn == "on",
                  convert=args.convert, verbose=args.verbose, check_weights=not args.no_check,
                  log=_log, tensor_parallel=args.tensor_parallel)
    if args.no_mmap:
        kwargs["use_mmap"] = False
    load = getattr(cann_llm, "load", None)
    if load is None:                      # before __init__ re-exports it
        from ..model import load
    return load(path, **kwargs)


# -- run ----------------------------------------------------------------------------------------

def add_run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", nargs="?", metavar="MODEL",
                   help="a .gguf file (default: SmolLM2-135M-Instruct Q4_1, fetched on first use)")
    p.add_argument("prompt_words", nargs="*", metavar="PROMPT",
                   help="the prompt (or -p); without a prompt, or with -i, chat interactively")
    p.add_argument("-p", "--prompt", default=None, help="the prompt")
    p.add_argument("-f", "--file", default=None, metavar="FILE", help="read the prompt from FILE")
    p.add_argument("--system", default=None, metavar="TEXT", help="system message for the chat")
    p.add_argument("--chat-template-file", default=None, metavar="FILE",
                   help="a Jinja chat template to use instead of the model's")
    p.add_argument("-i", "--interactive", action="store_true",
                   help="chat: read a message per line (/exit or Ctrl-D to quit, /clear)")
    p.add_argument("--raw", "--no-chat", dest="raw", action="store_true",
                   help="plain completion of the prompt, without the chat template")
    p.add_argument("-n", "--n-predict", type=int, default=-1, metavar="N",
                   help="maximum tokens to generate (-1: until the end of the answer or a full "
                        "context; default -1)")
    from ..sampling_params import SamplingParams
    SamplingParams.add_arguments(p.add_argument_group("sampling (llama.cpp's defaults and order)"))
    g = p.add_argument_group("constrained output (one of them)")
    g.add_argument("--json-schema", default=None, metavar="FILE",
                   help="the answer is compact JSON that validates against the JSON schema in "
                        "FILE")
    g.add_argument("--grammar", default=None, metavar="FILE",
                   help="the answer matches the GBNF (llama.cpp) or Lark grammar in FILE")
    add_model_arguments(p)


def sampling_kwargs(args) -> dict:
    """generate()/chat() sampling keywords from the arguments, checked by building a Sampler
    (an error names the flag, not the field)."""
    from dataclasses import asdict, fields
    from ..sampling_params import SamplingParams
    params = SamplingParams.from_args(args)
    try:
        sampler = params.sampler()
    except ValueError as e:
        msg = str(e)
        for f in fields(SamplingParams):
            if "flags" in f.metadata and msg.startswith(f.name + " "):
                msg = f.metadata["flags"][-1] + msg[len(f.name):]
                break
        raise RunError(msg) from None
    kw = {k: v for k, v in asdict(params).items() if k not in ("logit_bias", "grammar")}
    kw["seed"] = sampler.seed            # a concrete seed, printed with -v
    return kw


def _read_constraint(args) -> tuple[str, str] | None:
    """(kind, text) of --json-schema or --grammar, read and checked as text (compiled once the
    vocabulary is loaded)."""
    if args.json_schema is not None and args.grammar is not None:
        raise RunError("--json-schema and --grammar do not go together")
    flag, kind, path = (("--json-schema", "json_schema", args.json_schema)
                        if args.json_schema is not None else ("--grammar", "gbnf", args.grammar))
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise RunError(f"{flag} {path}: {getattr(e, 'strerror', None) or e}") from None
    return flag, kind, text


def _compile_constraint(model, constraint):
    if constraint is None:
        return None
    from ..grammar import GrammarError, compile
    flag, kind, text = constraint
    try:
        return compile(model.tokenizer, kind, text)
    except GrammarError as e:
        raise RunError(f"{flag}: {e}") from None


def _prompt_text(args) -> str | None:
    parts = []
    if args.prompt is not None:
        parts.append(args.prompt)
    if args.file is not None:
        try:
            with open(args.file, encoding="utf-8") as f:
                parts.append(f.read())
        except (OSError, UnicodeDecodeError) as e:
            raise RunError(f"-f {args.file}: {getattr(e, 'strerror', None) or e}") from None
    if args.prompt_words:
        parts.append(" ".join(args.prompt_words))
    if not parts:
        return None
    return "\n".join(parts)


def _max_tokens(args, model) -> int:
    return args.n_predict if args.n_predict >= 0 else model.n_ctx


def print_timings(model, out=None) -> None:
    """The closing lines, in llama.cpp's llama_perf_context_print format."""
    out = out or sys.stderr
    t = model.timings()

    def rate(ms, n, what):
        per = ms / n if n else 0.0
        tps = 1e3 * n / ms if ms > 0 else 0.0
        return f"{ms:10.2f} ms / {n:5d} {what} ({per:8.2f} ms per token, {tps:8.2f} tokens per second)"

    load_ms = float(t.get("load_ms", 0.0))
    p_ms, p_n = float(t.get("prompt_ms", 0.0)), int(t.get("prompt_tokens", 0))
    g_ms, g_n = float(t.get("gen_ms", 0.0)), int(t.get("gen_tokens", 0))
    print(f"cann-llm:        load time = {load_ms:10.2f} ms", file=out)
    print(f"cann-llm: prompt eval time = {rate(p_ms, p_n, 'tokens')}", file=out)
    print(f"cann-llm:        eval time = {rate(g_ms, g_n, 'runs  ')}", file=out)
    print(f"cann-llm:       total time = {p_ms + g_ms:10.2f} ms / {p_n + g_n:5d} tokens",
          file=out, flush=True)


def _stream_chat(model, messages, max_tokens, sampling, interactive=False) -> str:
    """Stream the answer to `messages`; returns its text. Ctrl-C stops the answer (the chat
    goes on; a one-shot run ends with status 130)."""
    from ..model import ContextFullError
    out = Stream()
    try:
        for piece in model.chat(messages, max_tokens=max_tokens, **sampling):
            out.write(piece)
    except ContextFullError as e:
        out.end()
        if not out.text:
            raise
        _err(f"cann-llm: stopped: {e}")
    except KeyboardInterrupt:
        out.end()
        if not interactive:
            raise
        _err("cann-llm: answer interrupted")
        return "".join(out.text)
    out.end()
    return "".join(out.text)


def _stream_raw(model, prompt, max_tokens, sampling) -> None:
    from ..model import ContextFullError
    ids = model.tokenize(prompt)
    if len(ids) >= model.n_ctx:
        raise ContextFullError(f"the prompt has {len(ids)} tokens, the context holds "
                               f"{model.n_ctx}")
    max_tokens = min(max_tokens, model.n_ctx - len(ids))
    detok = model.tokenizer.incremental()
    out = Stream()
    try:
        for token in model.generate(ids, max_tokens=max_tokens, **sampling):
            if model.tokenizer.is_eog(token):
                break
            out.write(detok.add(token))
        out.write(detok.flush())
    except ContextFullError as e:
        out.end()
        _err(f"cann-llm: stopped: {e}")
    out.end()


def _interactive(model, args, sampling, first_prompt) -> None:
    messages = [{"role": "system", "content": args.system}] if args.system else []
    interactive_tty = sys.stdin.isatty()
    if interactive_tty:
        try:
            import readline  # noqa: F401  (line editing and history for input())
        except ImportError:
            pass
        _err("cann-llm: chatting with the model; /exit or Ctrl-D to quit, /clear to forget the "
             "conversation")
    pending = first_prompt
    while True:
        if pending is None:
            try:
                line = input("> " if interactive_tty else "")
            except EOFError:
                if interactive_tty:
                    print()
                return
            except KeyboardInterrupt:
                print()
                return
        else:
            line, pending = pending, None
        text = line.strip()
        if not text:
            continue
        if text in ("/exit", "/quit", "/bye"):
            return
        if text == "/clear":
            messages = messages[:1] if args.system else []
            _err("cann-llm: conversation cleared")
            continue
        messages.append({"role": "user", "content": line})
        try:
            reply = _stream_chat(model, messages, _max_tokens(args, model), sampling,
                                 interactive=True)
        except ValueError as e:     # the conversation no longer fits: say so and go on
            messages.pop()
            _err(f"cann-llm: {e} (/clear to start over)")
            continue
        messages.append({"role": "assistant", "content": reply})
        if args.verbose:
            print_timings(model)


def cmd_run(args: argparse.Namespace) -> int:
    if args.n_predict < -1:
        raise RunError(f"-n/--n-predict must be >= -1 (-1: no limit), got {args.n_predict}")
    sampling = sampling_kwargs(args)
    _check_model_arguments(args)
    constraint = _read_constraint(args)
    prompt = _prompt_text(args)
    path = resolve_model(args.model)
    if args.raw and prompt is None:
        raise RunError("--raw needs a prompt (-p, -f or PROMPT)")
    if args.raw and args.interactive:
        raise RunError("--raw and -i do not go together (the chat uses the template)")
    from ..kv_cache import ContextFullError
    model = load_model(args, path)
    try:
        sampling["grammar"] = _compile_constraint(model, constraint)
        if args.verbose:
            _err(f"cann-llm: sampling: temp {args.temp}, top_k {args.top_k}, top_p {args.top_p}, "
                 f"min_p {args.min_p}, repeat_penalty {args.repeat_penalty} (last "
                 f"{args.repeat_last_n}), seed {sampling['seed']}")
        if args.interactive or prompt is None:
            _interactive(model, args, sampling, prompt)
            return 0
        max_tokens = _max_tokens(args, model)
        if args.raw:
            _stream_raw(model, prompt, max_tokens, sampling)
        else:
            messages = [{"role": "system", "content": args.system}] if args.system else []
            messages.append({"role": "user", "content": prompt})
            _stream_chat(model, messages, max_tokens, sampling)
        print_timings(model)
        return 0
    except ContextFullError as e:     # the Python message names n_ctx; here the flag is -c
        raise RunError(f"{e} (-c/--ctx-size sets n_ctx)") from None
    finally:
        close = getattr(model, "close", None)
        if close:
            close()


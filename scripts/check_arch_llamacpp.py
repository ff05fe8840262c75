"""Per-architecture agreement with llama.cpp on small random-weight GGUFs (a developer check, not
run in CI: CI checks the same graphs against the numpy reference backend).

For each architecture it writes a GGUF with tests/tiny_models.py: a few layers, the family's
hyperparameter shapes (head size, GQA ratio, Qwen3's head_dim != n_embd / n_head), a real
llama.cpp vocabulary, and weights scaled so that the logits are peaked. Each file is written in F16
(the strict comparison: llama.cpp multiplies F16 weights with F32/F16 activations, as we do), in
Q8_0, and as Q4_K_M quantized from the F16 file by llama.cpp itself (Q4_K, Q6_K, ... as its
quantizer mixes them). The quantized files are looser: llama.cpp quantizes activations to 8 bits
there. Both
sides run the same token sequences teacher-forced; the report gives, per file:

  peaked  share of positions where llama.cpp's top-2 logit gap is >= 0.2 (the file is only a test
          if this is >= 30%)
  top1    top-1 agreement on those positions
  lp med / lp p95   |our log-prob - llama.cpp's| over llama.cpp's top-5 tokens of every position

    python scripts/check_arch_llamacpp.py [--arch qwen3 ...] [--python PY] [--keep DIR]

--python: a Python that imports llama_cpp (llama-cpp-python; default: this one, else
/tmp/vllama/bin/python). use_extra_bufts=False is set: AMX machines crash on quantized models
otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from gguf import GGMLQuantizationType as QT  # noqa: E402
from tiny_models import write_tiny_model  # noqa: E402

# arch -> (vocabulary, write_tiny_model keywords): each family's shape features at a small size
ARCHS = {
    # Llama 3 style: GQA 4:1, head_dim 64, the llama-bpe vocabulary
    "llama": ("llama-bpe", dict(n_embd=256, n_head=4, n_head_kv=1, n_ff=512, n_layer=3)),
    # Mistral style: llama with head_dim from attention.key_length (Mistral-Nemo: 128 over 5120/32)
    "llama-hd": ("llama-spm", dict(arch="llama", n_embd=256, n_head=4, n_head_kv=2, head_dim=96,
                                   n_ff=512, n_layer=3)),
    "qwen2": ("qwen2", dict(n_embd=224, n_head=7, n_head_kv=1, n_ff=512, n_layer=3)),
    "qwen3": ("qwen2", dict(n_embd=256, n_head=4, n_head_kv=2, head_dim=128, n_ff=512, n_layer=3)),
    # Qwen3-30B-A3B's features: 8 of 128 experts there, 2 of 8 here, experts of width 128
    "qwen3moe": ("qwen2", dict(n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=128,
                               n_layer=3, n_expert=8, n_expert_used=2)),
    # Gemma 3 1B's shape features: GQA 4:1, head_dim 128 over n_embd 256, 7 layers (6 local
    # with a 16-token window and rope base 10000, one global with 1e6, rope scaling 8 as the 4B+
    # models have), and a logit soft-cap (Gemma 3 files have none; llama.cpp reads it if present)
    "gemma3": ("llama-spm", dict(n_embd=256, n_head=4, n_head_kv=1, head_dim=128, n_ff=512,
                                 n_layer=7, rope_freq_base=1e6,
                                 kv={"gemma3.attention.sliding_window": 16,
                                     "gemma3.rope.scaling.type": "linear",
                                     "gemma3.rope.scaling.factor": 8.0,
                                     "gemma3.final_logit_softcapping": 30.0})),
    # Phi-3 mini's head_dim 96, no GQA (Phi-3-medium and Phi-4-mini have it), separate output
    "phi3": ("phi-3", dict(n_embd=288, n_head=3, n_head_kv=3, n_ff=512, n_layer=3, tied=False)),
}

TEXT = ("The quick brown fox jumps over the lazy dog. In 1969, Apollo 11 landed on the Moon; "
        "def f(x):\n    return x * 2  # double\nBonjour, ça va? Привет, мир! 你好，世界。")

LLAMA_SIDE = r"""
import json, sys, numpy as np, llama_cpp
import llama_cpp.llama as L
default_params = llama_cpp.llama_model_default_params
def model_params():
    p = default_params()
    if hasattr(p, "use_extra_bufts"):
        p.use_extra_bufts = False
    return p
L.llama_cpp.llama_model_default_params = model_params
job = json.load(sys.stdin)
llm = L.Llama(model_path=job["model"], n_ctx=512, logits_all=True, verbose=False, n_threads=2)
llm.eval(job["ids"])
np.save(job["out"], np.array(llm.scores[:len(job["ids"])], dtype=np.float32))
"""


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    x = x - x.max(1, keepdims=True)
    return x - np.log(np.exp(x).sum(1, keepdims=True))


def compare(ours: np.ndarray, ref: np.ndarray) -> dict:
    srt = np.sort(ref, axis=1)
    peaked = (srt[:, -1] - srt[:, -2]) >= 0.2
    top1 = (ours.argmax(1) == ref.argmax(1))[peaked]
    lo, lr = log_softmax(ours), log_softmax(ref)
    top5 = np.argsort(-lr, axis=1)[:, :5]
    diff = np.abs(np.take_along_axis(lo, top5, 1) - np.take_along_axis(lr, top5, 1)).ravel()
    return {"positions": len(ref), "peaked": float(peaked.mean()),
            "top1": float(top1.mean()) if top1.size else float("nan"),
            "lp_median": float(np.median(diff)), "lp_p95": float(np.percentile(diff, 95))}


def llamacpp_logits(python: str, model: pathlib.Path, ids: list, out: pathlib.Path) -> np.ndarray:
    job = json.dumps({"model": str(model), "ids": ids, "out": str(out)})
    r = subprocess.run([python, "-c", LLAMA_SIDE], input=job, text=True, capture_output=True)
    if r.returncode:
        raise RuntimeError(f"llama.cpp failed on {model.name}:\n{r.stderr[-2000:]}")
    return np.load(out)


QUANTIZE_SIDE = r"""
import ctypes, json, sys, llama_cpp
job = json.load(sys.stdin)
p = llama_cpp.llama_model_quantize_default_params()
p.ftype = getattr(llama_cpp, "LLAMA_FTYPE_MOSTLY_" + job["type"])
p.nthread = 2
rc = llama_cpp.llama_model_quantize(job["src"].encode(), job["dst"].encode(), ctypes.byref(p))
sys.exit(rc)
"""


def quantize(python: str, src: pathlib.Path, dst: pathlib.Path, ftype: str) -> None:
    """dst = src quantized by llama.cpp's llama_model_quantize (its own type mix for ftype)."""
    job = json.dumps({"src": str(src), "dst": str(dst), "type": ftype})
    r = subprocess.run([python, "-c", QUANTIZE_SIDE], input=job, text=True, capture_output=True)
    if r.returncode:
        raise RuntimeError(f"llama.cpp could not quantize {src.name} to {ftype}:\n{r.stderr[-2000:]}")


def find_python(explicit: str | None) -> str:
    if explicit:
        return explicit
    import importlib.util
    if importlib.util.find_spec("llama_cpp") is not None:
        return sys.executable
    if os.path.exists("/tmp/vllama/bin/python"):
        return "/tmp/vllama/bin/python"
    sys.exit("check_arch_llamacpp: no Python with llama_cpp; pass --python")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", nargs="*", default=list(ARCHS), choices=list(ARCHS))
    ap.add_argument("--python", help="a Python that imports llama_cpp")
    ap.add_argument("--keep", help="write the GGUFs here and keep them")
    ap.add_argument("--weight-scale", type=float, default=0.08)
    args = ap.parse_args(argv)
    python = find_python(args.python)

    from cann_llm.model import Model
    from cann_llm.tokenizer import Tokenizer

    tmp = tempfile.TemporaryDirectory()
    work = pathlib.Path(args.keep or tmp.name)
    work.mkdir(parents=True, exist_ok=True)
    # F16 and Q8_0 written directly; Q4_K_M quantized from the F16 file by llama.cpp itself
    mixes = {"F16": QT.F16, "Q8_0": QT.Q8_0, "Q4_K_M": "Q4_K_M"}
    print("| arch | weights | positions | peaked | top-1 (peaked) | top-5 lp diff median | p95 |")
    print("|---|---|---|---|---|---|---|")
    for name in args.arch:
        vocab, kw = ARCHS[name]
        kw = dict(kw)
        arch = kw.pop("arch", name)
        for label, wtype in mixes.items():
            path = work / f"{name}-{label}.gguf"
            if isinstance(wtype, str):
                quantize(python, work / f"{name}-F16.gguf", path, wtype)
            else:
                write_tiny_model(path, arch=arch, vocab=vocab, weight_scale=args.weight_scale,
                                 weight_type=wtype, seed=7, **kw)
            ids = Tokenizer.from_gguf(path).tokenize(TEXT, add_special=True)
            with Model(str(path), n_ctx=512) as m:
                ours = m.logits(ids)
            ref = llamacpp_logits(python, path, ids, work / "ref.npy")
            c = compare(ours, ref)
            print(f"| {name} | {label} | {c['positions']} | {c['peaked']:.0%} | {c['top1']:.3f} | "
                  f"{c['lp_median']:.4f} | {c['lp_p95']:.4f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

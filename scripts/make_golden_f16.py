"""Make tests/data/golden_smollm2-f16.json: llama.cpp's teacher-forced top-5 log-probs on the
default model's weights widened to F16, for the same token sequences as the shared golden file.

Why: llama.cpp's CPU build quantizes activations to 8 bits (Q8_1 / Q8_0) inside every quantized
matmul, so its log-probs on the Q4_1 file differ from exact arithmetic by a median of ~0.07. Run on
the same weights stored as F16, llama.cpp multiplies with F16/F32 activations, as cann-llm (and the
CANN cube unit) does. This file is the reference for the issue's tight agreement bounds.

A developer tool, not run in CI: it needs llama-cpp-python (built from source here, and given
use_extra_bufts=False: this machine's AMX repacking crashes it on quantized models).

    python scripts/make_golden_f16.py [--python /path/to/venv-with-llama_cpp/bin/python]
"""

import argparse
import hashlib
import json
import pathlib
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parent.parent
SHARED_GOLDEN = REPO.parent / "shared" / "reference" / "golden_smollm2-q4_1.json"
OUTPUT = REPO / "tests" / "data" / "golden_smollm2-f16.json"

# Runs under the Python that has llama_cpp: reads a JSON job on stdin, prints top-5 per position.
LLAMA_SIDE = r"""
import json, sys, numpy as np, llama_cpp
import llama_cpp.llama as L
default_params = llama_cpp.llama_model_default_params
def model_params():
    p = default_params(); p.use_extra_bufts = False; return p
L.llama_cpp.llama_model_default_params = model_params
job = json.load(sys.stdin)
llm = L.Llama(model_path=job["model"], n_ctx=512, logits_all=True, verbose=False, n_threads=2)
out = []
for ids in job["sequences"]:
    llm.reset()
    llm.eval(ids)
    logits = np.array(llm.scores[:len(ids)], dtype=np.float64)
    lp = logits - logits.max(1, keepdims=True)
    lp -= np.log(np.exp(lp).sum(1, keepdims=True))
    top = np.argsort(-lp, axis=1, kind="stable")[:, :5]
    out.append({"top5_ids": top.tolist(),
                "top5_logprobs": np.take_along_axis(lp, top, 1).round(6).tolist()})
print(json.dumps({"version": llama_cpp.__version__, "results": out}))
"""


def sha256(path: pathlib.Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default="/tmp/vllama/bin/python",
                        help="a Python that can import llama_cpp")
    args = parser.parse_args()

    from cann_llm.model_store import default_model_path
    golden = json.loads(SHARED_GOLDEN.read_text())
    q4_1 = default_model_path()
    with tempfile.TemporaryDirectory() as tmp:
        f16 = pathlib.Path(tmp) / "smollm2-f16.gguf"
        subprocess.run([sys.executable, "-m", "cann_llm.cli", "quantize", str(q4_1), str(f16), "F16"],
                       check=True, stdout=subprocess.DEVNULL)
        sequences = [case["prompt_ids"] + case["greedy_ids"] for case in golden["greedy"]]
        job = json.dumps({"model": str(f16), "sequences": sequences})
        done = subprocess.run([args.python, "-c", LLAMA_SIDE], input=job, text=True, check=True,
                              capture_output=True)
        result = json.loads(done.stdout)
        f16_sha = sha256(f16)
    cases = [{"prompt": case["prompt"], "ids": ids, **r}
             for case, ids, r in zip(golden["greedy"], sequences, result["results"])]
    OUTPUT.parent.mkdir(exist_ok=True)
    OUTPUT.write_text(json.dumps({
        "model_sha256": golden["model_sha256"],
        "made_with": f"`cann-llm quantize <default model> out.gguf F16`, then llama.cpp via "
                     f"llama-cpp-python {result['version']} (use_extra_bufts=False), teacher forced",
        "f16_model_sha256": f16_sha,
        "cases": cases,
    }, indent=1) + "\n")
    print(f"wrote {OUTPUT} ({len(cases)} sequences)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""cann-llm against llama.cpp on the same GGUF file and machine: prompt (ppN) and generation
(tgN) tokens/s for both, the ratio and the time per token.

    python scripts/bench_llamacpp.py [MODEL] [-p 512] [-n 128] [-r 3] [-t 2] \
        [--llamacpp /tmp/vllama/bin/python]

The same as `cann-llm bench --llamacpp PYTHON` (runner/bench.py holds the measurement), with a
default for the llama.cpp side: this Python if it can import llama_cpp, else /tmp/vllama (a
separate venv with `CMAKE_ARGS="-DGGML_NATIVE=ON" pip install llama-cpp-python`).
"""

import os
import sys


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    from cann_llm import cli
    from cann_llm.bench import llamacpp_python

    if not any(a == "--llamacpp" or a.startswith("--llamacpp=") for a in argv):
        py = llamacpp_python()
        for candidate in (os.environ.get("LLAMACPP_PYTHON"), "/tmp/vllama/bin/python"):
            if py is None and candidate and os.path.exists(candidate):
                py = candidate
        if py is None:
            print("bench_llamacpp: no Python with llama_cpp found; install llama-cpp-python "
                  "or pass --llamacpp PYTHON", file=sys.stderr)
            return 1
        argv += ["--llamacpp", py]
    return cli.main(["bench", *argv])


if __name__ == "__main__":
    sys.exit(main())

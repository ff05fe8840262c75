"""Schemathesis against cann-llm serve's own OpenAPI schema (/openapi.json): generated valid and
malformed requests to every operation. No answer may be a server error (5xx) and every answer
must match the schema, whose error responses are OpenAI's error shape. The number of examples
per operation is CANN_LLM_FUZZ_EXAMPLES (CI's default is small; the closing note of [server]
reports a full run)."""

import os
import re
import pathlib
import subprocess
import sys

from serve_util import Server

EXAMPLES = int(os.environ.get("CANN_LLM_FUZZ_EXAMPLES", "12"))


def test_generated_requests_get_no_server_error_and_match_the_schema(default_model_path,
                                                                      tmp_path):
    # a short context keeps generated max_tokens cheap; --embeddings puts that route in play
    s = Server(default_model_path, "-c", "48", "--parallel", "4", "--embeddings")
    try:
        proc = subprocess.run(
            [str(pathlib.Path(sys.executable).with_name("st")), "run", s.url + "/openapi.json",
             "--max-examples", str(EXAMPLES), "--mode", "all", "--checks", "all",
             # semantic checks beyond the schema (a token id past the vocabulary, a prompt
             # longer than the context, n over the slots) are 400s by design
             "--exclude-checks", "positive_data_acceptance", "--workers", "2", "--seed", "7",
             "--request-timeout", "120", "--report", "junit",
             "--report-junit-path", str(tmp_path / "junit.xml")],
            capture_output=True, text=True, timeout=900, cwd=tmp_path)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out[-6000:]
        counts = re.findall(r"(\d+) generated", out)
        assert counts, out[-2000:]
        assert int(counts[-1]) >= EXAMPLES * 5, out[-2000:]
        assert "[500]" not in out
        assert "cann-llm serve: a step failed" not in s.log()
    finally:
        assert s.stop() == 0, s.log()

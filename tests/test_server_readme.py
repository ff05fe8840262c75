"""The README's serving examples run as written (on a free port instead of 8080): the curl
request and the openai-client script against a real `cann-llm serve`."""

import json
import re
import subprocess
import sys

from conftest import REPO_ROOT
from serve_util import Server


def _serving_blocks():
    text = (REPO_ROOT / "README.md").read_text()
    section = text.split("## Serving", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```(\w+)\n(.*?)```", section, flags=re.S)


def test_the_readme_serving_examples_work(default_model_path):
    blocks = dict(_serving_blocks())
    assert set(blocks) == {"sh", "python"}
    sh = blocks["sh"].replace("\\\n", " ")
    lines = [ln for ln in sh.splitlines() if ln.strip()]
    assert lines[0].startswith("cann-llm serve")              # the server, started below
    s = Server(default_model_path, "--parallel", "2")
    try:
        port = str(s.port)
        curl = subprocess.run(["bash", "-c", lines[1].replace("8080", port)],
                              capture_output=True, text=True, timeout=120)
        assert curl.returncode == 0, curl.stderr
        answer = json.loads(curl.stdout)
        assert "Paris" in answer["choices"][0]["message"]["content"]
        script = subprocess.run([sys.executable, "-c", blocks["python"].replace("8080", port)],
                                capture_output=True, text=True, timeout=120)
        assert script.returncode == 0, script.stderr
        assert len(script.stdout.strip()) > 5
    finally:
        assert s.stop() == 0

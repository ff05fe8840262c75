"""The container's HEALTHCHECK: exit 0 when `cann-llm serve` answers 200 on /health (the model is
loaded), else 1. The port is $CANN_LLM_PORT (8080), as docker/entrypoint.sh passes it."""

import os
import sys
import urllib.error
import urllib.request

port = os.environ.get("CANN_LLM_PORT") or "8080"
try:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=4) as response:
        sys.exit(0 if response.status == 200 else 1)
except (OSError, urllib.error.URLError) as e:
    print(f"healthcheck: {e}", file=sys.stderr)
    sys.exit(1)

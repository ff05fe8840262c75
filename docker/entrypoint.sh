#!/usr/bin/env bash
# The container's entry point: `cann-llm serve` configured by environment variables, with the
# container's arguments appended as extra flags (`docker run IMAGE --embeddings -v`). When the
# first argument is not a flag it is run as a command instead (`docker run IMAGE cann-llm devices`).
set -euo pipefail

# The CANN toolkit images export their paths as ENV; set_env.sh adds the rest when present (it is
# not written for `set -eu`).
if [ -f /usr/local/Ascend/ascend-toolkit/set_env.sh ]; then
  set +eu
  # shellcheck disable=SC1091
  . /usr/local/Ascend/ascend-toolkit/set_env.sh
  set -eu
fi

if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
  exec "$@"
fi

args=(serve)
if [ -n "${CANN_LLM_MODEL:-}" ]; then
  args+=("${CANN_LLM_MODEL}")
fi
args+=(--host "${CANN_LLM_HOST:-0.0.0.0}" --port "${CANN_LLM_PORT:-8080}"
       --parallel "${CANN_LLM_PARALLEL:-4}" --ctx-size "${CANN_LLM_CTX_SIZE:-4096}"
       --device "${CANN_LLM_DEVICE:-CANN0}")
exec cann-llm "${args[@]}" "$@"

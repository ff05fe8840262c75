"""The settings of a Ray that cann-llm starts on this host for its own use (serve --replicas,
--tensor-parallel): made before ray is imported, since Ray reads them at import, and inherited by
every process it starts. A cluster named by --ray-address / RAY_ADDRESS keeps its own settings.
"""

from __future__ import annotations

import logging
import os

__all__ = ["local_ray_environment"]


def local_ray_environment() -> None:
    """Ray's servers bind the loopback address (by default Ray publishes the host's network
    address for other nodes to join; RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 makes it use loopback,
    as it does on a laptop), token authentication stays on (Ray's default, without its warning),
    usage statistics are not sent, and the traceback Ray logs when it cannot read the NPU type
    is silenced (it asks pyACL, which acl_host has no use for)."""
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "token")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    logging.getLogger("ray._private.accelerators.npu").setLevel(logging.CRITICAL)

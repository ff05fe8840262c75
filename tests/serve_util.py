"""Starts `cann-llm serve` as a real process on a loopback port for the server tests, and stops
it (SIGTERM, then the exit code is checked)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A `cann-llm serve` process: .url, .client (httpx), .health_seen (statuses of /health
    while it started), .log() (its stderr), .stop() -> exit code."""

    def __init__(self, model_path, *args: str, threads: int | None = 1, timeout: float = 120,
                 env: dict | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._err = tempfile.TemporaryFile("w+")
        cmd = [sys.executable, "-m", "cann_llm.cli", "serve", str(model_path), "--port",
               str(self.port), *(["-t", str(threads)] if threads else []), *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self._err,
                                     stdin=subprocess.DEVNULL,
                                     env=None if env is None else {**os.environ, **env})
        self.health_seen: list[int] = []
        self.client = httpx.Client(base_url=self.url, timeout=120)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"cann-llm serve exited {self.proc.returncode}: {self.log()}")
            try:
                health = self.client.get("/health")
                self.health_seen.append(health.status_code)
                if health.status_code == 200 and health.headers.get(
                        "content-type", "").startswith("application/json") and \
                        health.json().get("status") == "ok":
                    break   # ours: any other server that took the port fails the start
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"cann-llm serve did not become ready: {self.log()}")
            time.sleep(0.02)

    def log(self) -> str:
        self._err.flush()
        self._err.seek(0)
        return self._err.read()

    def stop(self, sig=signal.SIGTERM, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.client.close()
        return self.proc.returncode

    def metric(self, name: str) -> float:
        """A sample's value from /metrics (the first line starting with `name`)."""
        for line in self.client.get("/metrics", headers=self.auth).text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        raise KeyError(name)

    auth: dict = {}


"""`cann-llm serve --replicas 2` on Ray Serve, as a real process on loopback with acl_host's two
devices (CANN_LLM_HOST_DEVICES=2): requests spread over both replicas, each on its own device,
a prompt's prefix sticks to its replica, a killed replica fails its requests in flight cleanly
(an OpenAI error, or an error event ending the stream) and Ray restarts it, and SIGTERM drains,
stops Ray and leaves no process. One Ray cluster for the module; the router's bookkeeping and
the flag errors are tested without one."""

import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import openai
import pytest

from conftest import REPO_ROOT
from serve_util import Server, free_port

MODEL = "SmolLM2-135M-Instruct.Q4_1"
# the end-of-text and <|im_end|> tokens of the default model: banned, a request runs to max_tokens
NO_EOS = {"0": -100, "2": -100}
PARIS = ("You are a careful historian. Tell me the long and detailed story of the city of Paris, "
         "from the first settlements on the islands of the Seine to the present day.")


def replica_of(headers) -> dict:
    """The X-Cann-Llm-Replica header as a dict: id, pid, devices, npu."""
    return dict(part.split("=", 1) for part in headers["x-cann-llm-replica"].split())


def descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(pid: int) -> bool:
    """Running (a zombie has exited: only its parent has yet to reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def pss_mib(pids) -> float:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("Pss:"))
        except (OSError, StopIteration):
            pass
    return total / 1024


def documented_command() -> list[str]:
    """The flags of docs/scale-out.md's local example, the command these tests start."""
    page = (REPO_ROOT / "docs" / "scale-out.md").read_text()
    line = next(ln for ln in page.splitlines()
                if ln.startswith("CANN_LLM_HOST_DEVICES=2 cann-llm serve "))
    return line.split(" serve ", 1)[1].split()


@pytest.fixture(scope="module")
def server(default_model_path):
    flags = documented_command()
    assert flags[:2] == ["--replicas", "2"]
    t0 = time.monotonic()
    s = Server(default_model_path, *flags, env={"CANN_LLM_HOST_DEVICES": "2"}, timeout=240)
    s.started_in = time.monotonic() - t0
    s.openai = openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0)
    yield s
    s.stop()


def test_requests_spread_over_both_replicas_each_on_its_own_device(server):
    seen = []
    for i in range(4):
        raw = server.openai.chat.completions.with_raw_response.create(
            model=MODEL, max_tokens=4, messages=[
                {"role": "user", "content": f"{'ABCD'[i]}: write one line about the number {i} "
                                            f"and what it means to a mathematician, please."}])
        assert raw.parse().choices[0].message.content
        seen.append(replica_of(raw.headers))
    assert len({r["id"] for r in seen}) == 2, seen
    # Ray gave each replica one of the two NPUs (ASCEND_RT_VISIBLE_DEVICES), seen as CANN0
    assert {r["npu"] for r in seen} == {"0", "1"} and {r["devices"] for r in seen} == {"CANN0"}
    assert len({r["pid"] for r in seen}) == 2
    pss = pss_mib({server.proc.pid} | descendants(server.proc.pid))
    print(f"\n2-replica serve ready in {server.started_in:.1f} s; "
          f"PSS of all its processes {pss:.0f} MiB")


def test_a_conversation_stays_on_the_replica_that_holds_its_prefix(server):
    first = server.openai.chat.completions.with_raw_response.create(
        model=MODEL, max_tokens=12, messages=[{"role": "user", "content": PARIS}])
    home = replica_of(first.headers)["id"]
    answer = first.parse().choices[0].message.content
    for turn in ("And then?", "Tell me more about the Middle Ages."):
        raw = server.openai.chat.completions.with_raw_response.create(model=MODEL, max_tokens=4,
                                                                      messages=[
            {"role": "user", "content": PARIS}, {"role": "assistant", "content": answer},
            {"role": "user", "content": turn}])
        assert replica_of(raw.headers)["id"] == home
        # the replica's prefix cache held the conversation's start
        assert raw.parse().usage.prompt_tokens_details.cached_tokens > 20


def test_load_bounds_the_affinity(server):
    """Six requests at once on one prefix: the replica holding it takes them until it has more
    than --parallel (2) in flight beyond the other, which then gets the rest."""
    rome = PARIS.replace("Paris", "Rome").replace("islands of the Seine", "Palatine hill")
    seen = []

    def one(i):
        r = httpx.post(server.url + "/v1/completions", timeout=120, json={
            "prompt": f"{rome} Part {i}.", "max_tokens": 16, "logit_bias": NO_EOS})
        seen.append(replica_of(r.headers)["id"])
    threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(seen) == 6 and len(set(seen)) == 2, seen


def test_streams_and_errors_pass_through_the_ingress(server):
    chunks = list(server.openai.completions.create(model=MODEL, prompt="Once upon a time",
                                                   max_tokens=6, stream=True, logit_bias=NO_EOS))
    assert chunks[-1].choices[0].finish_reason == "length"
    assert "".join(c.choices[0].text for c in chunks).strip()
    with server.client.stream("POST", "/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3,
            "stream": True}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        assert "x-cann-llm-replica" in r.headers
        lines = [line for line in r.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    r = server.client.post("/v1/chat/completions", json={"messages": [], "frobnicate": 1})
    assert r.status_code == 400 and r.json()["error"]["param"] in ("messages", "frobnicate")
    assert server.client.get("/v1/nowhere").json()["error"]["type"] == "not_found_error"
    with pytest.raises(openai.NotFoundError):
        server.openai.chat.completions.create(model="no-such-model", messages=[
            {"role": "user", "content": "Hi"}])


def test_a_killed_replica_fails_its_requests_cleanly_and_ray_restarts_it(server):
    warm = server.client.post("/v1/completions", json={"prompt": PARIS, "max_tokens": 1})
    victim = replica_of(warm.headers)
    plain = {}

    def non_streamed():         # plain HTTP, routed to the victim by its prompt's prefix
        r = httpx.post(server.url + "/v1/completions", timeout=120, json={
            "prompt": PARIS + " First,", "max_tokens": 400, "logit_bias": NO_EOS})
        plain["status"], plain["body"] = r.status_code, r.json()
    thread = threading.Thread(target=non_streamed)
    thread.start()
    time.sleep(0.3)
    raw = server.openai.completions.with_raw_response.create(
        model=MODEL, prompt=PARIS + " Then,", max_tokens=400, stream=True, logit_bias=NO_EOS)
    assert replica_of(raw.headers)["id"] == victim["id"]
    got = 0
    with pytest.raises(openai.APIError) as failed:
        for chunk in raw.parse():
            got += 1
            if got == 3:
                os.kill(int(victim["pid"]), signal.SIGKILL)
    assert "replica" in str(failed.value) and got < 400
    thread.join(60)
    assert not thread.is_alive()
    assert plain["status"] == 503, plain
    assert plain["body"]["error"]["code"] == "replica_failed"
    # Serve starts a replacement on the freed device; meanwhile the other replica serves
    deadline, ids = time.monotonic() + 90, set()
    while time.monotonic() < deadline:
        r = server.client.get("/health")
        assert r.status_code == 200
        who = replica_of(r.headers)
        ids.add(who["id"])
        if who["id"] != victim["id"] and who["npu"] == victim["npu"]:
            break
        time.sleep(0.2)
    else:
        pytest.fail(f"no replacement replica on NPU {victim['npu']} in 90 s (saw {ids})")
    done = server.openai.completions.create(model=MODEL, prompt=PARIS, max_tokens=2,
                                            logit_bias=NO_EOS)
    assert done.choices[0].finish_reason == "length"


def test_sigterm_drains_stops_ray_and_leaves_no_process(server):
    procs = {server.proc.pid} | descendants(server.proc.pid)
    names = {open(f"/proc/{p}/comm").read().strip() for p in procs if alive(p)}
    assert {"gcs_server", "raylet"} <= names, names
    with server.client.stream("POST", "/v1/completions", json={
            "prompt": "Once upon a time", "max_tokens": 40, "stream": True,
            "logit_bias": NO_EOS}) as r:
        lines = r.iter_lines()
        assert next(line for line in lines if line.startswith("data:"))
        t0 = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        rest = [line for line in lines if line]
    assert rest[-1] == "data: [DONE]" and '"finish_reason":"length"' in rest[-2]
    assert server.proc.wait(60) == 0, server.log()
    print(f"\nSIGTERM to exit: {time.monotonic() - t0:.1f} s")
    deadline = time.monotonic() + 10
    while (left := [p for p in procs if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, [open(f"/proc/{p}/cmdline").read()[:80] for p in left]


# ---- without a cluster ------------------------------------------------------------------------

def cli(*args, env=None, prelude=""):
    code = f"{prelude}\nfrom cann_llm.cli import main\nraise SystemExit(main({list(args)!r}))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL,
                          env={**os.environ, "CANN_LLM_HOST_DEVICES": "2", **(env or {})})


@pytest.mark.parametrize("args, prelude, message", [
    (["--replicas", "3"], "", "3 replicas x 1 device(s) need 3 devices, but this host shows 2"),
    (["--replicas", "2", "--device", "CANN1"], "", "numbered from 0"),
    (["--replicas", "0"], "", "--replicas must be in 1..64"),
    (["--ray-address", "auto"], "", "--ray-address needs --replicas"),
    (["--replicas", "2"], "import sys; sys.modules['ray'] = None",
     "--replicas needs Ray Serve: pip install 'cann-llm[scale]'"),
    (["--replicas", "1", "--ray-address", "nonsense"], "", "expected HOST:PORT"),
    (["--replicas", "1", "--ray-address", f"127.0.0.1:{free_port()}"], "",
     "cannot reach a Ray cluster there (Connection refused)"),
])
def test_replica_flag_errors_are_one_line(default_model_path, args, prelude, message):
    r = cli("serve", str(default_model_path), "-c", "256", *args, prelude=prelude)
    assert r.returncode == 1
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("cann-llm: "), r.stderr
    assert message in r.stderr, r.stderr


def test_a_port_that_is_no_ray_cluster_is_refused_at_once(default_model_path):
    import socket
    with socket.socket() as silent:          # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        t0 = time.monotonic()
        r = cli("serve", str(default_model_path), "-c", "256", "--replicas", "1",
                "--ray-address", f"127.0.0.1:{silent.getsockname()[1]}")
    assert r.returncode == 1 and time.monotonic() - t0 < 60
    assert "does not answer as a Ray cluster's GCS" in r.stderr and r.stderr.count("\n") == 1


def test_the_held_port_is_shared_with_the_proxy_alone():
    """Between the port check and Serve's proxy binding it, ray.init starts a dozen processes
    whose servers bind port 0 and answer any GET with 200. The held port is refused to a plain
    bind such as theirs, as bind(0) skips it, and shared with a SO_REUSEPORT listener such as
    the proxy; a port in use is refused at once."""
    import socket
    from cann_llm.server.replicas import ReplicasError, hold_port
    held = hold_port("127.0.0.1", 0)
    port = held.getsockname()[1]
    try:
        with socket.socket() as plain:
            plain.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            with pytest.raises(OSError):
                plain.bind(("127.0.0.1", port))
        with socket.socket() as proxy:
            proxy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            proxy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            proxy.bind(("127.0.0.1", port))
            proxy.listen()
            with socket.create_connection(("127.0.0.1", port), timeout=5):
                proxy.accept()[0].close()
            with pytest.raises(ReplicasError, match=f"cannot listen on 127.0.0.1:{port}"):
                hold_port("127.0.0.1", port)
    finally:
        held.close()


# ---- the router's bookkeeping -------------------------------------------------------------------

def test_prefix_keys_name_whole_block_prefixes():
    from cann_llm.server.replicas_router import BLOCK, prefix_keys
    a = prefix_keys("x" * (3 * BLOCK + 10))
    b = prefix_keys("x" * (2 * BLOCK) + "y" * BLOCK)
    assert len(a) == len(b) == 3 and a[:2] == b[:2] and a[2] != b[2]
    assert prefix_keys("short") == [] and len(prefix_keys("z" * 10**6)) == 256


def test_the_table_matches_the_longest_prefix_and_forgets():
    from cann_llm.server.replicas_router import PrefixTable, prefix_keys
    t = PrefixTable(block=64, capacity=6)
    conv = prefix_keys("c" * 256)
    t.insert(conv[:2], "r1")
    t.insert(conv, "r2")
    assert t.match(conv, {"r1", "r2"}) == (4, {"r2"})
    assert t.match(conv[:2], {"r1", "r2"}) == (2, {"r1", "r2"})
    assert t.match(conv, {"r1"}) == (2, {"r1"}) and t.match(conv, {"r3"}) == (0, set())
    assert t.chars == {"r1": 128, "r2": 256}
    t.insert(prefix_keys("d" * 192), "r3")            # 7 keys > capacity 6: the oldest goes
    assert len(t) == 6 and t.match(conv, {"r1", "r2"}) == (0, set())
    t.forget("r2")
    assert "r2" not in t.chars and t.match(conv[1:], {"r2"}) == (0, set())


def test_choose_follows_the_prefix_until_the_load_differs_too_much():
    from cann_llm.server.replicas_router import PrefixTable, choose, prefix_keys
    t = PrefixTable(block=64)
    held = prefix_keys("p" * 640)
    t.insert(held, "a")
    assert choose(t, held, 640, {"a": 0, "b": 0}, imbalance=2, min_match=0.1) == "a"
    assert choose(t, held, 640, {"a": 2, "b": 0}, imbalance=2, min_match=0.1) == "a"
    assert choose(t, held, 640, {"a": 3, "b": 0}, imbalance=2, min_match=0.1) == "b"
    # a match under min_match of the prompt is no reason: the replica holding less text wins
    assert choose(t, held[:1], 6400, {"a": 0, "b": 0}, imbalance=2, min_match=0.1) == "b"
    new = prefix_keys("n" * 640)
    assert choose(t, new, 640, {"a": 0, "b": 1}, imbalance=2, min_match=0.1) == "b"


def test_the_prompt_the_router_sees():
    from cann_llm.server.replicas import prompt_text
    chat = b'{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", ' \
           b'"content": [{"type": "text", "text": "Hi"}]}]}'
    assert prompt_text("/v1/chat/completions", chat) == "Be brief.\nHi"
    assert prompt_text("/v1/completions", b'{"prompt": ["one", "two"]}') == "one"
    assert prompt_text("/v1/completions", b'{"prompt": [1, 2, 3]}') == "1 2 3"
    assert prompt_text("/v1/completions", b'{"prompt": ') is None
    assert prompt_text("/health", b"") is None

"""`cann-llm run` and `cann-llm bench`: argument checks and the chat loop on a stand-in model
(in-process, quick), then the real thing as subprocesses on the default model."""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from cann_llm import cli


def _cann_llm(*args, stdin=None, timeout=300):
    exe = shutil.which("cann-llm")
    assert exe, "the cann-llm console script is not on PATH (is the venv active?)"
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout,
                          input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL)


def _one_line_error(result):
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    err = result.stderr.strip()
    assert err.startswith("cann-llm: "), err
    assert "\n" not in err and "Traceback" not in err, err
    return err


# -- a stand-in Model with the cann_llm.model interface -------------------------------------------

class _FakeTokenizer:
    eog_ids = {0}

    def is_eog(self, t):
        return t in self.eog_ids

    def incremental(self):
        class D:
            def add(self, t):
                return f" w{t}"

            def flush(self):
                return ""
        return D()


class _FakeModel:
    n_ctx = 64

    def __init__(self):
        self.tokenizer = _FakeTokenizer()
        self.calls = []
        self._t = {}

    def tokenize(self, text, special=True):
        return [1 + (len(w) % 7) for w in text.split()]

    def generate(self, ids, max_tokens=128, **kw):
        self.calls.append(("generate", list(ids), max_tokens, kw))
        for i in range(max_tokens):
            yield 5 + i
        self._t = dict(load_ms=1.0, prompt_tokens=len(ids), prompt_ms=2.0,
                       gen_tokens=max_tokens, gen_ms=4.0)

    def chat(self, messages, max_tokens=128, **kw):
        self.calls.append(("chat", [dict(m) for m in messages], max_tokens, kw))
        n = sum(len(m["content"]) for m in messages)
        if n > 200:
            from cann_llm.model import ContextFullError
            raise ContextFullError("the prompt has 300 tokens, the context holds 64")
        for piece in ["Paris", " is", " it."][:max_tokens]:
            yield piece
        self._t = dict(load_ms=1.0, prompt_tokens=n, prompt_ms=2.0, gen_tokens=3, gen_ms=4.0)

    def timings(self):
        return dict(self._t)

    def close(self):
        self.calls.append(("close",))


@pytest.fixture
def fake(monkeypatch, tmp_path):
    import cann_llm
    from cann_llm.cli import run as run_cli
    model = _FakeModel()
    seen = {}

    def load(path, **kw):
        seen.update(kw, path=path)
        return model
    monkeypatch.setattr(cann_llm, "load", load, raising=False)
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setattr(run_cli, "resolve_model", lambda m: str(gguf))
    model.seen = seen
    return model


def test_one_shot_chat_streams_and_prints_timings(fake, capsys):
    assert cli.main(["run", "-p", "capital of France?", "-n", "8", "--temp", "0",
                     "--system", "be brief", "-t", "2", "-c", "256"]) == 0
    out, err = capsys.readouterr()
    assert out == "Paris is it.\n"
    assert "load time" in err and "prompt eval time" in err and "tokens per second" in err
    kind, messages, max_tokens, kw = fake.calls[0]
    assert kind == "chat" and max_tokens == 8 and kw["temperature"] == 0.0
    assert messages == [{"role": "system", "content": "be brief"},
                        {"role": "user", "content": "capital of France?"}]
    assert fake.seen["n_ctx"] == 256 and fake.seen["n_threads"] == 2
    assert fake.seen["device"] == "CANN0" and fake.calls[-1] == ("close",)


def test_positional_prompt_and_seed_pass_through(fake, capsys):
    assert cli.main(["run", "m.gguf", "hello", "there", "-s", "42", "-n", "1"]) == 0
    assert capsys.readouterr().out == "Paris\n"
    _, messages, _, kw = fake.calls[0]
    assert messages[-1]["content"] == "hello there" and kw["seed"] == 42


def test_raw_completion_uses_generate_and_stops_at_eog(fake, capsys):
    assert cli.main(["run", "--raw", "-p", "once upon", "-n", "3"]) == 0
    out, err = capsys.readouterr()
    assert out == " w5 w6 w7\n" and "eval time" in err
    assert fake.calls[0][0] == "generate" and fake.calls[0][2] == 3


def test_n_zero_prints_no_text(fake, capsys):
    assert cli.main(["run", "-p", "hi", "-n", "0"]) == 0
    out, err = capsys.readouterr()
    assert out == "" and "load time" in err


def test_interactive_keeps_history_and_exits(fake, capsys, monkeypatch):
    import io
    monkeypatch.setattr(sys, "stdin", io.StringIO("first question\n\nsecond one\n/exit\nnever\n"))
    assert cli.main(["run", "-i", "-n", "4"]) == 0
    out = capsys.readouterr().out
    assert out.count("Paris is it.") == 2
    chats = [c for c in fake.calls if c[0] == "chat"]
    assert len(chats) == 2
    assert chats[1][1] == [{"role": "user", "content": "first question"},
                           {"role": "assistant", "content": "Paris is it."},
                           {"role": "user", "content": "second one"}]


def test_interactive_ctrl_d_and_context_full(fake, capsys, monkeypatch):
    import io
    monkeypatch.setattr(sys, "stdin", io.StringIO("x" * 300 + "\nshort\n"))
    assert cli.main(["run", "-n", "4"]) == 0       # no prompt: interactive; EOF ends it
    out, err = capsys.readouterr()
    assert "context holds 64" in err and out.count("Paris is it.") == 1


def test_ctrl_c_stops_an_answer(fake, capsys, monkeypatch):
    import io

    def interrupted(messages, max_tokens=128, **kw):
        yield "Par"
        raise KeyboardInterrupt
    monkeypatch.setattr(fake, "chat", interrupted)
    assert cli.main(["run", "-p", "hi"]) == 130            # one-shot: the run ends
    assert capsys.readouterr().out == "Par\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO("one\ntwo\n"))
    assert cli.main(["run", "-i"]) == 0                     # chat: the next turn goes on
    out, err = capsys.readouterr()
    assert out == "Par\nPar\n" and err.count("answer interrupted") == 2


def test_prompt_too_long_is_one_line(fake, capsys):
    assert cli.main(["run", "-p", "y" * 300]) == 1
    err = capsys.readouterr().err
    assert err.startswith("cann-llm: ") and err.count("\n") == 1 and "context" in err


@pytest.mark.parametrize("argv, words", [
    (["-n", "-5"], "-n"), (["--temp", "nan"], "--temp"), (["--top-p", "2"], "--top-p"),
    (["--min-p", "-1"], "--min-p"), (["--repeat-penalty", "0"], "--repeat-penalty"),
    (["--device", "GPU7"], "--device"), (["-c", "-1"], "--ctx-size"), (["-t", "0"], "--threads"),
])
def test_bad_values_fail_before_loading(argv, words, capsys, monkeypatch):
    import cann_llm
    monkeypatch.setattr(cann_llm, "load", lambda *a, **k: pytest.fail("loaded"), raising=False)
    assert cli.main(["run", "-p", "hi", *argv]) == 1
    err = capsys.readouterr().err
    assert err.startswith("cann-llm: ") and err.count("\n") == 1 and words in err


def test_missing_model_and_directory(tmp_path, capsys):
    assert cli.main(["run", str(tmp_path / "nope.gguf"), "-p", "hi"]) == 1
    assert "no such file" in capsys.readouterr().err
    assert cli.main(["run", str(tmp_path), "-p", "hi"]) == 1
    assert "directory" in capsys.readouterr().err


def test_bench_table_format():
    from cann_llm.bench import format_rows
    table = format_rows([dict(model="llama 135M Q4_1", size="85 MiB", params="135 M",
                              backend="CANN", threads=2, test="tg128", tps=[10.0, 12.0])])
    assert "| tg128 |" in table and "11.00 ± 1.41" in table


# -- the real model, as a user runs it --------------------------------------------------------------

@pytest.mark.slow
def test_run_one_shot_on_the_default_model(default_model_path):
    r = _cann_llm("run", "-p", "What is the capital of France?", "-n", "12", "--temp", "0")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip(), r.stderr
    for what in ("load time", "prompt eval time", "eval time", "tokens per second"):
        assert what in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.slow
def test_run_n_zero_on_the_default_model(default_model_path):
    r = _cann_llm("run", str(default_model_path), "-p", "Hi", "-n", "0")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "" and "prompt eval time" in r.stderr


@pytest.mark.slow
def test_run_interactive_two_turns_on_the_default_model(default_model_path):
    r = _cann_llm("run", "-i", "-n", "8", "--temp", "0",
                  stdin="Name a colour.\nAnd another one?\n/exit\n")
    assert r.returncode == 0, r.stderr
    assert len([ln for ln in r.stdout.splitlines() if ln.strip()]) >= 2, r.stdout


@pytest.mark.slow
@pytest.mark.parametrize("case", ["missing", "directory", "truncated", "not_gguf", "arch",
                                  "too_long", "duplicate_device"])
def test_bad_inputs_on_the_command_line(case, tmp_path, default_model_path):
    src = str(default_model_path)
    if case == "missing":
        args = [str(tmp_path / "missing.gguf"), "-p", "hi"]
    elif case == "directory":
        args = [str(tmp_path), "-p", "hi"]
    elif case == "truncated":
        p = tmp_path / "cut.gguf"
        with open(src, "rb") as f:
            p.write_bytes(f.read(os.path.getsize(src) // 2))
        args = [str(p), "-p", "hi"]
    elif case == "not_gguf":
        p = tmp_path / "text.gguf"
        p.write_text("hello, not a model\n" * 100)
        args = [str(p), "-p", "hi"]
    elif case == "arch":
        p = tmp_path / "arch.gguf"
        data = bytearray(open(src, "rb").read(1 << 16))
        i = data.find(b"llama", data.find(b"general.architecture"))
        data[i:i + 5] = b"llamb"
        p.write_bytes(bytes(data) + open(src, "rb").read()[1 << 16:])
        args = [str(p), "-p", "hi"]
    elif case == "duplicate_device":
        args = ["--device", "CANN0,CANN0", "-p", "hi"]
    else:
        args = ["-c", "64", "-p", "word " * 200]
    err = _one_line_error(_cann_llm("run", *args, "-n", "1"))
    if case == "too_long":
        assert "-c/--ctx-size" in err, err
    if case == "duplicate_device":
        assert "more than once" in err, err


@pytest.mark.slow
def test_run_json_schema_and_grammar_files(tmp_path, default_model_path):
    import json
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                               "big": {"type": "boolean"}},
              "required": ["city", "big"], "additionalProperties": False}
    (tmp_path / "s.json").write_text(json.dumps(schema))
    r = _cann_llm("run", "--json-schema", str(tmp_path / "s.json"), "-p",
                  "Name a city in France as JSON.", "-n", "60", "--temp", "0")
    assert r.returncode == 0, r.stderr
    answer = json.loads(r.stdout)
    assert set(answer) == {"city", "big"} and isinstance(answer["big"], bool)
    (tmp_path / "g.gbnf").write_text('root ::= "yes" | "no"\n')
    r = _cann_llm("run", "--grammar", str(tmp_path / "g.gbnf"), "-p", "Is Paris in France?",
                  "-n", "8", "--temp", "0")
    assert r.returncode == 0 and r.stdout.strip() in ("yes", "no"), (r.stdout, r.stderr)
    (tmp_path / "bad.json").write_text('{"type": "nope"}')
    err = _one_line_error(_cann_llm("run", "--json-schema", str(tmp_path / "bad.json"), "-p",
                                    "hi"))
    assert err.startswith("cann-llm: --json-schema: JSON schema") and "nope" in err, err
    err = _one_line_error(_cann_llm("run", "--json-schema", str(tmp_path / "s.json"),
                                    "--grammar", str(tmp_path / "g.gbnf"), "-p", "hi"))
    assert "do not go together" in err
    err = _one_line_error(_cann_llm("run", "--grammar", str(tmp_path / "none.gbnf"), "-p", "hi"))
    assert "--grammar" in err


@pytest.mark.slow
def test_bench_small(default_model_path):
    r = _cann_llm("bench", "-p", "16", "-n", "4", "-r", "1", "--llamacpp", "off")
    assert r.returncode == 0, r.stderr
    assert "pp16" in r.stdout and "tg4" in r.stdout and "t/s" in r.stdout
    # the model was just downloaded or read: its GGUF is in the page cache, and the line says so
    cached = [ln for ln in r.stdout.splitlines() if ln.startswith("in the page cache before")]
    assert cached and "GGUF " in cached[0] and "%" in cached[0], r.stdout
    opens = [ln for ln in r.stdout.splitlines() if ln.startswith("open to first token")]
    assert [ln.split(":")[0] for ln in opens] == ["open to first token, first open",
                                                  "open to first token, second open"], r.stdout
    assert all("weight cache " in ln for ln in opens), opens


def _on_tmpfs(path) -> bool:
    best, fstype = "", ""
    with open("/proc/self/mounts") as f:
        for line in f:
            mount, kind = line.split()[1:3]
            if str(path).startswith(mount.rstrip("/") + "/") and len(mount) > len(best):
                best, fstype = mount, kind
    return fstype in ("tmpfs", "ramfs")


def test_page_cache_fraction_sees_pages_leave_and_come_back(tmp_path):
    from cann_llm.bench import page_cache_fraction
    path = tmp_path / "pages.bin"
    path.write_bytes(os.urandom(1 << 20))
    with open(path, "rb") as f:
        f.read()
        assert page_cache_fraction(path) == 1.0
        if _on_tmpfs(path):
            pytest.skip("tmpfs keeps its pages: nothing to evict")
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    assert page_cache_fraction(path) < 0.5
    path.read_bytes()
    assert page_cache_fraction(path) == 1.0
    assert page_cache_fraction(tmp_path / "missing.bin") is None
    (tmp_path / "empty.bin").write_bytes(b"")
    assert page_cache_fraction(tmp_path / "empty.bin") is None


def test_host_time_per_token_parts_add_up(default_model_path):
    """bench's decode-token breakdown: the waits are inside the token, and the thread's CPU time
    outside the waits is at most their wall time (on acl_host the gap is time the woken stream
    thread held the caller's core)."""
    import cann_llm
    from cann_llm.bench import host_time_per_token
    with cann_llm.load(default_model_path, n_ctx=256, n_threads=2) as m:
        h = host_time_per_token(m, n_gen=8)
    assert h["total_ms"] > h["wait_ms"] > 0 and h["host_ms"] > 0
    assert 0 < h["host_cpu_ms"] <= h["host_ms"] + 0.05, h


def test_unknown_flag_of_a_command_is_that_commands_error(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["run", "--bogus", "-p", "hi"])
    assert exc.value.code == 1
    err = capsys.readouterr().err
    assert "cann-llm: run: unrecognized arguments: --bogus" in err and "cann-llm run --help" in err


def test_chat_template_file_replaces_the_models(tmp_path, default_model_path):
    template = tmp_path / "t.jinja"
    template.write_text("{% for m in messages %}<<{{ m.role }}:{{ m.content }}>>{% endfor %}"
                        "{% if add_generation_prompt %}<<assistant:{% endif %}")
    import cann_llm
    with cann_llm.load(default_model_path, n_ctx=64, chat_template=template.read_text()) as m:
        assert m.chat_template.render([{"role": "user", "content": "hi"}]) == \
            "<<user:hi>><<assistant:"
    r = _cann_llm("run", "--chat-template-file", str(tmp_path / "missing.jinja"), "-p", "hi")
    assert "--chat-template-file" in _one_line_error(r)


def test_verbose_prints_the_summary_once_with_prefixed_lines(default_model_path):
    r = _cann_llm("run", str(default_model_path), "-v", "--raw", "-p", "Once upon a time",
                  "-n", "4", "--temp", "0", "-c", "128")
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("model: llama, 30 layers") == 1, r.stderr
    assert all(line.startswith("cann-llm") for line in r.stderr.splitlines() if line), r.stderr
    assert "graph:" not in r.stdout and "split" not in r.stdout


def test_python_api_accepts_text_and_names_n_ctx(default_model_path):
    import cann_llm
    with cann_llm.load(default_model_path, n_ctx=32) as m:
        ids = m.tokenize("The capital of France is")
        assert list(m.generate("The capital of France is", max_tokens=3, temperature=0)) == \
            list(m.generate(ids, max_tokens=3, temperature=0))
        with pytest.raises(cann_llm.ContextFullError) as exc:
            m.logits(list(range(40)))
        assert "n_ctx" in str(exc.value) and "(-c)" not in str(exc.value)


def test_no_mmap_reaches_load(fake):
    assert cli.main(["run", "-p", "hi", "--no-mmap"]) == 0
    assert fake.seen["use_mmap"] is False
    fake.seen.clear()
    assert cli.main(["run", "-p", "hi"]) == 0
    assert fake.seen.get("use_mmap", True) is True


def test_verbose_says_which_weights_stay_in_the_map(tmp_path):
    """-v reports the weights read from the file's map (acl_host: F16 tensors of 1 MiB or more);
    --no-mmap copies them, and the greedy text is the same."""
    from gguf import GGMLQuantizationType as QT
    from tiny_models import write_tiny_model
    path = write_tiny_model(tmp_path / "f16.gguf", n_embd=512, n_head=8, n_head_kv=4, n_ff=1024,
                            weight_type=QT.F16)
    runs = [_cann_llm("run", str(path), "-v", "--raw", "-p", "a b c", "-n", "6", "--temp", "0",
                      "-c", "64", *extra) for extra in ((), ("--no-mmap",))]
    assert all(r.returncode == 0 for r in runs), [r.stderr for r in runs]
    assert "MiB read from the file's map" in runs[0].stderr, runs[0].stderr
    assert "read from the file's map" not in runs[1].stderr, runs[1].stderr
    assert runs[0].stdout == runs[1].stdout


def test_cache_type_flags_reach_load(fake):
    assert cli.main(["run", "-p", "hi", "-ctk", "f32", "-ctv", "f32"]) == 0
    assert fake.seen["type_k"] == "f32" and fake.seen["type_v"] == "f32"
    assert cli.main(["run", "-p", "hi"]) == 0
    assert fake.seen["type_k"] == "f16" and fake.seen["type_v"] == "f16"


@pytest.mark.slow
def test_unsupported_cache_type_is_one_line(default_model_path):
    err = _one_line_error(_cann_llm("run", str(default_model_path), "-ctk", "q8_0", "-p", "hi",
                                    "-n", "1"))
    assert "q8_0" in err, err

"""The architecture registry (runner/arch/): what each architecture declares, a generic loader
(no architecture names in loader.py), and a new architecture that lives only in its declaration."""

import ast
import pathlib
import re

import numpy as np
import pytest

from cann_llm import arch, loader
from cann_llm.arch import ROPE_NEOX, ROPE_NORMAL, Key
from cann_llm.arch.llama import Llama
from cann_llm.model import Model

from conftest import run_python
from tiny_models import write_tiny_model

RUNNER = pathlib.Path(loader.__file__).parent


def test_registry_declarations():
    assert arch.supported() == ("llama", "qwen2") == loader.SUPPORTED_ARCHS
    llama, qwen2 = arch.get("llama"), arch.get("qwen2")
    assert (llama.rope_type, llama.qkv_bias) == (ROPE_NORMAL, None)
    assert (qwen2.rope_type, qwen2.qkv_bias) == (ROPE_NEOX, True)
    assert type(qwen2).__module__ == "cann_llm.arch.qwen2"
    assert llama.tensor("attn_q", "bias", 3) == "blk.3.attn_q.bias"
    with pytest.raises(KeyError, match="unknown architecture 'gptneox'; supported: llama, qwen2"):
        arch.get("gptneox")


def _code_strings(path: pathlib.Path) -> list[str]:
    """The string constants of a module's code (docstrings left out)."""
    tree = ast.parse(path.read_text())
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
            and isinstance(n.value, str) and id(n) not in docs]


def test_loader_and_model_name_no_architecture():
    """Architecture names and their tensor names live in arch/ only."""
    for module in ("loader.py", "model.py", "kv_cache.py", "weights.py"):
        strings = _code_strings(RUNNER / module)
        for name in arch.supported():
            assert name not in strings, f"{module} names the architecture {name!r}"
        tensors = [s for s in strings if re.search(r"\.(weight|bias)$|^blk\.|^(attn|ffn)_", s)]
        assert not tensors, f"{module} names tensors {tensors}"


def test_declarations_do_not_load_the_backend():
    """The loader reads declarations only: opening a GGUF (cann-llm info) works where the native
    libraries cannot load; the backend loads with the first graph."""
    result = run_python("import sys, cann_llm.loader, cann_llm.arch\n"
                        "print(sorted(m for m in sys.modules if m.startswith('cann_llm.')))")
    assert result.returncode == 0, result.stderr
    assert "cann_llm.arch.qwen2" in result.stdout and "cann_llm.backend" not in result.stdout


def test_qwen2_declares_its_biases(tmp_path):
    """qwen2 requires the QKV biases (declared), llama takes them only when present."""
    path = write_tiny_model(tmp_path / "q.gguf", arch="qwen2", drop={"blk.1.attn_k.bias"})
    with pytest.raises(loader.GGUFError, match="missing tensor 'blk.1.attn_k.bias'"):
        loader.open_gguf(path)


class Toy(Llama):
    """A made-up architecture: llama's graph under another name, neox rope, one extra key, and
    its own tensor name for the FFN output (as a new architecture would declare them)."""
    name = "toyarch"
    rope_type = ROPE_NEOX
    extra_keys = (Key("logit_scale", "logit_scale", float, 1.0),
                  Key("toy_flag", "toy_flag", bool))
    tensor_names = {**Llama.tensor_names, "ffn_down": "blk.{bid}.ffn_toy_down"}


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(arch.ARCHS, "toyarch", Toy())
    return Toy


def _toy_model(path, **kw):
    renames = {f"blk.{i}.ffn_down.weight": (128, 64) for i in range(2)}
    shapes = {f"blk.{i}.ffn_toy_down.weight": ne for i, ne in enumerate(renames.values())}
    return write_tiny_model(path, arch="toyarch", drop=set(renames), shapes=shapes, **kw)


def test_a_new_architecture_is_only_a_declaration(toy, tmp_path):
    path = _toy_model(tmp_path / "toy.gguf", kv={"toyarch.toy_flag": True,
                                                  "toyarch.logit_scale": 0.5})
    g = loader.open_gguf(path)
    hp = g.hparams
    assert hp.arch == "toyarch" and hp.rope_type == ROPE_NEOX and not hp.qkv_bias
    assert hp.extra == {"logit_scale": 0.5, "toy_flag": True}
    assert "blk.1.ffn_toy_down.weight" in loader.expected_tensors(hp)
    g.close()
    ids = [1, 5, 9, 200]
    with Model(path, n_ctx=64) as dev, Model(path, device="CPU", n_ctx=64) as cpu:
        np.testing.assert_allclose(dev.logits(ids), cpu.logits(ids), rtol=0, atol=2e-3)


def test_new_architecture_keys_are_checked(toy, tmp_path):
    path = _toy_model(tmp_path / "toy.gguf")            # toy_flag is required
    with pytest.raises(loader.GGUFError, match="missing key 'toyarch.toy_flag'"):
        loader.open_gguf(path)
    path = _toy_model(tmp_path / "toy2.gguf", kv={"toyarch.toy_flag": "yes"})
    with pytest.raises(loader.GGUFError, match="'toyarch.toy_flag' = 'yes' is not a valid bool"):
        loader.open_gguf(path)
    path = write_tiny_model(tmp_path / "toy3.gguf", arch="toyarch", kv={"toyarch.toy_flag": True})
    with pytest.raises(loader.GGUFError, match="missing tensor 'blk.0.ffn_toy_down.weight'"):
        loader.open_gguf(path)


def test_rope_modes_match_the_c_header():
    from cann_llm import backend
    assert ROPE_NEOX == backend.ROPE_TYPE_NEOX and ROPE_NORMAL == 0

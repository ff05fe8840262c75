"""The architecture registry (runner/arch/): what each architecture declares, a generic loader
(no architecture names in loader.py), and a new architecture that lives only in its declaration."""

import ast
import math
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
    assert arch.supported() == ("gemma3", "llama", "phi3", "qwen2", "qwen3", "qwen3moe") == \
        loader.SUPPORTED_ARCHS
    llama, qwen2, qwen3 = arch.get("llama"), arch.get("qwen2"), arch.get("qwen3")
    assert (llama.rope_type, llama.qkv_bias, llama.qk_norm) == (ROPE_NORMAL, None, False)
    assert (qwen2.rope_type, qwen2.qkv_bias, qwen2.qk_norm) == (ROPE_NEOX, True, False)
    assert (qwen3.rope_type, qwen3.qkv_bias, qwen3.qk_norm) == (ROPE_NEOX, None, True)
    assert type(qwen2).__module__ == "cann_llm.arch.qwen2"
    assert llama.tensor("attn_q", "bias", 3) == "blk.3.attn_q.bias"
    assert qwen3.tensor("attn_k_norm", bid=2) == "blk.2.attn_k_norm.weight"
    with pytest.raises(KeyError, match="unknown architecture 'gptneox'; supported: gemma3, llama, "
                                       "phi3, qwen2, qwen3, qwen3moe"):
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


@pytest.fixture(scope="module")
def tiny_qwen3(tmp_path_factory):
    """Qwen3's shape: head_dim (attention.key_length) 32 over n_embd 64 / 4 heads = 16."""
    return write_tiny_model(tmp_path_factory.mktemp("q3") / "q3.gguf", arch="qwen3", n_embd=64,
                            n_head=4, n_head_kv=2, head_dim=32, n_ff=128)


def test_qwen3_loads_head_dim_and_head_norms(tiny_qwen3, tmp_path):
    g = loader.open_gguf(tiny_qwen3)
    hp = g.hparams
    assert (hp.head_dim, hp.rope_type, hp.qkv_bias) == (32, ROPE_NEOX, False)
    assert loader.expected_tensors(hp)["blk.1.attn_q_norm.weight"] == (32,)
    assert loader.expected_tensors(hp)["blk.0.attn_q.weight"] == (64, 128)
    g.close()
    path = write_tiny_model(tmp_path / "bad.gguf", arch="qwen3", head_dim=32,
                            drop={"blk.1.attn_k_norm.weight"})
    with pytest.raises(loader.GGUFError, match="missing tensor 'blk.1.attn_k_norm.weight'"):
        loader.open_gguf(path)


def test_qwen3_normalises_each_head_before_rope(tiny_qwen3):
    """Qcur_normed / Kcur_normed are RMS norms over each head's head_dim values times the
    attn_{q,k}_norm weight (checked in numpy from the node's own inputs), and the device's logits
    equal the CPU reference's."""
    ids = [1, 5, 9, 200, 17]
    seen = {}

    def cb(name, op, ttype, ne, data, info):
        if name.startswith(("Qcur_normed-", "Kcur_normed-")) or name in ("Qcur-1", "Kcur-1"):
            seen.setdefault((name, op), (info.src_names, info.sources(), data.copy()))
        return True

    # unfused: Q and K are MUL_MAT nodes of their own (fused, views of one; test_weight_fusion)
    with Model(tiny_qwen3, n_ctx=64, fuse_weights=False) as dev, \
            Model(tiny_qwen3, device="CPU", n_ctx=64) as cpu:
        np.testing.assert_allclose(dev.logits(ids), cpu.logits(ids), rtol=0, atol=2e-3)
        dev.logits(ids, eval_callback=cb)
    g = loader.open_gguf(tiny_qwen3)
    for kind, n_heads in (("Q", 4), ("K", 2)):
        pre = seen[(f"{kind}cur-1", "MUL_MAT")][2]                 # [n_tokens, n_heads*head_dim]
        srcs, (_, weight), normed = seen[(f"{kind}cur_normed-1", "MUL")]
        assert srcs[1] == f"blk.1.attn_{kind.lower()}_norm.weight"
        x = pre.reshape(len(ids), n_heads, 32).astype(np.float64)
        want = x / np.sqrt((x * x).mean(-1, keepdims=True) + g.hparams.rms_eps) * weight
        np.testing.assert_allclose(normed.reshape(want.shape), want, rtol=2e-3, atol=2e-3)
    g.close()


@pytest.fixture(scope="module")
def tiny_phi3(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("p3") / "p3.gguf", arch="phi3", n_embd=64,
                            n_head=4, n_head_kv=2, n_ff=96, tied=False)


def test_phi3_fused_projections(tiny_phi3):
    """phi3: Q, K and V are views of one attn_qkv product ([Q | K | V] rows), SwiGLU runs over
    the halves of ffn_up ([gate | up]); both checked in numpy from the nodes' values, and the
    device's logits equal the CPU reference's."""
    g = loader.open_gguf(tiny_phi3)
    hp = g.hparams
    assert hp.fused_qkv and not hp.qkv_bias
    expected = loader.expected_tensors(hp)
    assert expected["blk.0.attn_qkv.weight"] == (64, 64 + 2 * 32)
    assert expected["blk.0.ffn_up.weight"] == (64, 192)
    assert "blk.0.attn_q.weight" not in expected and "blk.0.ffn_gate.weight" not in expected
    g.close()
    ids = [1, 5, 9, 200, 17]
    seen = {}

    def cb(name, op, ttype, ne, data, info):
        seen.setdefault((name, op), (info.sources(), data.copy()))
        return True

    with Model(tiny_phi3, n_ctx=64) as dev, Model(tiny_phi3, device="CPU", n_ctx=64) as cpu:
        np.testing.assert_allclose(dev.logits(ids), cpu.logits(ids), rtol=0, atol=2e-3)
        dev.logits(ids, eval_callback=cb)
    qkv = seen[("wqkv-1", "MUL_MAT")][1]                     # [n_tokens, 128]
    for kind, lo, hi in (("Q", 0, 64), ("K", 64, 96)):
        rope_in = seen[(f"{kind}cur-1", "ROPE")][0][0]       # the view ROPE read
        np.testing.assert_array_equal(rope_in.reshape(len(ids), -1), qkv[:, lo:hi])
    (up,), swiglu = seen[("ffn_swiglu-0", "SWIGLU")]
    up = up.reshape(len(ids), 192).astype(np.float64)
    gate, lin = up[:, :96], up[:, 96:]
    np.testing.assert_allclose(swiglu, gate / (1 + np.exp(-gate)) * lin, rtol=1e-3, atol=1e-5)


def test_fused_qkv_file_refuses_a_wrong_shape(tmp_path):
    path = write_tiny_model(tmp_path / "p.gguf", arch="phi3",
                            shapes={"blk.0.attn_qkv.weight": (64, 64)})
    with pytest.raises(loader.GGUFError, match="blk.0.attn_qkv.weight"):
        loader.open_gguf(path)


def _tiny_gemma3(path, **kv):
    """Gemma 3's features at a tiny size: GQA 2:1, head_dim 32 over n_embd 64, three layers with
    a period-3 window pattern (0 and 1 local, 2 global), a 4-token window."""
    keys = {"gemma3.attention.sliding_window": 4, "gemma3.attention.sliding_window_pattern": 3,
            "gemma3.rope.freq_base_swa": 10000.0, **kv}
    return write_tiny_model(path, arch="gemma3", n_embd=64, n_head=4, n_head_kv=2, head_dim=32,
                            n_ff=128, n_layer=3, rope_freq_base=1e6, kv=keys, weight_scale=0.1)


def test_gemma3_declaration(tmp_path):
    g = loader.open_gguf(_tiny_gemma3(tmp_path / "g.gguf"))
    hp, decl = g.hparams, arch.get("gemma3")
    assert hp.extra == {"n_swa": 4, "swa_pattern": (3,), "rope_freq_base_swa": 10000.0,
                        "logit_softcap": 0.0}
    assert [decl.is_swa(hp, il) for il in range(3)] == [True, True, False]
    assert decl.layer_rope(hp, 0) == {"freq_base": 10000.0, "freq_scale": 1.0}
    assert decl.layer_rope(hp, 2) == {} and decl.logit_softcap(hp) is None
    assert decl.embed_scale(hp) == 8.0 and decl.attn_scale(hp) == 1 / math.sqrt(32)
    assert loader.expected_tensors(hp)["blk.2.post_ffw_norm.weight"] == (64,)
    g.close()
    # a per-layer pattern (an array of flags), and no window at all: every layer global
    g = loader.open_gguf(_tiny_gemma3(tmp_path / "g2.gguf", **{
        "gemma3.attention.sliding_window_pattern": np.array([0, 1, 0], dtype=np.int32)}))
    assert [decl.is_swa(g.hparams, il) for il in range(3)] == [False, True, False]
    g.close()
    g = loader.open_gguf(_tiny_gemma3(tmp_path / "g3.gguf", **{
        "gemma3.attention.sliding_window": None}))
    assert not any(decl.is_swa(g.hparams, il) for il in range(3))
    g.close()


def test_gemma3_graph(tmp_path):
    """Embeddings scaled by sqrt(n_embd), local layers attend under kq_mask_swa and global ones
    under kq_mask, GEGLU with tanh-GELU, post norms before each residual add, and the logit
    soft-cap: checked in numpy from the nodes' values; device logits equal the CPU reference's."""
    path = _tiny_gemma3(tmp_path / "g.gguf", **{"gemma3.final_logit_softcapping": 3.0})
    ids = [1, 5, 9, 200, 17, 40, 41, 3, 8]
    seen = {}

    def cb(name, op, ttype, ne, data, info):
        seen.setdefault((name, op), (info.src_names, info.sources(), data.copy()))
        return True

    # unfused: GEGLU's gate and up are two sources (fused, one; test_weight_fusion)
    with Model(path, n_ctx=64, fuse_weights=False) as dev, \
            Model(path, device="CPU", n_ctx=64) as cpu:
        np.testing.assert_allclose(dev.logits(ids), cpu.logits(ids), rtol=0, atol=2e-3)
        logits = dev.logits(ids, eval_callback=cb)
    (embd,), scaled = seen[("inp_scaled", "SCALE")][1:]
    np.testing.assert_allclose(scaled, embd.reshape(scaled.shape) * 8.0, rtol=1e-6)
    assert seen[("__fattn__-0", "FLASH_ATTN_EXT")][0][3] == "kq_mask_swa"
    assert seen[("__fattn__-2", "FLASH_ATTN_EXT")][0][3] == "kq_mask"
    (gate, up), geglu = seen[("ffn_geglu-0", "GEGLU")][1:]
    g64 = gate.reshape(geglu.shape).astype(np.float64)
    gelu = 0.5 * g64 * (1 + np.tanh(math.sqrt(2 / math.pi) * (g64 + 0.044715 * g64 ** 3)))
    np.testing.assert_allclose(geglu, gelu * up.reshape(geglu.shape), rtol=2e-3, atol=1e-5)
    srcs = seen[("ffn_inp-1", "ADD")][0]
    assert srcs[0] == "attn_post_norm-1"
    assert seen[("l_out-1", "ADD")][0][0] == "ffn_post_norm-1"
    raw = seen[("result_output", "MUL_MAT")][2].astype(np.float64).reshape(logits.shape)
    np.testing.assert_allclose(logits, 3.0 * np.tanh(raw / 3.0), rtol=1e-4, atol=1e-5)
    assert np.abs(logits).max() < 3.0


def test_gemma3_sliding_window_hides_far_tokens(tmp_path):
    """With every layer local (a per-layer pattern of all ones), a window of 3 (a token sees
    itself and the 2 before it) and 3 layers, the logits at position t depend on positions
    t-6..t only: two sequences that differ at position 0 differ up to position 6 and give the
    same logits from position 7 on (a window off by one moves that boundary)."""
    path = _tiny_gemma3(tmp_path / "g.gguf", **{
        "gemma3.attention.sliding_window": 3,
        "gemma3.attention.sliding_window_pattern": np.array([1, 1, 1], dtype=np.int32)})
    a = [7, 5, 9, 200, 17, 40, 41, 3, 8, 60]
    b = [250] + a[1:]
    with Model(path, n_ctx=64) as m:
        la, lb = m.logits(a), m.logits(b)
    assert not np.allclose(la[:2], lb[:2]) and not np.allclose(la[6], lb[6])
    np.testing.assert_array_equal(la[7:], lb[7:])


def test_qwen3moe_declaration(tmp_path):
    path = write_tiny_model(tmp_path / "m.gguf", arch="qwen3moe", head_dim=32, n_ff=48,
                            n_expert=6, n_expert_used=2)
    g = loader.open_gguf(path)
    hp = g.hparams
    assert hp.extra == {"n_expert": 6, "n_expert_used": 2, "n_ff_exp": 48}
    expected = loader.expected_tensors(hp)
    assert expected["blk.1.ffn_down_exps.weight"] == (48, 64, 6)
    assert expected["blk.1.ffn_gate_inp.weight"] == (64, 6)
    assert "blk.1.ffn_down.weight" not in expected
    g.close()
    bad = write_tiny_model(tmp_path / "bad.gguf", arch="qwen3moe", n_expert=2, n_expert_used=3)
    with pytest.raises(loader.GGUFError, match="expert_used_count = 3 must be between 1 and "
                                               "expert_count = 2"):
        loader.open_gguf(bad)
    dense = write_tiny_model(tmp_path / "l.gguf", kv={"llama.expert_count": 8})
    with pytest.raises(loader.GGUFError, match="not supported for 'llama' \\(MoE architectures: "
                                               "qwen3moe\\)"):
        loader.open_gguf(dense)


def test_qwen3moe_routes_each_token_through_its_experts(tmp_path):
    """The MoE FFN against numpy from the file's own expert weights: softmax router, the top 2 of
    6 experts per token, their probabilities renormalised, SwiGLU experts, the weighted sum
    (ffn_moe_out of layer 0 from its input ffn_norm-0); device logits equal the CPU reference's."""
    path = write_tiny_model(tmp_path / "m.gguf", arch="qwen3moe", head_dim=32, n_ff=48,
                            n_expert=6, n_expert_used=2, weight_scale=0.1)
    ids = [1, 5, 9, 200, 17]
    seen = {}

    def cb(name, op, ttype, ne, data, info):
        seen.setdefault(name, data.copy())
        return True

    with Model(path, n_ctx=64) as dev, Model(path, device="CPU", n_ctx=64) as cpu:
        np.testing.assert_allclose(dev.logits(ids), cpu.logits(ids), rtol=0, atol=2e-3)
        dev.logits(ids, eval_callback=cb)
    g = loader.open_gguf(path)
    wt = {n: t.data.view(np.float32).reshape(tuple(reversed(t.ne))).astype(np.float64)
          for n, t in g.tensors.items() if n.startswith("blk.0.ffn")}      # F32 weights
    g.close()
    x = seen["ffn_norm-0"].reshape(len(ids), 64).astype(np.float64)
    logits = x @ wt["blk.0.ffn_gate_inp.weight"].T                       # [n_tokens, 6]
    probs = np.exp(logits - logits.max(1, keepdims=True))
    probs /= probs.sum(1, keepdims=True)
    top = np.argsort(-probs, axis=1, kind="stable")[:, :2]
    np.testing.assert_array_equal(seen["ffn_moe_argsort-0"].reshape(len(ids), 6)[:, :2], top)
    want = np.zeros_like(x)
    for t in range(len(ids)):
        w = probs[t, top[t]] / probs[t, top[t]].sum()
        for e, we in zip(top[t], w):
            gate = wt["blk.0.ffn_gate_exps.weight"][e] @ x[t]
            up = wt["blk.0.ffn_up_exps.weight"][e] @ x[t]
            want[t] += we * (wt["blk.0.ffn_down_exps.weight"][e] @ (gate / (1 + np.exp(-gate)) * up))
    got = seen["ffn_moe_out-0"].reshape(want.shape)
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-3 * np.abs(want).max())


@pytest.mark.parametrize("qtype", ["Q4_0", "Q4_1", "F16"])
def test_qwen3moe_batch_is_the_tokens_alone(tmp_path, qtype):
    """Eight one-token sequences decoded together give each sequence's logits alone, bit for bit,
    although the experts take other MUL_MAT_ID compositions: Q4_0 / Q4_1 experts are gathered per
    token alone (2 pairs for 6 experts) and routed through the grouped product together (16
    pairs), which computes the same dequantized weights with the same fused multiply-adds; F16
    experts are routed both times. The batch also agrees with the CPU reference."""
    from gguf import GGMLQuantizationType as QT

    from cann_llm.model import Batch
    exps = {f"blk.{i}.ffn_{p}_exps.weight": QT[qtype] for i in range(2) for p in ("gate", "up", "down")}
    path = write_tiny_model(tmp_path / "m.gguf", arch="qwen3moe", head_dim=32, n_ff=64, n_expert=6,
                            n_expert_used=2, weight_scale=0.1, types=exps)
    toks = [5, 6, 7, 9, 11, 40, 77, 120]
    with Model(path, n_ctx=64) as dev, Model(path, device="CPU", n_ctx=64) as cpu:
        backend = dev.sched.slots[0].backend
        dev.kv.clear()
        rows = dev.decode(Batch(toks, [0] * 8, list(range(8)), [True] * 8))
        together = backend.stats()
        assert together["mul_mat_id_routed"] > 0 and together["mul_mat_id_gathered"] == 0
        for s, tok in enumerate(toks):
            np.testing.assert_array_equal(rows[s], dev.logits([tok])[0])
        alone = backend.stats()
        if qtype == "F16":
            assert alone["mul_mat_id_gathered"] == 0 and alone["mul_mat_id_routed"] > together["mul_mat_id_routed"]
        else:
            assert alone["mul_mat_id_gathered"] > 0 and alone["mul_mat_id_routed"] == together["mul_mat_id_routed"]
        want = np.concatenate([cpu.logits([tok]) for tok in toks])
        np.testing.assert_allclose(rows, want, rtol=0, atol=5e-3 * np.abs(want).max())


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

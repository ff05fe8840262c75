"""Weights fused at load (Arch.weight_fusions, weights.load_weights): each layer's Q, K and V as one
attn_qkv tensor and its FFN gate and up as one ffn_gate_up, where the parts share a type and none
stays in the file's map. The fused graph gives the unfused graph's logits bit for bit on acl_host
(every output element of a product is the same sum, whatever the columns beside it)."""

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from tiny_models import write_tiny_model

PROMPT = [1, 5, 9, 200, 17, 40, 41, 3, 8, 77, 12, 250, 6, 90, 31, 2, 64, 128, 7, 19]


def _logits_and_names(path, fuse, **kw):
    """Logits of a 20-token prompt (the prefill kernels), of a 3-token one (the decode kernels)
    and 4 greedy tokens after it, and the store's tensor names, of one load."""
    from cann_llm import Model
    with Model(str(path), n_ctx=64, fuse_weights=fuse, **kw) as m:
        long, short = m.logits(PROMPT), m.logits(PROMPT[:3])
        tokens = list(m.generate(PROMPT[:3], max_tokens=4, temperature=0.0))
        return long, short, tokens, set(m.weights.tensors), m.weights.stats


@pytest.mark.parametrize("arch,wtype", [("llama", QT.Q4_1), ("llama", QT.Q8_0), ("llama", QT.Q4_0),
                                        ("qwen2", QT.Q8_0), ("gemma3", QT.Q4_1),
                                        ("qwen3", QT.F16), ("qwen3moe", QT.Q8_0),
                                        ("phi3", QT.Q8_0)])
def test_fused_load_gives_the_unfused_logits(tmp_path, arch, wtype):
    """Q/K/V (with qwen2's biases) and gate/up load fused, except where the file fuses them
    already (phi3) and the experts' FFN (qwen3moe); logits and greedy tokens are the unfused
    load's, bit for bit, through GEGLU (gemma3), head norms on views of the fused rows (qwen3)
    and SwiGLU."""
    path = write_tiny_model(tmp_path / f"{arch}.gguf", arch=arch, weight_type=wtype,
                            n_embd=128 if arch != "qwen3" else 64, n_ff=256)
    *ref, names_ref, _ = _logits_and_names(path, False)
    *got, names, stats = _logits_and_names(path, True)
    for a, b in zip(ref, got):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    fused_qkv = arch != "phi3"      # phi3's file has attn_qkv and a [gate | up] ffn_up already
    fused_ffn = arch not in ("phi3", "qwen3moe")
    for il in (0, 1):
        assert f"blk.{il}.attn_qkv.weight" in names
        assert f"blk.{il}.attn_q.weight" not in names and f"blk.{il}.ffn_gate.weight" not in names
        assert (f"blk.{il}.ffn_gate_up.weight" in names) == fused_ffn
        assert (f"blk.{il}.attn_qkv.bias" in names) == (arch == "qwen2")
    assert stats["fused"] == 2 * (fused_qkv * (1 + (arch == "qwen2")) + fused_ffn)
    assert ("blk.0.attn_q.weight" in names_ref) == fused_qkv

def test_parts_of_different_types_stay_apart(tmp_path):
    """A group fuses only when its parts get one type on the device: layer 0's V in Q8_0 beside
    Q4_1 Q and K keeps its attention projections apart (its FFN still fuses); layer 1 fuses
    both. The logits stay the unfused load's."""
    path = write_tiny_model(tmp_path / "mix.gguf", weight_type=QT.Q4_1, n_embd=128, n_ff=256,
                            types={"blk.0.attn_v.weight": QT.Q8_0})
    *ref, _, _ = _logits_and_names(path, False)
    *got, names, stats = _logits_and_names(path, True)
    for a, b in zip(ref, got):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    assert {"blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight",
            "blk.0.ffn_gate_up.weight", "blk.1.attn_qkv.weight", "blk.1.ffn_gate_up.weight"} <= names
    assert "blk.0.attn_qkv.weight" not in names and "blk.1.attn_q.weight" not in names
    assert stats["fused"] == 3


def test_weights_read_from_the_map_are_not_fused(device, tmp_path):
    """F16 matrices of 1 MiB or more stay in the file's map on acl_host, where a fused tensor
    would be a copy: gate and up (1 MiB each) load apart while the smaller Q, K and V, copied
    anyway, fuse; with use_mmap off every matrix is a copy and both groups fuse."""
    if not device.caps_buffer_from_host_ptr:
        pytest.skip("the device cannot read weights from the file's map (a real NPU)")
    path = write_tiny_model(tmp_path / "f16.gguf", weight_type=QT.F16, n_embd=512, n_head=4,
                            n_head_kv=4, n_ff=1024, n_layer=1)
    *ref, names_ref, stats_ref = _logits_and_names(path, True)
    assert stats_ref["bytes_mapped"] == 3 << 20 and stats_ref["fused"] == 1
    assert "blk.0.ffn_gate.weight" in names_ref and "blk.0.attn_qkv.weight" in names_ref
    *got, names, stats = _logits_and_names(path, True, use_mmap=False)
    assert stats["bytes_mapped"] == 0 and stats["fused"] == 2
    assert "blk.0.ffn_gate_up.weight" in names and "blk.0.attn_qkv.weight" in names
    for a, b in zip(ref, got):
        assert np.array_equal(np.asarray(a), np.asarray(b))


def test_corrupt_part_of_a_fused_tensor_is_named(tmp_path):
    """A NaN scale in K, loaded into the fused attn_qkv, is reported under K's own GGUF name."""
    from cann_llm.loader import GGUFError
    from test_corrupt_weights import corrupt
    path = write_tiny_model(tmp_path / "bad.gguf", weight_type=QT.Q8_0, n_embd=128, n_ff=256)
    corrupt(path, "blk.1.attn_k.weight", 34, np.full(1, np.nan, np.float16).tobytes())
    from cann_llm import Model
    with pytest.raises(GGUFError, match=r"blk\.1\.attn_k\.weight.*block 1"):
        Model(str(path), n_ctx=64)

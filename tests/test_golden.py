"""Agreement with llama.cpp on the default model, teacher forced, from two references:

- tests/data/golden_smollm2-q4_1.json: llama.cpp on the Q4_1 file itself. Its CPU build
  quantizes activations to 8 bits (Q8_1 / Q8_0) inside every quantized matmul, which moves its
  log-probs a median ~0.07 from exact arithmetic. llama.cpp run on the same weights widened to F16
  differs from this file by just as much (docs/runner.md has the numbers), so here we check the
  parts of the issue's criteria that do not depend on that noise: every confident position agrees
  and greedy generation follows llama.cpp up to its first near-tie; top-1 agreement and log-prob
  differences are held at the measured level.
- tests/data/golden_smollm2-f16.json (scripts/make_golden_f16.py): llama.cpp on those F16 weights,
  i.e. with F16/F32 activations as the CANN cube unit uses. The issue's bounds apply in full:
  top-1 agreement >= 97%, top-5 log-prob differences median <= 0.02 and p95 <= 0.1.
Tokenization is covered by test_tokenizer.py.
"""

import json
import pathlib

import numpy as np
import pytest

import cann_llm
from conftest import GOLDEN_Q4_1 as GOLDEN_Q4_1_PATH

GOLDEN_Q4_1 = json.loads(GOLDEN_Q4_1_PATH.read_text())
GOLDEN_F16 = json.loads((pathlib.Path(__file__).parent / "data" / "golden_smollm2-f16.json").read_text())


def log_softmax(logits: np.ndarray) -> np.ndarray:
    lp = logits.astype(np.float64)
    lp -= lp.max(1, keepdims=True)
    return lp - np.log(np.exp(lp).sum(1, keepdims=True))


def agreement(log_probs: list[np.ndarray], cases: list[dict]) -> dict:
    """Top-1 agreement, confident misses and top-5 log-prob differences against a reference's
    per-position top5_ids / top5_logprobs."""
    agree = total = 0
    confident_misses, diffs = [], []
    for ci, (lp, case) in enumerate(zip(log_probs, cases)):
        for i, (top_ids, top_lp) in enumerate(zip(case["top5_ids"], case["top5_logprobs"])):
            ours = int(lp[i].argmax())
            agree += ours == top_ids[0]
            total += 1
            if top_lp[0] - top_lp[1] >= 0.2 and ours != top_ids[0]:
                confident_misses.append((ci, i))
            diffs += [abs(lp[i][t] - v) for t, v in zip(top_ids, top_lp)]
    return {"top1": agree / total, "confident_misses": confident_misses,
            "median": float(np.median(diffs)), "p95": float(np.percentile(diffs, 95))}


@pytest.fixture(scope="module")
def runs(default_model_path):
    from cann_llm.model_store import sha256_file
    assert sha256_file(default_model_path) == GOLDEN_Q4_1["model_sha256"] == GOLDEN_F16["model_sha256"]
    cases = GOLDEN_Q4_1["greedy"]
    with cann_llm.load(default_model_path, n_ctx=512) as m:
        log_probs = [log_softmax(m.logits(case["prompt_ids"] + case["greedy_ids"])) for case in cases]
        greedy = [list(m.generate(case["prompt_ids"], max_tokens=len(case["greedy_ids"]), temperature=0))
                  for case in cases]
    assert [c["ids"] for c in GOLDEN_F16["cases"]] == [c["prompt_ids"] + c["greedy_ids"] for c in cases]
    return {"q4_1": agreement(log_probs, cases), "f16": agreement(log_probs, GOLDEN_F16["cases"]),
            "greedy": greedy}


def test_issue_bounds_against_llamacpp_with_f16_activations(runs):
    stats = runs["f16"]
    assert stats["confident_misses"] == [], stats
    assert stats["top1"] >= 0.97, stats
    assert stats["median"] <= 0.02 and stats["p95"] <= 0.1, stats


def test_confident_positions_agree_with_llamacpp_q4_1(runs):
    assert runs["q4_1"]["confident_misses"] == []


def test_measured_agreement_with_llamacpp_q4_1(runs):
    # measured: top-1 96.8%, median 0.067, p95 0.30 (llama.cpp F16-vs-Q4_1: 0.067 / 0.30 too)
    stats = runs["q4_1"]
    assert stats["top1"] >= 0.96, stats
    assert stats["median"] <= 0.09 and stats["p95"] <= 0.4, stats


def test_greedy_matches_up_to_the_first_near_tie(runs):
    """llama.cpp is not batch-invariant: compare up to the first step where its own top-2 are
    within 0.2 log-prob (its greedy ids and its batched top-1 can differ there)."""
    for case, ours in zip(GOLDEN_Q4_1["greedy"], runs["greedy"]):
        n_prompt = len(case["prompt_ids"])
        n = 0
        for i in range(len(case["greedy_ids"])):
            top_lp = case["top5_logprobs"][n_prompt - 1 + i]
            if top_lp[0] - top_lp[1] < 0.2:
                break
            n += 1
        assert ours[:n] == case["greedy_ids"][:n], (case["prompt"], n)

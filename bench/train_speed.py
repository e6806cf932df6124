"""Training and encoding speed of the seed recipe on the real Quora data; prints one JSON line.

    python bench/train_speed.py [--data PATH] [--steps 200] [--dim 128] [--encode 200000]

train_pairs_per_s: optimizer steps on length-bucketed batches of 256 duplicate pairs (forward of
both sides, triplet loss, backward, fused Adam), after 10 warm-up steps, from one full process.
encode_questions_per_s: Model.encode on distinct test-pool questions, tokenising included.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import numpy as np
import torch

from dupq.data import default_data_path, read_pairs, split_pairs
from dupq.model import Encoder, EncoderConfig, Model
from dupq.tokenizer import Vocabulary
from dupq.train import TrainConfig, batch_loss, EncodedPairs, length_batches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(default_data_path()))
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--encode", type=int, default=200_000)
    args = parser.parse_args()

    pairs, _ = read_pairs(args.data)
    splits = split_pairs(pairs)
    pool_dups = splits.pool.take(splits.pool.labels == 1)
    t0 = time.perf_counter()
    vocab = Vocabulary.build(pool_dups.q1 + pool_dups.q2)
    vocab_seconds = time.perf_counter() - t0

    config = TrainConfig()
    torch.manual_seed(0)
    encoder = Encoder(EncoderConfig(len(vocab), dim=args.dim))
    optimizer = torch.optim.Adam(encoder.parameters(), lr=config.lr, fused=True)
    data = EncodedPairs(vocab, splits.train.q1, splits.train.q2)
    batches = length_batches(data.lengths, config.batch_size, np.random.default_rng(0), config.bucket)
    encoder.train()
    done, started = 0, None
    for step, index in enumerate(batches[: args.steps + 10]):
        if step == 10:
            done, started = 0, time.perf_counter()
        loss = batch_loss(encoder, data, index, config)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        done += len(index)
    train_rate = done / (time.perf_counter() - started)

    model = Model(vocab, encoder)
    questions = list(dict.fromkeys(pairs.q1 + pairs.q2))[: args.encode]
    t0 = time.perf_counter()
    vocab.encode(questions)
    tokenize_rate = len(questions) / (time.perf_counter() - t0)
    model.encode(questions[:5000])  # warm-up
    t0 = time.perf_counter()
    model.encode(questions)
    encode_rate = len(questions) / (time.perf_counter() - t0)

    print(json.dumps({
        "train_pairs_per_s": round(train_rate),
        "encode_questions_per_s": round(encode_rate),
        "tokenize_questions_per_s": round(tokenize_rate),
        "vocab_build_seconds": round(vocab_seconds, 2),
        "vocab_size": len(vocab),
        "dim": args.dim,
        "batch_size": config.batch_size,
        "train_steps": args.steps,
        "encoded_questions": len(questions),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "machine": platform.processor() or platform.machine(),
    }))


if __name__ == "__main__":
    main()

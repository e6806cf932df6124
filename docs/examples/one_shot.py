"""One-shot use: a question never seen in training, compared with known ones by similarity alone (no retraining)."""

import sys

from dupq import Model

model = Model.load(sys.argv[1] if len(sys.argv) > 1 else None)  # the bundled model unless a folder is given
examples = [
    "How can I learn Spanish quickly?",
    "What is the best way to learn a new language?",
    "How do I become fluent in French?",
    "What is the fastest way to lose weight?",
    "How do I cook rice in a microwave?",
]
new = "What is the fastest way to become fluent in Spanish?"  # not in the Quora file
similarities = model.encode(examples) @ model.encode([new])[0]  # (5,) cosine similarities: what search ranks by
probabilities = model.probability([new] * len(examples), examples)  # (5,) calibrated P(duplicate)
verdicts = model.scores([new] * len(examples), examples) > model.threshold
for sim, p, dup, example in sorted(zip(similarities, probabilities, verdicts, examples), reverse=True):
    print(f"{sim:.3f}  {p:.2f}  {'duplicate' if dup else '         '}  {example}")

"""dupq from Python: judge a pair with the bundled model, then search a small collection of old questions."""

import tempfile

from dupq import Collection, Model

model = Model.load()  # the bundled model; Model.load("runs/model") loads one you trained
q1, q2 = "How can I lose weight quickly?", "What is the fastest way to lose weight?"
print(f"similarity {model.similarity(q1, q2):.4f}")  # cosine of the two vectors: what search ranks by
print(f"probability {model.probability(q1, q2):.4f}")  # calibrated P(duplicate)
print(f"duplicate {model.is_duplicate(q1, q2)}")  # the model's verdict at its threshold

old = ["How do I learn Python?", "What is the best way to learn French?", "How do I cook rice in a microwave?"]
with tempfile.TemporaryDirectory() as folder:
    with Collection.build(f"{folder}/faq", old, model) as faq:  # a folder: SQLite store + FAISS index
        for hit in faq.search(["How can I learn Python fast?"], k=2)[0]:  # best first
            verdict = "duplicate" if hit.duplicate else "different"
            print(f"{hit.score:.3f}  p {hit.probability:.2f}  {verdict}  {hit.text}")

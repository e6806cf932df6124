"""What a model is made of, without torch: the encoder's and the pair head's configs, and their weights' shapes.

``config.json`` names the parts (read into these dataclasses by :mod:`dupq.modeling.folder_format`) and
``model.safetensors`` holds their weights under the torch modules' state-dict names. A loaded model runs the NumPy
kernels, so this module, like every one a loaded model needs, imports no torch. :func:`weight_shapes` is what a folder's
weights must hold (``tests/modeling/test_encoders.py`` keeps it equal to the torch modules' state dicts).

>>> weight_shapes("lstm", EncoderConfig(vocab_size=10, dim=4), HeadConfig(dim=4))["lstm.weight_hh_l0"]
(16, 4)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import StrictBool, StrictStr

from dupq.core.formats import MAX_DIM, MAX_HIDDEN, MAX_OUT_DIM, MAX_VOCAB, checked, integer, number
from dupq.modeling.static import Weight

# The registered encoder types (dupq.modeling.encoders.ENCODERS: one torch class each) -> the gate
# blocks of their recurrent layer's weights: i, f, g, o for an LSTM.
GATES = {"lstm": 4}
ENCODER_TYPES = tuple(GATES)
POOLINGS = ("mean", "max")
HEADS = ("cosine", "mlp")
SENTENCE_TRANSFORMERS = "sentence-transformers"  # a model folder holding a pretrained sentence encoder


@dataclass
class EncoderConfig:
    """Architecture of the shared question encoder (any registered type).

    The annotations are also ``config.json``'s format (:mod:`dupq.modeling.folder_format` reads the
    ``encoder`` entry into this class): a stored size outside them is refused before anything is built.
    """

    vocab_size: integer(2, MAX_VOCAB)  # rows of the embedding table: the vocabulary's size
    dim: integer(1, MAX_DIM) = 128  # embedding and recurrent width (the seed's d_feature); cost grows with dim^2
    bidirectional: StrictBool = False  # also read right to left; output is 2*dim wide, slower by ~2x
    dropout: number(0.0, 0.99) = 0.0  # dropout on word embeddings while training; regularises, slows learning
    pooling: Literal[POOLINGS] = "mean"  # "mean" over the real tokens (the seed) or "max" (InferSent's choice)

    def __post_init__(self) -> None:
        if self.pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, not {self.pooling!r}")

    @property
    def out_dim(self) -> int:
        return self.dim * (2 if self.bidirectional else 1)


@dataclass
class HeadConfig:
    """How a pair of question vectors becomes a duplicate logit (judging pairs; search keeps the cosine).

    The annotations are also ``config.json``'s format for its ``head`` entry (:mod:`dupq.modeling.folder_format`).
    """

    # "cosine": scale * (cos - bias), 2 numbers; "mlp": a network over [|u-v|, u*v, cos]
    kind: Literal[HEADS] = "cosine"
    dim: integer(1, MAX_OUT_DIM) = 128  # width of the question vectors it reads
    hidden: integer(1, MAX_HIDDEN) = 256  # the mlp's hidden width: more can fit finer pair features, and overfit sooner

    def __post_init__(self) -> None:
        if self.kind not in HEADS:
            raise ValueError(f"head must be one of {', '.join(HEADS)}, not {self.kind!r}")


def _plain_name(name: str) -> bool:
    return bool(name) and not name.startswith(".") and "/" not in name and "\\" not in name


Subfolder = checked(str, _plain_name, "the plain name of a subfolder (a path could lead outside the model folder)")


@dataclass
class SentenceConfig:
    """What ``config.json`` records of a sentence-transformers model (its ``encoder`` entry, beside
    ``type``); :mod:`dupq.modeling.sentence_model` runs it. Annotations as for :class:`EncoderConfig`."""

    dim: integer(1, MAX_OUT_DIM)  # width of its unit vectors (384 for all-MiniLM-L6-v2), and of a collection's
    max_seq_length: integer(1, 2**20) | None = None  # word pieces read per question (None: the transformer's own)
    name: StrictStr = ""  # where it came from, for people: a folder, or all-MiniLM-L6-v2 from its package
    folder: Subfolder = "sentence-transformers"  # the subfolder of the model folder that holds the transformer
    join: Subfolder | None = None  # a subfolder holding a dupq LSTM model whose vectors are joined to the transformer's
    join_weight: Weight = 0.0  # w of the join: a search's score is (cos_transformer + w cos_lstm) / (1 + w)
    int8: StrictBool = False  # run its linear layers in int8 on a CPU: faster, vectors a little off float32's

    @property
    def out_dim(self) -> int:
        return self.dim


def weight_shapes(kind: str, encoder: EncoderConfig, head: HeadConfig | None) -> dict[str, tuple[int, ...]]:
    """The name and shape of every weight in ``model.safetensors`` of a model with an encoder of type
    ``kind`` and a pair ``head`` (its names prefixed ``head.``): torch's ``nn.LSTM``
    names, one ``_reverse`` set more for a bidirectional layer."""
    d, rows = encoder.dim, GATES[kind] * encoder.dim
    shapes = {"embedding.weight": (encoder.vocab_size, d)}
    for suffix in ("", "_reverse") if encoder.bidirectional else ("",):
        shapes |= {
            f"{kind}.weight_ih_l0{suffix}": (rows, d),
            f"{kind}.weight_hh_l0{suffix}": (rows, d),
            f"{kind}.bias_ih_l0{suffix}": (rows,),
            f"{kind}.bias_hh_l0{suffix}": (rows,),
        }
    if head is not None:
        shapes |= {"head.scale": (), "head.bias": ()}
        if head.kind == "mlp":
            shapes |= {
                "head.mlp.0.weight": (head.hidden, 2 * head.dim + 1),
                "head.mlp.0.bias": (head.hidden,),
                "head.mlp.2.weight": (1, head.hidden),
                "head.mlp.2.bias": (1,),
            }
    return shapes

"""How close the training step's LSTM runs to the machine's arithmetic speed; prints one JSON line.

``matmul_gflops``: a large float32 matrix product (2048 x 2048 by 2048 x 2048) through oneDNN,
the library whose kernels run torch's CPU LSTM: the practical ceiling for dense float32 work on
these threads. ``torch_mm_gflops``: the same product through ``torch.mm`` (the BLAS torch was
built with), for comparison; on an AMD CPU it can be far below oneDNN's.

``lstm``: for each ``ROWSxLENGTH`` shape (the seed recipe runs its 512 questions a batch as 8
length-sorted slices of 64 rows, most of them 6 to 14 tokens long), one LSTM layer of width
``--dim`` forward and backward, timed, and the arithmetic it cannot avoid: per row and token,
the forward pass multiplies the input and the previous state by the four gates' weights (two
``d x 4d`` products: ``16 d^2`` floating-point operations), and the backward pass twice that
(the gradients of the input and the state, and of both weights), so ``48 d^2`` in all. Its
``gflops`` over ``matmul_gflops`` is ``share_of_matmul``: near 1, the LSTM is as fast as this
machine multiplies, and only less arithmetic (fewer padded tokens) makes training faster.
The elementwise gate work (sigmoids, tanh, products) is left out of the count, so the share is
a lower bound.
"""

from __future__ import annotations

import os
import platform
from typing import Annotated

import torch
import torch.utils.mkldnn
import typer

from dupq_lab.options import Threads, report, timed


def rate(fn, repeats: int) -> float:
    """Seconds per call of ``fn``: the median of ``repeats`` timed calls after 3 warm-up calls."""
    for _ in range(3):
        fn()
    return sorted(timed(lambda _: fn(), range(repeats))[1])[repeats // 2]


def matmul_gflops(repeats: int, n: int = 2048) -> dict[str, float]:
    """GFLOP/s of an ``n x n`` by ``n x n`` float32 product: through oneDNN, and through ``torch.mm``."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    onednn = torch.utils.mkldnn.to_mkldnn(torch.nn.Linear(n, n, bias=False))
    a_onednn = a.to_mkldnn()
    return {
        "matmul_gflops": round(2 * n**3 / rate(lambda: onednn(a_onednn), repeats) / 1e9, 1),
        "torch_mm_gflops": round(2 * n**3 / rate(lambda: torch.mm(a, b), repeats) / 1e9, 1),
    }


def lstm_shape(dim: int, rows: int, length: int, repeats: int) -> dict:
    layer = torch.nn.LSTM(dim, dim, batch_first=True)
    x = torch.randn(rows, length, dim, requires_grad=True)

    def step() -> None:
        out, _ = layer(x)
        out.sum().backward()

    seconds = rate(step, repeats)
    flops = 48 * dim * dim * rows * length
    return {"rows": rows, "length": length, "ms": round(seconds * 1e3, 3), "gflops": round(flops / seconds / 1e9, 1)}


def main(
    threads: Threads = os.cpu_count() or 1,
    dim: Annotated[int, typer.Option(min=1, help="The LSTM's width.")] = 128,
    shapes: Annotated[
        str, typer.Option(help="Batch shapes, ROWSxLENGTH, comma-separated.")
    ] = "64x8,64x16,128x16,512x12",
    repeats: Annotated[int, typer.Option(min=1, help="Timed calls of each shape.")] = 30,
) -> None:
    torch.set_num_threads(threads)
    ceiling = matmul_gflops(repeats)
    shapes = []
    for shape in shapes.split(","):
        rows, length = (int(v) for v in shape.split("x"))
        row = lstm_shape(dim, rows, length, repeats)
        row["share_of_matmul"] = round(row["gflops"] / ceiling["matmul_gflops"], 2)
        shapes.append(row)
    report(
        {
            **ceiling,
            "dim": dim,
            "lstm": shapes,
            "threads": torch.get_num_threads(),
            "mkldnn": torch.backends.mkldnn.is_available(),
            "torch": torch.__version__,
            "cpus": os.cpu_count(),
            "machine": platform.processor() or platform.machine(),
        }
    )

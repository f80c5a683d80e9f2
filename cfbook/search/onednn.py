"""The search's matrix products on an x86 CPU through oneDNN rather than the BLAS.

PyTorch's x86 builds send a float32 ``addmm`` or ``mm`` to MKL, which picks its code by the
processor's vendor: on an AMD EPYC (Zen 5, AVX-512) its verbose output names no AVX-512 path,
and the two products of a 784-32-10 MLP's first layer take about twice the time they take in
oneDNN, which picks by instruction set (benchmark 12's last table). So the plain-MLP paths of
the search (``PlainMLP``, the compiled and the prepared step) send their large float32 products
on an x86 CPU to oneDNN's inner product (``MIN_MACS``). The results are MKL's within rounding,
not to the bit; ``torch.backends.mkldnn.enabled = False`` turns oneDNN off, and the search is
then autograd's to the bit again.

Inductor lowers oneDNN's own operator only with constant weights, and a search's weights are
graph inputs (one graph serves every epoch of a training), so the traced step calls it through
``cfbook::linear``, an operator inductor leaves opaque.
"""

from __future__ import annotations

import platform
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

X86 = platform.machine().lower() in ("x86_64", "amd64")
# A product goes to oneDNN from this many multiply-adds (rows x inputs x outputs): below it
# oneDNN's fixed cost per call, about 10 us, outweighs its speed. On a 2-core AMD EPYC a
# 784 x 32 layer's two products broke even at about 70 rows (1.8 million) and took 0.6x MKL's
# time from 300 rows; a 100 x 32 layer's broke even at 1,000 rows (3.2 million), a 32 x 10
# layer's never did up to 1,000 rows (2026-12-06, unrecorded probe).
MIN_MACS = 2**22
# A compiled step's row count is a symbol: it chooses as for this many rows (compile="auto"
# compiles searches of 2**18 numbers and more: 335 rows of 784).
GRAPH_ROWS = 256


def enabled() -> bool:
    """Whether float32 CPU products may go to oneDNN: an x86 machine whose torch has oneDNN,
    with ``torch.backends.mkldnn`` enabled (its default)."""
    return X86 and torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled


def serves(x: Tensor, layer: nn.Linear, rows: int | None = None) -> bool:
    """Whether the products of ``rows`` rows like ``x`` (default: ``x``'s) with ``layer`` go to
    oneDNN."""
    macs = (x.shape[0] if rows is None else rows) * layer.in_features * layer.out_features
    return macs >= MIN_MACS and x.dtype == torch.float32 and x.device.type == "cpu" and enabled()


def graph_products(model: nn.Sequential, x0: Tensor) -> tuple[bool, ...] | None:
    """For a compiled step of a plain MLP (``PlainMLP.of(model)`` is not None: the caller
    checks) from rows like ``x0``: whether each layer's products go to oneDNN (False for a
    ReLU); None where none does."""
    chosen = tuple(isinstance(m, nn.Linear) and serves(x0, m, GRAPH_ROWS) for m in model)
    return chosen if any(chosen) else None


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``x @ weight.T + bias`` by oneDNN (``weight``: out x in, as in ``nn.Linear``)."""
    # Looked up here, not at import: a torch built without oneDNN has no such operator.
    return torch.ops.mkldnn._linear_pointwise(x.contiguous(), weight, bias, "none", [], "")


# Defined with the dispatcher's own API, not ``torch.library.custom_op``, whose kernels import
# torch._dynamo (0.8 s) on their first call: a prepared step calls this one from its package.
_LIBRARY = torch.library.Library("cfbook", "DEF")
_LIBRARY.define("linear(Tensor x, Tensor weight, Tensor? bias) -> Tensor")
_LIBRARY.impl("linear", linear, "CPU")
traced_linear = torch.ops.cfbook.linear.default  # ``linear`` as tracing records it


@torch.library.register_fake("cfbook::linear")
def _(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    return x.new_empty(x.shape[0], weight.shape[0])


def vjp(
    model: nn.Sequential, values: dict[str, Tensor], products: tuple[bool, ...]
) -> Callable[[Tensor], tuple[Tensor, Callable[[Tensor], tuple[Tensor]]]]:
    """A plain MLP's logits at a point and their pullback, as ``torch.func.vjp`` returns them,
    with the parameters ``values`` (by name, as ``functional_call`` takes them); the layers that
    ``products`` (``graph_products``) marks multiply by ``cfbook::linear``, the others as
    autograd does. The backward products are against the weights' transposes, each ReLU's by
    ``threshold_backward`` on its output: autograd's formulas."""
    layers = list(model)

    def forward(x: Tensor) -> tuple[Tensor, Callable[[Tensor], tuple[Tensor]]]:
        outputs = []
        for i, layer in enumerate(layers):
            if isinstance(layer, nn.Linear):
                weight, bias = values[f"{i}.weight"], values.get(f"{i}.bias")
                x = (traced_linear if products[i] else F.linear)(x, weight, bias)
            else:
                x = x.relu()
            outputs.append(x)

        def pullback(grad: Tensor) -> tuple[Tensor]:
            for i in reversed(range(len(layers))):
                weight = values.get(f"{i}.weight")
                if products[i]:
                    grad = traced_linear(grad, weight.t().contiguous(), None)
                elif isinstance(layers[i], nn.Linear):
                    grad = grad.mm(weight)
                else:
                    grad = torch.ops.aten.threshold_backward(grad, outputs[i], 0)
            return (grad,)

        return x, pullback

    return forward

"""The eager search's input gradient for plain MLPs, without the autograd engine.

An eager iteration needs the logits and one vector-Jacobian product with respect to the input.
For an ``nn.Sequential`` of ``nn.Linear`` and ``nn.ReLU`` layers (cfbook's ``mlp``, the paper's
models) ``PlainMLP`` calls the ATen kernels that autograd itself would call: ``addmm`` forward
(``F.linear`` on a 2-D input), then ``mm`` against each weight and ``threshold_backward`` on each
ReLU's output (PyTorch's ``derivatives.yaml`` for ``addmm``, ``mm`` and ``relu``). The gradient is
autograd's to the bit, and recording and replaying the graph is skipped, as are the fresh buffers
autograd allocates at every iteration (their pages' first touch is not free on a CPU). With a
784-32-10 MLP the whole eager search is 1.43x as fast at 100 rows, 1.22x at 1,024 and 1.24x at
10,000 (benchmark 9, two threads, 2026-12-05). Any other model, or one with hooks that autograd
would run, takes autograd.

With float32 rows on an x86 CPU the large products go to oneDNN instead (``cfbook.search.onednn``):
autograd's results within rounding, not its bits; with oneDNN turned off, its bits again.

On a CPU it also bounds the last product from its inputs' largest entries, so the step can skip
its pass that zeroes NaN gradients where none can be: 4-9 % of the search at 100 to 10,000 rows
in an unrecorded probe (2026-12-05), the same bits.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn.modules import module as module_globals

from cfbook.search import onednn

_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_GLOBAL = tuple(f"_global{name}" for name in _HOOKS)
threshold_backward = torch.ops.aten.threshold_backward.grad_input


class PlainMLP:
    """The logits and input gradient of an ``nn.Sequential`` of ``nn.Linear`` and ``nn.ReLU``.

    ``forward`` keeps what autograd would save (each layer's input, and so each ReLU's output)
    for the next ``pullback``; call them in pairs, under ``torch.no_grad()``.
    """

    def __init__(self, layers: list[nn.Module]) -> None:
        self.layers = layers
        # The weights' transposes, as views made once (a search's weights do not change).
        self._transposed = [m.weight.t() if isinstance(m, nn.Linear) else None for m in layers]
        self._contiguous: dict[int, Tensor] = {}  # oneDNN's weights for the backward products
        self._inputs: list[Tensor] = []
        self._buffers: dict[tuple[str, int], Tensor] = {}
        self._weight_max: float | None = None
        self.finite = False  # whether the last pullback's result is known to be finite

    @classmethod
    def of(cls, model: nn.Module) -> PlainMLP | None:
        """The direct path for ``model``, or None where autograd must run it: any other module
        type (subclasses and parametrized layers included) and any module or global hook."""
        if type(model) is not nn.Sequential or any(getattr(module_globals, h) for h in _GLOBAL):
            return None
        layers = list(model)
        if not layers or any(type(layer) not in (nn.Linear, nn.ReLU) for layer in layers):
            return None
        if any(getattr(m, h) for m in (model, *layers) for h in _HOOKS):
            return None
        return cls(layers)

    def _buffer(self, kind: str, i: int, like: Tensor, columns: int) -> Tensor:
        """A reused (rows x columns) buffer: a fresh one per iteration would cost its pages'
        first touch, which on a CPU is a good part of a large search's time."""
        buffer = self._buffers.get((kind, i))
        shape = (like.shape[0], columns)
        if buffer is None or buffer.shape != shape or buffer.dtype != like.dtype:
            buffer = like.new_empty(shape)
            self._buffers[(kind, i)] = buffer
        return buffer

    def forward(self, x: Tensor) -> Tensor:
        """The logits of a 2-D batch ``x``."""
        self._inputs = []
        owned = False  # whether x is one of this object's buffers (a ReLU may then work in place)
        for i, layer in enumerate(self.layers):
            self._inputs.append(x)
            if isinstance(layer, nn.Linear) and onednn.serves(x, layer):
                x = onednn.linear(x, layer.weight, layer.bias)
                owned = True
            elif isinstance(layer, nn.Linear):
                wt, b = self._transposed[i], layer.bias
                out = self._buffer("forward", i, x, wt.shape[1])
                x = torch.mm(x, wt, out=out) if b is None else torch.addmm(b, x, wt, out=out)
                owned = True
            else:
                x = x.relu_() if owned else x.relu()
        self._inputs.append(x)
        return x

    def pullback(self, grad: Tensor, out: Tensor | None = None, bound: bool = False) -> Tensor:
        """The gradient with respect to the last ``forward``'s input, given ``grad`` with respect
        to its logits; written into ``out`` where given. ``bound``: also set ``finite``, which
        reads two numbers on the host (no cost on a CPU, a synchronisation on a GPU)."""
        self.finite = False
        for i in reversed(range(len(self.layers))):
            layer, inp = self.layers[i], self._inputs[i]
            if isinstance(layer, nn.Linear) and onednn.serves(grad, layer):
                if i == 0 and bound:
                    self.finite = self._bounded(grad, layer.weight)
                if i not in self._contiguous:  # made once: a search's weights do not change
                    self._contiguous[i] = layer.weight.t().contiguous()
                grad = onednn.linear(grad, self._contiguous[i])
                if i == 0 and out is not None:  # a copy costs less than fresh pages next step
                    grad = out.copy_(grad)
            elif isinstance(layer, nn.Linear):
                w = layer.weight
                if inp.stride(0) == 1 and inp.stride(1) == inp.shape[0]:
                    grad = self._transposed[i].mm(grad.t()).t()  # autograd's order, column-major
                else:
                    target = out if i == 0 else self._buffer("backward", i, grad, w.shape[1])
                    if i == 0 and bound:
                        self.finite = self._bounded(grad, w)
                    grad = torch.mm(grad, w, out=target)
            else:
                target = self._buffer("backward", i, grad, grad.shape[1])
                grad = threshold_backward(grad, self._inputs[i + 1], 0, grad_input=target)
        self._inputs = []
        return grad

    def _bounded(self, grad: Tensor, w: Tensor) -> bool:
        """Whether ``grad @ w`` is surely finite: every entry is a sum of ``grad.shape[1]``
        products, so its size is at most that count times the largest |grad| times the largest
        |w|; NaN or infinite inputs make the bound NaN or infinite and the answer False."""
        if grad.numel() == 0 or w.numel() == 0:
            return False
        if self._weight_max is None:
            self._weight_max = w.abs().amax().item()
        bound = grad.abs().amax().item() * self._weight_max * grad.shape[1]
        return bound < 0.5 * torch.finfo(grad.dtype).max

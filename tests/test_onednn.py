"""The search's large float32 products on an x86 CPU through oneDNN (``cfbook.search.onednn``):
which products go there, that the direct path, the compiled and the prepared step compute them
by oneDNN (its bits, not the BLAS's), and that the results are autograd's within rounding."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace

import pytest
import torch
from torch import nn

from cfbook import NativeGenerator
from cfbook.search import compiled, onednn, prepared
from cfbook.search.pullback import PlainMLP

pytestmark = pytest.mark.skipif(not onednn.enabled(), reason="needs oneDNN on an x86 CPU")


@contextlib.contextmanager
def blas() -> Iterator[None]:
    """oneDNN off, as a user turns it off."""
    torch.backends.mkldnn.enabled = False
    try:
        yield
    finally:
        torch.backends.mkldnn.enabled = True


class Layers(nn.Sequential):
    """The same layers in a subclass: autograd runs it, with the BLAS's products."""


def wide_mlp(seed: int = 0, scale: float = 1.0) -> nn.Sequential:
    """784-32-10, the benchmarks' and the paper's MNIST MLP: its first layer's products go to
    oneDNN from 168 rows (168 x 784 x 32 >= 2**22), its last layer's below 13,108."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(784, 32), nn.ReLU(), nn.Linear(32, 10))
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(scale)
    return model


def rows(n: int, seed: int = 1) -> torch.Tensor:
    return torch.rand(n, 784, generator=torch.Generator().manual_seed(seed)) * 2 - 1


def _autograd(model: nn.Module, x: torch.Tensor, v: torch.Tensor):
    xw = x.detach().requires_grad_(True)
    logits = model(xw)
    return logits.detach(), torch.autograd.grad(logits, xw, v)[0]


def test_a_product_goes_to_onednn_by_its_multiply_adds_dtype_device_and_switch(monkeypatch):
    first, last = wide_mlp()[0], wide_mlp()[2]
    assert onednn.serves(rows(168), first) and not onednn.serves(rows(167), first)
    exact = nn.Linear(1024, 32)  # 128 x 1,024 x 32 = 2**22 exactly: served
    assert onednn.serves(torch.rand(128, 1024), exact)
    assert not onednn.serves(torch.rand(127, 1024), exact)
    assert not onednn.serves(rows(13107)[:, :32], last)  # 13,107 x 32 x 10 < 2**22
    assert onednn.serves(rows(13108)[:, :32], last)
    assert onednn.serves(rows(2), first, rows=168) and not onednn.serves(rows(500), first, 167)
    assert not onednn.serves(rows(500).double(), first)
    assert not onednn.serves(rows(500).to("meta"), first)  # not on the CPU
    with blas():
        assert not onednn.enabled() and not onednn.serves(rows(500), first)
    monkeypatch.setattr(onednn, "X86", False)
    assert not onednn.enabled()


def test_a_compiled_step_chooses_as_for_256_rows():
    assert onednn.graph_products(wide_mlp(), rows(2)) == (True, False, False)
    small = nn.Sequential(nn.Linear(100, 32), nn.ReLU(), nn.Linear(32, 10))  # 256 x 3,200 < 2**22
    assert onednn.graph_products(small, torch.rand(2, 100)) is None
    with blas():
        assert onednn.graph_products(wide_mlp(), rows(2)) is None


@pytest.mark.parametrize("n", [168, 600])
def test_the_direct_path_takes_onednn_s_bits_and_is_autograd_s_within_rounding(n):
    model = wide_mlp(scale=3.0)
    x, v = rows(n), torch.randn(n, 10, generator=torch.Generator().manual_seed(2))
    direct = PlainMLP.of(model)
    out = torch.full((n, 784), 7.0)
    with torch.no_grad():
        logits = direct.forward(x)
        grad = direct.pullback(v, out=out, bound=True)
        # By hand: oneDNN for the first layer's two products, the BLAS for the last layer's.
        w1, b1, w2, b2 = (p.detach() for p in model.parameters())
        lp = torch.ops.mkldnn._linear_pointwise  # (only where oneDNN is built in)
        hidden = lp(x, w1, b1, "none", [], "").relu()
        want_logits = torch.addmm(b2, hidden, w2.t())
        back = torch.ops.aten.threshold_backward(v.mm(w2), hidden, 0)
        want_grad = lp(back, w1.t().contiguous(), None, "none", [], "")
    assert grad is out and direct.finite
    with torch.no_grad():
        direct.forward(x)
        # The ReLU works in place on oneDNN's output: one tensor is its input and its output.
        assert direct._inputs[1].data_ptr() == direct._inputs[2].data_ptr()
        direct.pullback(v)
    assert not direct.finite  # not asked: nothing is read
    assert torch.equal(logits, want_logits) and torch.equal(grad, want_grad)
    auto_logits, auto_grad = _autograd(model, x, v)
    # The BLAS's forward bits differ: oneDNN did run. (Over the 32 hidden units the backward
    # product's sums come out the same in both libraries here.)
    assert not torch.equal(logits, auto_logits)
    torch.testing.assert_close(logits, auto_logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grad, auto_grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ["167 rows", "float64"])
def test_below_the_bar_or_in_float64_the_direct_path_is_autograd_s_bit_for_bit(case):
    model = wide_mlp(scale=3.0)
    x = rows(167)
    if case == "float64":
        model, x = model.double(), rows(600).double()
    v = torch.randn(x.shape[0], 10, dtype=x.dtype)
    direct = PlainMLP.of(model)
    with torch.no_grad():
        logits = direct.forward(x)
        grad = direct.pullback(v)
    auto_logits, auto_grad = _autograd(model, x, v)
    assert torch.equal(logits, auto_logits) and torch.equal(grad, auto_grad)


def test_an_overflowing_gradient_is_still_bounded_zeroed_and_capped():
    """The oneDNN path sets ``finite`` as the BLAS path does: huge weights overflow the input
    gradient, the bound says so, and the search's points stay finite."""
    model = wide_mlp(scale=1e20)
    x = rows(200) * 1e-20
    direct = PlainMLP.of(model)
    with torch.no_grad():
        assert direct.forward(x).isfinite().all()
        v = torch.ones(200, 10) / 10 - torch.eye(10)[torch.arange(200) % 10]
        assert direct.pullback(v, bound=True).isinf().any()
    assert not direct.finite
    target = (model(x).argmax(1) + 1) % 10
    result = NativeGenerator(compile=False, maxiter=5).generate(model, x, target)
    assert result.counterfactual.isfinite().all()


SEARCH = NativeGenerator(maxiter=40, tau=0.5, step_size=1.0)


def search(model: nn.Module, compile: bool | str, n: int = 300):
    x = rows(n)
    target = (model(x).argmax(1) + 1) % 10
    return replace(SEARCH, compile=compile).generate(model, x, target, domain=(-1.0, 1.0))


def assert_agree(a, b) -> None:
    """The same rows valid after the same steps, and the points the same within rounding but
    for a few rows (at most 3 %), where rounding flipped the sign of a feature's offset from its
    factual near 0, and so the cost term's direction, for a step."""
    assert a.valid.any() and not a.valid.all()
    assert torch.equal(a.valid, b.valid) and torch.equal(a.iterations, b.iterations)
    apart = (a.counterfactual - b.counterfactual).abs().amax(1) > 1e-4
    assert int(apart.sum()) <= 0.03 * len(apart)


def test_searches_are_autograd_s_within_rounding():
    model = wide_mlp(scale=3.0)
    fast, slow = search(model, False), search(Layers(*model), False)
    assert not torch.equal(fast.counterfactual, slow.counterfactual)
    assert_agree(fast, slow)
    with blas():  # the switch gives autograd's bits back
        assert torch.equal(search(model, False).counterfactual, slow.counterfactual)


@pytest.mark.skipif(not compiled.compiler_available(), reason="needs torch 2.8 or later")
def test_the_compiled_step_calls_onednn_and_agrees_with_the_eager_one():
    model = wide_mlp(scale=3.0)
    x = rows(2)
    state, constraints = compiled.graph_inputs(model, None, None)
    for off, calls in ((contextlib.nullcontext(), 2), (blas(), 0)):  # forward and backward
        with off:
            graph, _ = compiled.trace_step(model, state, x, constraints, False, False, True)
        ops = [n.target for n in graph.graph.nodes if n.op == "call_function"]
        assert ops.count(torch.ops.cfbook.linear.default) == calls
    before = compiled.graphs_compiled()
    fused = search(model, True)
    assert_agree(fused, search(model, False))
    with blas():  # another graph, not the one compiled with oneDNN
        assert not torch.equal(search(model, True).counterfactual, fused.counterfactual)
    assert compiled.graphs_compiled() == before + 2


@pytest.mark.skipif(not compiled.compiler_available(), reason="needs torch 2.8 or later")
def test_a_prepared_step_calls_onednn_as_the_compiled_step_does(tmp_path, monkeypatch):
    """The package runs ``cfbook::linear`` (registered by importing cfbook) and gives the
    compiled step's bits; a package built with oneDNN off has another key."""
    monkeypatch.setenv("CFBOOK_PREPARED_DIR", prepared.OFF)
    model = wide_mlp(scale=3.0)
    built = search(model, True)
    monkeypatch.setenv("CFBOOK_PREPARED_DIR", str(tmp_path))
    SEARCH.prepare(model, rows(2), domain=(-1.0, 1.0))
    before = compiled.graphs_compiled()
    auto = search(model, "auto")  # 300 rows x 25 steps: far below the plan's bar
    assert compiled.graphs_compiled() == before
    for name in ("counterfactual", "nascent", "valid", "iterations"):
        assert torch.equal(getattr(auto, name), getattr(built, name)), name
    key = prepared.layout_key(model, rows(2), True, False, True, False)
    with blas():
        assert prepared.layout_key(model, rows(2), True, False, True, False) != key

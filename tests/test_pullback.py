"""The eager search's direct path for plain MLPs (``cfbook.search.pullback.PlainMLP``): which
models take it, and that it gives autograd's logits, gradients and searches bit for bit where
its products are the BLAS's, as autograd's are. On an x86 CPU they are oneDNN's by default
(``tests/test_onednn.py``); here oneDNN is off, as a user turns it off."""

import pytest
import torch
from torch import nn
from torch.nn.utils import parametrize

from cfbook import NativeGenerator
from cfbook.search import pullback, step
from cfbook.search.pullback import PlainMLP


@pytest.fixture(autouse=True)
def blas_products(monkeypatch):
    monkeypatch.setattr(torch.backends.mkldnn, "enabled", False)


class Layers(nn.Sequential):
    """The same layers as an ``nn.Sequential``, in a subclass: autograd runs it."""


def mlp(*sizes: int, bias: bool = True, lead_relu: bool = False, seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    layers: list[nn.Module] = [nn.ReLU()] if lead_relu else []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        layers.append(nn.Linear(a, b, bias=bias and i % 2 == 0))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    model = nn.Sequential(*layers)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(3.0)
    return model


class _Scale(nn.Module):
    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return 2 * w


def test_only_hook_free_stacks_of_linear_and_relu_take_the_direct_path():
    assert PlainMLP.of(mlp(5, 8, 3)) is not None
    assert PlainMLP.of(mlp(5, 8, 8, 3, bias=False, lead_relu=True)) is not None
    assert PlainMLP.of(nn.Sequential(nn.Linear(4, 2), nn.ReLU(), nn.ReLU())) is not None
    assert PlainMLP.of(Layers(*mlp(5, 8, 3))) is None  # a subclass may change forward
    assert PlainMLP.of(nn.Sequential()) is None
    assert PlainMLP.of(nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))) is None
    assert PlainMLP.of(nn.Linear(5, 3)) is None
    assert PlainMLP.of(nn.Sequential(nn.Flatten(), nn.Linear(5, 3))) is None
    hooked = mlp(5, 8, 3)
    hooked[1].register_forward_hook(lambda module, args, out: out * 2)
    assert PlainMLP.of(hooked) is None
    pre = mlp(5, 8, 3)
    pre.register_forward_pre_hook(lambda module, args: args)
    assert PlainMLP.of(pre) is None
    backward = mlp(5, 8, 3)
    backward[0].register_full_backward_hook(lambda module, gin, gout: gin)
    assert PlainMLP.of(backward) is None
    scaled = mlp(5, 8, 3)
    parametrize.register_parametrization(scaled[0], "weight", _Scale())
    assert PlainMLP.of(scaled) is None  # a parametrized layer is a subclass of nn.Linear
    handle = nn.modules.module.register_module_forward_hook(lambda module, args, out: out)
    try:
        assert PlainMLP.of(mlp(5, 8, 3)) is None
    finally:
        handle.remove()
    assert PlainMLP.of(mlp(5, 8, 3)) is not None


def _autograd(model: nn.Module, x: torch.Tensor, v: torch.Tensor):
    xw = x.detach().requires_grad_(True)
    logits = model(xw)
    return logits.detach(), torch.autograd.grad(logits, xw, v)[0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(
    "sizes,bias,lead_relu",
    [((12, 16, 4), True, False), ((12, 32, 16, 3), False, True), ((7, 3), True, False)],
)
@pytest.mark.parametrize("trailing_relu", [False, True])
@pytest.mark.parametrize("layout", ["rows", "one row", "column-major", "special values"])
def test_logits_and_input_gradient_are_autograd_s_bit_for_bit(
    dtype, sizes, bias, lead_relu, layout, trailing_relu
):
    model = mlp(*sizes, bias=bias, lead_relu=lead_relu).to(dtype)
    if trailing_relu:
        model.append(nn.ReLU())
    g = torch.Generator().manual_seed(3)
    n = 1 if layout == "one row" else 40
    x = torch.randn(n, sizes[0], generator=g, dtype=dtype)
    if layout == "column-major":
        x = x.t().contiguous().t()
        assert x.stride() == (1, n)
    if layout == "special values":
        x[0, 0], x[1, 1], x[2, 2] = float("nan"), float("inf"), -float("inf")
    v = torch.randn(n, sizes[-1], generator=g, dtype=dtype)
    direct = PlainMLP.of(model)
    before = x.clone()
    with torch.no_grad():
        logits = direct.forward(x)
        grad = direct.pullback(v)
    want_logits, want_grad = _autograd(model, x, v)
    assert torch.equal(x, before) or layout == "special values"  # the input is never written
    torch.testing.assert_close(logits, want_logits, rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(grad, want_grad, rtol=0, atol=0, equal_nan=True)


def test_the_gradient_goes_into_the_buffer_given_and_buffers_are_reused():
    """No fresh buffers from one iteration to the next (their pages' first touch is what the
    direct path saves besides autograd's engine): the same storage for every layer's output,
    the ReLU applied in place, the backward products in their own reused buffers."""
    model = mlp(12, 16, 4)
    direct = PlainMLP.of(model)
    x = torch.randn(30, 12)
    out = torch.full((30, 12), 7.0)
    storages = []
    for _ in range(2):
        with torch.no_grad():
            logits = direct.forward(x)
            hidden = direct._inputs[2]  # the ReLU's output, the second Linear's input
            values = logits.clone()
            grad = direct.pullback(torch.ones(30, 4), out=out)
        backward = [b.data_ptr() for k, b in direct._buffers.items() if k[0] == "backward"]
        storages.append((logits.data_ptr(), hidden.data_ptr(), *backward))
        assert grad is out
        assert torch.equal(values, _autograd(model, x, torch.ones(30, 4))[0])
        assert torch.equal(out, _autograd(model, x, torch.ones(30, 4))[1])
    assert storages[0] == storages[1]
    assert len(set(storages[0])) == 4  # two layers' outputs, two backward products
    assert storages[0][1] == direct._buffers[("forward", 0)].data_ptr()  # ReLU in place
    with torch.no_grad():
        direct.forward(x[:10])
    assert direct._buffers[("forward", 0)].shape == (10, 16)  # a new size, a new buffer
    with torch.no_grad():
        direct.forward(x)  # float32 buffers of x's shapes
        direct_64 = PlainMLP.of(model.double())
        direct_64._buffers = dict(direct._buffers)
        assert direct_64.forward(x.double()).dtype == torch.float64  # a new dtype, a new buffer


CASES = {
    "domain": {"domain": (-1.5, 1.5)},
    "no domain": {},
    "mutability": {
        "domain": (-2.0, 2.0),
        "mutability": ["none", "increase", "decrease"] + ["both"] * 9,
    },
    "groups": {"domain": (-3.0, 3.0), "categorical": [[0, 1, 2], [5]]},
    "row energy": {"lambda_energy": torch.linspace(0.0, 5.0, 64)},
}
SEARCHES = {
    "default": {},
    "long steps": {"epsilon": 0.05, "tau": 0.9, "step_size": 0.5},
    "chunks": {"cf_batchsize": 19, "compact_every": 2},
    "straight through": {"categorical_gradient": "straight_through"},
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("search", SEARCHES)
def test_a_search_is_autograd_s_search_bit_for_bit(case, search):
    """The direct path must leave every search result as autograd left it: points, nascent
    points, validity, iteration counts, and the recorded path."""
    if search == "straight through" and case != "groups":
        pytest.skip("straight-through is about one-hot groups")
    model = mlp(12, 16, 4)
    g = torch.Generator().manual_seed(5)
    x = torch.rand(64, 12, generator=g) * 2 - 1
    target = (model(x).argmax(1) + 1) % 4
    generator = NativeGenerator(compile=False, maxiter=40, **SEARCHES[search])
    kwargs = CASES[case]
    results = [generator.generate(m, x, target, **kwargs) for m in (model, Layers(*model))]
    recorded = [
        NativeGenerator(compile=False, maxiter=12).generate(m, x, target, record=True, **kwargs)
        for m in (model, Layers(*model))
    ]
    for fast, slow in (results, recorded):
        for name in ("counterfactual", "nascent", "valid", "iterations", "path"):
            a, b = getattr(fast, name), getattr(slow, name)
            assert (a is None and b is None) or torch.equal(a, b), name
    assert results[0].valid.any()
    # Nascent points that moved (with groups the decoded factual lies outside epsilon, and long
    # steps leave the small ball at once).
    assert case == "groups" or search != "default" or (results[0].nascent != x).any()


def test_a_float64_search_is_autograd_s_bit_for_bit():
    model = mlp(12, 16, 4).double()
    x = torch.rand(50, 12, dtype=torch.float64) * 2 - 1
    target = (model(x).argmax(1) + 1) % 4
    generator = NativeGenerator(compile=False, maxiter=30)
    fast, slow = (generator.generate(m, x, target, domain=(-1, 1)) for m in (model, Layers(*model)))
    assert fast.counterfactual.dtype == torch.float64
    for name in ("counterfactual", "nascent", "valid", "iterations"):
        assert torch.equal(getattr(fast, name), getattr(slow, name)), name


def test_the_eager_step_takes_the_direct_path_for_plain_mlps(pullback_rows):
    calls = pullback_rows
    model = mlp(12, 16, 4)
    x = torch.rand(20, 12) * 2 - 1
    target = (model(x).argmax(1) + 1) % 4
    NativeGenerator(compile=False, maxiter=5, tau=1.0).generate(model, x, target)
    assert calls == [20] * 5
    NativeGenerator(compile=False, maxiter=5, tau=1.0).generate(Layers(*model), x, target)
    assert len(calls) == 5  # autograd for anything else


def test_the_finiteness_bound_is_hand_computed_and_fails_safe():
    """grad @ w is surely finite when count x max|grad| x max|w| < half of the largest float."""
    w = torch.tensor([[1.0, -3.0, 0.5], [2.0, 0.0, -1.0]])  # max |w| = 3, two products a sum

    def bounded(grad: torch.Tensor) -> bool:
        return PlainMLP.of(mlp(3, 2, 2))._bounded(grad, w)

    assert bounded(torch.tensor([[2.0, -1.0]]))  # 2 x 2 x 3 = 12
    assert bounded(torch.tensor([[2.8e37, 0.0]]))  # 1.68e38 < 1.70e38
    assert not bounded(torch.tensor([[2.9e37, 0.0]]))  # 1.74e38: too close to overflow
    assert not bounded(torch.tensor([[1.0, float("nan")]]))
    assert not bounded(torch.tensor([[1.0, -float("inf")]]))
    assert PlainMLP.of(mlp(3, 2, 2))._bounded(
        torch.tensor([[1e300, 0.0]], dtype=torch.float64), w.double()
    )
    assert not bounded(torch.ones(0, 2))  # no rows: nothing to bound
    # Each pullback says it anew, and only when asked: a column-major input takes autograd's
    # order, unbounded; without ``bound`` nothing is read.
    direct = PlainMLP.of(mlp(3, 2, 2))
    x, v = torch.rand(4, 3), torch.ones(4, 2)
    for layout, bound, expected in (
        (x, True, True),
        (x.t().contiguous().t(), True, False),
        (x, True, True),
        (x, False, False),
    ):
        with torch.no_grad():
            direct.forward(layout)
            direct.pullback(v, bound=bound)
        assert direct.finite is expected
    with torch.no_grad():
        direct.forward(x)
        direct.pullback(v)  # not asked by default
    assert direct.finite is False


@pytest.mark.parametrize("domain", [None, (-1e-19, 1e-19)])
def test_a_search_whose_gradient_overflows_is_autograd_s_bit_for_bit(domain):
    """Huge weights and tiny inputs: finite logits, but the input gradient overflows. The step
    must then zero and cap it as autograd's path does, not skip that."""
    model = mlp(12, 16, 4, bias=False)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1e20)
    g = torch.Generator().manual_seed(5)
    x = (torch.rand(64, 12, generator=g) * 2 - 1) * 1e-20
    direct = PlainMLP.of(model)
    with torch.no_grad():
        assert direct.forward(x).isfinite().all()
        v = torch.ones(64, 4) / 4 - torch.eye(4)[torch.arange(64) % 4]
        assert direct.pullback(v, bound=True).isinf().any()
    assert not direct.finite
    target = (model(x).argmax(1) + 1) % 4
    generator = NativeGenerator(compile=False, maxiter=10)
    kwargs = {} if domain is None else {"domain": domain}
    fast, slow = (generator.generate(m, x, target, **kwargs) for m in (model, Layers(*model)))
    for name in ("counterfactual", "nascent", "valid", "iterations"):
        a, b = getattr(fast, name), getattr(slow, name)
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True, msg=name)
    # Infinite then NaN gradients, capped and zeroed: the points stay finite.
    assert fast.counterfactual.isfinite().all()


def test_the_step_skips_the_nan_pass_only_where_the_bound_holds(monkeypatch):
    skipped = []
    original = pullback.PlainMLP.pullback

    def watched(self, grad, out=None, bound=False):
        result = original(self, grad, out, bound)
        skipped.append(self.finite)
        return result

    monkeypatch.setattr(pullback.PlainMLP, "pullback", watched)
    model = mlp(12, 16, 4)
    x = torch.rand(20, 12) * 2 - 1
    search = NativeGenerator(compile=False, maxiter=5)
    search.generate(model, x, (model(x).argmax(1) + 1) % 4)
    assert len(skipped) == 5 and all(skipped)
    # Held to the GPU's rule (no host read in the loop), a CPU search never skips it.
    monkeypatch.setattr(step, "SYNC_FREE", True)
    skipped.clear()
    search.generate(model, x, (model(x).argmax(1) + 1) % 4)
    assert len(skipped) == 5 and not any(skipped)

"""One CT training step computed by hand from CounterfactualTraining.jl's formulas (issue 26).

Every expected number below is written out from the Julia sources, not from cfbook:

- loss: CT.jl ``src/loss.jl`` (``implausibility``: E(x+) - E(x') with E = -logit, i.e.
  z_t(x') - z_t(x+); ``reg_loss``: z_t(x+)^2 + z_t(x')^2), ``src/objectives.jl``
  (``FullObjective``: [clf, mean(div), mean(reg), adv] . lambda, clf = logitcrossentropy with
  mean over the batch) and ``src/training.jl`` (adv = logitcrossentropy(m(nascent), true label));
- mature counterfactuals and neighbours: ``src/counterfactuals.jl`` (converged -> the search
  result, else the neighbour; one random training sample whose true label is the target;
  ``protect_immutable!`` edits the neighbour);
- search step: CE.jl ``generators/gradient_based`` (Descent: x <- x - eta * grad),
  ``objectives/penalties.jl`` (loss CE + lambda_cost * ||x' - x||_1 + lambda_energy * phi_t *
  (E + 1e-3 E^2), phi_t = a (b + t + 1)^-0.9, b = round(maxiter / 25), a = b / 10) and
  ``counterfactuals/search.jl`` / ``termination.jl`` (mutability on the step, then the domain
  clamp; stop once p_target >= tau).

The arithmetic is in the comments. The same model serves every test: a 2-2 linear layer,
z = W x + b with W = [[1, -1], [0.5, 0.5]], b = [0, 0.5], i.e.
    z0 = x1 - x2,    z1 = 0.5 x1 + 0.5 x2 + 0.5.
For two classes, CE(z, y) = log(1 + exp(z_other - z_y)) and p_c = sigmoid(z_c - z_other).
``test_mutants_are_caught`` breaks each term on purpose and checks that the hand values catch it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from torch import nn

import cfbook.search.generators as generators_module
import cfbook.search.step as step_module
import cfbook.training.loss as loss_module
from cfbook import (
    AdversarialObjective,
    EnergyDifferentialObjective,
    FullObjective,
    NativeGenerator,
)
from cfbook.paper.settings import SEARCH
from cfbook.search.constraints import Constraints
from cfbook.search.generators import ReferenceGenerator, SearchParameters
from cfbook.search.interface import CounterfactualResult, Generator
from cfbook.training.counterfactuals import (
    CounterfactualBatch,
    epoch_counterfactuals,
    epoch_search,
)
from cfbook.training.loss import batch_loss, counterfactual_terms

ATOL = 2e-6  # float32 forward passes; every mutant below moves a value by 2.7e-5 or more


def linear_model() -> nn.Module:
    model = nn.Linear(2, 2)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, -1.0], [0.5, 0.5]]))
        model.bias.copy_(torch.tensor([0.0, 0.5]))
    return model


def t(*rows: tuple[float, ...]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32)


def close(actual: torch.Tensor | float, expected: float | list, atol: float = ATOL) -> None:
    actual = torch.as_tensor(actual, dtype=torch.float64)
    torch.testing.assert_close(
        actual, torch.tensor(expected, dtype=torch.float64), atol=atol, rtol=0
    )


# --------------------------------------------------------------------------------------------
# One training batch
#
# Mini-batch: xb = [(1, 0), (0, 2)], yb = [0, 1].
#   (1, 0): z = (1, 1)      -> CE(y=0) = log 2                 = 0.69314718
#   (0, 2): z = (-2, 1.5)   -> CE(y=1) = log(1 + e^-3.5)       = 0.02975042
#   clf = mean                                                 = 0.36144880
#
# Its chunk of two counterfactuals (factual label y, target t, mature CF x', neighbour x+,
# nascent point a):
#   row A: y = 0, t = 1, x' = (0, 1), x+ = (1, 2),   a = (0.5, 0.5)
#   row B: y = 1, t = 0, x' = (2, 0), x+ = (2.5, 2), a = (1, 1)
#   A: z1(x') = 1, z1(x+) = 2        -> div = 1 - 2 = -1,     reg = 2^2 + 1^2   = 5
#   B: z0(x') = 2, z0(x+) = 0.5      -> div = 2 - 0.5 = 1.5,  reg = 0.5^2 + 2^2 = 4.25
#   implaus = mean(div) = 0.25,  reg_loss = mean(reg) = 4.625
#   A: z(a) = (0, 1),   CE(y=0) = log(1 + e^1)    = 1.31326169
#   B: z(a) = (0, 1.5), CE(y=1) = log(1 + e^-1.5) = 0.20141328
#   adv_loss = mean = 0.75733748
#
# FullObjective lambdas [1, 0.5, 0.1, 0.25]:
#   L = 0.36144880 + 0.5 * 0.25 + 0.1 * 4.625 + 0.25 * 0.75733748 = 1.13828317
# EnergyDifferentialObjective [1, 0.5, 0.1]: 0.36144880 + 0.125 + 0.4625   = 0.94894880
# AdversarialObjective [1, 0.25]:            0.36144880 + 0.25 * 0.75733748 = 0.55078317
#
# dL/dW[0, 0] (class-0 logit, feature x1), d z0 / d W00 = x1:
#   clf: mean of (p0 - [y == 0]) x1: (0.5 - 1) * 1 and (sigmoid(-3.5) - 0) * 0 -> -0.25
#   div: only row B (t = 0): d(z0(x') - z0(x+)) = x'1 - x+1 = 2 - 2.5 = -0.5; mean -0.25;
#        times 0.5                                                              -> -0.125
#   reg: row B: 2 z0(x+) x+1 + 2 z0(x') x'1 = 2*0.5*2.5 + 2*2*2 = 10.5; mean 5.25;
#        times 0.1                                                              -> 0.525
#   adv: A: (sigmoid(-1) - 1) * 0.5 = -0.36552929; B: sigmoid(-1.5) * 1 = 0.18242552;
#        mean -0.09155188, times 0.25                                           -> -0.02288797
#   dL/dW00 = -0.25 - 0.125 + 0.525 - 0.02288797                                = 0.12711203
# --------------------------------------------------------------------------------------------

XB, YB = t((1.0, 0.0), (0.0, 2.0)), torch.tensor([0, 1])
HAND = {
    "clf": 0.36144880,
    "implaus": 0.25,
    "reg_loss": 4.625,
    "adv_loss": 0.75733748,
    "full": 1.13828317,
    "energy": 0.94894880,
    "adversarial": 0.55078317,
    "dW00": 0.12711203,
}


def chunk() -> CounterfactualBatch:
    return CounterfactualBatch(
        counterfactual=t((0.0, 1.0), (2.0, 0.0)),
        neighbour=t((1.0, 2.0), (2.5, 2.0)),
        nascent=t((0.5, 0.5), (1.0, 1.0)),
        target=torch.tensor([1, 0]),
        label=torch.tensor([0, 1]),
        valid=torch.tensor([True, True]),
        iterations=torch.tensor([3, 5]),
        factual_index=torch.tensor([0, 1]),
    )


def check_batch(cf: CounterfactualBatch, fuse: bool = False) -> None:
    """The hand values of the batch above: each term, the three objectives, one gradient."""
    model, rows = linear_model(), slice(0, 2)
    terms = counterfactual_terms(model, FullObjective(), cf, rows, fuse)
    for name in ("implaus", "reg_loss", "adv_loss"):
        close(terms[name].detach(), HAND[name])
    close(terms["implaus_valid_sum"], 0.5)  # both rows valid: -1 + 1.5
    vanilla = FullObjective(lambda_div=0, lambda_reg=0, lambda_adv=0)
    clf, _ = batch_loss(model, vanilla, XB, YB, None, None, fuse)
    close(clf.detach(), HAND["clf"])
    for objective, key in (
        (EnergyDifferentialObjective(), "energy"),
        (AdversarialObjective(), "adversarial"),
    ):
        close(batch_loss(model, objective, XB, YB, cf, rows, fuse)[0].detach(), HAND[key])
    loss, _ = batch_loss(model, FullObjective(), XB, YB, cf, rows, fuse)
    close(loss.detach(), HAND["full"])
    loss.backward()
    close(model.weight.grad[0, 0], HAND["dW00"])


@pytest.mark.parametrize("fuse", [False, True])
def test_one_training_batch_matches_the_hand_computed_loss(fuse):
    check_batch(chunk(), fuse)


def test_the_chunk_is_a_constant_of_the_loss():
    """CT.jl differentiates only through the model: CFs, neighbours and nascent points are data."""
    model, cf = linear_model(), chunk()
    for name in ("counterfactual", "neighbour", "nascent"):
        getattr(cf, name).requires_grad_(True)
    loss, _ = batch_loss(model, FullObjective(), XB, YB, cf, slice(0, 2), False)
    loss.backward()
    close(model.weight.grad[0, 0], HAND["dW00"])


# --------------------------------------------------------------------------------------------
# Which counterfactuals enter the loss: one epoch's draws with a stub search.
#
# Training set: (2, 0) with label 0 and (0, 2) with label 1, one sample per class, so every
# draw is determined: z(2, 0) = (2, 1.5) -> predicted 0 -> target 1; z(0, 2) = (-2, 1.5) ->
# predicted 1 -> target 0 (CT.jl: uniform over the classes other than the prediction); the
# neighbour of target c is the only training sample labelled c; nce = 2 = n draws each row once.
# The stub returns x + 10 as the search result and x + 0.1 as the nascent point, and calls the
# search of (2, 0) converged, that of (0, 2) not. CT.jl keeps a converged result and
# replaces the other by its neighbour; the nascent point is kept either way; with feature 1
# immutable, the valid row's neighbour takes the counterfactual's feature 1 (the invalid row's
# counterfactual is its neighbour, so nothing changes there).
# --------------------------------------------------------------------------------------------


class StubSearch(Generator):
    def generate(self, model, x, target, *, domain=None, mutability=None):
        valid = (x == torch.tensor([2.0, 0.0])).all(1)
        return CounterfactualResult(x + 10, x + 0.1, valid, torch.full_like(target, 7))


def check_mature(mutability: list[str] | None, mature: str = "neighbour") -> None:
    x_all, y_all = t((2.0, 0.0), (0.0, 2.0)), torch.tensor([0, 1])
    model = linear_model()
    search = epoch_search(
        StubSearch(),
        x_all,
        y_all,
        nce=2,
        domain=None,
        mutability=mutability,
        mature=mature,
        n_batches=1,
        n_classes=2,
    )
    cf = epoch_counterfactuals(model, x_all, y_all, search, torch.Generator().manual_seed(0))
    assert sorted(cf.factual_index.tolist()) == [0, 1]
    by_factual = {int(i): r for r, i in enumerate(cf.factual_index)}
    a, b = by_factual[0], by_factual[1]  # factual (2, 0): valid; factual (0, 2): not
    assert cf.target[a] == 1 and cf.target[b] == 0
    assert cf.label[a] == 0 and cf.label[b] == 1
    assert cf.valid[a] and not cf.valid[b]
    close(cf.counterfactual[a], [12.0, 10.0])  # the search result
    close(cf.counterfactual[b], [2.0, 0.0])  # replaced by its neighbour
    close(cf.neighbour[a], [12.0, 2.0] if mutability else [0.0, 2.0])
    close(cf.neighbour[b], [2.0, 0.0])
    close(cf.nascent[a], [2.1, 0.1])
    close(cf.nascent[b], [0.1, 2.1])


@pytest.mark.parametrize("mutability", [None, ["none", "both"]])
def test_mature_counterfactuals_neighbours_and_nascent_points(mutability):
    check_mature(mutability)


# --------------------------------------------------------------------------------------------
# The search
#
# Factuals x0 = (1, 0) with target 1 and (0, 2) with target 0; lambda_cost 0.001,
# lambda_energy 5, step 0.1 (Flux ``Descent()``). Gradient wrt the logits:
#     p - onehot(t), plus on z_t: -lambda_energy * phi_t * (1 - 2e-3 z_t)   (E = -z_t);
# wrt x: W^T (that) + lambda_cost * sign(x - x0) (0 at x = x0: ChainRules' rule for norm(., 1)).
#
# maxiter 1 or 2: b = round(maxiter / 25) = 0, a = 0, phi = 0 (CE.jl alike): CE and cost only.
#   row 1, step 1: z = (1, 1), p = (0.5, 0.5), dz = (0.5, -0.5),
#       grad = (1*0.5 + 0.5*(-0.5), -1*0.5 + 0.5*(-0.5)) = (0.25, -0.75)
#       x1 = (1, 0) - 0.1 (0.25, -0.75) = (0.975, 0.075); z(x1) = (0.9, 1.025),
#       p1(x1) = sigmoid(0.125) = 0.53120937
#   row 2, step 1: z = (-2, 1.5), p0 = sigmoid(-3.5) = 0.02931223, dz = (-0.97068777, 0.97068777),
#       grad = (-0.97068777 + 0.48534388, 0.97068777 + 0.48534388) = (-0.48534388, 1.45603165)
#       x1 = (0.04853439, 1.85439683)
#   row 2, step 2: z(x1) = (-1.80586245, 1.45146561), p0 = 0.03706445,
#       dz = (-0.96293555, 0.96293555), grad = (-0.48146777, 1.44440332) + 0.001 (1, -1)
#       = (-0.48046777, 1.44340332), x2 = (0.09658117, 1.71005650)
# --------------------------------------------------------------------------------------------

X0, TARGET = t((1.0, 0.0), (0.0, 2.0)), torch.tensor([1, 0])
PAPER = {"lambda_cost": 0.001, "lambda_energy": 5.0, "step_size": 0.1}


def native(**kw) -> NativeGenerator:
    return NativeGenerator(compile=False, **{**PAPER, **kw})


def check_one_step(generator: SearchParameters) -> None:
    found = generator.generate(linear_model(), X0, TARGET)
    close(found.counterfactual, [[0.975, 0.075], [0.04853439, 1.85439683]])
    close(found.nascent, [[0.975, 0.075], [0.04853439, 1.85439683]])  # within epsilon 0.3
    close(found.iterations, [1, 1])
    close(found.valid, [False, False])  # tau 0.99


def check_convergence_and_nascent(generator: SearchParameters) -> None:
    # tau 0.52: row 1 reaches p1 = 0.5312 >= 0.52 after one step and stops there (valid, one
    # iteration); row 2 takes both steps and stays invalid (p0 = 0.0467). epsilon 0.2 (L-inf):
    # row 2's offsets are 0.1456 after step 1 and 0.2899 after step 2, so its nascent point is
    # x1 (the last iterate within epsilon); row 1's is its counterfactual.
    found = generator.generate(linear_model(), X0, TARGET)
    close(found.counterfactual, [[0.975, 0.075], [0.09658117, 1.71005650]])
    close(found.nascent, [[0.975, 0.075], [0.04853439, 1.85439683]])
    close(found.valid, [True, False])
    close(found.iterations, [1, 2])


# maxiter 30 (the paper's): b = 1, a = 0.1; phi_0 = 0.1 * 2^-0.9 = 0.05358867 (weight
# 5 phi_0 = 0.26794337), phi_1 = 0.1 * 3^-0.9 = 0.03720411 (weight 0.18602053). tau 0.99.
#   row 1, step 1: dz = (0.5, -0.5 - 0.26794337 (1 - 0.002)) = (0.5, -0.76740748),
#       grad = (0.5 - 0.38370374, -0.5 - 0.38370374) = (0.11629626, -0.88370374),
#       x1 = (0.98837037, 0.08837037)
#   row 1, step 2: z(x1) = (0.9, 1.03837037), p = (0.46546249, 0.53453751),
#       dz = (0.46546249, -0.53453751 - 0.18602053 (1 - 0.002 * 1.03837037))
#          = (0.46546249, -0.65109671),
#       grad = (0.46546249 - 0.32554835, -0.46546249 - 0.32554835) + 0.001 (-1, 1)
#            = (0.13891414, -0.79001085), x2 = (0.97447896, 0.16737146)
#   row 2, step 1: dz = (-0.97068777 - 0.26794337 (1 + 0.004), 0.97068777)
#          = (-1.23970291, 0.97068777), grad = (-0.75435902, 1.72504679),
#       x1 = (0.07543590, 1.82749532)
#   row 2, step 2: z(x1) = (-1.75205942, 1.45146561), p0 = 0.03903328,
#       dz = (-0.96096672 - 0.18602053 (1 + 0.002 * 1.75205942), 0.96096672)
#          = (-1.14763908, 0.96096672),
#       grad = (-0.66615572, 1.62712244), x2 = (0.14205147, 1.66478308)
PATH_1 = [[0.98837037, 0.08837037], [0.07543590, 1.82749532]]
PATH_2 = [[0.97447896, 0.16737146], [0.14205147, 1.66478308]]


def check_energy_steps(generator: NativeGenerator) -> None:
    path = generator.generate(linear_model(), X0, TARGET, record=True).path
    close(path[0], X0.tolist())
    close(path[1], PATH_1)
    close(path[2], PATH_2)


CONSTRAINED = {"domain": [(0.99, 5.0), (-5.0, 5.0)], "mutability": ["both", "decrease"]}


def check_constraints(
    generator: NativeGenerator | ReferenceGenerator, constraints: dict = CONSTRAINED
) -> None:
    # Row 1's first paper step is (-0.01162963, +0.08837037) (PATH_1). Feature 2 may only
    # decrease: its step is dropped; feature 1's lower bound 0.99 then clamps 0.98837 up to 0.99
    # (CE.jl: mutability on the step, then the domain clamp). Every later step points the same
    # way, so the search ends where its first step left it.
    record = {"record": True} if isinstance(generator, NativeGenerator) else {}
    found = generator.generate(linear_model(), X0[:1], TARGET[:1], **record, **constraints)
    if record:
        close(found.path[1], [[0.99, 0.0]])
    close(found.counterfactual, [[0.99, 0.0]])


def test_one_search_step_at_step_0_1():
    check_one_step(native(maxiter=1, tau=0.99))


@pytest.mark.parametrize("make", [native, lambda **kw: ReferenceGenerator(**{**PAPER, **kw})])
def test_convergence_and_nascent_points(make):
    check_convergence_and_nascent(make(maxiter=2, tau=0.52, epsilon=0.2))


def test_first_two_paper_steps_with_the_energy_penalty():
    check_energy_steps(native(maxiter=30, tau=0.99))


def test_mutability_then_domain_clamp():
    check_constraints(native(maxiter=30, tau=0.99))


def test_paper_settings_search_at_step_0_1():
    """CTExperiments builds the search's optimiser as ``Descent()`` (Flux's default step 0.1);
    the ``lr = 0.25`` of every grid_config.toml is never read (cfbook/paper/training_audit.md)."""
    assert SEARCH["step_size"] == 0.1
    assert NativeGenerator(**SEARCH, tau=0.5).step_size == 0.1


# --------------------------------------------------------------------------------------------
# Each check must be able to fail: break one term and see the hand values catch it.
# --------------------------------------------------------------------------------------------


def swap(cf: CounterfactualBatch, a: str, b: str) -> CounterfactualBatch:
    fields = dict(vars(cf))
    fields[a], fields[b] = fields[b], fields[a]
    return CounterfactualBatch(**fields)


def other_class_logit(logits, target):
    return logits.gather(1, (1 - target)[:, None]).squeeze(1)


def old_schedule(self, t):  # (b + t)^-0.9 instead of (b + t + 1)^-0.9
    b = round(self.maxiter / 25)
    return self.lambda_energy * (b / 10) * (b + t) ** -0.9


MUTANTS: dict[str, tuple[Callable[[pytest.MonkeyPatch], None], Callable[[], None]]] = {
    "energy differential signed E(x') - E(x+)": (
        lambda mp: None,
        lambda: check_batch(swap(chunk(), "counterfactual", "neighbour")),
    ),
    "adversarial term on the counterfactuals": (
        lambda mp: None,
        lambda: check_batch(swap(chunk(), "counterfactual", "nascent")),
    ),
    "adversarial term against the targets": (
        lambda mp: None,
        lambda: check_batch(swap(chunk(), "label", "target")),
    ),
    "energy of the wrong class": (
        lambda mp: mp.setattr(loss_module, "_target_logit", other_class_logit),
        lambda: check_batch(chunk()),
    ),
    "ridge and differential weights swapped": (
        lambda mp: mp.setattr(
            loss_module,
            "TERM_WEIGHTS",
            {"implaus": "lambda_reg", "reg_loss": "lambda_div", "adv_loss": "lambda_adv"},
        ),
        lambda: check_batch(chunk()),
    ),
    "invalid counterfactuals kept (the Native branch's mature='raw')": (
        lambda mp: None,
        lambda: check_mature(None, mature="raw"),
    ),
    "neighbours not protected": (
        lambda mp: mp.setattr(Constraints, "protect_neighbours", lambda self, nb, cf: nb),
        lambda: check_mature(["none", "both"]),
    ),
    "step 0.25 (the configs' unread lr)": (
        lambda mp: None,
        lambda: check_one_step(native(maxiter=1, tau=0.99, step_size=0.25)),
    ),
    "no cost term": (
        lambda mp: None,
        lambda: check_convergence_and_nascent(
            native(maxiter=2, tau=0.52, epsilon=0.2, lambda_cost=0.0)
        ),
    ),
    "nascent point at the default epsilon 0.3": (
        lambda mp: None,
        lambda: check_convergence_and_nascent(native(maxiter=2, tau=0.52)),
    ),
    "no energy ridge 1e-3 E^2": (
        lambda mp: mp.setattr(step_module, "ENERGY_RIDGE", 0.0),
        lambda: check_energy_steps(native(maxiter=30, tau=0.99)),
    ),
    "energy schedule (b + t)^-0.9": (
        lambda mp: mp.setattr(SearchParameters, "energy_weight", old_schedule),
        lambda: check_energy_steps(native(maxiter=30, tau=0.99)),
    ),
    "reference search without the energy ridge": (
        lambda mp: mp.setattr(generators_module, "ENERGY_RIDGE", 0.0),
        lambda: check_energy_steps_reference(),
    ),
    "mutability ignored": (
        lambda mp: mp.setattr(Constraints, "step_bounds", lambda self, dtype: None),
        lambda: check_constraints(native(maxiter=30, tau=0.99)),
    ),
    "mutability ignored by the reference": (
        lambda mp: mp.setattr(Constraints, "mask_step", lambda self, step: step),
        lambda: check_constraints(ReferenceGenerator(**PAPER, maxiter=30, tau=0.99)),
    ),
    "no domain clamp": (
        lambda mp: None,
        lambda: check_constraints(native(maxiter=30, tau=0.99), {**CONSTRAINED, "domain": None}),
    ),
}


def check_energy_steps_reference() -> None:
    # ReferenceGenerator has no record: with tau 0.55 a maxiter-30 search of row 1 stops at
    # PATH_2 (p1 = sigmoid(1.03837 - 0.9) = 0.53454 < 0.55 at x1; at x2, z = (0.80710750,
    # 1.07092521) and p1 = sigmoid(0.26381771) = 0.56557 >= 0.55).
    found = ReferenceGenerator(**PAPER, maxiter=30, tau=0.55).generate(
        linear_model(), X0[:1], TARGET[:1]
    )
    close(found.counterfactual, PATH_2[:1])
    close(found.iterations, [2])


def test_reference_search_stops_after_the_two_paper_steps():
    check_energy_steps_reference()


@pytest.mark.parametrize("name", MUTANTS)
def test_mutants_are_caught(name, monkeypatch):
    mutate, check = MUTANTS[name]
    mutate(monkeypatch)
    with pytest.raises(AssertionError):
        check()


def test_hand_constants_follow_the_formulas():
    """The constants above, recomputed with math from the formulas (not with cfbook)."""

    def ce(z_other_minus_z_y):
        return math.log1p(math.exp(z_other_minus_z_y))

    clf = (ce(0.0) + ce(-3.5)) / 2
    adv = (ce(1.0) + ce(-1.5)) / 2
    assert clf == pytest.approx(HAND["clf"], abs=1e-8)
    assert adv == pytest.approx(HAND["adv_loss"], abs=1e-8)
    assert clf + 0.5 * 0.25 + 0.1 * 4.625 + 0.25 * adv == pytest.approx(HAND["full"], abs=1e-8)
    phi_0 = 0.1 * 2**-0.9
    assert phi_0 == pytest.approx(0.05358867, abs=1e-8)

    def sigmoid(v):
        return 1 / (1 + math.exp(-v))

    d_adv = ((sigmoid(-1.0) - 1) * 0.5 + sigmoid(-1.5) * 1.0) / 2
    d_w00 = -0.25 + 0.5 * (-0.5 / 2) + 0.1 * (10.5 / 2) + 0.25 * d_adv
    assert d_w00 == pytest.approx(HAND["dW00"], abs=1e-8)


def _three_rows() -> CounterfactualBatch:
    g = torch.Generator().manual_seed(0)
    x = [torch.randn(3, 2, generator=g) for _ in range(3)]  # rows unlike features: 3 and 2
    return CounterfactualBatch(
        counterfactual=x[0],
        neighbour=x[1],
        nascent=x[2],
        target=torch.tensor([1, 0, 1]),
        label=torch.tensor([0, 1, 1]),
        valid=torch.tensor([True, False, True]),
        iterations=torch.tensor([3, 5, 1]),
        factual_index=torch.tensor([0, 1, 2]),
    )


@pytest.mark.parametrize(
    ("div", "reg", "adv"),
    [(0.5, 0.0, 0.0), (0.0, 0.1, 0.0), (0.0, 0.0, 0.25), (0.0, 0.0, 0.0), (0.5, 0.1, 0.25)],
)
def test_a_term_has_a_gradient_exactly_when_its_weight_is_positive(div, reg, adv):
    # The energy differential and its ridge share their forward passes: both carry a gradient
    # when either is weighted. The fused forward pass (one call for the three inputs) gives the
    # same terms as three calls.
    objective = FullObjective(lambda_div=div, lambda_reg=reg, lambda_adv=adv)
    cf, rows = _three_rows(), slice(0, 3)
    got = {}
    for fuse in (False, True):
        model, calls = linear_model(), []
        model.register_forward_hook(lambda *_, calls=calls: calls.append(1))
        got[fuse] = counterfactual_terms(model, objective, cf, rows, fuse)
        assert len(calls) == (1 if fuse else 3)
        energy = div > 0 or reg > 0
        assert got[fuse]["implaus"].requires_grad == energy
        assert got[fuse]["reg_loss"].requires_grad == energy
        assert got[fuse]["adv_loss"].requires_grad == (adv > 0)
    for name, value in got[False].items():
        close(got[True][name].detach(), float(value.detach()))
    # The batch loss passes fuse on: the classifier's forward pass plus one or three.
    for fuse, forwards in ((True, 2), (False, 4)):
        model, calls = linear_model(), []
        model.register_forward_hook(lambda *_, calls=calls: calls.append(1))
        batch_loss(model, objective, XB, YB, cf, rows, fuse)
        assert len(calls) == forwards

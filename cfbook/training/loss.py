"""CT's loss: on one mini-batch, the classifier's cross-entropy plus, when the epoch has
counterfactuals, the energy differential, its ridge and the adversarial term of the batch's chunk
of counterfactuals (steps 9-11 of Algorithm 1); and ``CounterfactualLoss``, which searches each
epoch's counterfactuals and gives every mini-batch its loss, for a training loop of one's own and
for ``counterfactual_training``'s."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import torch
from torch import Tensor, nn

from cfbook.errors import warn
from cfbook.inputs import check_label_range, require_int
from cfbook.objectives import Objective
from cfbook.search.calibration import PROBE_SEARCH_ROWS, STEP_SIZES, probe_validity
from cfbook.search.checks import count_classes
from cfbook.search.constraints import Categorical, Domain, Mutability
from cfbook.search.generators import SearchParameters, model_device
from cfbook.search.interface import Generator, check_generator
from cfbook.search.logits import class_logits
from cfbook.training import distributed
from cfbook.training.counterfactuals import (
    CounterfactualBatch,
    check_mature,
    epoch_counterfactuals,
    epoch_search,
    resolve_nce,
)
from cfbook.training.data import check_training_data, training_tensors

__all__ = [
    "LOW_VALIDITY",
    "TERM_WEIGHTS",
    "CounterfactualLoss",
    "LowValidityWarning",
    "SearchProbeWarning",
    "batch_loss",
    "counterfactual_terms",
]

#: Below this share of valid counterfactuals, an epoch under mature="neighbour" warns, and so
#: does the probe before the first search epoch.
LOW_VALIDITY = 0.5


class LowValidityWarning(UserWarning):
    """Most of an epoch's counterfactuals were invalid, so CT's energy term was mostly zero."""


class SearchProbeWarning(LowValidityWarning):
    """Before the first search epoch, most of a probe's searches did not reach their target."""


#: The counterfactual loss terms and the objective's weight for each.
TERM_WEIGHTS = {"implaus": "lambda_div", "reg_loss": "lambda_reg", "adv_loss": "lambda_adv"}


def _target_logit(logits: Tensor, target: Tensor) -> Tensor:
    return logits.gather(1, target[:, None]).squeeze(1)


def counterfactual_terms(
    model: nn.Module, objective: Objective, cf: CounterfactualBatch, rows: slice, fuse: bool
) -> dict[str, Tensor]:
    """The three CT terms on one chunk of counterfactuals (unweighted), plus the valid rows'
    energy differential summed (``implaus_valid_sum``).

    - ``implaus``: the energy differential, the mean of z_target(counterfactual) minus
      z_target(neighbour), where the neighbour is a training sample of the target class;
    - ``reg_loss``: its ridge, the mean of both logits squared;
    - ``adv_loss``: the cross-entropy of the nascent points (the last iterates within epsilon of
      the factuals) against the factuals' true labels.

    Terms whose weight is 0 are computed without gradient: they are logged, not trained on.
    ``fuse`` runs the three forward passes as one."""
    grad_energy = objective.lambda_div > 0 or objective.lambda_reg > 0
    grad_adv = objective.lambda_adv > 0
    inputs = [cf.counterfactual[rows], cf.neighbour[rows], cf.nascent[rows]]
    if fuse:
        with torch.set_grad_enabled(grad_energy or grad_adv):
            outputs = list(class_logits(model(torch.cat(inputs))).float().split(inputs[0].shape[0]))
    else:
        with torch.set_grad_enabled(grad_energy):
            outputs = [class_logits(model(x)).float() for x in inputs[:2]]
        with torch.set_grad_enabled(grad_adv):
            outputs.append(class_logits(model(inputs[2])).float())
    target = cf.target[rows]
    z_cf, z_nb = _target_logit(outputs[0], target), _target_logit(outputs[1], target)
    differential = z_cf - z_nb
    terms = {
        "implaus": differential.mean(),
        "reg_loss": (z_nb.square() + z_cf.square()).mean(),
        "adv_loss": nn.functional.cross_entropy(outputs[2], cf.label[rows]),
    }
    if not grad_energy:
        terms["implaus"], terms["reg_loss"] = terms["implaus"].detach(), terms["reg_loss"].detach()
    if not grad_adv:
        terms["adv_loss"] = terms["adv_loss"].detach()
    terms["implaus_valid_sum"] = (differential.detach() * cf.valid[rows]).sum()
    return terms


def batch_loss(
    model: nn.Module,
    objective: Objective,
    xb: Tensor,
    yb: Tensor,
    cf: CounterfactualBatch | None,
    rows: slice | None,
    fuse: bool,
) -> tuple[Tensor, dict[str, Tensor]]:
    """One mini-batch's loss, and its counterfactual terms (none without counterfactuals)."""
    loss = objective.lambda_clf * nn.functional.cross_entropy(class_logits(model(xb)).float(), yb)
    if cf is None:
        return loss, {}
    terms = counterfactual_terms(model, objective, cf, rows, fuse)
    for name, weight in TERM_WEIGHTS.items():
        if getattr(objective, weight):
            loss = loss + getattr(objective, weight) * terms[name]
    return loss, terms


class CounterfactualLoss:
    """CT's loss for a training loop of one's own (plain PyTorch, Lightning, with a scheduler or
    early stopping); ``counterfactual_training`` is this object in a loop.

    Made once per run, from the objective, the search, the model (on its training device) and
    the training loader, whose whole data set is gathered once: the factuals and neighbours are
    drawn from all of it. Then, each epoch:

    - ``start_epoch(model, epoch)`` (epochs count from 1) searches the epoch's ``nce``
      counterfactuals with the model as it stands (in eval mode; its modes are restored), none
      in the first ``burnin_epochs`` epochs or for an objective without counterfactual terms;
    - ``loss(model, xb, yb, b)`` (or calling the object) gives mini-batch ``b`` of the epoch
      (from 0) its loss, the objective's weighted sum, and the unweighted terms
      (``implaus``, ``reg_loss``, ``adv_loss``, when the epoch has counterfactuals) on the
      batch's chunk of the counterfactuals.

    ``counterfactuals`` holds the epoch's search (``CounterfactualBatch``: ``valid``,
    ``iterations``, ...) or None. The defaults are ``counterfactual_training``'s: ``nce`` one
    per mini-batch as in CT.jl (fewer than a tenth of the rows warns), ``mature="neighbour"``
    and ``categorical=None`` (see ``counterfactual_training``). ``seed`` seeds the draws of
    factuals, targets and neighbours; None draws it from torch's global generator
    (``torch.manual_seed`` then makes the run reproducible). The data, the model and the
    labels are checked once, here, with ``counterfactual_training``'s messages.

    Example, a loop of one's own::

        ct = CounterfactualLoss(FullObjective(), NativeGenerator(), model, loader, nce=100)
        for epoch in range(1, nepochs + 1):
            ct.start_epoch(model, epoch)
            model.train()
            for b, (xb, yb) in enumerate(loader):
                loss, terms = ct(model, xb, yb, b)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
    """

    def __init__(
        self,
        objective: Objective,
        generator: Generator,
        model: nn.Module,
        train_loader: Iterable,
        *,
        nce: int | None = None,
        burnin_epochs: int = 0,
        domain: Domain = None,
        mutability: Mutability = None,
        mature: str = "neighbour",
        categorical: Categorical = None,
        seed: int | None = None,
        fuse_cf_forwards: bool = False,
    ) -> None:
        if not isinstance(objective, Objective):
            raise TypeError(f"objective must be a cfbook Objective, got {type(objective).__name__}")
        require_int("burnin_epochs", burnin_epochs, minimum=0)
        check_mature(mature)
        device = model_device(model) or torch.device("cpu")
        self.x, self.y = (t.to(device) for t in training_tensors(train_loader))
        check_training_data(self.x, self.y)
        self.n_classes = count_classes(model, self.x, "the training data")
        check_label_range(self.y, self.n_classes)
        self.objective, self.generator = objective, generator
        self.burnin_epochs, self.mature, self.fuse = burnin_epochs, mature, fuse_cf_forwards
        self.n_batches = len(train_loader)
        world = distributed.world_size()
        self.nce = None
        self.search = None
        if objective.needs_counterfactuals:
            check_generator(generator)
            self.nce = resolve_nce(nce, self.x.shape[0], self.n_batches * world)
            self.search = epoch_search(
                generator,
                self.x,
                self.y,
                nce=self.nce,
                domain=domain,
                mutability=mutability,
                mature=mature,
                n_batches=self.n_batches,
                n_classes=self.n_classes,
                world_size=world,
                categorical=categorical,
            )
        if seed is None:  # the same on every process: they draw the same factuals
            seed = distributed.broadcast_int(int(torch.randint(0, 2**62, (1,))), device)
        self.rng = torch.Generator(device=device)
        self.rng.manual_seed(seed)
        self.counterfactuals: CounterfactualBatch | None = None
        self.probe_rows = min(PROBE_SEARCH_ROWS, self.x.shape[0])
        self.probe_validity: float | None = None
        self.probed_at: int | None = None

    def searches_in(self, epoch: int) -> bool:
        """Whether ``start_epoch`` searches counterfactuals in ``epoch``."""
        return self.search is not None and epoch > self.burnin_epochs

    def start_epoch(self, model: nn.Module, epoch: int) -> CounterfactualBatch | None:
        """Search ``epoch``'s counterfactuals with ``model`` as it stands (None in burn-in
        epochs and for objectives without counterfactual terms); kept for its mini-batches."""
        require_int("epoch", epoch)
        self.counterfactuals = None
        if self.searches_in(epoch):
            device = model_device(model)
            if device is not None and device != self.x.device:
                raise ValueError(
                    f"the model is on {device} but this CounterfactualLoss was made for a model "
                    f"on {self.x.device}: make it after the model moves to its training device "
                    "(in Lightning, in the LightningModule's on_fit_start)"
                )
            if epoch == self.burnin_epochs + 1:
                self._probe(model, epoch)
            self.counterfactuals = epoch_counterfactuals(
                model, self.x, self.y, self.search, self.rng
            )
        return self.counterfactuals

    def _probe(self, model: nn.Module, epoch: int) -> None:
        """Before the first search epoch, the share of a probe's searches (``PROBE_SEARCH_ROWS``
        training rows, targets among the classes the model does not predict) that reach their
        target with the model as it stands: the validity to expect (``probe_validity``). Under
        ``mature="neighbour"``, below ``LOW_VALIDITY`` it warns, naming the smallest larger step
        size that reached it on the same rows, if one of ``STEP_SIZES`` does. Only cfbook's
        generators are probed (a search of one's own may keep state); the probe draws its rows
        with its own random generator, so the run's results do not change."""
        generator = self.generator
        if not isinstance(generator, SearchParameters):
            return
        search = self.search
        kwargs = {
            "domain": search.domain,
            "mutability": search.mutability,
            "categorical": search.categorical,
            "rows": self.probe_rows,
        }
        self.probe_validity = probe_validity(generator, model, self.x, **kwargs)
        self.probed_at = epoch
        if self.mature != "neighbour" or self.probe_validity >= LOW_VALIDITY:
            return
        fix = None
        for step in (s for s in STEP_SIZES if s > generator.step_size):
            share = probe_validity(replace(generator, step_size=step), model, self.x, **kwargs)
            if share >= LOW_VALIDITY:
                fix = (
                    f"With step_size={step} the same searches reached {share:.0%}: pass "
                    f"{type(generator).__name__}(step_size={step}, ...), or pick a step with "
                    "cfbook.search.calibrate_search"
                )
                break
        fix = fix or (
            f"No step size up to {STEP_SIZES[-1]} reached {LOW_VALIDITY:.0%} on the same rows: "
            "raise maxiter, lower tau or lambda_cost, train longer before searching (burnin), "
            "or train with mature='raw'"
        )
        warn(
            f"epoch {epoch}: a probe search of {self.probe_rows} training rows with the model as "
            f"it stands found {self.probe_validity:.0%} valid, so under mature='neighbour' CT's "
            f"energy term would be mostly zero. {fix}.",
            SearchProbeWarning,
        )

    def loss(
        self, model: nn.Module, xb: Tensor, yb: Tensor, batch: int
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Mini-batch ``batch``'s loss (the objective's weighted sum) and its unweighted
        counterfactual terms (none when the epoch has no counterfactuals)."""
        cf = self.counterfactuals
        rows = None
        if cf is not None:
            if isinstance(batch, bool) or not isinstance(batch, int):
                raise TypeError(f"batch must be the mini-batch's index, got {batch!r}")
            if not 0 <= batch < self.n_batches:
                raise IndexError(
                    f"mini-batch {batch} of an epoch of {self.n_batches} (the loader's length "
                    "when this loss was made): pass each batch's index from 0, as enumerate "
                    "or Lightning's batch_idx give it"
                )
            rows = self.search.chunks[batch]
        return batch_loss(model, self.objective, xb, yb, cf, rows, self.fuse)

    __call__ = loss

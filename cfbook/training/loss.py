"""CT's loss on one mini-batch: the classifier's cross-entropy plus, when the epoch has
counterfactuals, the energy differential, its ridge and the adversarial term of the batch's chunk
of counterfactuals (steps 9-11 of Algorithm 1)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from cfbook.objectives import Objective
from cfbook.training.counterfactuals import CounterfactualBatch

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
            outputs = list(model(torch.cat(inputs)).float().split(inputs[0].shape[0]))
    else:
        with torch.set_grad_enabled(grad_energy):
            outputs = [model(x).float() for x in inputs[:2]]
        with torch.set_grad_enabled(grad_adv):
            outputs.append(model(inputs[2]).float())
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
    loss = objective.lambda_clf * nn.functional.cross_entropy(model(xb).float(), yb)
    if cf is None:
        return loss, {}
    terms = counterfactual_terms(model, objective, cf, rows, fuse)
    for name, weight in TERM_WEIGHTS.items():
        if getattr(objective, weight):
            loss = loss + getattr(objective, weight) * terms[name]
    return loss, terms

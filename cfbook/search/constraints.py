"""Feature constraints of the counterfactual search: domain bounds and mutability.

Both are validated once and turned into device tensors of one sample's shape, so the search loop
applies them with a few elementwise kernels and no Python per feature, to flat rows
``(N, n_features)`` and to samples of any shape ``(N, *shape)`` (images) alike. A feature is one
number of a sample; "per feature" means one entry per number, in ``x[0].flatten()`` order, or
nested in the sample's shape.

``domain`` is one ``(low, high)`` pair for every feature, one pair per feature, an
``(n_features, 2)`` or ``(*shape, 2)`` tensor, or a pair of tensors (low, high) of one sample's
shape. ``domain=None`` means the same everywhere in cfbook (``generate``,
``counterfactual_training``, ``paper_evaluate``, ``attack_accuracy``): no bounds, the search
may move a feature anywhere. ``infer_domain(x)`` gives the data's own range as CT.jl infers it.
``mutability`` is one of ``MUTABILITY_VALUES`` per feature (flat or nested in the sample's
shape); ``None``: every feature is free. ``categorical`` lists the one-hot groups of flat rows,
each a sequence of column indices (``None``: none; see ``CategoricalCode`` for how the search
decodes them, as CounterfactualExplanations.jl does).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

MUTABILITY_VALUES = ("both", "none", "increase", "decrease")

Domain = Sequence[tuple[float, float]] | tuple[float, float] | Tensor | None
Mutability = Sequence[str] | None
Categorical = Sequence[Sequence[int]] | None
#: One sample's shape, or (for flat rows) its number of features.
Shape = int | Sequence[int]

# How the gradient of a search passes the decoding of its one-hot groups (see CategoricalCode).
CATEGORICAL_GRADIENTS = ("frozen", "straight_through")


@dataclass
class Constraints:
    """Per-feature bounds and step masks on the search device, each of one sample's shape, so
    that they broadcast over a batch (masks are ``None`` when all free)."""

    lower: Tensor | None
    upper: Tensor | None
    immutable: Tensor | None = None
    increase_only: Tensor | None = None
    decrease_only: Tensor | None = None
    categorical: CategoricalCode | None = None

    @property
    def has_mutability(self) -> bool:
        return self.immutable is not None

    def bounds(self) -> tuple[Tensor, Tensor] | None:
        """The domain's (lower, upper) bounds, None without a domain: the step's form."""
        return None if self.lower is None else (self.lower, self.upper)

    def decode(self, x: Tensor) -> Tensor:
        """``x`` with its one-hot groups decoded (``CategoricalCode.decode``); ``x`` itself when
        there are none."""
        return x if self.categorical is None else self.categorical.decode(x)

    def clamp(self, x: Tensor) -> Tensor:
        """Project onto the domain."""
        if self.lower is None:
            return x
        return torch.clamp(x, self.lower, self.upper)

    def mask_step(self, step: Tensor) -> Tensor:
        """Drop the parts of a step that move a feature the way it may not move."""
        if not self.has_mutability:
            return step
        no_up = self.immutable | self.decrease_only
        no_down = self.immutable | self.increase_only
        return torch.where((step > 0) & no_up | (step < 0) & no_down, 0.0, step)

    def step_bounds(self, dtype: torch.dtype) -> tuple[Tensor, Tensor] | None:
        """``mask_step`` as a per-feature clamp of the step: (0, inf) where a feature may only
        increase, (-inf, 0) where it may only decrease, (0, 0) where it is immutable."""
        if not self.has_mutability:
            return None
        inf = torch.full(self.immutable.shape, torch.inf, dtype=dtype, device=self.immutable.device)
        no_up = self.immutable | self.decrease_only
        no_down = self.immutable | self.increase_only
        return torch.where(no_down, 0.0, -inf), torch.where(no_up, 0.0, inf)

    def protect_neighbours(self, neighbours: Tensor, counterfactuals: Tensor) -> Tensor:
        """Make neighbours keep the counterfactual's fixed features (edits neighbours, not CFs)."""
        if not self.has_mutability:
            return neighbours
        out = torch.where(self.immutable, counterfactuals, neighbours)
        out = torch.where(self.increase_only, torch.maximum(counterfactuals, out), out)
        return torch.where(self.decrease_only, torch.minimum(counterfactuals, out), out)


@dataclass
class CategoricalCode:
    """The one-hot groups of a search as index tensors on its device, and their decoding.

    ``decode`` sets each group of two or more columns to the one-hot vector of its largest entry
    (1 there, 0 in the group's other columns; a tie goes to the first of the tied columns) and
    rounds a one-column group, a 0/1 feature, to the nearer of 0 and 1 (after clipping it to
    [0, 1]), as CounterfactualExplanations.jl's ``reconstruct_cat_encoding`` does (which breaks
    ties at random). There is no all-zero "dropped" level: a group always decodes to exactly one
    of its columns. With a domain, a column whose bounds exclude 1 is never chosen and the
    decoded values are clipped to the bounds (neither changes anything for the one-hot columns of
    a domain inferred from data in which every level occurs). Groups whose columns are all
    immutable are not decoded at all: they keep the factual's values.

    How the search uses it (``NativeGenerator`` and ``ReferenceGenerator`` alike): at every
    iteration the model, the cost and the convergence check see the decoded point and the
    gradient with respect to it is applied to the search state unchanged (straight through the
    decoding); the returned counterfactual, its validity and the nascent points are decoded.
    ``categorical_gradient`` says what happens to the state after each step: ``"frozen"``
    (default; what CounterfactualExplanations.jl does) overwrites it by its decoding, so a group
    changes category only when one step carries another entry past the current one;
    ``"straight_through"`` keeps it continuous, so small steps accumulate across iterations.
    """

    index: Tensor | None  # (G, K): the columns of each group of two or more, padded
    eligible: Tensor | None  # (G, K): real columns that the decoding may set to 1
    flat: Tensor | None  # (C,): where those real columns sit in index.flatten()
    binary: Tensor | None  # (B,): the one-column groups
    columns: Tensor  # (C + B,): every decoded column, those of index first
    low: Tensor | None = None  # (C + B,): their domain bounds
    high: Tensor | None = None

    def decode(self, x: Tensor) -> Tensor:
        """``x`` (N x D) with every group decoded; a new tensor (``x`` is not changed)."""
        parts = []
        if self.index is not None:
            scores = x[:, self.index].masked_fill(~self.eligible, -torch.inf)  # (N, G, K)
            winner = scores.argmax(-1, keepdim=True)  # the first largest entry
            levels = torch.arange(self.index.shape[1], device=x.device)
            parts.append((levels == winner).to(x.dtype).flatten(1)[:, self.flat])
        if self.binary is not None:
            parts.append(x[:, self.binary].clamp(0.0, 1.0).round())
        values = parts[0] if len(parts) == 1 else torch.cat(parts, 1)
        if self.low is not None:
            values = torch.minimum(torch.maximum(values, self.low), self.high)
        return x.index_copy(1, self.columns, values)


def categorical_groups(categorical: Categorical, n_features: int) -> list[list[int]]:
    """``categorical`` checked (each group a non-empty sequence of distinct column indices in
    ``[0, n_features)``, no column in two groups) as lists of ints; [] for None."""
    if categorical is None:
        return []
    if isinstance(categorical, str):
        raise ValueError("categorical must be a sequence of column-index groups, not a string")
    groups: list[list[int]] = []
    seen: set[int] = set()
    for group in categorical:
        if isinstance(group, str | int) or not hasattr(group, "__iter__"):
            raise ValueError(
                "categorical must be a sequence of groups, each a sequence of column indices "
                f"(e.g. [[3, 4, 5], [6, 7]]); got the entry {group!r}"
            )
        cols = [int(c) for c in group]
        if not cols:
            raise ValueError("a categorical group must hold at least one column")
        bad = [c for c in cols if not 0 <= c < n_features]
        if bad:
            raise ValueError(
                f"categorical column {bad[0]} is outside the data's {n_features} features"
            )
        twice = sorted(set(cols) & seen) or sorted({c for c in cols if cols.count(c) > 1})
        if twice:
            raise ValueError(
                f"categorical column {twice[0]} belongs to two groups (or twice to one)"
            )
        seen.update(cols)
        groups.append(cols)
    return groups


def _categorical_code(
    groups: list[list[int]],
    mutability: Mutability,
    bounds: Tensor | None,
    device: torch.device | str,
    dtype: torch.dtype,
) -> CategoricalCode | None:
    """The decoding of ``groups`` on ``device``: wholly immutable groups left out; a group that
    mixes immutable and mutable columns, or holds a column that may move one way only, refused
    (decoding to the largest entry can move any of its columns either way)."""
    values = None if mutability is None else [str(v) for v in mutability]
    kept = []
    for cols in groups:
        kinds = {"both"} if values is None else {values[c] for c in cols}
        if kinds == {"none"}:
            continue  # immutable: it stays as the factual has it
        if kinds != {"both"}:
            raise ValueError(
                f"categorical group {cols} has mutability {sorted(kinds)}: a group must be "
                "wholly 'none' (it keeps the factual's category) or wholly 'both'"
            )
        kept.append(cols)
    if not kept:
        return None
    wide = [g for g in kept if len(g) > 1]
    single = [g[0] for g in kept if len(g) == 1]
    index = eligible = flat = binary = None
    columns: list[int] = []
    if wide:
        k = max(map(len, wide))
        padded = [g + [g[0]] * (k - len(g)) for g in wide]
        real = torch.tensor([[j < len(g) for j in range(k)] for g in wide])
        index = torch.tensor(padded)
        eligible = real
        if bounds is not None:
            low, high = bounds[index, 0], bounds[index, 1]
            eligible = real & (low <= 1) & (high >= 1)
        flat = real.flatten().nonzero().squeeze(1)
        columns += [c for g in wide for c in g]
    if single:
        binary = torch.tensor(single)
        columns += single
    cols = torch.tensor(columns)
    low = high = None
    if bounds is not None:
        low = bounds[cols, 0].to(device=device, dtype=dtype)
        high = bounds[cols, 1].to(device=device, dtype=dtype)

    def on(t: Tensor | None) -> Tensor | None:
        return None if t is None else t.to(device)

    return CategoricalCode(
        on(index), on(eligible), on(flat), on(binary), cols.to(device), low, high
    )


def infer_domain(x: Tensor) -> Tensor:
    """Per-feature ``[min(mu - 2 sd, min), max(mu + 2 sd, max)]`` with the corrected (n - 1)
    standard deviation, like the Julia package (one sample: sd 0)."""
    mu = x.mean(0)
    sd = x.std(0, correction=1) if x.shape[0] > 1 else torch.zeros_like(mu)
    lower = torch.minimum(mu - 2 * sd, x.amin(0))
    upper = torch.maximum(mu + 2 * sd, x.amax(0))
    return torch.stack([lower, upper], dim=1)


def _sample_shape(shape: Shape) -> tuple[int, ...]:
    return (shape,) if isinstance(shape, int) else tuple(int(d) for d in shape)


def domain_bounds(domain: Domain, shape: Shape) -> Tensor:
    """``domain`` (not None) as an (n_features, 2) float64 tensor of (low, high) rows, checked;
    ``shape`` is one sample's shape (or its number of features)."""
    shape = _sample_shape(shape)
    n_features = math.prod(shape)
    if isinstance(domain, Tensor) or hasattr(domain, "__array__"):
        bounds = torch.as_tensor(domain).detach().to("cpu", torch.float64)
        if bounds.shape == (*shape, 2):
            bounds = bounds.reshape(n_features, 2)
    elif (
        isinstance(domain, tuple | list)
        and len(domain) == 2
        and all(isinstance(v, int | float) for v in domain)
    ):
        bounds = torch.tensor([domain], dtype=torch.float64).expand(n_features, 2)
    elif (
        isinstance(domain, tuple | list)
        and len(domain) == 2
        and all(isinstance(v, Tensor) or hasattr(v, "__array__") for v in domain)
    ):
        low, high = (torch.as_tensor(v).detach().to("cpu", torch.float64) for v in domain)
        if low.shape != shape or high.shape != shape:
            raise ValueError(
                f"domain's (low, high) tensors must each have one sample's shape {shape}, got "
                f"{tuple(low.shape)} and {tuple(high.shape)}"
            )
        bounds = torch.stack([low.flatten(), high.flatten()], 1)
    else:
        try:
            bounds = torch.tensor([tuple(pair) for pair in domain], dtype=torch.float64)
        except (TypeError, ValueError) as err:
            raise ValueError(
                "domain must be a (low, high) pair, one (low, high) pair per feature, or a pair "
                "of tensors (low, high) of one sample's shape"
            ) from err
    if bounds.ndim != 2 or bounds.shape[1] != 2:
        raise ValueError(
            f"domain must have shape (n_features, 2) or {(*shape, 2)}, got {tuple(bounds.shape)}"
        )
    if bounds.shape[0] != n_features:
        raise ValueError(
            f"domain has {bounds.shape[0]} entries but the data has {n_features} features"
        )
    if torch.isnan(bounds).any() or (bounds[:, 0] > bounds[:, 1]).any():
        bad = int(torch.nonzero(~(bounds[:, 0] <= bounds[:, 1]))[0])
        raise ValueError(f"domain entry {bad} is not a (low, high) pair with low <= high")
    return bounds


def mutability_values(mutability: Mutability, shape: Shape) -> list[str]:
    """``mutability`` (not None) as one value per feature, flat, checked: a sequence of
    ``n_features`` values, or values nested in one sample's ``shape`` (lists, an array)."""
    shape = _sample_shape(shape)
    n_features = math.prod(shape)
    if isinstance(mutability, str):
        raise ValueError("mutability must be a sequence with one value per feature, not a string")
    values = _flat_values(mutability, shape)
    if len(values) != n_features:
        raise ValueError(
            f"mutability has {len(values)} entries but the data has {n_features} features"
        )
    unknown = sorted({str(v) for v in values} - set(MUTABILITY_VALUES))
    if unknown:
        raise ValueError(
            f"mutability values must be one of {', '.join(MUTABILITY_VALUES)}; got {unknown}"
        )
    return [str(v) for v in values]


def _flat_values(values: object, shape: tuple[int, ...]) -> list[object]:
    """A flat list of values, or values nested along ``shape``, as one flat list."""
    if hasattr(values, "tolist"):
        values = values.tolist()
    if isinstance(values, str) or not hasattr(values, "__iter__"):
        return [values]
    values = list(values)
    if len(shape) < 2 or all(isinstance(v, str) for v in values):
        return values
    return [v for part in values for v in _flat_values(part, shape[1:])]


def _mutability_masks(values: list[str], shape: tuple[int, ...]) -> dict[str, Tensor]:
    return {
        name: torch.tensor([v == value for v in values]).reshape(shape)
        for name, value in (
            ("immutable", "none"),
            ("increase_only", "increase"),
            ("decrease_only", "decrease"),
        )
    }


def make_constraints(
    domain: Domain,
    mutability: Mutability,
    shape: Shape,
    *,
    device: torch.device | str,
    dtype: torch.dtype = torch.float32,
    categorical: Categorical = None,
) -> Constraints:
    """Check ``domain``, ``mutability`` and ``categorical`` against one sample's ``shape`` (or,
    for flat rows, the number of features); place them on ``device`` in that shape. One-hot
    groups are columns of flat rows: samples of several dimensions take none."""
    shape = _sample_shape(shape)
    n_features = math.prod(shape)
    lower = upper = None
    host_bounds = None
    if domain is not None:
        host_bounds = domain_bounds(domain, shape)
        bounds = host_bounds.to(dtype).to(device)  # the values the search compares with
        lower = bounds[:, 0].reshape(shape).contiguous()
        upper = bounds[:, 1].reshape(shape).contiguous()
    masks: dict[str, Tensor] = {}
    values = None
    if mutability is not None:
        values = mutability_values(mutability, shape)
        masks = _mutability_masks(values, shape)
        if not any(bool(m.any()) for m in masks.values()):
            masks = {}  # every feature is free: skip the masking kernels entirely
        masks = {k: m.to(device) for k, m in masks.items()}
    groups = categorical_groups(categorical, n_features)
    if groups and len(shape) > 1:
        raise ValueError(
            f"categorical groups are columns of flat rows, but the samples have shape {shape}: "
            "flatten them (x.flatten(1)) to search with one-hot groups"
        )
    code = _categorical_code(groups, values, host_bounds, device, dtype) if groups else None
    return Constraints(lower, upper, **masks, categorical=code)

"""A pandas DataFrame as CT's tensors, and counterfactuals back as a DataFrame.

``TableEncoder`` standardises the numeric columns (scikit-learn's ``StandardScaler``) and one-hot
encodes the categorical ones (``OneHotEncoder``), fitted on the training rows; it gives the
tensor, the one-hot groups (``categorical=`` of the search and of training), the domain and the
mutability by column name, and decodes rows of the tensor back to the original columns.
pandas and scikit-learn are optional: ``pip install 'cfbook[tables]'``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from cfbook.data.tabular import infer_domain

__all__ = ["TableEncoder"]


def _require() -> tuple[Any, Any, Any]:
    try:
        import pandas as pd
        from sklearn.preprocessing import OneHotEncoder, StandardScaler
    except ImportError as err:
        raise ImportError(
            "TableEncoder needs pandas and scikit-learn: pip install 'cfbook[tables]'"
        ) from err
    return pd, StandardScaler, OneHotEncoder


class TableEncoder:
    """Numeric and categorical columns of a DataFrame as one float tensor, and back.

    ``numeric`` and ``categorical`` name the feature columns (every other column, such as the
    label, is left out). Mutability is given by column name: ``immutable`` features keep the
    factual's value (a categorical one its whole one-hot group), ``increase`` and ``decrease``
    numeric features may move one way only. After ``fit(frame)`` on the training rows:

    - ``transform(frame)``: the (n, n_features) float32 tensor: the numeric columns standardised,
      then each categorical feature's one-hot columns (``columns`` names them, ``sex=Male``);
    - ``groups``: the one-hot groups as column indices, for ``categorical=`` of ``generate``,
      ``paper_evaluate`` and ``counterfactual_training``;
    - ``domain``: per column, the training data's range as CT.jl infers it (mean +- 2 sd,
      widened to the observed values) for numeric columns, (0, 1) for one-hot columns;
    - ``mutability``: per column, for the search;
    - ``decode(x)``: rows of the tensor as a DataFrame of the original columns (integer columns
      rounded, each category its group's largest entry);
    - ``compare(factuals, counterfactuals)``: both decoded, side by side, with the changed
      features of each counterfactual listed.
    """

    def __init__(
        self,
        numeric: Sequence[str] = (),
        categorical: Sequence[str] = (),
        *,
        immutable: Sequence[str] = (),
        increase: Sequence[str] = (),
        decrease: Sequence[str] = (),
    ) -> None:
        self.numeric, self.categorical = list(numeric), list(categorical)
        features = self.numeric + self.categorical
        if not features:
            raise ValueError("TableEncoder needs at least one numeric or categorical column")
        twice = sorted({f for f in features if features.count(f) > 1})
        if twice:
            raise ValueError(f"columns named twice among numeric and categorical: {twice}")
        for name, names in (
            ("immutable", immutable),
            ("increase", increase),
            ("decrease", decrease),
        ):
            unknown = [f for f in names if f not in features]
            if unknown:
                raise ValueError(
                    f"{name} names {unknown}, not among the encoded columns {features}"
                )
        one_way = [f for f in (*increase, *decrease) if f in self.categorical]
        if one_way:
            raise ValueError(
                f"{one_way} are categorical: a category has no direction, so it may move freely "
                "or be immutable, not only increase or decrease"
            )
        both = sorted(set(increase) & set(decrease) | (set(immutable) & {*increase, *decrease}))
        if both:
            raise ValueError(f"{both} given more than one mutability")
        self.immutable, self.increase, self.decrease = (
            list(immutable),
            list(increase),
            list(decrease),
        )
        self._scaler = self._one_hot = None
        self.columns: list[str] = []

    def fit(self, frame: Any) -> TableEncoder:
        """Fit the scaler and the one-hot encoder on ``frame`` (the training rows)."""
        pd, StandardScaler, OneHotEncoder = _require()
        self._check(frame, pd)
        self._dtypes = {c: frame[c].dtype for c in self.numeric}
        if self.numeric:
            self._scaler = StandardScaler().fit(frame[self.numeric].to_numpy(np.float64))
        if self.categorical:
            self._one_hot = OneHotEncoder(sparse_output=False, dtype=np.float64)
            self._one_hot.fit(frame[self.categorical].astype(str))
        self.columns = list(self.numeric)
        self.groups: list[list[int]] = []
        for feature, levels in zip(self.categorical, self._levels(), strict=True):
            start = len(self.columns)
            self.columns += [f"{feature}={level}" for level in levels]
            self.groups.append(list(range(start, len(self.columns))))
        x = self.transform(frame).double().numpy()
        n_numeric = len(self.numeric)
        numeric_domain = infer_domain(x[:, :n_numeric]) if n_numeric else []
        self.domain = torch.tensor(
            numeric_domain + [(0.0, 1.0)] * (len(self.columns) - n_numeric), dtype=torch.float64
        )
        self.mutability = self._mutability()
        return self

    def fit_transform(self, frame: Any) -> Tensor:
        """``fit(frame)``, then ``transform(frame)``."""
        return self.fit(frame).transform(frame)

    def transform(self, frame: Any) -> Tensor:
        """``frame``'s feature columns as a float32 tensor of ``len(columns)`` columns."""
        pd, _, _ = _require()
        self._fitted()
        self._check(frame, pd)
        parts = []
        if self._scaler is not None:
            parts.append(self._scaler.transform(frame[self.numeric].to_numpy(np.float64)))
        if self._one_hot is not None:
            values = frame[self.categorical].astype(str)
            for feature, levels in zip(self.categorical, self._levels(), strict=True):
                unseen = sorted(set(values[feature]) - set(levels))
                if unseen:
                    raise ValueError(
                        f"column {feature!r} holds {unseen[:5]}, categories the encoder was not "
                        "fitted on: fit it on data that holds every category"
                    )
            parts.append(self._one_hot.transform(values))
        return torch.as_tensor(np.concatenate(parts, axis=1), dtype=torch.float32)

    def decode(self, x: Tensor) -> Any:
        """Rows of the encoded tensor as a DataFrame of the original feature columns."""
        pd, _, _ = _require()
        self._fitted()
        rows = x.detach().to("cpu", torch.float64).numpy()
        if rows.ndim != 2 or rows.shape[1] != len(self.columns):
            raise ValueError(
                f"decode takes rows of the {len(self.columns)} encoded columns, got shape "
                f"{tuple(x.shape)}"
            )
        table = {}
        if self._scaler is not None:
            values = self._scaler.inverse_transform(rows[:, : len(self.numeric)])
            for i, column in enumerate(self.numeric):
                dtype = self._dtypes[column]
                col = values[:, i]
                table[column] = (
                    np.rint(col).astype(dtype) if np.issubdtype(dtype, np.integer) else col
                )
        for feature, levels, group in zip(
            self.categorical, self._levels(), self.groups, strict=True
        ):
            table[feature] = np.asarray(levels, dtype=object)[rows[:, group].argmax(1)]
        return pd.DataFrame(table)[self.numeric + self.categorical]

    def compare(self, factuals: Tensor, counterfactuals: Tensor) -> Any:
        """Factuals and counterfactuals decoded, each factual's row before its counterfactual's
        (the index: ``(row, "factual" | "counterfactual")``), with a column ``changed`` naming
        the features that differ (numeric ones by more than a thousandth of their scale)."""
        pd, _, _ = _require()
        before, after = self.decode(factuals), self.decode(counterfactuals)
        scale = self._scaler.scale_ if self._scaler is not None else []
        changed = []
        for i in range(len(before)):
            names = [
                c
                for k, c in enumerate(self.numeric)
                if abs(float(after.at[i, c]) - float(before.at[i, c])) > 1e-3 * scale[k]
            ]
            names += [c for c in self.categorical if after.at[i, c] != before.at[i, c]]
            changed.append(", ".join(names))
        before["changed"], after["changed"] = "", changed
        table = pd.concat({"factual": before, "counterfactual": after}, names=["kind", "row"])
        return table.swaplevel().sort_index(level="row", sort_remaining=False, kind="stable")

    def _levels(self) -> list[list[str]]:
        return [] if self._one_hot is None else [list(c) for c in self._one_hot.categories_]

    def _mutability(self) -> list[str]:
        out = []
        for column in self.columns:
            feature = column if column in self.numeric else column.split("=", 1)[0]
            if feature in self.immutable:
                out.append("none")
            elif feature in self.increase:
                out.append("increase")
            elif feature in self.decrease:
                out.append("decrease")
            else:
                out.append("both")
        return out

    def _fitted(self) -> None:
        if not self.columns:
            raise ValueError("the TableEncoder is not fitted: call fit(train_frame) first")

    def _check(self, frame: Any, pd: Any) -> None:
        if not isinstance(frame, pd.DataFrame):
            raise TypeError(f"expected a pandas DataFrame, got a {type(frame).__name__}")
        missing = [c for c in self.numeric + self.categorical if c not in frame.columns]
        if missing:
            raise ValueError(f"the DataFrame has no column {missing}; it has {list(frame.columns)}")
        not_numbers = [c for c in self.numeric if not pd.api.types.is_numeric_dtype(frame[c].dtype)]
        if not_numbers:
            raise ValueError(
                f"numeric columns {not_numbers} hold no numbers: list them as categorical, or "
                "convert them (pd.to_numeric)"
            )
        empty = [c for c in self.numeric + self.categorical if frame[c].isna().any()]
        if empty:
            raise ValueError(f"columns {empty} hold missing values: drop or impute them first")

"""Counterfactual training inside a PyTorch Lightning ``LightningModule``.

``cfbook.CounterfactualLoss`` is CT's loss for a loop of one's own: made once the model sits on
its training device (``on_fit_start``), it searches each epoch's counterfactuals when the epoch
starts and gives every mini-batch its loss and terms. Lightning keeps what it does best: the
loop, the logging, the checkpoints, schedulers and early stopping.

Run it (``pip install 'cfbook[lightning]' scikit-learn``) to train on scikit-learn's 8 x 8 digits
as images: ``python examples/ct_in_lightning.py``.
"""

from __future__ import annotations

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader

from cfbook import CounterfactualLoss, FullObjective, NativeGenerator
from cfbook.search.constraints import Domain


class CounterfactualClassifier(L.LightningModule):
    """A classifier trained with CT: ``model`` maps inputs to logits, ``loader`` is the
    training loader (its whole data set is where each epoch's factuals come from)."""

    def __init__(
        self,
        model: nn.Module,
        loader: DataLoader,
        *,
        nce: int,
        domain: Domain,
        burnin_epochs: int = 0,
        step_size: float = 1.0,
        lr: float = 1e-2,
    ) -> None:
        super().__init__()
        self.model, self.loader = model, loader
        self.nce, self.domain, self.burnin_epochs = nce, domain, burnin_epochs
        self.generator = NativeGenerator(step_size=step_size)
        self.lr = lr
        self.ct: CounterfactualLoss | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)

    def on_fit_start(self) -> None:
        # Here the model is on its training device, where the training set is gathered.
        self.ct = CounterfactualLoss(
            FullObjective(),
            self.generator,
            self.model,
            self.loader,
            nce=self.nce,
            burnin_epochs=self.burnin_epochs,
            domain=self.domain,
        )

    def on_train_epoch_start(self) -> None:
        found = self.ct.start_epoch(self.model, self.current_epoch + 1)  # epochs count from 1
        if found is not None:
            self.log("percent_valid", found.valid.float().mean())

    def training_step(self, batch: tuple[torch.Tensor, ...], batch_idx: int) -> torch.Tensor:
        x, y = batch[0], batch[1]
        loss, terms = self.ct(self.model, x, y, batch_idx)
        self.log_dict({"loss": loss, **terms}, on_step=False, on_epoch=True)
        return loss

    def train_dataloader(self) -> DataLoader:
        return self.loader

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.lr)


def digits() -> tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn's 8 x 8 digits as (N, 1, 8, 8) images in [-1, 1], and their labels."""
    from sklearn.datasets import load_digits

    data = load_digits()
    return torch.tensor(data.images, dtype=torch.float32)[:, None] / 8 - 1, torch.tensor(
        data.target
    )


def conv_net() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 64, 10)
    )


def main(max_epochs: int = 4, rows: int = 600) -> tuple[CounterfactualClassifier, L.Trainer]:
    x, y = digits()
    loader = DataLoader(
        torch.utils.data.TensorDataset(x[:rows], y[:rows]), batch_size=100, shuffle=True
    )
    module = CounterfactualClassifier(
        conv_net(), loader, nce=rows // 10, domain=(-1.0, 1.0), burnin_epochs=max_epochs // 2
    )
    trainer = L.Trainer(
        max_epochs=max_epochs,
        accelerator="auto",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module)
    return module, trainer


if __name__ == "__main__":
    torch.manual_seed(0)
    _, trainer = main()
    print({k: round(float(v), 3) for k, v in trainer.callback_metrics.items()})

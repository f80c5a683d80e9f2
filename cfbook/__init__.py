"""cfbook: counterfactual training on the GPU with PyTorch.

Where things live:

- ``cfbook.search``: the counterfactual search (the ``Generator`` protocol, ``NativeGenerator``
  batched on the device, ``ReferenceGenerator`` one sample at a time, the one search step and
  its compiled executor, the domain and mutability constraints);
- ``cfbook.training``: ``counterfactual_training``, ``CounterfactualLoss`` (CT inside a loop of
  one's own), a run's identity, one epoch's counterfactuals, CT's loss terms, logs,
  checkpoints, training over several processes;
- ``cfbook.evaluation``: the CT paper's test-time protocol (``paper_evaluate``), its measures,
  round statistics, attacks and attributions;
- ``cfbook.data``: data sets as tensors on the device (MNIST, the paper's tabular and synthetic
  sets) and the on-device loader;
- the leaf modules ``models``, ``objectives``, ``device``, ``amp``, ``atomic``, ``profiling``,
  ``progress``, ``inputs`` (the checks of what users pass), which import nothing of cfbook but
  ``errors`` (``SetupError``: a device, launcher or download that is not there);
- ``cfbook.paper``: the paper's experiment grid; ``cfbook.book``: only the book (importing
  ``cfbook`` loads neither); ``cfbook.commands``: the command lines.

The parts import downwards only (``pyproject.toml``'s import-linter contracts hold them to it):
commands, book, paper, training, evaluation, then search and data. Everything a training script
needs is importable from here.
"""

from cfbook.data import DeviceLoader, load_mnist
from cfbook.device import detect_device
from cfbook.evaluation import PaperProtocol, accuracy, attack_accuracy, paper_evaluate, predict
from cfbook.models import build_model, mlp, resnet18_mnist
from cfbook.objectives import (
    AdversarialObjective,
    EnergyDifferentialObjective,
    FullObjective,
    Objective,
    VanillaObjective,
)
from cfbook.search import (
    CounterfactualResult,
    Generator,
    NativeGenerator,
    ReferenceGenerator,
    infer_domain,
)
from cfbook.training import (
    CounterfactualBatch,
    CounterfactualLoss,
    EpochRecord,
    LowValidityWarning,
    SearchProbeWarning,
    TrainingLog,
    counterfactual_training,
    load_log,
    save_log,
)

__version__ = "0.1.0"

__all__ = [
    "AdversarialObjective",
    "CounterfactualBatch",
    "CounterfactualLoss",
    "CounterfactualResult",
    "DeviceLoader",
    "EnergyDifferentialObjective",
    "EpochRecord",
    "FullObjective",
    "Generator",
    "LowValidityWarning",
    "NativeGenerator",
    "Objective",
    "PaperProtocol",
    "ReferenceGenerator",
    "SearchProbeWarning",
    "TrainingLog",
    "VanillaObjective",
    "accuracy",
    "attack_accuracy",
    "build_model",
    "counterfactual_training",
    "detect_device",
    "infer_domain",
    "load_log",
    "load_mnist",
    "mlp",
    "paper_evaluate",
    "predict",
    "resnet18_mnist",
    "save_log",
]

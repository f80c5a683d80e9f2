"""cfbook: counterfactual training on the GPU with PyTorch.

The top level holds the training loop and what it is made of (objectives, one epoch's
counterfactuals, logs, checkpoints, devices, distributed training, models). Below it:
``cfbook.search`` (the counterfactual search), ``cfbook.evaluation`` (the paper's test-time
protocol), ``cfbook.data`` (data sets on the device) and ``cfbook.book`` (only for the book;
importing ``cfbook`` does not load it). The layers import downwards only: the book uses
training, training uses evaluation and search, evaluation uses search; the leaf modules
(``amp``, ``atomic``, ``device``, ``models``, ``objectives``, ``profiling``, ``progress``) import
nothing of cfbook and serve every layer.
"""

from cfbook.log import EpochRecord, TrainingLog, load_log, save_log
from cfbook.objectives import (
    AdversarialObjective,
    EnergyDifferentialObjective,
    FullObjective,
    Objective,
    VanillaObjective,
)
from cfbook.search.generators import CounterfactualResult, NativeGenerator, ReferenceGenerator
from cfbook.training import LowValidityWarning, counterfactual_training

__version__ = "0.1.0"

__all__ = [
    "AdversarialObjective",
    "CounterfactualResult",
    "EnergyDifferentialObjective",
    "EpochRecord",
    "FullObjective",
    "LowValidityWarning",
    "NativeGenerator",
    "Objective",
    "ReferenceGenerator",
    "TrainingLog",
    "VanillaObjective",
    "counterfactual_training",
    "load_log",
    "save_log",
]

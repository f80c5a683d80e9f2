"""cfbook: counterfactual training on the GPU with PyTorch."""

from cfbook.generators import CounterfactualResult, NativeGenerator, ReferenceGenerator
from cfbook.log import EpochRecord, TrainingLog, load_log, save_log
from cfbook.objectives import (
    AdversarialObjective,
    EnergyDifferentialObjective,
    FullObjective,
    Objective,
    VanillaObjective,
)
from cfbook.training import counterfactual_training

__version__ = "0.1.0"

__all__ = [
    "AdversarialObjective",
    "CounterfactualResult",
    "EnergyDifferentialObjective",
    "EpochRecord",
    "FullObjective",
    "NativeGenerator",
    "Objective",
    "ReferenceGenerator",
    "TrainingLog",
    "VanillaObjective",
    "counterfactual_training",
    "load_log",
    "save_log",
]

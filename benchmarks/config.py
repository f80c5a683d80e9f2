"""Problem sizes and time boxes of the full and the quick run.

The full run is sized for about ten minutes on a quiet 2-core CPU; the quick run only checks that
every benchmark works (its numbers are noisy and small).
"""

from __future__ import annotations

from dataclasses import dataclass

MODEL_NAMES = ("mlp", "resnet18")


@dataclass(frozen=True)
class TrainSetup:
    """One training run of the overhead and mixed-precision benchmarks."""

    n: int  # training samples
    batch_size: int
    nce: int  # counterfactuals per epoch

    @property
    def n_batches(self) -> int:
        return -(-self.n // self.batch_size)


@dataclass(frozen=True)
class Sizes:
    """Everything that decides how long a run takes."""

    n_data: int  # MNIST samples loaded (factuals are drawn from them)
    pretrain: dict[str, tuple[int, int]]  # model -> (samples, epochs) of plain training
    maxiter: int
    throughput_nce: dict[str, tuple[int, ...]]
    reference_subset: dict[str, int]  # samples the slow reference searches per measurement
    efficiency_batch: dict[str, int]
    training: dict[str, TrainSetup]
    memory_model: str
    memory_nce: tuple[int, ...]  # nce sweep at cf_batchsize memory_chunk
    memory_chunk: int
    memory_chunks: tuple[int, ...]  # cf_batchsize sweep at nce memory_nce_fixed
    memory_nce_fixed: int
    precision_nce: dict[str, int]
    sync_nce: int
    fused_n: dict[str, tuple[int, ...]]  # batch sizes of the compiled-step benchmark
    fused_maxiter: dict[str, dict[int, int]]  # its iterations per model and batch size
    fused_chunk: dict[str, int]  # cf_batchsize there (ResNet-18 activations bound the rows)
    fused_threads: tuple[int, ...]  # torch CPU thread counts it compares
    fused_one_thread_max: dict[str, int]  # largest N also timed with one thread (time box)
    fused_heavy: dict[str, int]  # rows x iterations above which a case is timed once
    fused_epochs: int  # training epochs per generator, the first one paying the compile
    min_repeats: int
    max_repeats: int
    budget_s: float  # time box of one side-by-side comparison (after its minimum repeats)
    training_rounds: int  # timed epochs per objective (after one warm-up epoch)
    scaling_model: str
    scaling: TrainSetup  # the run trained on 1 and 2 processes (global batch)
    scaling_epochs: int  # burn-in, timed epochs, a profiled one


FULL = Sizes(
    n_data=4096,
    pretrain={"mlp": (2048, 3), "resnet18": (1024, 2)},
    maxiter=30,
    throughput_nce={"mlp": (128, 1024), "resnet18": (128, 1024)},
    reference_subset={"mlp": 256, "resnet18": 16},
    efficiency_batch={"mlp": 1024, "resnet18": 128},
    # nce / N = 0.2 and about 26 counterfactuals per batch, as in the tutorial's profile.
    training={
        "mlp": TrainSetup(n=2560, batch_size=128, nce=512),
        "resnet18": TrainSetup(n=640, batch_size=128, nce=128),
    },
    memory_model="resnet18",
    memory_nce=(128, 512, 2048),
    memory_chunk=128,
    memory_chunks=(32, 128, 512),
    memory_nce_fixed=512,
    precision_nce={"mlp": 1024, "resnet18": 32},
    sync_nce=256,
    fused_n={"mlp": (100, 1024, 10000), "resnet18": (100, 1024, 10000)},
    # ResNet-18 at 10,000 rows: one iteration (about 12 s a pass on two cores) keeps the run short.
    fused_maxiter={"mlp": {100: 30, 1024: 30, 10000: 30}, "resnet18": {100: 3, 1024: 2, 10000: 1}},
    fused_chunk={"mlp": 10000, "resnet18": 1024},
    fused_threads=(1, 2),
    fused_one_thread_max={"mlp": 10000, "resnet18": 1024},
    fused_heavy={"mlp": 10**9, "resnet18": 2000},
    fused_epochs=8,
    min_repeats=3,
    max_repeats=7,
    budget_s=15.0,
    training_rounds=2,
    scaling_model="resnet18",
    scaling=TrainSetup(n=512, batch_size=128, nce=128),
    scaling_epochs=4,
)

QUICK = Sizes(
    n_data=2048,
    pretrain={"mlp": (2048, 3), "resnet18": (512, 1)},
    maxiter=10,
    throughput_nce={"mlp": (128, 1024), "resnet18": (16, 64)},
    reference_subset={"mlp": 64, "resnet18": 2},
    efficiency_batch={"mlp": 256, "resnet18": 16},
    training={
        "mlp": TrainSetup(n=512, batch_size=64, nce=128),
        "resnet18": TrainSetup(n=64, batch_size=32, nce=16),
    },
    memory_model="resnet18",
    memory_nce=(32, 128),
    memory_chunk=32,
    memory_chunks=(8, 32, 128),
    memory_nce_fixed=128,
    precision_nce={"mlp": 256, "resnet18": 8},
    sync_nce=128,
    fused_n={"mlp": (100, 1024), "resnet18": (16,)},
    fused_maxiter={"mlp": {100: 10, 1024: 10}, "resnet18": {16: 1}},
    fused_chunk={"mlp": 1024, "resnet18": 16},
    fused_threads=(1, 2),
    fused_one_thread_max={"mlp": 1024, "resnet18": 16},
    fused_heavy={"mlp": 10**9, "resnet18": 0},
    fused_epochs=3,
    min_repeats=2,
    max_repeats=3,
    budget_s=1.0,
    training_rounds=1,
    scaling_model="mlp",
    scaling=TrainSetup(n=512, batch_size=64, nce=64),
    scaling_epochs=3,
)

# A search setting where most samples converge within a few iterations (a looser tau and a longer
# step than the defaults), used to show that converged samples stop costing compute.
CONVERGING_SEARCH: dict[str, dict[str, float]] = {
    "mlp": {"tau": 0.5, "step_size": 10.0},
    "resnet18": {"tau": 0.5, "step_size": 3.0},
}

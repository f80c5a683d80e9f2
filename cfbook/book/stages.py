"""The two training stages and the plot stage's loaders: everything the chapters call.

Each training runs in its own process (one CT_MODE per kernel) and leaves behind, per run, a JSON
log and the model's weights, then one evaluation file for all its runs; a second heavy training
never inherits the first one's fragmented accelerator memory.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from cfbook import distributed
from cfbook.atomic import atomic_torch_save, atomic_write_text
from cfbook.book.microscope import MICROSCOPE_FORMAT, look_closely
from cfbook.book.profiles import Profile, check_mode
from cfbook.checkpoint import prepare_checkpoint_dir
from cfbook.data import DeviceLoader, MNISTData, display_path, find_data_dir, load_mnist
from cfbook.device import describe_device, free_cached_memory
from cfbook.evaluation.paper_protocol import paper_evaluate
from cfbook.evaluation.protocol import EVALUATION_FORMAT, evaluate
from cfbook.log import TrainingLog, load_log, save_log
from cfbook.models import build_model
from cfbook.training import counterfactual_training

__all__ = [
    "TRAINING_MODES",
    "evaluation_path",
    "load_comparison_runs",
    "load_evaluation",
    "load_evaluations",
    "load_microscope",
    "load_paired_evaluation",
    "microscope_path",
    "paired_evaluation_path",
    "run_paired_evaluation",
    "log_path",
    "profile_data",
    "profile_dir",
    "run_training_stage",
    "stage_outputs",
    "weights_path",
    "stage_checkpoint_dir",
]

TRAINING_MODES = ("full", "vanilla")


def profile_dir(data_dir: str | Path | None, profile_name: str) -> Path:
    """Folder holding one profile's logs, evaluations and executed stage notebooks."""
    root = Path(data_dir) if data_dir is not None else find_data_dir()
    return root / profile_name


def _training_mode(mode: str) -> str:
    if check_mode(mode) not in TRAINING_MODES:
        raise ValueError(f"only {' and '.join(TRAINING_MODES)} stages write logs, not {mode!r}")
    return mode


def _run_suffix(run: int) -> str:
    return "" if run == 1 else f"-run{run}"


def log_path(data_dir: str | Path | None, profile_name: str, mode: str, run: int = 1) -> Path:
    """Where run ``run`` (1-based) of the training stage ``mode`` saves its log."""
    return profile_dir(data_dir, profile_name) / f"{_training_mode(mode)}{_run_suffix(run)}.json"


def weights_path(data_dir: str | Path | None, profile_name: str, mode: str, run: int = 1) -> Path:
    """Where run ``run`` saves its trained weights (git-ignored; ``weights_only``-loadable)."""
    return log_path(data_dir, profile_name, mode, run).with_suffix(".pt")


def evaluation_path(data_dir: str | Path | None, profile_name: str, mode: str) -> Path:
    """Where the stage ``mode`` saves the evaluation of all its runs."""
    return profile_dir(data_dir, profile_name) / f"{_training_mode(mode)}-evaluation.json"


def paired_evaluation_path(data_dir: str | Path | None, profile_name: str) -> Path:
    """Where the paper-protocol comparison of both stages' runs, seed by seed, is saved."""
    return profile_dir(data_dir, profile_name) / "paired-evaluation.json"


def stage_outputs(data_dir: str | Path | None, profile: Profile, mode: str) -> list[Path]:
    """Every file a finished stage leaves in git: its runs' logs and its evaluation."""
    logs = [log_path(data_dir, profile.name, mode, run) for run in range(1, profile.runs + 1)]
    return [*logs, evaluation_path(data_dir, profile.name, mode)]


def stage_checkpoint_dir(
    data_dir: str | Path | None, profile_name: str, mode: str, run: int = 1
) -> Path:
    """Where run ``run`` of training stage ``mode`` keeps its per-epoch checkpoint (git-ignored),
    so that running the stage again after an interruption resumes instead of starting over; a
    finished run's checkpoint makes the rerun skip straight to the next run."""
    return profile_dir(data_dir, profile_name) / "checkpoints" / f"{mode}{_run_suffix(run)}"


def profile_data(
    profile: Profile, *, device: str | torch.device, data_dir: str | Path | None = None
) -> tuple[MNISTData, DeviceLoader]:
    """The profile's MNIST subset and its first run's shuffling loader: what the stages train
    on, and what the MNIST chapter shows. Under DDP the profile's batch is the global one, split
    over the processes."""
    data = load_mnist(profile.n, device=device, seed=profile.seed, root=data_dir)
    shard = distributed.loader_shard(profile.batch_size)
    return data, data.loader(shuffle=True, seed=profile.seed, **shard)


def _train_run(
    mode: str,
    profile: Profile,
    data: MNISTData,
    run: int,
    device: torch.device,
    root: Path,
    training: dict[str, Any],
) -> tuple[torch.nn.Module, TrainingLog]:
    """Train run ``run`` and save its log and weights. The model is built right after seeding
    with the run's seed, so the full and the vanilla stage start from identical weights and see
    the same mini-batch order."""
    seed = profile.run_seeds()[run - 1]
    loader = data.loader(shuffle=True, seed=seed, **distributed.loader_shard(profile.batch_size))
    torch.manual_seed(seed)
    model = build_model(profile.model)
    optimizer = torch.optim.Adam(model.parameters(), lr=profile.lr)
    checkpoint_dir = stage_checkpoint_dir(root, profile.name, mode, run)
    if distributed.is_main():
        prepare_checkpoint_dir(checkpoint_dir, profile.config())
    distributed.barrier()  # no process looks for a checkpoint before a stale one is gone
    model, log = counterfactual_training(
        profile.objective(mode),
        model,
        profile.search(),
        loader,
        optimizer,
        device=device,
        nepochs=profile.nepochs,
        domain=data.domain,
        burnin=profile.burnin,
        nce=profile.nce,
        cf_batchsize=profile.cf_batchsize,
        accuracy_every=profile.accuracy_every,
        val_loader=data.val_loader(),
        checkpoint_dir=checkpoint_dir,
        mature=profile.mature,
        **training,
    )
    log.meta.update(
        profile=profile.name,
        config=profile.config(),
        run=run,
        seed=seed,
        data_source=data.source,
        device_name=describe_device(device),
        threads=torch.get_num_threads(),
    )
    if distributed.is_main():
        path = log_path(root, profile.name, mode, run)
        save_log(log, path)
        atomic_torch_save(model.state_dict(), weights_path(root, profile.name, mode, run))
        print(
            f"Saved the {mode} log of run {run}/{profile.runs} ({len(log)} epochs) and its "
            f"weights to {display_path(path, root)}"
        )
    return model, log


def run_training_stage(
    mode: str,
    profile: Profile,
    *,
    device: str | torch.device,
    data_dir: str | Path | None = None,
    **training: Any,
) -> TrainingLog | None:
    """Train the objective selected by ``mode`` once per run of the profile, save each run's log
    and weights, then evaluate all runs (the paper's test-time protocol) into one file. Any other
    mode trains nothing. Returns the first run's log.

    ``training`` goes on to ``counterfactual_training`` (e.g. ``accumulate``, ``profile_epoch``).
    Torch's CPU threads follow $CFBOOK_THREADS, else this process's share of the cores. Under DDP
    every process trains and only rank 0 saves and evaluates.
    """
    if check_mode(mode) not in TRAINING_MODES:
        print(f"CT_MODE={mode}: skipping the training stages (profile {profile.name}).")
        return None
    distributed.configure_threads()
    device = torch.device(device)
    root = Path(data_dir) if data_dir is not None else find_data_dir()
    data, _ = profile_data(profile, device=device, data_dir=root)
    trained = [
        _train_run(mode, profile, data, run, device, root, training)
        for run in range(1, profile.runs + 1)
    ]
    log = trained[0][1]
    if not distributed.is_main():
        return log
    models = [model for model, _ in trained]
    result = evaluate(
        models,
        data.x_val,
        data.y_val,
        data.x,
        data.y,
        config=profile.evaluation,
        domain=(-1.0, 1.0),
        cf_batchsize=profile.cf_batchsize,
    )
    result["meta"] = {
        "profile": profile.name,
        "mode": mode,
        "objective": profile.objective(mode).name,
        "config": profile.config(),
        "seeds": profile.run_seeds(),
        "data_source": data.source,
        "device_name": describe_device(device),
    }
    path = evaluation_path(root, profile.name, mode)
    atomic_write_text(path, json.dumps(result, indent=1))
    print(f"Saved the {mode} evaluation to {display_path(path, root)}")
    # Hand the accelerator's cached blocks back before the kernel moves on or exits.
    del trained, models
    run_paired_evaluation(profile, device=device, data_dir=root, data=data)
    del data
    free_cached_memory(device)
    return log


def _trained_runs(root: Path, profile: Profile, mode: str) -> bool:
    """Whether every run of ``mode`` has weights and a log of this very profile."""
    for run in range(1, profile.runs + 1):
        log, weights = (
            log_path(root, profile.name, mode, run),
            weights_path(root, profile.name, mode, run),
        )
        if not (log.is_file() and weights.is_file()):
            return False
        if load_log(log).meta.get("config") != profile.config():
            return False
    return True


def run_paired_evaluation(
    profile: Profile,
    *,
    device: str | torch.device,
    data_dir: str | Path | None = None,
    data: MNISTData | None = None,
) -> Path | None:
    """The paper's protocol on both objectives, seed by seed (CT run k against baseline run k),
    on the held-out digits, once both stages have trained this profile; the second stage to
    finish runs it, and saves run 1's search under the microscope beside it. Returns the file
    written, or None (and says why) if a stage is missing."""
    root = Path(data_dir) if data_dir is not None else find_data_dir()
    missing = [m for m in TRAINING_MODES if not _trained_runs(root, profile, m)]
    if missing:
        print(f"Paired evaluation waits for the {' and '.join(missing)} stage of this profile.")
        return None
    device = torch.device(device)
    if data is None:
        data, _ = profile_data(profile, device=device, data_dir=root)
    seeds = profile.run_seeds()
    evaluations = []
    for run, seed in enumerate(seeds, start=1):
        models = {}
        for mode in TRAINING_MODES:
            model = build_model(profile.model).to(device)
            state = torch.load(
                weights_path(root, profile.name, mode, run), map_location=device, weights_only=True
            )
            model.load_state_dict(state)
            models[mode] = model.eval()
        if run == 1:
            microscope = look_closely(models, data.x_val, data.y_val, profile.search())
            microscope["meta"] |= {
                "profile": profile.name,
                "config": profile.config(),
                "seed": seed,
            }
            atomic_write_text(microscope_path(root, profile.name), json.dumps(microscope))
        protocol = replace(profile.paired, seed=seed)
        evaluations.append(
            paper_evaluate(models, data.x_val, data.y_val, protocol, domain=(-1.0, 1.0))
        )
        print(f"Paired evaluation of run {run}/{len(seeds)} done", flush=True)
    result = {
        "format": "cfbook-paired-evaluation",
        "meta": {"profile": profile.name, "config": profile.config(), "seeds": seeds},
        "runs": evaluations,
    }
    path = paired_evaluation_path(root, profile.name)
    atomic_write_text(path, json.dumps(result, indent=1))
    print(f"Saved the paired evaluation to {display_path(path, root)}")
    return path


def microscope_path(data_dir: str | Path | None, profile_name: str) -> Path:
    """Where the paired evaluation saves its search under the microscope (run 1's models)."""
    return profile_dir(data_dir, profile_name) / "microscope.json"


def load_microscope(
    profile_name: str, *, data_dir: str | Path | None = None
) -> dict[str, Any] | None:
    """The search under the microscope of ``profile_name``, or None after saying which command
    makes it."""
    path = microscope_path(data_dir, profile_name)
    if _missing([path], profile_name, data_dir):
        return None
    result = json.loads(path.read_text(encoding="utf-8"))
    if result.get("format") != MICROSCOPE_FORMAT:
        raise ValueError(f"{path} is not a cfbook microscope file; run both training stages again")
    return result


def load_paired_evaluation(
    profile_name: str, *, data_dir: str | Path | None = None
) -> dict[str, Any] | None:
    """The paired evaluation of ``profile_name``, or None after saying which command makes it."""
    path = paired_evaluation_path(data_dir, profile_name)
    if _missing([path], profile_name, data_dir):
        return None
    result = json.loads(path.read_text(encoding="utf-8"))
    if result.get("format") != "cfbook-paired-evaluation":
        raise ValueError(f"{path} is not a cfbook paired evaluation")
    return result


def load_evaluation(path: str | Path) -> dict[str, Any]:
    """Read an evaluation file; a damaged one is an error naming the file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"evaluation not found: {path}")
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
        if result.get("format") != EVALUATION_FORMAT:
            raise ValueError("not a cfbook evaluation file")
        for key in ("summary", "robustness", "gallery", "meta"):
            if key not in result:
                raise ValueError(f"missing {key!r}")
    except (ValueError, AttributeError) as err:
        raise ValueError(f"corrupt evaluation file {path}: {err}") from err
    return result


def _missing(paths: list[Path], profile_name: str, data_dir: str | Path | None) -> bool:
    missing = [p for p in paths if not p.is_file()]
    if missing:
        command = f"python -m cfbook.pipeline --profile {profile_name} --stages-only"
        if data_dir is not None and Path(data_dir).resolve() != find_data_dir().resolve():
            command += f" --data-dir {Path(data_dir)}"
        print(
            "Missing file(s): "
            + ", ".join(display_path(p, p.parents[1]) for p in missing)
            + f"\nRun both training stages first: {command}"
        )
    return bool(missing)


def load_comparison_runs(
    profile: Profile, *, data_dir: str | Path | None = None
) -> tuple[list[TrainingLog], list[TrainingLog]] | None:
    """Every run's log of both stages of ``profile`` (CT first), or ``None`` after saying which
    command makes them."""
    paths = {
        mode: [log_path(data_dir, profile.name, mode, run) for run in range(1, profile.runs + 1)]
        for mode in TRAINING_MODES
    }
    if _missing([p for ps in paths.values() for p in ps], profile.name, data_dir):
        return None
    full, vanilla = ([load_log(p) for p in paths[mode]] for mode in TRAINING_MODES)
    return full, vanilla


def load_evaluations(
    profile_name: str, *, data_dir: str | Path | None = None
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """Both stages' evaluations of ``profile_name`` (full first), or ``None`` after saying which
    command makes them."""
    paths = [evaluation_path(data_dir, profile_name, mode) for mode in TRAINING_MODES]
    if _missing(paths, profile_name, data_dir):
        return None
    full, vanilla = (load_evaluation(p) for p in paths)
    return full, vanilla

"""The wrong edits that once passed every test, applied one at a time: each must fail a test.

Run by scripts/mutation.sh beside mutmut's random mutants. Each edit is an exact text
replacement in one file (refused if the text is gone, so that a refactor cannot make the check
pass by accident); the file is restored whatever happens.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Edit:
    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]


EDITS = (
    Edit(
        "IP against the factual class instead of the target class",
        "cfbook/evaluation/protocol.py",
        "near, sample = references[c]",
        "near, sample = references[levels_of(references, c)]",
        ("tests/test_paper_protocol.py",),
    ),
    Edit(
        "each model given its own reference draws (CT and the baseline unpaired)",
        "cfbook/evaluation/protocol.py",
        "        found[name] = (x0, cf, is_valid(model, cf, target), target, references)\n",
        "        own = [_references(members, protocol, rng) for _ in group]\n"
        "        found[name] = (x0, cf, is_valid(model, cf, target), target, own)\n",
        ("tests/test_paper_protocol.py",),
    ),
    Edit(
        "each model given its own individuals (CT and the baseline unpaired)",
        "cfbook/evaluation/protocol.py",
        "        x0 = x_test[torch.cat(rows[name]).to(x_test.device)]\n",
        "        people = [draw_individuals(predicted, levels, n, rng) for _ in group]\n"
        "        target = torch.cat([p.target.repeat(rounds) for p in people]).to(x_test.device)\n"
        "        x0 = x_test[torch.cat([draw_rows(predicted[name], p.factual.repeat(rounds), rng)"
        " for p in people]).to(x_test.device)]\n",
        ("tests/test_paper_protocol.py",),
    ),
    Edit(
        "a run's figure from the last energy weight instead of the mean over weights",
        "cfbook/evaluation/protocol.py",
        "mean_of([per_weight[name][w][k][i] for w in protocol.energy_weights])",
        "per_weight[name][protocol.energy_weights[-1]][k][i]",
        ("tests/test_paper_protocol.py",),
    ),
    Edit(
        "a biased MMD^2 (the diagonal kept)",
        "cfbook/evaluation/metrics.py",
        "term_a = (kaa.sum() - kaa.diagonal().sum()) / (n * (n - 1))",
        "term_a = kaa.mean()",
        ("tests/test_metrics.py",),
    ),
    Edit(
        "the MMD kernel's bandwidth doubled",
        "cfbook/evaluation/metrics.py",
        "k = torch.exp(-sq / (2 * bandwidth**2))",
        "k = torch.exp(-sq / (2 * (2 * bandwidth) ** 2))",
        ("tests/test_metrics.py",),
    ),
    Edit(
        "the eager step's leaving rows keep the new point, not the last one within epsilon",
        "cfbook/search/step.py",
        "copy_rows(ws.nascent, previous, ws.within > within)",
        "copy_rows(ws.nascent, point, ws.within > within)",
        ("tests/test_generators.py",),
    ),
    Edit(
        "the CPU's sparse copy writes the rows that stay instead of those that leave",
        "cfbook/search/step.py",
        "index = rows.nonzero().squeeze(1)",
        "index = (~rows).nonzero().squeeze(1)",
        ("tests/test_generators.py",),
    ),
    Edit(
        "the sync-free nascent update with its two sides swapped",
        "cfbook/search/step.py",
        "torch.where(rows[:, None], source, dest, out=dest)",
        "torch.where(rows[:, None], dest, source, out=dest)",
        ("tests/test_generators.py",),
    ),
    Edit(
        "the sync-free nascent update computed and thrown away",
        "cfbook/search/step.py",
        "torch.where(rows[:, None], source, dest, out=dest)",
        "torch.where(rows[:, None], source, dest, out=None)",
        ("tests/test_generators.py",),
    ),
    Edit(
        "the MLP direct path keeps no logits (a trailing ReLU's backward reads them)",
        "cfbook/search/pullback.py",
        "        self._inputs.append(x)\n        return x\n",
        "        self._inputs.append(None)\n        return x\n",
        ("tests/test_pullback.py",),
    ),
    Edit(
        "the MLP direct path allocating fresh buffers every iteration",
        "cfbook/search/pullback.py",
        "buffer = self._buffers.get((kind, i))",
        "buffer = None",
        ("tests/test_pullback.py",),
    ),
    Edit(
        "the NaN pass skipped where the gradient may overflow, kept where it cannot",
        "cfbook/search/step.py",
        "    if not finite:\n        grad = grad.nan_to_num_(nan=0.0)\n",
        "    if finite:\n        grad = grad.nan_to_num_(nan=0.0)\n",
        ("tests/test_pullback.py",),
    ),
    Edit(
        "a prepared step served to another thread count than it was built for",
        "cfbook/search/prepared.py",
        "        torch.get_num_threads(),\n",
        "",
        ("tests/test_prepared.py",),
    ),
    Edit(
        "'auto' ignores a prepared step (lone searches stay eager)",
        "cfbook/search/compiled.py",
        "        prepared\n        or (",
        "        False\n        or (",
        ("tests/test_prepared.py",),
    ),
    Edit(
        "a prepared step served to searches with and without per-row energy weights alike",
        "cfbook/search/prepared.py",
        "        per_row_energy,\n    )\n    return",
        "    )\n    return",
        ("tests/test_prepared.py",),
    ),
    Edit(
        "Adult's labels inverted, 1 for an income at most 50K (pass 14)",
        "cfbook/data/tabular.py",
        'int(r[-1] == ">50K")',
        'int(r[-1] != ">50K")',
        ("tests/test_tabular.py",),
    ),
    Edit(
        "a tabular loader's default split shuffled, not the file's row order (pass 14)",
        "cfbook/data/tabular.py",
        'source="CT.jl\'s balanced CSV", device=device, shuffle=shuffle)',
        'source="CT.jl\'s balanced CSV", device=device, shuffle=True)',
        ("tests/test_tabular.py",),
    ),
    Edit(
        "variants' evaluations saved before protected_lambdas existed refused on a rerun",
        "cfbook/paper/grid.py",
        '        return {**config, "variant": {**variant, "protected_lambdas": "mutability"}}\n',
        "        return config\n",
        ("tests/test_paper_grid.py",),
    ),
    Edit(
        "the synthetic sets' protected feature misnamed, a constructor mutmut cannot reach "
        "(it runs at import; pass 15)",
        "cfbook/paper/settings.py",
        'reg, ("x1",), 250, 0.0, 0.0)',
        'reg, ("X1",), 250, 0.0, 0.0)',
        ("tests/test_paper_grid.py",),
    ),
    Edit(
        "MNIST's paper split drawn at 1,000 per class, leaving no validation rows (pass 15)",
        "cfbook/paper/settings.py",
        "(e.n_train + 1000) // 10, 100)",
        "(e.n_train + 1000) // 11, 100)",
        ("tests/test_paper_grid.py",),
    ),
    Edit(
        "the evaluation chapter's plausibility claim read from every seed's rounds pooled "
        "(pass 16)",
        "cfbook/book/report.py",
        '    better, worse, missing = _tally(c["per_seed"]["ip"])\n',
        '    better, worse, missing = _tally([c["ip"]] * n)\n',
        ("tests/test_verdicts.py",),
    ),
    Edit(
        "the ablation's counts read from the first seed alone",
        "cfbook/book/figures/ablation.py",
        'if test(rows[objective]["per_seed"][measure])',
        'if test(rows[objective]["per_seed"][measure][:1])',
        ("tests/test_verdicts.py",),
    ),
    Edit(
        "a grid lock's holder sent SIGHUP, which ends it, to ask whether it lives (pass 25)",
        "cfbook/paper/files.py",
        "os.kill(pid, 0)",
        "os.kill(pid, 1)",
        ("tests/test_paper_grid.py::test_a_cell_run_by_another_live_process_is_refused",),
    ),
    Edit(
        "amp='bf16' computing in float16 (pass 25)",
        "cfbook/amp.py",
        'dtype = torch.bfloat16 if amp == "bf16" else torch.float16',
        "dtype = torch.float16",
        ("tests/test_amp.py",),
    ),
    Edit(
        "the scaling table's mean epoch after burn-in counting the last burn-in epoch (pass 26)",
        "cfbook/book/scaling.py",
        'r.epoch > log.meta["burnin_epochs"]',
        'r.epoch >= log.meta["burnin_epochs"]',
        ("tests/test_scaling_text.py",),
    ),
    Edit(
        "a knob cell's corrupt file telling the user to rerun grid cell 0 (pass 27)",
        "cfbook/paper/grid.py",
        'return knob_rerun(self.data) if self.overrides else f"--cell {self.index}"',
        'return f"--cell {self.index}"',
        ("tests/test_knobs.py",),
    ),
    Edit(
        "the two-dimensional figure data stored as float32's neighbours of its decimals (pass 27)",
        "cfbook/paper/two_d.py",
        "return _decimals(torch.round(t * 10**digits).div(10**digits).tolist(), digits)",
        "return torch.round(t * 10**digits).div(10**digits).tolist()",
        ("tests/test_two_d.py",),
    ),
)

# The factual class of a two-class individual is the other class: the first edit's helper.
HELPER = "\n\ndef levels_of(references, c):\n    return next(k for k in references if k != c)\n"


def run(edit: Edit) -> bool:
    """Apply one edit, run its tests, restore the file; True when a test failed."""
    path = ROOT / edit.path
    original = path.read_text()
    if original.count(edit.old) != 1:
        raise SystemExit(f"{edit.path}: the text of '{edit.name}' is not there once; update it")
    try:
        path.write_text(original.replace(edit.old, edit.new) + HELPER)
        tests = subprocess.run(
            [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *edit.tests],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
    finally:
        path.write_text(original)
    return tests.returncode != 0


def main() -> int:
    survived = []
    for edit in EDITS:
        killed = run(edit)
        print(f"{'killed  ' if killed else 'SURVIVED'} {edit.name}", flush=True)
        if not killed:
            survived.append(edit.name)
    print(f"{len(EDITS) - len(survived)} of {len(EDITS)} named edits fail a test")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())

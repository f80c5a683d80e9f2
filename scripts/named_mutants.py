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
        "cfbook/evaluation/measures.py",
        "implausibility(mine, run.references.near(c))",
        "implausibility(mine, run.references.near(1 - c))",
        ("tests/test_paper_protocol.py",),
    ),
    Edit(
        "each model given its own reference draws (CT and the baseline unpaired)",
        "cfbook/evaluation/protocol.py",
        "        found[name] = (x0, cf, is_valid(model, cf, target), target, references)\n",
        "        own = _references(members, protocol, rng)\n"
        "        found[name] = (x0, cf, is_valid(model, cf, target), target, own)\n",
        ("tests/test_paper_protocol.py",),
    ),
    Edit(
        "each model given its own individuals (CT and the baseline unpaired)",
        "cfbook/evaluation/protocol.py",
        "        x0 = x_test[torch.cat(rows[name]).to(x_test.device)]\n",
        "        people = draw_individuals(predicted, levels, n, rng)\n"
        "        target = people.target.repeat(rounds).to(x_test.device)\n"
        "        x0 = x_test[draw_rows(predicted[name], people.factual.repeat(rounds), rng)"
        ".to(x_test.device)]\n",
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
        "a row's nascent point taken after its step, not at the last point within epsilon",
        "cfbook/search/step.py",
        "nascent=torch.where(rows_like(state.within, x), point, state.nascent)",
        "nascent=torch.where(rows_like(state.within, x), new_point, state.nascent)",
        ("tests/test_generators.py",),
    ),
    Edit(
        "rows that reached tau go on stepping",
        "cfbook/search/step.py",
        "new_point = new = torch.where(moving, new, x)",
        "new_point = new",
        ("tests/test_generators.py",),
    ),
    Edit(
        "no NaN guard on the input gradient",
        "cfbook/search/step.py",
        "grad.nan_to_num_(nan=0.0)",
        'grad.nan_to_num_(nan=float("nan"))',
        ("tests/test_generators.py",),
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
        "amp='bf16' computing in float16 (pass 25)",
        "cfbook/amp.py",
        'dtype = torch.bfloat16 if amp == "bf16" else torch.float16',
        "dtype = torch.float16",
        ("tests/test_amp.py",),
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

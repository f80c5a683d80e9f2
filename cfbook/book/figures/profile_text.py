"""How one training profile differs from another, and why, written from the profiles themselves
so that the text of "Running the book" always agrees with its profile table."""

from __future__ import annotations

from dataclasses import fields

from cfbook.book.figures.training import _setting
from cfbook.book.profiles import GENERATORS, Profile
from cfbook.search.generators import NativeGenerator

__all__ = ["REASONS", "differing_settings", "profile_differences_text"]

#: Why a reduced profile may change a setting of the tutorial's, by the reason's topic; each
#: setting names its topic in ``TOPIC``. Only topics with a differing setting are written.
REASONS = {
    "size": "fewer images, epochs and attacked digits keep a CPU run short; several seeds show "
    "the spread",
    "search": (
        "NativeGenerator's defaults (step {native_step:g}, distance weight {native_cost:g}) leave "
        "almost every training-time counterfactual invalid on this model, and under the paper's "
        "rule an invalid one adds no energy; `calibrated` takes the paper's distance weight, "
        "{calibrated_cost:g}, and with the larger step most searches converge (the calibration "
        "in [What CT buys](what_ct_buys.ipynb))"
    ),
    "mature": (
        "`raw` (the tutorial's, CounterfactualTraining.jl's Native branch) counts a search that "
        "did not converge as it ended; `neighbour` (the paper's) replaces it by its neighbour"
    ),
    "memory": "it only splits the search into chunks to bound memory, which a CPU has to spare",
}
TITLES = {"size": "Size", "search": "Search", "mature": "`mature`", "memory": "`cf_batchsize`"}
TOPIC = {
    "model": "size",
    "n": "size",
    "nepochs": "size",
    "batch_size": "size",
    "nce": "size",
    "maxiter": "size",
    "runs": "size",
    "evaluation": "size",
    "paired": "size",
    "generator": "search",
    "step_size": "search",
    "tau": "search",
    "lambdas": "search",
    "mature": "mature",
    "cf_batchsize": "memory",
}


def differing_settings(base: Profile, other: Profile) -> list[str]:
    """The settings whose values differ between the two profiles, in ``profile_table``'s order
    (a burn-in share that only covers another number of epochs is not a difference)."""
    names = [f.name for f in fields(Profile) if f.name != "name"]
    return [n for n in names if getattr(base, n) != getattr(other, n)]


def profile_differences_text(base: Profile, other: Profile) -> str:
    """One sentence naming every setting in which ``other`` differs from ``base`` (short values
    as ``old -> new``), then one bullet per reason those settings share (``REASONS``)."""
    changed = differing_settings(base, other)
    if not changed:
        return f"`{other.name}` has every setting of `{base.name}`."
    shown = []
    for name in changed:
        old, new = _setting(base, name), _setting(other, name)
        short = max(len(old), len(new)) <= 20
        shown.append(f"`{name}` ({old} → {new})" if short else f"`{name}`")
    listed = ", ".join(shown[:-1]) + (" and " if len(shown) > 1 else "") + shown[-1]
    default = NativeGenerator()
    values = {
        "native_step": default.step_size,
        "native_cost": default.lambda_cost,
        "calibrated_cost": GENERATORS["calibrated"]["lambda_cost"],
    }
    topics = dict.fromkeys(TOPIC.get(name, "size") for name in changed)
    bullets = [f"- **{TITLES[topic]}**: {REASONS[topic].format(**values)}." for topic in topics]
    return f"`{other.name}` differs from `{base.name}` in {listed}. Why:\n\n" + "\n".join(bullets)

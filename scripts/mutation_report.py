"""Kill rates per module from mutmut's results (tests/MUTATION.md records each module's latest),
with every survivor's changed line below it, sorted into kinds.

Two kinds of survivor change nothing a test on this machine can see, and are counted apart:
``message`` mutants change only the wording of an error (``"XXtextXX"``, ``"TEXT"``), whose key
words the tests match; ``device`` mutants drop a ``device=`` (``device=None``, ``.to(None)``),
which a one-device (CPU) run cannot tell from the original. The rest are ``behaviour``: each is
either killed by a new test or classified in tests/MUTATION.md with its reason."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter, defaultdict

LINE = re.compile(r"^\s*(cfbook\.[\w.]+?)\.x\w*?__mutmut_\d+: (.+)$")
KILLED = {"killed", "timeout", "segfault"}  # a mutant that crashes or hangs is caught too
STRING = re.compile(r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'")


def _mutmut(*args: str) -> str:
    return subprocess.run(
        [sys.executable, "-m", "mutmut", *args], capture_output=True, text=True, check=True
    ).stdout


def kind(name: str) -> tuple[str, str]:
    """The kind of a survivor and its changed line."""
    diff = _mutmut("show", name).splitlines()
    old = [line[1:] for line in diff if line.startswith("-") and not line.startswith("---")]
    new = [line[1:] for line in diff if line.startswith("+") and not line.startswith("+++")]
    changed = " / ".join(line.strip() for line in new) or "(line removed)"
    if (
        old
        and new
        and [STRING.sub('""', line) for line in old] == [STRING.sub('""', line) for line in new]
    ):
        return "message", changed
    if any("device=None" in line or ".to(None" in line for line in new):
        return "device", changed
    return "behaviour", changed


def main() -> int:
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    survivors: list[tuple[str, str]] = []
    for line in _mutmut("results", "--all", "true").splitlines():
        match = LINE.match(line)
        if match:
            module, status = match.group(1), match.group(2).strip()
            counts[module][status] += 1
            if status == "survived":
                survivors.append((module, line.strip().split(":")[0]))
    kinds = {name: kind(name) for _, name in survivors}
    print(
        "| module | mutants | checked | killed | survived (message, device, behaviour) | killed "
        "| killed, message and device survivors aside |"
    )
    print("|---|---|---|---|---|---|---|")
    for module, c in sorted(counts.items()):
        checked = sum(n for s, n in c.items() if s != "not checked")
        killed = sum(n for s, n in c.items() if s in KILLED)
        mine = Counter(kinds[n][0] for m, n in survivors if m == module)
        aside = checked - mine["message"] - mine["device"]
        rate = f"{killed / checked:.1%}" if checked else "-"
        strict = f"{killed / aside:.1%}" if aside else "-"
        print(
            f"| {module} | {sum(c.values())} | {checked} | {killed} | {c['survived']} "
            f"({mine['message']}, {mine['device']}, {mine['behaviour']}) | {rate} | {strict} |"
        )
    for wanted in ("behaviour", "device", "message"):
        names = [(n, kinds[n][1]) for _, n in survivors if kinds[n][0] == wanted]
        print(f"\n{len(names)} {wanted} survivors:")
        for name, changed in names:
            print(f"- `{name.removeprefix('cfbook.')}`: `{changed[:150]}`")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Mistakes mypy must catch in user code (typing_check.sh counts them)."""

import sandboxio


def mistakes() -> None:
    with sandboxio.create("fake://") as sb:
        sb.run(42)  # not a command
        text: str = sb.read_file("/x")  # bytes, not str
        sb.tier.satisfies("container")  # an IsolationTier, not a string

"""The device names a user may write, without torch: `minitf --device X config` checks one before torch loads
(core.device, which imports torch, reads them from here)."""

from __future__ import annotations

import re

ACCEPTED_FORMS = "auto, cpu, cuda, cuda:N or mps"

# "cuda:N" is the only form with an index: CPU and MPS are one device each.
DEVICE_NAME = re.compile(r"^(auto|cpu|cuda|mps)(?::(\d+))?$")


def well_formed(name: str) -> bool:
    """Whether `name` is written as a device is (case and surrounding spaces aside); not whether it is here."""
    match = DEVICE_NAME.match(name.strip().lower()) if isinstance(name, str) else None
    return match is not None and (match.group(2) is None or match.group(1) == "cuda")

"""What the architectures share: typed reads of config.json and the one way to refuse a feature."""

from __future__ import annotations

from ..errors import CheckpointError

_MISSING = object()


class HFUnsupported(CheckpointError):
    """A model that uses something the lab's model does not compute (refused before anything is built)."""

    def __init__(self, feature: str, supported: str):
        super().__init__(f"the model uses {feature}, which the lab's model does not compute; "
                         f"it loads {supported}")


def get(hf: dict, key: str, kind: type, default=_MISSING):
    """config.json's `key` as `kind` (an int field that holds 2.0 is refused, a float field takes 1),
    `default` where it is absent or null; CheckpointError naming the field otherwise."""
    value = hf.get(key)
    if value is None:
        if default is _MISSING:
            raise CheckpointError(f"config.json has no {key}; download the model's config.json again")
        return default
    ok = (isinstance(value, bool) if kind is bool else isinstance(value, str) if kind is str
          else isinstance(value, int) and not isinstance(value, bool) if kind is int
          else isinstance(value, (int, float)) and not isinstance(value, bool))
    if not ok:
        raise CheckpointError(f"config.json's {key} is {str(value)[:40]!r}, not {kind.__name__}; "
                              "download the model's config.json again")
    return float(value) if kind is float else value

"""The names a checkpoint folder's files and folders have, as patterns: what a save writes, and where (layout.py says
what they mean; debris.py reads what saves cut short left by them). A module of its own so that both read them
without importing each other."""

from __future__ import annotations

import re

MANIFEST = "checkpoint.json"
NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}$")

# Every name a save writes carries 64 random bits (after the writer's pid, which only helps a person
# trace debris): two saves never pick the same name. Whether a file is debris is decided by the
# folder lock (a save holds it), never by the pid: two PID namespaces on one volume share pids.
DATA_FILE = re.compile(r"^(model|state)-(\d+)-([0-9a-f]+)\.safetensors$")
MANIFEST_TMP = re.compile(r"^\.checkpoint\.json\.tmp-(\d+)-([0-9a-f]+)$")
TMP_DIR = re.compile(r"^\.(.+)\.tmp-(\d+)-([0-9a-f]+)$")  # a new NAME written here, then renamed into place

"""The bytes of a checkpoint: weights and training state as safetensors, the manifest as canonical JSON.

Serialising (the model's tensors with a tied weight stored once, the optimizer's state and the
random generators, the manifest written one way only) and checking a manifest's bytes completely
(its checksum, its exact text, every field a reader will use) live here, beside each other, so
that what a save writes and what a load accepts cannot drift apart.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

from ..catalog import shows_as_text  # noqa: F401 - a manifest's paths are held to it, as :data's are
from ..errors import CheckpointError
from .layout import DATA_FILE, FORMAT_NAME, FORMAT_VERSION, MAX_SHOWN, ORIGINS, PICKLE_MAGIC, damaged

if TYPE_CHECKING:  # torch is imported by the encoders that need it: reading a manifest (:ls) needs none
    import torch

    from ..model import MiniTransformerLM


def tied_aliases(model: torch.nn.Module) -> dict[str, str]:
    """{alias: first name} for state_dict entries that are the same tensor (lm_head.weight -> token_embedding.weight)."""
    seen: dict[int, str] = {}
    aliases = {}
    for key, value in model.state_dict(keep_vars=True).items():
        if id(value) in seen:
            aliases[key] = seen[id(value)]
        else:
            seen[id(value)] = key
    return aliases


# safetensors' names of the element types a checkpoint holds (weights, moments, random generators' states)
SAFETENSORS_DTYPES = {"float32": "F32", "float64": "F64", "float16": "F16", "bfloat16": "BF16", "int64": "I64",
                      "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL"}


def safetensors_header(tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> tuple[bytes, int]:
    """The start of a safetensors file of `tensors`: its 8-byte header length and its JSON header (padded with spaces
    to 8 bytes, as safetensors pads it), and the number of bytes of the tensors that follow it in the header's order.
    A checkpoint's files (safetensors_bytes) and a Hugging Face folder's (core.hf.write_safetensors) begin so."""
    header: dict = {"__metadata__": metadata}
    offset = 0
    for name, t in tensors.items():
        size = t.numel() * t.element_size()
        header[name] = {"dtype": SAFETENSORS_DTYPES[str(t.dtype).removeprefix("torch.")], "shape": list(t.shape),
                        "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text, offset


def tensor_bytes(t: torch.Tensor) -> memoryview:
    """A tensor's bytes as they lie: little-endian, as safetensors stores them, on every machine torch runs on here."""
    import torch

    return memoryview(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy())


def safetensors_bytes(tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> bytearray:
    """`tensors` as the bytes of one safetensors file: its 8-byte header length, its JSON header (padded with spaces to
    8 bytes, as safetensors pads it), then each tensor's bytes in the header's order, copied once into the result.

    safetensors.torch.save made a bytes copy of every tensor first and then joined them: a save held twice what it
    saved, and a 6 x 384 model's :save under AdamW took 210 MiB above the process for its 123 MiB of weights and
    moments (a model at the lab's 500M parameters, some 10 GiB, at the end of a long run: its autosave)."""
    start, size = safetensors_header(tensors, metadata)
    out = bytearray(len(start) + size)
    out[:len(start)] = start
    at = len(start)
    for t in tensors.values():
        if t.numel():
            n = t.numel() * t.element_size()
            out[at:at + n] = tensor_bytes(t)
            at += n
    return out


def encode_model(model: MiniTransformerLM) -> bytearray:
    aliases = tied_aliases(model)
    tensors = {
        k: v.detach().to("cpu").contiguous()
        for k, v in model.state_dict().items()
        if k not in aliases
    }
    return safetensors_bytes(tensors, {"format": "pt"})


def encode_state(trainer) -> tuple[bytearray, list, dict]:
    import torch

    opt = trainer.optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict] = {}  # non-tensor per-parameter state (none for torch's AdamW, kept for safety)
    for index, entry in opt["state"].items():
        for key, value in entry.items():
            if isinstance(value, torch.Tensor):
                tensors[f"optim.{int(index)}.{key}"] = value.detach().to("cpu").contiguous()
            else:
                scalars.setdefault(str(int(index)), {})[key] = value
    tensors["rng.data"] = trainer.generator.get_state()
    tensors["rng.torch"] = torch.get_rng_state()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for i, state in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"rng.cuda.{i}"] = state.cpu()
    return safetensors_bytes(tensors, {"format": "pt"}), opt["param_groups"], scalars


def file_entry(fname: str, data: bytes) -> dict:
    return {"file": fname, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def encode_manifest(manifest: dict) -> bytes:
    """The one way a manifest is written; a reader insists on it byte for byte (see read_manifest)."""
    return (json.dumps(manifest, indent=1, sort_keys=True, ensure_ascii=True) + "\n").encode("ascii")


def encoded_here(raw: bytes) -> None:
    """`raw` is encode_manifest's encoding of a manifest that went through JSON once (so it parses to what it was made
    from): a reader of these bytes need not encode them again to compare."""
    _known(raw).add("text")


# What this process found true of manifests' bytes, by their SHA-256: "text" (they are encode_manifest's encoding
# of what they parse to) and "values" (their checksum and every field passed). Checking the text re-encodes the
# manifest with indentation, which runs in pure Python (a third of a second for 20,000 rows of history), and
# checking the fields reads every row: a :save, and a :train's autosave, read the same few manifests again and
# again (the autosaves a rotation moves, each twice; the checkpoint it may share files with; itself after
# writing). The same bytes pass the same checks, so each is made once. The CHECKED_KEPT most recent are kept.
_checked: dict[bytes, set[str]] = {}
CHECKED_KEPT = 256


def _known(raw: bytes) -> set[str]:
    digest = hashlib.sha256(raw).digest()
    facts = _checked.pop(digest, set())
    _checked[digest] = facts  # the most recent last
    while len(_checked) > CHECKED_KEPT:
        del _checked[next(iter(_checked))]
    return facts


def meta_sha256(manifest: dict) -> str:
    body = {k: v for k, v in manifest.items() if k != "meta_sha256"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


# Format 2 is format 1 and a mixture of one expert a token gated by the chosen expert's probability ("moe_top1_gate":
# "probability"; 1 until 6128e820, which changed the gate without a new format). A minitf of before reads past the key
# it does not know and computes those weights with the gate of 1: another model, without a word. Each release refuses
# a format above the one it reads, so such a checkpoint is written as format 2, which those releases refuse ("written by
# a newer minitf: upgrade minitf"), and every other checkpoint stays format 1, which all of them still read. So this
# reader takes 2 only with that gate in the manifest, and reads it as 1; a change of the format of every checkpoint
# goes to 3 (2 is taken). layout.FORMAT_VERSION stays the format of every other checkpoint.
GATE_FORMAT_VERSION = 2


def format_version_of(manifest: dict) -> int:
    """The format a save writes `manifest` as: GATE_FORMAT_VERSION where an older minitf would compute its weights
    with another gate (a one-expert mixture), else FORMAT_VERSION."""
    return GATE_FORMAT_VERSION if manifest.get("moe_top1_gate") is not None else FORMAT_VERSION


def parse_manifest(raw: bytes, where: Path, exact: bool = True) -> dict:
    """Check a manifest's bytes completely; `where` names it in messages. exact=False (`:ls`) checks every value
    but not the text byte for byte: re-encoding with indentation runs in pure Python, some 0.1 s for a manifest
    of 3,000 steps' history, and `:ls` reads them all; a load checks every byte."""
    if raw.startswith(PICKLE_MAGIC):
        raise damaged(f"{where} is a pickle (torch.save) file, which minitf never opens because it can run code")
    try:
        manifest = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise damaged(f"{where} is not valid JSON (truncated or corrupted)") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise damaged(f"{where} is not a minitf checkpoint manifest")
    version = manifest.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise damaged(f"{where} has no valid format_version (corrupted)")
    if version > FORMAT_VERSION and (version != GATE_FORMAT_VERSION or manifest.get("moe_top1_gate") is None):
        # past 2, both formats this one reads: "this one reads 1" of format 3 was false of a one-expert mixture's
        # format 2. A format 2 without the gate is no mixture's: of it, this one reads 1.
        reads = (f"{FORMAT_VERSION}, and {GATE_FORMAT_VERSION} for a mixture of one expert a token"
                 if version > GATE_FORMAT_VERSION else f"{FORMAT_VERSION}")
        raise CheckpointError(
            f"{where.parent.name} was written by a newer minitf (format {version}, this one reads {reads}): upgrade "
            "minitf"
        )
    # The checksum covers the values; the exact-text comparison covers what parsing forgets (a float's
    # 17th digit, say), so that any changed byte is caught.
    known = _known(raw)
    if "values" not in known and manifest.get("meta_sha256") != meta_sha256(manifest) \
            or exact and "text" not in known and raw != encode_manifest(manifest):
        raise damaged(f"{where} does not match its checksum (corrupted or edited)")
    if exact:
        known.add("text")
    if "values" not in known:
        _check_manifest_fields(manifest, where)
        known.add("values")
    return manifest


def _check_manifest_fields(m: dict, where: Path) -> None:
    def need(ok: bool, what: str) -> None:
        if not ok:
            raise damaged(f"{where}: {what}; this file was not written by minitf")

    def is_int(v) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    def is_number(v) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    huge = _too_large(m)
    need(huge is None, f"{huge}, past the largest whole number a checkpoint holds (2**63 - 1)")
    need(isinstance(m.get("model_config"), dict), "model_config is missing")
    need(isinstance(m.get("vocab"), str), "vocab is missing")
    tokenizer = m.get("tokenizer")
    need(tokenizer is None or (isinstance(tokenizer, dict) and set(tokenizer) == {"kind", "json"}
                               and tokenizer["kind"] == "bpe" and isinstance(tokenizer["json"], str)),
         "tokenizer is malformed")
    # The strings a listing or a message shows are text a terminal prints: no control characters
    # (an ESC in a foreign manifest would otherwise drive the terminal), and of a sane length.
    # A tab or a newline in the data's path was saved by releases before :data refused such a path (core.catalog.
    # unkept_path), and refused here at every load: the work could not be loaded. Neither drives a terminal, so such a
    # checkpoint loads, its data said to be unavailable where the path is read (core.data refuses it).
    spec = m.get("data_spec")
    need(isinstance(spec, str) and 0 < len(spec) <= MAX_SHOWN and shows_as_text(spec.replace("\t", " ").replace(
        "\n", " ")), "data_spec is missing or not printable text")
    weights_from = m.get("weights_from")
    need(weights_from is None or (isinstance(weights_from, str) and 0 < len(weights_from) <= MAX_SHOWN
                                  and shows_as_text(weights_from)), "weights_from is not printable text")
    parts = m.get("own_parts")  # store.save_checkpoint's loading.own_parts(model): names and shapes, in words
    need(parts is None or (isinstance(parts, list) and all(isinstance(x, str) and 0 < len(x) <= MAX_SHOWN
                                                            and shows_as_text(x) for x in parts)),
         "own_parts is not a list of printable text")
    for key in ("data_since_step", "measured_since_step"):
        since = m.get(key)
        need(since is None or (is_int(since) and since >= 0), f"{key} is not a whole number >= 0")
    gate = m.get("moe_top1_gate")
    need(gate in (None, "probability"), "moe_top1_gate is not 'probability'")  # the one value a save writes
    digest = m.get("data_sha256")
    need(digest is None or (isinstance(digest, str) and len(digest) == 64
                            and all(c in "0123456789abcdef" for c in digest)), "data_sha256 is not a SHA-256")
    for key in ("saved_at", "minitf_version", "torch_version", "python_version"):
        need(key not in m or (isinstance(m[key], str) and len(m[key]) <= 64 and m[key].isprintable()),
             f"{key} is not short printable text")
    origin = m.get("origin")
    need(origin is None or (isinstance(origin, dict) and origin.get("kind") in ORIGINS
                            and set(origin) <= {"kind", "session"}
                            and (isinstance(origin.get("session", ""), str) and len(origin.get("session", "")) <= 64)),
         "origin is malformed")
    # the process that wrote an autosave during its run (store.save_checkpoint's `writer`), whose host a message names
    writer = m.get("run_writer")
    need(writer is None or (isinstance(writer, dict) and set(writer) <= {"token", "host", "pid", "pidns", "boot",
                                                                          "since"}
                            and all(isinstance(writer.get(k, ""), str) and len(writer.get(k, "")) <= MAX_SHOWN
                                    and shows_as_text(writer.get(k, "") or " ")
                                    for k in ("token", "host", "pidns", "boot"))
                            and is_int(writer.get("pid", 0)) and is_number(writer.get("since", 0))),
         "run_writer is malformed")
    t = m.get("trainer")
    need(isinstance(t, dict), "trainer is missing")
    for key in ("step", "run_start", "run_steps"):
        need(is_int(t.get(key)) and t[key] >= 0, f"trainer.{key} is not a whole number >= 0")
    need(is_number(t.get("run_elapsed")) and t["run_elapsed"] >= 0, "trainer.run_elapsed is not a number >= 0")
    constant = t.get("run_constant_lr")
    need(constant is None or (is_number(constant) and constant > 0),
         "trainer.run_constant_lr is not a positive number")
    window = t.get("trained_window")
    need(window is None or (is_int(window) and window > 0), "trainer.trained_window is not a whole number > 0")
    mps = t.get("mps_rng")
    need(mps is None or (isinstance(mps, list) and 0 < len(mps) <= 4096 and all(is_int(b) and 0 <= b < 256
                                                                             for b in mps)),
         "trainer.mps_rng is not a list of bytes")
    need(t.get("trained_dtype") in (None, "float32", "bfloat16"), "trainer.trained_dtype is not float32 or bfloat16")
    need(t.get("trained_ns_dtype") in (None, "float32", "bfloat16"),
         "trainer.trained_ns_dtype is not float32 or bfloat16")
    spans = t.get("dtype_spans")  # [first step, dtype, Newton-Schulz dtype or null], the first steps first
    need(spans is None or (isinstance(spans, list) and len(spans) <= t["step"]
                           and all(isinstance(span, list) and len(span) == 3 and is_int(span[0])
                                   and 1 <= span[0] <= t["step"] and span[1] in ("float32", "bfloat16")
                                   and span[2] in (None, "float32", "bfloat16") for span in spans)
                           and all(a[0] < b[0] for a, b in zip(spans, spans[1:]))),
         "trainer.dtype_spans is not a list of [step, dtype, Newton-Schulz dtype] in step order")
    need(isinstance(t.get("history"), list), "trainer.history is not a list of steps")
    for i, row in enumerate(t["history"]):
        problem = _history_problem(row, t["step"])
        need(problem is None, f"trainer.history[{i}] {problem}")
    need(isinstance(t.get("train_config"), dict), "trainer.train_config is missing")
    o = m.get("optimizer")
    need(isinstance(o, dict) and isinstance(o.get("param_groups"), list)
         and all(isinstance(g, dict) and isinstance(g.get("params"), list) and all(is_int(i) for i in g["params"])
                 for g in o["param_groups"]), "optimizer.param_groups is malformed")
    need(isinstance(o.get("scalars", {}), dict), "optimizer.scalars is malformed")
    files = m.get("files")
    need(isinstance(files, dict) and set(files) == {"model", "state"}, "files must list model and state")
    for entry in files.values():
        need(isinstance(entry, dict) and isinstance(entry.get("file"), str) and bool(DATA_FILE.match(entry["file"]))
             and is_int(entry.get("size")) and isinstance(entry.get("sha256"), str), "a files entry is malformed")


LARGEST_INT = 2**63 - 1  # every whole number a save writes fits torch's int64 (a step, a seed, a size, a pid)


def _too_large(manifest: dict) -> str | None:
    """The first whole number of `manifest` outside int64, in words with where it is ("trainer.step is a whole number
    of 401 digits"); None where every one fits. JSON's integers have no bound: a step of 10**400 loaded and printed
    400 digits, and a seed of 10**30 was refused as "seed=1e+30", digits nobody wrote. Looked for once, on the
    numbers alone (a history of thousands of rows), and then the path of the one found."""
    def fits(value) -> bool:
        return not isinstance(value, int) or isinstance(value, bool) or -LARGEST_INT - 1 <= value <= LARGEST_INT

    stack: list = [manifest]
    while stack:  # JSON's types exactly (`type is`: twice as fast as isinstance here, and a bool is no int)
        value = stack.pop()
        kind = type(value)
        if kind is dict:
            stack.extend(value.values())
        elif kind is list:
            stack.extend(value)
        elif kind is int and not -LARGEST_INT - 1 <= value <= LARGEST_INT:
            break
    else:
        return None
    paths: list = [("", manifest)]
    while paths:
        at, value = paths.pop()
        if isinstance(value, dict):
            paths.extend((f"{at}.{k}" if at else str(k), v) for k, v in value.items())
        elif isinstance(value, list):
            paths.extend((f"{at}[{i}]", v) for i, v in enumerate(value))
        elif not fits(value):
            digits = len(str(abs(value)))
            where = at if at.isprintable() and len(at) <= 80 else _shown(at)  # a key may hold anything
            return f"{where} is {value if digits <= 40 else f'a whole number of {digits:,} digits'}"
    return None


# One row of the loss history (core.train.StepInfo). Every field a row can have is checked, because
# every one is read somewhere: the continuing rate is the last row's lr, `:ls` and `:load` show the
# last val_loss, the charts plot the rest. Rows of checkpoints written before aux_loss,
# compile_seconds and val_bpc existed lack them; load_checkpoint fills them in as None.
_HISTORY_COUNTS = ("step", "run_step", "run_steps")  # whole numbers >= 0
_HISTORY_NUMBERS = ("train_loss", "lr", "grad_norm", "tokens_per_second", "elapsed")  # finite numbers
_HISTORY_MAYBE = ("val_loss", "accuracy")  # a finite number, or null (not evaluated at that step)
HISTORY_LATER = ("aux_loss", "compile_seconds", "val_bpc", "train_eval_loss")  # as _HISTORY_MAYBE, may be absent
# a cross-entropy is never below 0 (a re-signed manifest's val loss of -5 was listed by :ls and shown in the toolbar)
_HISTORY_NONNEGATIVE = ("lr", "grad_norm", "tokens_per_second", "elapsed", "compile_seconds", "val_bpc", "train_loss",
                        "val_loss", "aux_loss", "accuracy", "train_eval_loss")


def _history_problem(row, last_step: int) -> str | None:
    """What is wrong with one history row (None: nothing), in words for a message."""
    def number(v) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    if not isinstance(row, dict):
        return "is not a step (a JSON object)"
    for key in _HISTORY_COUNTS:
        if not (isinstance(row.get(key), int) and not isinstance(row.get(key), bool) and row[key] >= 0):
            return f"has no whole number {key}" if key not in row else f"has a {key} that is not a whole number >= 0"
    if row["step"] > last_step:
        return f"is step {row['step']}, after the checkpoint's step {last_step}"
    for key in _HISTORY_NUMBERS:
        if key not in row:
            return f"has no {key}"
        if not number(row[key]):
            return f"has a {key} that is not a finite number ({_shown(row[key])})"
    for key in _HISTORY_MAYBE + HISTORY_LATER:
        if key not in row and key in _HISTORY_MAYBE:
            return f"has no {key}"
        if row.get(key) is not None and not number(row[key]):
            return f"has a {key} that is neither a finite number nor null ({_shown(row[key])})"
    for key in _HISTORY_NONNEGATIVE:
        if row.get(key) is not None and row[key] < 0:
            return f"has a negative {key}"
    if row.get("accuracy") is not None and row["accuracy"] > 1:  # a share of the questions
        return "has an accuracy above 1"
    known = set(_HISTORY_COUNTS + _HISTORY_NUMBERS + _HISTORY_MAYBE + HISTORY_LATER)
    for key in set(row) - known:  # a field of a newer minitf: kept only if it is a plain number or null
        if row[key] is not None and not number(row[key]):
            return f"has an unknown field {_shown(key)} that is not a number"
    return None


def _shown(value) -> str:
    """A value from a manifest, quoted for a message: short, and escaped (it may hold anything)."""
    text = ascii(value)
    return text if len(text) <= 40 else text[:37] + "..."


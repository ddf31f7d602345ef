"""The commands: small functions that act on a Session and return plain dataclasses.

Each family of commands is one module holding its result types, its commands and its renderers
(named functions, registered with render.render on their result type):

    base.py          the registry and its decorator, the completers, the default prompts
    help.py          :help, :quit
    train.py         :train, :plot (the loss chart, the summary line)
    counting.py      :ngram (counting models: the losses a training loss is measured against)
    context.py       :context (the val loss at each position of the window: how much of its context the model uses)
    mistakes.py      :mistakes (where the model is wrong: a task's wrong answers, teacher-forced and its own; a
                     text's hardest next tokens)
    checks.py        :checks (before trusting a run: the loss at init, causality, rows that never mix, backprop
                     against a measured slope, a blind baseline, one batch learned by heart)
    generate.py      :gen, :step (text from a prompt, and one step of it stage by stage)
    settings.py      :config, :set, :data
    checkpoints.py   :save, :load, :ls, :parity (and the saves other commands make)
    anatomy.py       :shapes, :params (what the model is made of and costs)
    worked.py        :qkv, :rope, :resid, :ln, :ffn, :kv (one query's attention, rotary positions, the residual
                     stream, one norm, the feed-forward's units, decoding with the KV cache: worked out by hand)
    backprop.py      :grad, :muon (backpropagation on one text: the gradient down the stream, into every part;
                     Muon's step on one matrix: the momentum, Newton-Schulz step by step, the update)
    inside.py        :attn, :lens, :score, :embed, :tok, :report (views inside the model on one input)
    why.py           :patch, :attrib, :heads (which parts carry an answer; what each head does, what copying needs)
    lab.py           :compare, :experts, :ablate (the variant lab)
    rates.py         :lrfind (the learning-rate range test: where a run's peak rate belongs)
    speed.py         :device, :quantize

A command is registered with `@command(...)` (base.py), with everything the front ends need to know
about it declared on the registration (registry.py): its options, what completes them, whether it
needs torch, whether it is REPL-only. Commands never print: progress and generated text leave
through a `Reporter`, results are returned, and their renderers draw them. A new command `:foo` is
one new module here (its result, its function, its renderer, and its `FAMILY`, the heading `:help`
lists it under) and one import line below; nothing else in the package changes (the tests want its line in
every_command_lines, tests/conftest.py, to check its --json: docs/code.md, "Adding a command").

Every command validates all of its arguments before it changes anything, so a failed command
leaves the session as it was. Errors a user can cause are `UserError`s with a one-sentence message.
No torch at module level (see session.py): the core modules that need it are imported inside the
commands that use them.
"""

# Imported for their registrations: `:help` lists the families in this order (a family a module
# imports registers first).
from . import help, train, counting, context, mistakes, checks, generate, settings, checkpoints, anatomy, worked, backprop, inside, why, lab, rates, speed  # noqa: F401
from .anatomy import KVCacheSize, ParamsResult, ShapesResult
from .base import DATA_NAMES, REGISTRY, command
from .checkpoints import LoadResult, LsResult, ParityLayer, ParityResult, SaveResult
from .generate import GenResult, StepResult, StepRow
from .help import HelpEntry, HelpResult, QuitResult
from .inside import AttnResult, LENS_AT, LensResult, LensRow, ReportResult, TokResult
from .backprop import GradResult, MuonResult
from .worked import FfnResult, FfnUnit, KvResult, KvStep, LnResult, QkvResult, ResidResult, RopeResult
from .why import AttribPart, AttribResult, PatchResult, patch_reading
from .lab import AblateResult, CompareResult, ExpertsResult
from .settings import ConfigResult, DataResult, SetResult
from .speed import DeviceResult, QuantizeResult
from .train import PlotResult, PlotSeries, TrainResult

__all__ = [
    "DATA_NAMES", "LENS_AT", "REGISTRY", "AblateResult", "AttnResult", "AttribPart", "AttribResult", "CompareResult", "ConfigResult", "DataResult",
    "DeviceResult", "ExpertsResult", "FfnResult", "FfnUnit", "GenResult", "GradResult", "HelpEntry", "HelpResult", "KVCacheSize", "KvResult", "KvStep", "LensResult", "LensRow", "LnResult",
    "LoadResult", "LsResult", "MuonResult", "ParamsResult", "ParityLayer", "ParityResult", "PatchResult", "PlotResult", "PlotSeries", "QkvResult",
    "QuantizeResult", "QuitResult", "ResidResult", "RopeResult",
    "ReportResult", "SaveResult", "SetResult", "ShapesResult", "StepResult", "StepRow", "TokResult", "TrainResult",
    "command", "patch_reading",
]

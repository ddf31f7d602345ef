"""The live state of one REPL or one shell invocation: settings, data, model, trainer, device.

Everything heavy is built on first use. `import torch` takes seconds and the prompt must not wait
for it, so this module imports only the torch-free core (config, errors) at module level; the data,
model and trainer are created the first time a command asks for them. `status()` reads what exists
and never builds anything, so the bottom toolbar works before torch has been imported.

The session changes state only through its own methods (`use_data`, `set_model_config`,
`set_train_config`, `set_gen_config`, `set_shell_config`, `move_to`, `adopt`, `rollback`, and
`keep_frames`, `keep_counters` for what views keep), each called by a command after it has validated
everything, so a failed command leaves the state as it was. The model and the trainer offer what those
methods need (`take_config`, `Trainer.set_config`); nothing here reaches into their parts.

Checkpoints live in `checkpoint_dir`, a shell setting: it starts as `--checkpoint-dir`, else `$MINITF_CHECKPOINT_DIR`,
else `./checkpoints`, and `:set checkpoint_dir=DIR` moves the session to another folder, the model kept. With
`autosave` on, every `:train` ends by saving a checkpoint.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import weakref
from dataclasses import dataclass
from pathlib import Path

from .core.catalog import data_problem, known_as
from .core.config import GenConfig, ModelConfig, Settings, TrainConfig, new_function_of, rebuilding_changes, setting
from .core.errors import DataError
from .core.paths import default_checkpoint_dir, expand
from .core.recipes import data_key, switch_recipe
from .core.sizes import check_parameter_bound, check_weights_free
from .core.threads import ThreadPolicy

AUTOSAVE_NAME = "autosave"  # never a name a user picked: an autosave cannot overwrite their checkpoint


@dataclass
class ShellConfig(Settings):
    """Settings of the shell itself (not of the model, its training or its sampling)."""

    kind = "shell"

    autosave: bool = setting(True, f"save the checkpoint {AUTOSAVE_NAME!r} at the end of every :train (and during a "
                                   "long one: save_every), and keep a trained model as a checkpoint kept-DATE before a "
                                   "setting or data rebuilds it")
    # In seconds, not steps: a step of a tiny model takes milliseconds and one of a 12 x 768 model seconds, so a count
    # of steps that saves a big run every minute saves a tiny one many times a second (each save slower than the
    # steps between). At evaluations only: the checkpoint then holds the step's val loss (:ls and :load show it), and
    # the run is stopped there as a Ctrl-C at that step leaves it. Before, a kill -9, the OOM killer or a power cut
    # during :train lost the whole run (136 of 300 steps, and no checkpoint at all); 60 leaves the default run of 600
    # steps (some 40 s on 2 cores) saving at its end alone, as before
    save_every: int = setting(60, f"seconds between the run's saves of {AUTOSAVE_NAME!r} during a :train: written at "
                                  "the first evaluation this long after the command began or its last save, as a "
                                  "run stopped there (:load autosave, then :train continues it), so a kill, the "
                                  "out-of-memory killer or a power cut loses at most about this much training (and "
                                  "eval_every steps); 0: at the run's end only", low=0, limit=10_000_000)
    # core/threads.py: the rule auto follows, and why (an oversubscribed core is tens of times slower).
    threads: int = setting(0, "CPU threads torch computes with: 0 = auto ($MINITF_THREADS if set, else the cores "
                           "this process may use, less those other programs keep busy; looked at again while "
                           "training), N = exactly N; another count sums in another order, so a run's numbers "
                           "differ from about the third decimal on, more as it goes: a fixed N, with "
                           "$MINITF_PRODUCTS set to onednn or torch for float32 products on a CPU, repeats a run "
                           "exactly",
                           low=0, limit=1024)
    # A folder that fills up or turns read-only mid-session left the REPL's user one way to keep a trained model:
    # restart minitf on another folder (after `:save hf:DIR`, which keeps the weights and loses the run). Now the
    # folder is a setting like the others. The session stores it absolute (Session.checkpoint_dir), as messages name it.
    checkpoint_dir: str = setting("checkpoints", "the folder :save, :load, :ls and autosave use, made at the first "
                                  "save; changing it keeps the model. It starts as --checkpoint-dir, else "
                                  "$MINITF_CHECKPOINT_DIR, else ./checkpoints in the folder minitf started in",
                                  folder=True, suggestions=("checkpoints",), shell_option="--checkpoint-dir")

    def check_together(self) -> None:
        if not self.checkpoint_dir.strip():
            from .core.errors import ConfigError

            raise ConfigError("checkpoint_dir is empty; give a folder, e.g. checkpoint_dir=runs")


def _identity(data) -> tuple:
    """What tells a dataset from another, as Session._same_data compares them, kept without the text itself (a text of
    200 MiB is not held for it): its description and sizes, and a hash of its text."""
    return data.info(), hash(getattr(data, "text", None))


@dataclass
class Status:
    """What the bottom toolbar shows."""

    device: str
    n_params: int | None  # None until the model is built
    step: int
    last_loss: float | None  # the training loss of the last step
    data: str
    val_loss: float | None = None  # the last evaluated validation loss (what :load, :ls and :train report)
    val_step: int | None = None  # the step it was measured at (before `step` in a run stopped between evaluations)
    val_bpc: float | None = None  # that val loss in bits per character of the val text (text data only)
    accuracy: float | None = None  # a task's accuracy at that evaluation (held-out questions answered right)
    # what every view and :gen runs on, where it is not the model the numbers above describe: the parts :ablate has
    # switched off, and whether :gen samples :quantize's int8 copy
    ablated: tuple[str, ...] = ()
    int8: bool = False


BUILD_NOTICE_PARAMETERS = 50_000_000  # a model of this many parameters takes seconds to build on a CPU: said first


def random_states() -> tuple | None:
    """torch's global random states (CPU; each CUDA device's where CUDA has started; an Apple GPU's), or None where
    torch is not imported yet: nothing has drawn from them, and a command that needs no torch must not import it.
    Nor wait for it: while the REPL's background thread imports torch, it is in sys.modules already, and `import
    torch` here waited for the import to end (:help right after the prompt took 1.25 s); None then too."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None or getattr(getattr(torch, "__spec__", None), "_initializing", False):
        return None

    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None  # never starts CUDA for this
    mps = torch.mps.get_rng_state() if torch.backends.mps.is_available() else None
    return torch.get_rng_state(), cuda, mps


def set_random_states(states: tuple | None) -> None:
    """Put back what random_states gave; None (torch was not imported then): a new generator's state (below)."""
    import torch

    if states is None:
        # torch was not imported before: the caller had drawn nothing to keep; a new generator's state (torch's default
        # seed; an import seeds the process's own from the system's randomness) leaves no trace of the session's
        torch.set_rng_state(torch.Generator().get_state())
        return
    cpu, cuda, mps = states
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)
    if mps is not None:
        torch.mps.set_rng_state(mps)


@contextlib.contextmanager
def random_kept():
    """torch's global random states as they were before the block, put back after it: the shell run from Python (a
    notebook's main([...])) builds models outside any session's command (`--load`), and a build seeds the process's
    generators (Session._new_model), which reset its caller's stream."""
    before = random_states()
    try:
        yield
    finally:
        if before is not None:  # else the caller had not imported torch: it had drawn nothing to keep
            set_random_states(before)


class Session:
    def __init__(
        self,
        model_config: ModelConfig | None = None,
        train_config: TrainConfig | None = None,
        data_spec: str = "pydoc",
        device_name: str = "auto",
        gen_config: GenConfig | None = None,
        checkpoint_dir: str | Path | None = None,
        shell_config: ShellConfig | None = None,
    ):
        self.model_config = model_config if model_config is not None else ModelConfig()
        if train_config is None:  # the data's own recipe (core.recipes), pydoc's being TrainConfig's defaults
            train_config, _ = switch_recipe(TrainConfig(), "pydoc", known_as(data_spec))
        self.train_config = train_config
        self.data_spec = data_spec
        self.device_name = device_name
        self.gen_config = gen_config if gen_config is not None else GenConfig()
        self.shell_config = shell_config if shell_config is not None else ShellConfig()
        self.threads = ThreadPolicy(self.shell_config.threads)  # applied when torch is first needed (build)
        # the argument (--checkpoint-dir), else a shell_config's own folder, else the default; absolute, as the default
        # is: config, ls and save --json gave `--checkpoint-dir ck` as typed, relative
        own = self.shell_config.checkpoint_dir if shell_config is not None else ShellConfig.checkpoint_dir
        self.checkpoint_dir = checkpoint_dir or (own if own != ShellConfig.checkpoint_dir else default_checkpoint_dir())
        self._saved_in = self.checkpoint_dir  # the folder of last_checkpoint (the folder may have changed since)
        # the folder this session began in, which the next minitf started the same way opens: a line that loads from
        # another (after :set checkpoint_dir=) must name it (repl.save_before_leaving)
        self.started_in = self.checkpoint_dir
        self._ablations = None  # core.ablation.Ablations on the model, while any part is switched off
        # Which session wrote an autosave (core.checkpoint's `origin`): a continued run replaces its own
        # autosave, never another session's. Random, so that it is unique across processes and hosts.
        self.token = secrets.token_hex(8)
        self.last_checkpoint: str | None = None  # the checkpoint this session last saved or loaded
        # (a weak reference to the trainer, its step, the manifest's meta_sha256 or None, the meta_sha256 of every save
        # or load of the model as it is, their model files' (sha256, size)) at that save or load
        self._on_disk: tuple | None = None
        # the checkpoint folder the last save found it could not use (full, read-only), until a save succeeds: :quit's
        # warning offered `:save NAME` there, the fix that had just failed (commands.shared.folder_refused)
        self.save_refused_in: Path | None = None
        self.known_saves: set[str] = set()  # the meta_sha256 of every checkpoint this session saved or loaded
        self.pages_written: dict[str, tuple] = {}  # {path: its file's identity} of every :report this session wrote
        self.last_good_lr: float | None = None  # the last peak rate a :train finished with, without diverging
        self.watch_frames: list = []  # core.watch.WatchFrame: what the last `:train watch=` saw, in order
        # The last :ngram's counters, [(n, val loss)], and a weak reference to the data they counted: a switch of
        # data or tokenizer (a new data object) leaves them behind. :plot draws them on the loss chart.
        self._counters: tuple = (None, [])
        # The training step at which the current data came in while the model stayed (a switch to data of the same
        # vocabulary); 0 when the model and its history began on it. History rows after it are this data's.
        self._data_since_step = 0
        # (what identifies it, _data_since_step) of the data in use before the last switch that kept the model: back to
        # it with no step trained between (`:data reverse:4`, then `:data sort` again), its history is the data's again
        self._data_before: tuple | None = None
        # The training step at which the model's function changed with its weights kept (causal=on/off): the losses
        # measured before are of another function, so the toolbar shows none of them (it kept a no-mask model's
        # val loss of 0.05 beside a model that, masked again, scored 2.3)
        self._measured_since_step = 0
        # (the new_function settings' values, _measured_since_step) before the last switch of the mask: switched back
        # with no step trained between, the losses before are the model's own again (as _data_before does for data)
        self._measured_before: tuple | None = None
        # A subword tokenizer (core.bpe) every text corpus is read with, or None: characters. A loaded
        # Hugging Face model brings its own; switching data keeps it, so the model keeps its embedding.
        self.tokenizer = None
        self.weights_from: str | None = None  # "hf:PATH" while the model holds weights it did not train here
        self.drawn_here = False  # the model's weights were drawn from the seed in this session (built, not loaded)
        self._data = None
        self._device = None
        self._model = None
        self._trainer = None
        # Lines a command said before any run (:set dtype=bfloat16 on a CPU that emulates it): every trainer built
        # in this session counts them as said, so the first :train does not say them again (already_said)
        self._said: set[str] = set()
        # Hears a line before a build that takes seconds (a 300M-parameter model): the running command's notice,
        # set by the front door for the command's length (dispatch.run_command); None: said to no one
        self.on_build = None
        # This session's own state of torch's global random generators (dropout's masks and a build's weights draw
        # from them), swapped in for each command (own_random). They were the process's, shared: a second Lab's
        # :params (its build seeds them) or a main([...]) between two :train moved the first session's masks, and a
        # main([...]) reset its caller's stream. None until the first command: the session starts from the
        # caller's state then, so a lone session's numbers are what they were when the generators were shared.
        self._random: tuple | None = None
        self._random_depth = 0  # own_random blocks entered and not left (a build inside a command)

    @contextlib.contextmanager
    def own_random(self):
        """Within the block, torch's global random generators are this session's own: its state is swapped in, and
        on the way out kept and the caller's put back, so that this session's stream moves only with its own draws
        and other sessions' and the caller's do not move with it. Nested blocks (a build inside a command) are one.
        Not thread-safe: a session runs one command at a time. A CUDA generator that starts within the block (the
        first command on a GPU) has no state of the caller's to put back: the caller's goes on from the session's
        (docs/code.md says so); from then on both are kept apart."""
        if self._random_depth:
            yield
            return
        caller = random_states()
        if self._random is not None:
            set_random_states(self._random)
        self._random_depth += 1
        try:
            yield
        finally:
            self._random_depth -= 1
            if (now := random_states()) is not None:  # else torch is still not imported: nothing drew
                self._random = now
                set_random_states(caller)

    # --- lazily built state ------------------------------------------------------------------------
    @property
    def data(self):
        """The current dataset, loaded from data_spec on first use (raises DataError)."""
        if self._data is None:
            # said before core.data (and torch, 1.3 s) is imported: `minitf --data missing.txt tok hi` took 1.7 s
            if (problem := data_problem(self.data_spec)) is not None:
                raise DataError(problem)
            from .core.data import load_data, reading_notice
            from .core.interrupts import cut_short

            # A large file is said before its seconds of reading, as :data says it (`minitf --data big.txt train` was
            # silent for 11 s), to the running command (on_build: dispatch.run_command sets it). Ctrl-C stops the
            # read at once, as the notice says: nothing is held yet, and the data stays unread
            if self.on_build is not None and (said := reading_notice(self.data_spec)) is not None:
                self.on_build(said)
            with cut_short():
                data = load_data(self.data_spec, self.tokenizer)
            # A file can turn out to be known data (a local copy of tiny Shakespeare): its recipe then.
            config, _ = self.recipe_switch(data)
            self._data = data
            self.model_config = self.model_config.replace(vocab_size=data.tokenizer.vocab_size)
            self.set_train_config(config)
        return self._data

    @property
    def loaded_data(self):
        """The dataset if it has been loaded, else None (never loads anything)."""
        return self._data

    @property
    def autosave(self) -> bool:
        return self.shell_config.autosave

    @property
    def checkpoint_dir(self) -> Path:
        """The folder of checkpoints now, absolute (the checkpoint_dir setting)."""
        return Path(self.shell_config.checkpoint_dir)

    @checkpoint_dir.setter
    def checkpoint_dir(self, folder: str | Path) -> None:
        self.shell_config = self.shell_config.replace(checkpoint_dir=str(expand(folder).absolute()))

    @property
    def device(self):
        """The torch.device of device_name, resolved on first use (raises DeviceError)."""
        if self._device is None:
            from .core.device import resolve_device
            from .core.errors import DeviceUnavailable
            from .syntax import cmd

            try:
                self._device = resolve_device(self.device_name)
            except DeviceUnavailable as e:  # said at every command after a start on `--device cuda`, and only the
                # first line (the start's warning) named the way out (an unknown name's message lists the names)
                raise DeviceUnavailable(f"{e}; {cmd('device', 'cpu')} uses the CPU instead") from None
        return self._device

    @property
    def has_model(self) -> bool:
        return self._model is not None

    @property
    def model(self):
        self.build()
        return self._model

    @property
    def trainer(self):
        self.build()
        return self._trainer

    @property
    def redrawable(self) -> bool:
        """A model is built, drew its weights from the seed here (not loaded, not from hf:) and has not trained: its
        weights are its seed's and nothing else, so a new seed may draw them again. Builds nothing."""
        return self._model is not None and self.drawn_here and self.untrained

    @property
    def untrained(self) -> bool:
        """The model has not trained a step here nor brought weights from elsewhere: its outputs are random."""
        return self.trainer.step == 0 and self.weights_from is None

    def checkpoint_written(self, name: str | None, meta_sha256: str | None = None,
                           model_file: dict | None = None, same_model: dict | None = None) -> None:
        """The model as it is now was saved as, or loaded from, checkpoint `name`; `meta_sha256` is that
        checkpoint's own (its manifest's), None where it is no checkpoint of checkpoint_dir (an hf: folder) or
        nothing was written here (a rank under torchrun that is not the one writing). `model_file`: its manifest's
        entry of the model file (sha256, size), and `same_model` what else it holds (reads.same_model), by which any
        checkpoint of the folder holding this model at this step is found (saved_over)."""
        self.last_checkpoint, self._saved_in = name, self.checkpoint_dir
        if meta_sha256 is not None:
            self.known_saves.add(meta_sha256)
        # every save or load of the model as it is now, not the last one only: `:train` (its autosave) then `:save m`
        # is one model in two checkpoints, and with m saved over by another session the model was said to be "in no
        # checkpoint" at :quit (and copied again at a rebuild) while the autosave held it
        same = self._trainer is not None and self.holds_state()
        earlier = self._on_disk[3] if same else frozenset()
        weights = self._on_disk[4] if same else frozenset()
        if model_file is not None and isinstance(model_file.get("sha256"), str):
            weights |= {(model_file["sha256"], model_file.get("size"), json.dumps(same_model, sort_keys=True))}
        self._on_disk = ((weakref.ref(self._trainer), self._trainer.step, meta_sha256,
                          earlier | {meta_sha256} if meta_sha256 is not None else earlier, weights)
                         if self._trainer is not None else None)

    @property
    def last_checkpoint_here(self) -> str | None:
        """last_checkpoint where it is a checkpoint of the folder in use now (`:load NAME` finds it there), else None:
        `:set checkpoint_dir=` moved the session since it was saved or loaded."""
        return self.last_checkpoint if self._saved_in == self.checkpoint_dir else None

    def holds_state(self) -> bool:
        """Whether the model is as it was at the last save or load (the same trainer, at the same step)."""
        on_disk = self._on_disk
        return (on_disk is not None and self._trainer is not None and on_disk[0]() is self._trainer
                and on_disk[1] == self._trainer.step)

    @property
    def unsaved_step(self) -> int | None:
        """The step of a model trained here past every checkpoint this session saved or loaded (its autosave
        failed, or autosave is off), or whose checkpoint is not in the folder any more (another session saved over
        it or removed it, and no other checkpoint there holds it); None when there is nothing a checkpoint lacks.
        Never builds a model."""
        trainer = self._trainer
        if trainer is None or trainer.step == 0:
            return None
        if self._on_disk is not None and self._on_disk[0]() is trainer and self._on_disk[1] == trainer.step:
            if self.saved_over is None:
                return None
        return trainer.step

    @property
    def saved_over(self) -> str | None:
        """The checkpoint the model as it is now was saved as or loaded from, when neither it nor any other
        checkpoint of its folder holds that save any more (another session wrote over it, or it was removed);
        None when one does, or when that cannot be asked (the model changed since, an hf: folder). A rotation that
        moved it (`autosave` to `autosave-1`) keeps it: it is found under its new name."""
        if not self.holds_state() or self._on_disk[2] is None:
            return None
        if self.holds_model(self.last_checkpoint):
            return None
        from .core.checkpoint.layout import NAME
        from .core.checkpoint.reads import manifest_bytes

        def folder() -> dict[str, int]:  # each checkpoint's name and its folder's inode, which a rename keeps
            try:
                with os.scandir(self._saved_in) as entries:
                    return {e.name: e.inode() for e in entries if NAME.match(e.name)}
            except OSError:
                return {}

        # the checksums looked for in each manifest's bytes, unparsed: a folder of long runs' manifests (megabytes of
        # loss history each) is read at :quit in a blink; a manifest holds another's checksum only as a copy of it
        saves = [sha.encode() for sha in self._on_disk[3]]
        names = folder()
        for _ in range(3):
            for n in names:
                manifest = manifest_bytes(self._saved_in / n) or b""
                if any(sha in manifest for sha in saves):
                    return None
            # another session's autosave rotated while the folder was read (autosave to autosave-1, read under
            # neither name): the model was said to be in no checkpoint at :quit. Read again while the folder moves.
            again = folder()
            if again == names:
                break
            names = again
        # the same weights at the same step in a checkpoint another save wrote (a load of `big`, then another
        # session's save of `other`'s model over `big`: `other` holds it): in a checkpoint still, and kept again at
        # every :load it was not (17 MB a time, a folder filled by a session that only loaded)
        from .core.checkpoint.reads import holding

        step = self._on_disk[1]
        if any(holding(self._saved_in, {"sha256": sha, "size": size}, step, like=json.loads(like)) is not None
               for sha, size, like in self._on_disk[4]):
            return None
        return self.last_checkpoint

    def holds_model(self, name: str | None) -> bool:
        """Whether checkpoint `name` of the folder is still the save or load that holds the model as it is now.
        Where this session wrote nothing to compare with (a rank under torchrun that is not the one writing), a
        checkpoint of that name counts, as rank 0's own answer does."""
        on_disk = self._on_disk
        if not (name and on_disk is not None and on_disk[0]() is self._trainer and self._trainer is not None
                and on_disk[1] == self._trainer.step):
            return False
        if on_disk[2] is None:
            return (self._saved_in / name / "checkpoint.json").is_file()
        return _meta_sha256(self._saved_in / name) == on_disk[2]

    def leave_ranks(self) -> None:
        """Under torchrun, before the process group is destroyed: the trainer lets go of its DDP wrapper."""
        if self._trainer is not None:
            self._trainer.leave_ranks()

    def build(self) -> None:
        """Create the model and its trainer if they do not exist yet (seeded with train_config.seed)."""
        if self._model is not None:
            return
        data, device = self.data, self.device  # either may raise; nothing is set before both succeed
        # :set held the settings to the lab's bound before the data was read (it reads none), with the vocabulary
        # as it stood: the data's own may be far larger (30,000 characters took a 453M-parameter model to 515M)
        check_parameter_bound(self.model_config.replace(vocab_size=data.tokenizer.vocab_size))
        if device.type == "cpu":  # weights past the memory free are refused here, not met by the out-of-memory killer
            check_weights_free(self.model_config.replace(vocab_size=data.tokenizer.vocab_size))
        if self.threads.choice is None:
            self.threads.decide()
        self._model, self._trainer = self._new_model(data, device)
        self.drawn_here = True
        self._data_since_step, self._data_before, self._measured_since_step, self._measured_before = 0, None, 0, None

    def _new_model(self, data, device, config: ModelConfig | None = None):
        """A model of `config` (default: the settings) and its trainer; the settings take `config` once both are
        built. A Ctrl-C cuts the build short (a 300M-parameter model takes many seconds on a CPU) and changes
        nothing: the model and the settings stay as they were."""
        import torch

        from .core.interrupts import cut_short
        from .core.model import MiniTransformerLM
        from .core.sizes import parameter_count
        from .core.train import Trainer

        config = (config or self.model_config).replace(vocab_size=data.tokenizer.vocab_size)
        n = parameter_count(config)
        if n >= BUILD_NOTICE_PARAMETERS and self.on_build is not None:
            self.on_build(f"building a model of {n / 1e6:,.0f}M parameters ({config.n_layers} blocks of "
                          f"d_model={config.d_model}): this takes a while; Ctrl-C stops it and keeps the model and "
                          "settings as they were")
        # Within a command (dispatch.run_command) the generators are this session's own (own_random), so the seed
        # starts this session's stream; a build outside any command (a caller's `session.trainer` in Python, who then
        # calls trainer.run() on the process's generators) seeds the process's, as it always has: swapped out there,
        # the caller's run drew from an unseeded stream and two builds with one seed trained differently. There the
        # session's own state, if a command had kept one (a Lab's settings= run :set), is dropped, and its next
        # command starts from the process's, just seeded: kept, it swapped back in an unseeded stream from before
        # the build (torch starts each process from a seed of its own), and `lab.model` read before a Lab's first
        # :train moved that run's dropout masks from process to process
        with cut_short():
            torch.manual_seed(self.train_config.seed)
            model = MiniTransformerLM(config).to(device)
            trainer = Trainer(model, data, self.train_config, device)
        if not self._random_depth:
            self._random = None
        trainer.threads = self.threads
        for line in self._said:
            trainer.already_noted(line)
        self.model_config = config
        return model, trainer

    def already_said(self, line: str) -> None:
        """Count `line` as said to this session's user: the trainer that exists, and each one built later, keeps
        its runs from saying it again (Trainer.already_noted)."""
        self._said.add(line)
        if self._trainer is not None:
            self._trainer.already_noted(line)

    def rebuild(self, config: ModelConfig | None = None) -> None:
        """Fresh weights, optimizer and history for `config` (default: the current settings), only if a model
        exists; the settings take `config` once it is built."""
        if self._model is None:
            return
        model, trainer = self._new_model(self.data, self.device, config)
        self._ablations = None  # they were hooks on the old model, which goes
        self.watch_frames = []  # and what :train watch= saw of it (:report and :plot would show it as this one's)
        self.weights_from = None
        self._model, self._trainer = model, trainer
        self.drawn_here = True
        self._data_since_step, self._data_before, self._measured_since_step, self._measured_before = 0, None, 0, None

    # --- state changes (the caller has validated the arguments) --------------------------------------
    def use_data(self, spec: str, data) -> tuple[bool, dict]:
        """Switch to an already loaded and checked dataset: (whether the model was rebuilt, recipe changes).

        A dataset with another vocabulary needs another embedding table, so the model is rebuilt;
        with the same vocabulary the model and trainer are kept and only the batches change. The
        training settings follow the new data's recipe where they still hold the old one's
        (core.recipes): {setting: (before, after)} for each that moved.
        """
        config, recipe_changes = self.recipe_switch(data)
        rebuilt = False
        if self._model is not None:
            if data.tokenizer.itos != self._data.tokenizer.itos:
                was = self._data, self.data_spec
                self._data, self.data_spec = data, spec
                try:
                    self.rebuild()
                except KeyboardInterrupt:  # a build cut short: the model stays, and the data it reads with it
                    self._data, self.data_spec = was
                    raise
                rebuilt = True
            elif self._same_data(data):  # `:data sort` again: the history and :ngram's counters are still of it
                data = self._data
            elif (self._data_before is not None and self._data_before[0] == _identity(data)
                  and self._trainer.step == self._data_since_step):  # back, nothing trained on the data between
                self._trainer.data = data
                self._data_since_step, self._data_before = self._data_before[1], None
            else:
                self._data_before = (_identity(self._data), self._data_since_step)
                self._trainer.data = data
                self._data_since_step = self._trainer.step
        self._data, self.data_spec = data, spec
        # Text read by a subword tokenizer keeps it; a task (always characters) drops it, so the tokenizer
        # setting, which reads `char` now, is what the next text is read by, as after a :load (adopt).
        self.tokenizer = data.tokenizer if data.tokenizer.kind != "char" else None
        self.model_config = self.model_config.replace(vocab_size=data.tokenizer.vocab_size)
        self.set_train_config(config)
        return rebuilt, recipe_changes

    def _same_data(self, data) -> bool:  # (_identity compares the same way, by a hash of the text)
        """Whether `data` is the data in use again: the same description, sizes and text (not a file edited since)."""
        return (self._data is not None and data.info() == self._data.info()
                and getattr(data, "text", None) == getattr(self._data, "text", None))

    def use_tokenizer(self, tokenizer, data) -> bool:
        """Read text with `tokenizer` (None: characters) from now on; `data` is the current text read by it.

        The model is rebuilt for the new vocabulary, as a switch of data to another vocabulary does."""
        rebuilt, _ = self.use_data(self.data_spec, data)
        self.tokenizer = tokenizer
        return rebuilt

    @property
    def tokenizer_setting(self) -> str:
        """The `tokenizer` setting (core.config.DataConfig) that reads as the tokenizer in use (never loads data)."""
        from .core.bpe import tokenizer_setting

        return tokenizer_setting(self._data.tokenizer if self._data is not None else self.tokenizer)

    @property
    def recipe_data(self) -> str:
        """The data whose recipe (core.recipes) the settings follow: the loaded data's name, else the spec
        (not loaded yet; a file that is a copy of tiny Shakespeare is `shakespeare` already)."""
        return data_key(self._data) if self._data is not None else known_as(self.data_spec)

    def recipe_switch(self, data) -> tuple[TrainConfig, dict]:
        """(training config, {setting: (before, after)}) after a switch to `data` (core.recipes.switch_recipe)."""
        return switch_recipe(self.train_config, self.recipe_data, data_key(data))

    def rebuild_needed(self, config: ModelConfig | None = None, data=None) -> bool:
        """Whether adopting this model config (or switching to this data) would reset the model's weights."""
        if self._model is None:
            return False
        if data is not None and self._data is not None and data.tokenizer.itos != self._data.tokenizer.itos:
            return True
        if config is not None:
            return bool(rebuilding_changes(self.model_config, config))
        return False

    def set_model_config(self, config: ModelConfig) -> bool:
        """Adopt a validated model config. True when the model was rebuilt (weights reset).

        Settings declared in_place (dropout, the attention path, the causal mask, moe_aux_weight, rope_base,
        norm_eps, experts_per_token) change no weight, nor does a value that builds the same model (n_kv_heads=0
        for none), so the model takes them as they are;
        any other change alters a weight's shape or meaning, so the model is rebuilt.
        """
        rebuild = self.rebuild_needed(config=config)
        if self._model is not None and rebuild:
            self.rebuild(config)  # the settings change once the model is built: a Ctrl-C during it leaves both
            return True
        before, self.model_config = self.model_config, config
        if self._model is None:
            return False
        was, now = new_function_of(before), new_function_of(config)
        if was != now:  # another function, the same weights (causal=on/off): the losses before are not its own
            back = self._measured_before
            if back is not None and back[0] == now and self._trainer.step == self._measured_since_step:
                self._measured_since_step, self._measured_before = back[1], None  # back, nothing trained between
            else:
                self._measured_before = (was, self._measured_since_step)
                self._measured_since_step = self._trainer.step
        # off while the model changes (the mask's ablation is a flag causal= also sets); causal=off takes the mask
        # itself, so its ablation goes (as :ablate mask is refused there) and a later causal=on puts a mask back
        active = [a for a in self.ablations if a.kind != "mask" or config.causal]
        self.set_ablations([])
        self._model.take_config(config)
        if self._sampling is not None:  # :quantize's copy samples the same function: the mask, the window go with it
            self._sampling[0].take_config(config)
        self.set_ablations(active)
        return False

    def set_train_config(self, config: TrainConfig) -> None:
        """Adopt a validated training config; the trainer (if any) follows it from its next step."""
        self.train_config = config
        if self._trainer is not None:
            self._trainer.set_config(config)

    def set_gen_config(self, config: GenConfig) -> None:
        self.gen_config = config

    def set_shell_config(self, config: ShellConfig) -> None:
        self.shell_config = config
        self.threads.set(config.threads)

    # --- ablations: parts of the model switched off by hooks, never by changing a weight ---------------
    @property
    def ablations(self) -> list:
        return list(self._ablations.active) if self._ablations is not None else []

    def set_ablations(self, ablations: list) -> None:
        """Switch exactly these parts off (core.ablation.Ablation each); [] puts the model back as it was. One that
        cannot be switched off (positions in a model without any) raises, and the parts off before stay so."""
        before = self.ablations
        try:
            self._switch_off(ablations)
        except BaseException:
            self._switch_off(before)
            raise

    def _switch_off(self, ablations: list) -> None:
        from .core.ablation import Ablations

        for held in (self._ablations, self._copy_ablations):
            if held is not None:
                held.clear()
        self._ablations = self._copy_ablations = None
        if ablations:
            self._ablations = Ablations(self.model)
            for ablation in ablations:
                self._ablations.add(ablation)
            if self.sampling_copy:  # :quantize's copy is what :gen samples: the same parts go off in it
                self._copy_ablations = Ablations(self._sampling[0])
                for ablation in ablations:
                    self._copy_ablations.add(ablation)

    def keep_frames(self, frames: list) -> None:
        """Keep what a `:train watch=` run saw (replacing an earlier run's frames), for :report and :plot."""
        self.watch_frames = list(frames)

    @property
    def data_since_step(self) -> int:
        """The step after which the current data came in: 0 unless a switch to data of the same vocabulary kept
        the model (its history before that step is of the data before)."""
        return self._data_since_step

    @property
    def measured_since_step(self) -> int:
        """The step at which the model's function changed with its weights kept (causal=on/off; 0: never): the
        losses measured before it are of another function."""
        return self._measured_since_step

    @property
    def history_on_data(self) -> list[dict]:
        """The training history's rows since the current data came in (all of them unless a switch to data of
        the same vocabulary kept the model): what the model did on this data."""
        if self._trainer is None:
            return []
        return [row for row in self._trainer.history if row["step"] > self._data_since_step]

    def keep_counters(self, data, losses: list[tuple[int, float]]) -> None:
        """Keep the val loss of each counting model (n, loss) that :ngram measured on `data`."""
        self._counters = (weakref.ref(data), list(losses))

    @property
    def counters(self) -> list[tuple[int, float]]:
        """The last :ngram's (n, val loss) on the current data; [] if none was counted on it."""
        counted_on, losses = self._counters
        return losses if counted_on is not None and counted_on() is self._data else []

    def note_good_lr(self, lr: float) -> None:
        """Remember a learning rate that trained without diverging (to suggest after a divergence)."""
        self.last_good_lr = lr

    # --- roll-back of a failed command ----------------------------------------------------------------
    def snapshot(self) -> dict:
        """Everything a failed `:train` must give back: weights, optimizer, RNG, run, settings, and :quantize's copy
        where :gen samples from one."""
        return {"trainer": self.trainer.snapshot(), "train_config": self.train_config,
                "sampling": self._sampling if self.sampling_copy else None,
                "on_disk": (self.last_checkpoint, self._saved_in, self._on_disk)}

    def rollback(self, snapshot: dict) -> None:
        self._trainer.rollback(snapshot["trainer"])
        self.set_train_config(snapshot["train_config"])
        # the checkpoint that holds the model as it is again: an autosave written during the run (save_every) recorded
        # the run's step, and a run that failed after it left the model it rolled back to "in no checkpoint" at :quit
        # though the rotation had kept it (autosave-1)
        if "on_disk" in snapshot:
            self.last_checkpoint, self._saved_in, self._on_disk = snapshot["on_disk"]
        # a diverged :train said "the model ... back where this training began", and :gen sampled the float model
        self._keep_sampling(snapshot.get("sampling"))

    def adopt(self, data_spec: str, data, model, trainer, weights_from: str | None = None,
              data_since_step: int = 0, measured_since_step: int = 0) -> None:
        """Take over a restored (data, model, trainer) set as a whole (`:load`), on the current device.

        `weights_from`: where weights trained elsewhere came from (`hf:PATH`), so that step 0 is not
        taken for an untrained model."""
        self.loaded_autosave_session = None  # the caller says whose autosave this is, where it is one (:load)
        self.set_ablations([])  # hooks on the model that goes (and on a :quantize copy of it)
        if self.threads.choice is None:  # as build() does: a loaded model is the first to need torch's threads
            self.threads.decide()
        self._data, self.data_spec = data, data_spec
        self.tokenizer = data.tokenizer if data.tokenizer.kind != "char" else None
        self._model, self._trainer = model, trainer
        # a checkpoint's history is of the data it brings, after the step a switch to it kept the model at (its
        # manifest's data_since_step, 0: all of it)
        self._data_since_step, self._data_before = data_since_step, None
        self._measured_since_step, self._measured_before = measured_since_step, None  # as saved
        self.watch_frames = []  # what :train watch= saw was of the model that goes
        self.weights_from = weights_from
        self.drawn_here = False  # a checkpoint's weights, even at step 0: its own, not a seed's to draw again
        trainer.threads = self.threads
        self.model_config = model.config
        self.train_config = trainer.config

    def move_to(self, device) -> bool:
        """Move the model and optimizer state (if built) to a resolved torch.device. True if it moved."""
        old = self._device
        if self._model is not None:
            from .core.device import move_to

            move_to(self._model, self._trainer.optimizer, device)
            self._trainer.device = device
        self._device = device
        self.device_name = str(device)
        return old is None or old != device

    # --- the toolbar -------------------------------------------------------------------------------
    def status(self) -> Status:
        """Built from what exists; never builds or imports anything."""
        device = str(self._device) if self._device is not None else self.device_name
        if self._model is None:
            return Status(device=device, n_params=None, step=0, last_loss=None, data=self.data_spec)
        # a val loss of the data before a switch that kept the model is not this data's: the toolbar names the data
        # read from the history's last rows, not by walking it: this is asked at every redraw of the toolbar
        history, since = self._trainer.history, max(self._data_since_step, self._measured_since_step)
        last = history[-1] if history and history[-1]["step"] > since else None
        at = history.last_index("val_loss") if last is not None else None
        evaluated = history[at] if at is not None and history[at]["step"] > since else None
        return Status(
            device=device,
            n_params=self._model.num_parameters(),
            step=self._trainer.step,
            last_loss=last["train_loss"] if last else None,
            data=self.data_spec,
            val_loss=evaluated["val_loss"] if evaluated else None,
            val_step=evaluated.get("step") if evaluated else None,
            val_bpc=evaluated.get("val_bpc") if evaluated else None,
            accuracy=evaluated.get("accuracy") if evaluated else None,
            ablated=tuple(str(a) for a in self.ablations),
            int8=self.sampling_copy,
        )

    # The session that wrote the autosave this model was loaded from (`:load autosave`, `--load autosave`), or None:
    # its run, continued here, replaces that autosave as its own (checkpoint.store.is_own_autosave checks the run).
    loaded_autosave_session: str | None = None

    # --- the save= of a run that a plain :train goes on with -------------------------------------------
    _run_save: tuple | None = None  # (trainer, run_start, NAME)

    def remember_run_save(self, trainer, name: str | None) -> None:
        """The checkpoint `name` the run of `trainer` now under way saves into (`:train save=NAME`); None: autosave."""
        self._run_save = (trainer, trainer.run_start, name) if name is not None else None

    def run_saved_as(self, trainer) -> str | None:
        """The save=NAME of the run `trainer` holds, where that run was started with one (and is still the same
        run, of the same trainer: a :load or a rebuild brings another); else None."""
        if self._run_save is None:
            return None
        kept, start, name = self._run_save
        return name if kept is trainer and start == trainer.run_start else None

    # --- sampling through a copy (:quantize; added by the speed work) ----------------------------------
    # (the copy, the model it was made from, that model's weights version when it was made)
    _sampling: tuple | None = None
    _copy_ablations = None  # core.ablation.Ablations on the copy: :ablate switches the same parts off in both

    def set_sampling_model(self, model) -> None:
        """Let :gen sample from `model`, a copy of the current weights (e.g. int8), or None: the model itself.

        The copy is kept only while the weights it was made from are unchanged: `sampling_model`
        drops it as soon as they change (a :train step, a :load, a rebuild, a roll-back), so no
        command has to remember to clear it.
        """
        self._sampling = None if model is None else (model, self._model, self._weights_version())

    @property
    def sampling_model(self):
        """The model :gen samples from: the copy of set_sampling_model while still current, else the model."""
        if self._sampling is not None:
            copy, source, version = self._sampling
            if source is self._model and version == self._weights_version():
                return copy
            self._sampling = None  # the weights changed: a stale copy would sample an older model
        return self.model

    @contextlib.contextmanager
    def weights_put_back(self):
        """A block that writes the weights in place and puts them back exactly (`:grad`'s trial step of the optimizer,
        rolled back even on Ctrl-C): :quantize's copy, made from those weights, stays the one :gen samples. Every
        in-place write bumps a tensor's version counter, which `sampling_model` reads as a change of the weights."""
        kept = self._sampling if self.sampling_copy else None
        try:
            yield
        finally:
            self._keep_sampling(kept)

    def _keep_sampling(self, kept: tuple | None) -> None:
        """Keep `kept`, :quantize's copy as `_sampling` held it before, as the one :gen samples: the weights are those
        it was made from again, bitwise, though written in place meanwhile (their versions moved). None: nothing."""
        if kept is not None and kept[1] is self._model:
            self._sampling = (kept[0], kept[1], self._weights_version())

    @property
    def sampling_copy(self) -> bool:
        """Whether :gen samples from a copy now (never builds anything)."""
        return self._sampling is not None and self.sampling_model is not self._model

    def _weights_version(self) -> tuple | None:
        # Every in-place change of a tensor (an optimizer step, load_state_dict) bumps its version counter.
        if self._model is None:
            return None
        return self._trainer.step, tuple(p._version for p in self._model.parameters())


def _meta_sha256(path: Path) -> str | None:
    """The meta_sha256 of the checkpoint at `path` as its manifest is now (unique to each save), None where there is
    none readable. core.checkpoint.reads is torch-free: asking costs a read of one small file."""
    from .core.checkpoint.reads import manifest_bytes

    raw = manifest_bytes(path)
    try:
        meta = json.loads(raw) if raw is not None else None
    except ValueError:
        return None
    return meta.get("meta_sha256") if isinstance(meta, dict) else None

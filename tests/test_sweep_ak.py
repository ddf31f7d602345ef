"""What a sweep of "views leave no trace" found: each test failed before its fix.

The harness below takes everything a view could leave behind for the next `:train`: every weight and buffer (bitwise),
`requires_grad` and `.grad`, each module's training flag and its hooks of every kind, the optimizer's state and
param_groups, the trainer's step, run, history and batch generator, torch's global switches and random state, the
settings, the ablations and :quantize's copy. Each view is run between two snapshots, and `:train` after it must
give the losses it gives after no view. Every view passed it on the variants (rope, gqa, swiglu, moe, untied,
rmsnorm, qk_norm, post-norm, sdpa, no mask, dropout) and with a part ablated, and `minitf --load NAME VIEW` leaves
the checkpoint's files byte for byte; those tests guard it. What failed is below.

`:quantize int8`, then `:grad`, then `:gen`: :gen sampled from the float model again, with nothing said. :grad's
trial step of the optimizer (its "step |dW|/|W|" column) is rolled back, the weights bitwise as they were, but every
write in place bumps a tensor's version, which is how the session tells that the weights moved under the int8 copy:
the copy was dropped. The session now keeps the copy across a block that puts the weights back (weights_put_back).
A `:train lr=1e9` that diverged said "the model, optimizer, run and settings are back at step 6", and they were, but
:gen sampled from the float model after it, the int8 copy dropped for the same reason: the roll-back keeps it too.

A Ctrl-C inside an interruptible view (:heads, :patch, :ablate, :grad, :context, :mistakes, :muon, :report...)
raises KeyboardInterrupt wherever the view is. One that came while a listening pass took its hooks off or put the
training flags back (:heads pressed at once did it) left hooks on the model for good, and half its modules in eval
mode; one that came while :ablate put a block's hooks on left hooks that no `:ablate off` knew of, so the block stayed
switched off for every later :train; one that came while an attention layer switched between the fused kernel and
the explicit formula left some layers on the other path. Setting up and putting back are now each done whole
(core.interrupts.held), and the Ctrl-C is raised once they are: the model is as it was, and the command says
"interrupted" as before.

A Ctrl-C during :patch (or :context, :heads: any interruptible view) that landed as one of torch's own
`with torch.no_grad():` blocks ended, in the Python of its __exit__, left gradients off for the rest of the session:
every later :train ended in "internal error: element 0 of tensors does not require grad". The front door's Ctrl-C
handler now puts back the gradient mode the command found, once it raised a Ctrl-C inside it.
The same Ctrl-C landing as an autocast block ended (the fast path's attention has one in every block, so :ngram's and
:ablate's evaluations pass through thousands) left torch one autocast level deep for good: its cache of bfloat16
copies of the weights was never emptied again, and a `dtype=bfloat16` :train after it computed every step with the
weights of its first step, silently. The handler puts autocast's level, switches and dtypes back as well.
"""

import signal
import sys

import pytest
import torch
import torch.nn as nn
from torch.utils.hooks import RemovableHandle

from minitf_repl import dispatch
from minitf_repl.commands import REGISTRY
from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.parsing import parse_line
from minitf_repl.reporter import Reporter
from minitf_repl.session import Session
from test_commands import TINY, Recorder, run

TEXT = "the cat sat on the mat. a dog ran in the fog. " * 60
HOOK_KINDS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
              "_forward_hooks_with_kwargs", "_state_dict_hooks", "_load_state_dict_pre_hooks")


@pytest.fixture
def text(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text(TEXT, encoding="utf-8")
    return str(path)


def trained(data: str, **model) -> Session:
    """A tiny model with dropout (so that the random state matters), stopped half-way through a run of 6 steps."""
    s = Session(ModelConfig(**{**TINY, "dropout": 0.2, **model}),
                TrainConfig(steps=6, batch_size=4, eval_every=3, eval_batches=2), data_spec=data, device_name="cpu")
    s.set_shell_config(s.shell_config.replace(autosave=False))
    run(s, ":train", Recorder(stop_after=3))
    return s


def tensors(value):
    """A nested state (an optimizer's state_dict) with each tensor as a comparable tuple."""
    if isinstance(value, torch.Tensor):
        return value.dtype, tuple(value.shape), value.detach().cpu().flatten().tolist()
    if isinstance(value, dict):
        return {k: tensors(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [tensors(v) for v in value]
    return value


def state_of(s: Session) -> dict:
    """Everything a view could leave behind that the next :train or view would meet."""
    model, trainer = s.model, s.trainer
    return {
        "weights": {n: (tensors(p), p.requires_grad, None if p.grad is None else tensors(p.grad))
                    for n, p in model.named_parameters()},
        "buffers": {n: tensors(b) for n, b in model.named_buffers()},
        "modules": {n: (m.training, getattr(m, "use_sdpa", None), [len(getattr(m, k)) for k in HOOK_KINDS])
                    for n, m in model.named_modules()},
        "optimizer": tensors(trainer.optimizer.state_dict()),
        "trainer": tensors((trainer.step, trainer.run_start, trainer.run_steps, trainer.history,
                            trainer.generator.get_state(), trainer.config)),
        "torch": (torch.is_grad_enabled(), torch.get_default_dtype(), torch.is_anomaly_enabled(),
                  torch.are_deterministic_algorithms_enabled(), torch.is_autocast_enabled("cpu"),
                  torch.is_inference_mode_enabled(), tensors(torch.get_rng_state())),
        "settings": (s.model_config, s.train_config, s.gen_config, s.shell_config, s.data_spec),
        "session": (s.ablations, s.sampling_copy, s.sampling_model is s.model or id(s.sampling_model)),
    }


def differences(before: dict, after: dict) -> list[str]:
    """What changed, by name: 'modules blocks.0.attn.hook_weights', 'session', ..."""
    out = []
    for part, value in before.items():
        if isinstance(value, dict) and part != "optimizer":
            out += [f"{part} {name}" for name in value.keys() | after[part].keys()
                    if value.get(name) != after[part].get(name)]
        elif value != after[part]:
            out.append(part)
    return sorted(out)


def losses_next(s: Session) -> list[float]:
    said = Recorder()
    run(s, ":train", said)  # the rest of the stopped run: its batches, its dropout masks
    return [step.train_loss for step in said.steps]


VIEWS = [":plot", ":ngram", ":context", ":mistakes", ":checks", ":gen the n=5", ":shapes the", ":params", ":qkv",
         ":resid", ":ln", ":ffn", ":kv the n=5", ":grad", ":muon", ":attn", ":step", ":lens", ":score the cat",
         ":embed", ":patch the cat vs the dog", ":attrib", ":heads", ":compare current lr=0.005 steps=2",
         ":lrfind steps=10", ":tok the", ":config"]


# --- the harness: each view between two snapshots, then :train ----------------------------------------------------
@pytest.mark.parametrize("line", VIEWS)
def test_a_view_leaves_the_session_and_the_next_train_as_they_were(text, line, tmp_path):
    untouched = losses_next(trained(text))
    s = trained(text)
    before = state_of(s)
    run(s, line)
    assert differences(before, state_of(s)) == []
    assert losses_next(s) == untouched


@pytest.mark.parametrize("model, line", [
    (dict(pos_encoding="rope", n_kv_heads=1, activation="swiglu"), ":rope"),
    (dict(pos_encoding="rope", n_kv_heads=1, activation="swiglu"), ":context length=64"),
    (dict(n_experts=3, tie_embeddings=False, norm="rmsnorm", qk_norm=True), ":experts"),
    (dict(n_experts=3, tie_embeddings=False, norm="rmsnorm", qk_norm=True), ":grad"),
    (dict(attention="sdpa", norm_placement="post", bias=False), ":attn"),
    (dict(attention="sdpa", norm_placement="post", bias=False), ":patch the cat vs the dog"),
])
def test_a_view_of_a_variant_leaves_it_as_it_was(text, model, line):
    untouched = losses_next(trained(text, **model))
    s = trained(text, **model)
    before = state_of(s)
    run(s, line)
    assert differences(before, state_of(s)) == []
    assert losses_next(s) == untouched


# --- :grad kept :quantize's copy ---------------------------------------------------------------------------------
def test_grad_leaves_gen_sampling_from_the_int8_copy_quantize_made(text):
    s = trained(text)
    run(s, ":quantize int8")
    copy = s.sampling_model
    assert copy is not s.model
    before = state_of(s)
    run(s, ":grad")  # its trial step of the optimizer is rolled back: the weights are bitwise as they were
    assert differences(before, state_of(s)) == []  # was ['session']: the copy dropped
    assert s.sampling_model is copy and run(s, ":quantize").mode == "int8"
    run(s, ":train steps=1")  # a real change of the weights still drops it
    assert s.sampling_model is s.model


# --- Ctrl-C that lands while a view sets up or puts back ---------------------------------------------------------
def ctrl_c_at(monkeypatch, owner, name: str, call: int) -> list:
    """Press Ctrl-C (SIGINT to this process) as the `call`-th call of owner.name begins, as a person's key lands
    at any moment; the front door's handler (dispatch.stop_on_signals) then raises KeyboardInterrupt there, or
    at the end of a block that must be done whole. Returns the count of calls so far."""
    original = getattr(owner, name)
    calls = []

    def pressed(*args, **kwargs):
        calls.append(1)
        if len(calls) == call:
            signal.raise_signal(signal.SIGINT)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, pressed)
    return calls


def interrupted(s: Session, line: str) -> str:
    """Run `line` as the REPL does, under its Ctrl-C handler: 'interrupted' or 'done'."""
    command, args = parse_line(line, REGISTRY)
    reporter = Reporter()
    try:
        with dispatch.stop_on_signals(reporter, command):
            dispatch.run_command(s, command, args, reporter)
    except KeyboardInterrupt:
        return "interrupted"
    return "done"


INTERRUPTIBLE = [":heads", ":patch the cat vs the dog", ":grad", ":context", ":mistakes", ":muon", ":ngram",
                 ":ablate block=0", ":ablate head=0.1"]


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to oneself")
@pytest.mark.parametrize("line", INTERRUPTIBLE)
@pytest.mark.parametrize("when", [("hook off", RemovableHandle, "remove", 1),
                                  ("hook off", RemovableHandle, "remove", 2),
                                  ("hook on", nn.Module, "register_forward_hook", 3),
                                  ("mode set", nn.Module, "train", 2)], ids=lambda w: f"{w[0]} {w[3]}")
def test_ctrl_c_while_a_view_sets_up_or_puts_back_leaves_the_model_as_it_was(text, monkeypatch, line, when):
    untouched = losses_next(trained(text))
    s = trained(text)
    before = state_of(s)
    _, owner, name, call = when
    with monkeypatch.context() as m:
        ctrl_c_at(m, owner, name, call)
        said = interrupted(s, line)
    if said == "done" and s.ablations:  # :ablate done before the key: off again, as a user would
        run(s, ":ablate off")
    assert differences(before, state_of(s)) == []
    assert losses_next(s) == untouched


def test_ctrl_c_as_heads_puts_its_hooks_back_is_still_heard_and_leaves_nothing(text, monkeypatch):
    s = trained(text)
    before = state_of(s)
    ctrl_c_at(monkeypatch, RemovableHandle, "remove", 1)
    assert interrupted(s, ":heads") == "interrupted"  # said "interrupted", as before: only when it is raised moved
    monkeypatch.undo()
    # was: hooks left on blocks.0.attn's probes, and every module but the model itself in eval mode
    assert differences(before, state_of(s)) == []


def test_ctrl_c_while_ablate_puts_a_blocks_hooks_on_leaves_no_hook_that_ablate_off_cannot_take_off(text, monkeypatch):
    s = trained(text)
    before = state_of(s)
    with monkeypatch.context() as m:
        ctrl_c_at(m, nn.Module, "register_forward_hook", 3)  # the block's first hooks are on, the rest not yet
        assert interrupted(s, ":ablate block=0") == "interrupted"
    run(s, ":ablate off")
    assert s.ablations == []
    assert differences(before, state_of(s)) == []  # was: hooks on blocks.0 and its attention, the block still off


def test_ctrl_c_while_the_attention_switches_to_the_explicit_formula_leaves_every_layer_on_the_kernel(text,
                                                                                                    monkeypatch):
    s = trained(text, attention="sdpa", n_layers=2)
    before = state_of(s)
    switched = []
    original = nn.Module.__setattr__

    def setting(module, name, value):
        if name == "use_sdpa":
            switched.append(value)
            if len(switched) == 2:  # layer 0 is on the explicit formula, layer 1 not yet
                signal.raise_signal(signal.SIGINT)
        original(module, name, value)

    with monkeypatch.context() as m:
        m.setattr(nn.Module, "__setattr__", setting)
        assert interrupted(s, ":heads") == "interrupted"
    assert [m.use_sdpa for m in (b.attn for b in s.model.blocks)] == [True, True]  # was [False, True]
    assert differences(before, state_of(s)) == []


# --- a diverged :train kept :quantize's copy as well ---------------------------------------------------------------
def test_a_diverged_train_rolled_back_leaves_gen_sampling_from_the_int8_copy(text):
    from minitf_repl.core.errors import TrainingDiverged

    s = trained(text)
    run(s, ":train")
    run(s, ":quantize int8")
    copy, before = s.sampling_model, state_of(s)
    with pytest.raises(TrainingDiverged, match="back at step 6"):
        run(s, ":train steps=30 lr=1e9 schedule=continue")
    after = state_of(s)
    assert all(after["weights"][name][0] == weight[0] for name, weight in before["weights"].items())  # bitwise
    assert after["session"] == before["session"]  # was: "back at step 6", yet :gen sampled the float model
    assert s.sampling_model is copy


# --- Ctrl-C as torch's own no_grad block ends -------------------------------------------------------------------
@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to oneself")
@pytest.mark.parametrize("line", [":patch the cat vs the dog", ":context", ":heads"])
def test_ctrl_c_as_a_views_no_grad_block_ends_leaves_gradients_on_for_the_next_train(text, monkeypatch, line):
    untouched = losses_next(trained(text))
    s = trained(text)
    original, pressed = torch.set_grad_enabled, []

    def set_grad_enabled(mode):  # what `with torch.no_grad():` calls on its way out, to turn gradients back on
        if mode and not torch.is_grad_enabled() and not pressed:
            pressed.append(mode)
            signal.raise_signal(signal.SIGINT)  # the key lands just before the mode is put back
        return original(mode)

    try:
        with monkeypatch.context() as m:
            m.setattr(torch, "set_grad_enabled", set_grad_enabled)
            assert interrupted(s, line) == "interrupted"
        assert pressed and torch.is_grad_enabled()  # was off for good
        assert losses_next(s) == untouched  # was "element 0 of tensors does not require grad" at the first step
    finally:
        torch.set_grad_enabled(True)  # for the tests after this one, had it failed


# --- Ctrl-C as torch's own autocast block ends ------------------------------------------------------------------
def autocast_level() -> int:
    """How many autocast blocks torch believes it is inside (it has no getter: one in and out again tells)."""
    level = torch.autocast_increment_nesting() - 1
    torch.autocast_decrement_nesting()
    return level


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to oneself")
@pytest.mark.parametrize("line", [":ngram", ":ablate head=0.0"])
def test_ctrl_c_as_an_autocast_block_ends_leaves_bfloat16_training_on_fresh_weights(text, monkeypatch, line):
    def bf16() -> Session:
        s = trained(text)
        run(s, ":set dtype=bfloat16")
        return s

    untouched = losses_next(bf16())
    s = bf16()
    original, pressed = torch.autocast_decrement_nesting, []

    def decrement():  # the first thing an autocast block does on its way out (the fast path's attention has one)
        if not pressed and sys._getframe(1).f_code.co_name == "__exit__":
            pressed.append(1)
            signal.raise_signal(signal.SIGINT)
        return original()

    try:
        with monkeypatch.context() as m:
            m.setattr(torch, "autocast_decrement_nesting", decrement)
            assert interrupted(s, line) == "interrupted"
        assert pressed and autocast_level() == 0  # was 1 for good
        # was: the cache of bfloat16 copies of the weights was never emptied again, and every step after the first
        # computed with the weights of that first one
        assert losses_next(s) == untouched
    finally:
        while autocast_level() > 0:  # for the tests after this one, had it failed
            torch.autocast_decrement_nesting()
        torch.clear_autocast_cache()


# --- the one-shot shell: a view of a checkpoint leaves it as it was ------------------------------------------------
def test_a_one_shot_view_of_a_checkpoint_leaves_its_files_as_they_were(text, checkpoint_dir):
    import os

    from test_cli import invoke

    s = trained(text)
    run(s, ":save mine")

    def files() -> dict:
        return {path: (path.read_bytes(), os.stat(path).st_mtime_ns) for path in sorted(checkpoint_dir.rglob("*"))
                if path.is_file()}

    before = files()
    for view in (["grad"], ["heads"], ["quantize", "int8"], ["ablate", "head=0.0"],
                 ["compare", "current lr=0.005", "--steps", "2"]):
        result = invoke("--load", "mine", *view)
        assert result.exit_code == 0, result.output
    assert files() == before

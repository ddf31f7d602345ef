"""What a user's-eye sweep of reproducibility and resumed work found: each test failed before its fix.

A learner changes one thing and compares; everything else must stay put. `:lrfind` trained its fresh model with
dropout drawing from the session's random state, so with dropout on, a `:lrfind` between two runs changed what the
next `:train` did, and two `:lrfind`s in a row read different curves. `:compare` trained its contenders in step from
one shared random stream: with dropout, a contender's numbers moved with its rivals, and `current` did not reproduce
`:train`. `:train seed=3` on a fresh session (or with data of another vocabulary) drew the new model's weights from
the old seed, though `:set seed=3` then `:train` drew them from 3; on a trained model it said nothing of the
validation batches changing with the seed. A `:set lr` while a run was stopped went unread by a constant-rate run
(it went on above the new lr) and unannounced for a cosine one (its rate jumped), and what `:set optimizer=adamw`'s
recipe moved was not counted at all; a new run over a stopped one dropped its remaining steps without a word. Two runs
of the same command gave other last digits where threads=auto moved torch's thread count mid-run, and nothing said
why. On a GPU, a rolled-back run left the GPU's generator (dropout's) where the failed run had moved it.
`:context length=` drew its longer copy's throwaway weights from the session's random state, and `:load hf:PATH`
left that state wherever the session's history had put it. A `:train seed=` refused after its checks (or whose data
switch could not keep the trained model) left the seed changed, and reseeded the trained model's batch order.
"""

import pytest
import torch

from test_commands import Recorder, run, tiny_session


def weights(session) -> dict:
    return {k: v.detach().clone() for k, v in session.model.state_dict().items()}


def same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# --- :lrfind leaves the session's random state alone ---------------------------------------------------------
def test_lrfind_with_dropout_leaves_the_random_state_and_reads_the_same_curve_twice():
    s = tiny_session()
    run(s, ":set dropout=0.2")
    run(s, ":train steps=2")
    before = torch.get_rng_state()
    first = run(s, ":lrfind steps=10")
    assert torch.equal(torch.get_rng_state(), before)  # the next :train's dropout masks are what they were
    second = run(s, ":lrfind steps=10")
    assert first.test.losses == second.test.losses


# --- :train seed= draws the weights of a model the command builds --------------------------------------------
def test_train_seed_on_a_fresh_session_draws_the_initial_weights_as_set_seed_does():
    given = tiny_session()
    run(given, ":train seed=3 steps=2")
    set_first = tiny_session()
    run(set_first, ":set seed=3")
    run(set_first, ":train steps=2")
    assert given.train_config.seed == 3
    assert same_weights(weights(given), weights(set_first))  # the weights were drawn from seed 1337 before


def test_train_seed_with_data_of_another_vocabulary_draws_the_rebuilt_models_weights_from_it(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("the cat sat on the mat. " * 40)
    given = tiny_session()
    run(given, ":train steps=2")
    run(given, f":train data={text} seed=5 steps=2")
    assert given.trainer.step == 2  # another vocabulary: a new model
    set_first = tiny_session()
    run(set_first, ":train steps=2")
    run(set_first, ":set seed=5")
    run(set_first, f":data {text}")
    run(set_first, ":train steps=2")
    assert same_weights(weights(given), weights(set_first))


# --- a setting of the schedule changed while a run is stopped -------------------------------------------------
def test_set_lr_while_a_constant_rate_run_is_stopped_is_read_and_said():
    s = tiny_session()
    run(s, ":train steps=4")
    run(s, ":train steps=10", Recorder(stop_after=3))  # a constant-rate run (schedule=continue), stopped
    said = Recorder()
    run(s, ":set lr=0.0001", said)
    assert any("goes on with the stopped run (its last 7 steps of 10) at a constant 0.0001, the lr setting" in n
               for n in said.notices)
    result = run(s, ":train")
    assert result.resumed and result.constant_lr == 0.0001
    assert [row["lr"] for row in s.trainer.history[-7:]] == [0.0001] * 7  # it went on at 0.01 before


def test_set_lr_while_a_cosine_run_is_stopped_says_what_the_next_step_trains_at():
    s = tiny_session()
    run(s, ":train steps=10", Recorder(stop_after=3))
    said = Recorder()
    run(s, ":set lr=0.001", said)
    line = next(n for n in said.notices if "stopped run" in n)
    run(s, ":train")
    assert f"its next step trains at {s.trainer.history[3]['lr']:.3g}" in line
    assert "drawn anew with the new lr" in line


def test_train_seed_on_a_trained_model_says_what_set_seed_says():
    s = tiny_session()
    run(s, ":train steps=2")
    said = Recorder()
    run(s, ":train steps=2 seed=4", said)  # the val loss moves with the other validation batches: said
    assert any("the weights are kept" in n and "the validation batches are others" in n for n in said.notices)
    said = Recorder()
    run(s, ":train steps=2 seed=4", said)  # the same seed again: nothing new
    assert not any("the weights are kept" in n for n in said.notices)


# --- a new run over a stopped one ----------------------------------------------------------------------------
def test_a_new_run_started_over_a_stopped_one_says_the_stopped_runs_steps_are_dropped():
    s = tiny_session()
    run(s, ":train steps=10", Recorder(stop_after=3))
    said = Recorder()
    result = run(s, ":train steps=4", said)
    assert not result.resumed
    assert any("the stopped run's last 7 steps of 10 are dropped: this is a new run of 4 steps" in n
               for n in said.notices)
    said = Recorder()
    run(s, ":train steps=2", said)  # the run before ended: nothing dropped, nothing said
    assert not any("dropped" in n for n in said.notices)


# --- threads=auto moving the thread count during a run ---------------------------------------------------------
def test_a_thread_count_moved_during_a_run_is_said_once_and_the_setting_says_what_it_does_to_the_numbers():
    from minitf_repl.core.config import ModelConfig, TrainConfig
    from minitf_repl.core.data import load_data
    from minitf_repl.core.model import MiniTransformerLM
    from minitf_repl.core.threads import ThreadChoice
    from minitf_repl.session import ShellConfig
    from minitf_repl.core.train import Trainer

    class Moving:  # other work started beside the run: auto's second look takes a thread away
        looks = 0

        def revisit(self):
            Moving.looks += 1
            return ThreadChoice(1, "auto", 2, 1.0) if Moving.looks == 2 else None

    data = load_data("sort")
    model = MiniTransformerLM(ModelConfig(vocab_size=data.tokenizer.vocab_size, d_model=16, n_heads=2, n_layers=1,
                                          d_ff=16, max_seq_len=16))
    trainer = Trainer(model, data, TrainConfig(steps=3, batch_size=2, eval_every=3, eval_batches=1))
    trainer.threads = Moving()
    notes = []
    summary = trainer.run(on_notice=notes.append)
    moved = [n for n in summary.notes if "thread" in n]
    assert notes == summary.notes and len(moved) == 1
    assert "third decimal" in moved[0] and "threads=" in moved[0]
    assert "third decimal" in ShellConfig.spec("threads").help


def test_set_steps_while_a_long_run_is_stopped_writes_its_length_as_every_line_does():
    s = tiny_session()
    run(s, ":train steps=2000", Recorder(stop_after=1))
    said = Recorder()
    run(s, ":set steps=5", said)
    assert any("its last 1,999 steps of 2,000" in n for n in said.notices)


# --- on a GPU, dropout draws from the GPU's own generator ------------------------------------------------------


def gpu_session(**train):
    from minitf_repl.core.config import ModelConfig, TrainConfig
    from minitf_repl.session import Session
    from test_commands import TINY

    train = {"steps": 6, "batch_size": 4, "eval_every": 3, "eval_batches": 2, **train}
    s = Session(ModelConfig(**TINY), TrainConfig(**train), data_spec="sort:4", device_name="cuda")
    run(s, ":set dropout=0.2 autosave=off")
    return s


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_diverged_run_on_a_gpu_rolls_its_random_state_back_too():
    from minitf_repl.core.errors import TrainingDiverged

    def three_and_three(between: str | None) -> dict:
        s = gpu_session()
        run(s, ":train steps=3")
        if between is not None:
            with pytest.raises(TrainingDiverged):
                run(s, between)
        run(s, ":train steps=3")
        return weights(s)

    # the failed run drew dropout masks on the GPU before its loss went non-finite: rolled back, they are undrawn
    assert same_weights(three_and_three(None), three_and_three(":train steps=30 lr=1e9 schedule=continue"))


@pytest.mark.parametrize("line", [":compare current n_layers=2 steps=3", ":lrfind steps=10", ":checks"])
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_views_that_train_their_own_models_on_a_gpu_leave_its_random_state(line):
    s = gpu_session()
    run(s, ":train steps=2")
    before = torch.cuda.get_rng_state(s.device)
    run(s, line)
    assert torch.equal(torch.cuda.get_rng_state(s.device), before)


def test_the_trainers_random_state_on_a_gpu_is_the_cpus_and_that_gpus(monkeypatch):
    """What the GPU tests above check where a GPU is, by its plumbing: a fake GPU generator is read and put back."""
    from minitf_repl.core import train

    gpu = {"state": torch.tensor([1, 2, 3], dtype=torch.uint8)}
    monkeypatch.setattr(train.torch.cuda, "get_rng_state", lambda device: gpu["state"].clone())
    monkeypatch.setattr(train.torch.cuda, "set_rng_state", lambda state, device: gpu.update(state=state.clone()))
    saved = train.random_state("cuda")
    cpu_before = torch.get_rng_state()
    torch.rand(3)
    gpu["state"] = torch.tensor([9, 9, 9], dtype=torch.uint8)
    train.set_random_state(saved, "cuda")
    assert torch.equal(torch.get_rng_state(), cpu_before) and gpu["state"].tolist() == [1, 2, 3]
    assert train.random_state("cpu")[1] is None


def test_set_optimizer_while_a_run_is_stopped_says_what_its_recipes_rate_does_to_the_run():
    s = tiny_session()
    run(s, ":train steps=10", Recorder(stop_after=3))
    said = Recorder()
    run(s, ":set optimizer=adamw", said)  # AdamW's recipe moves lr (0.01 -> 0.003) and warmup_steps: the rest moves
    line = next(n for n in said.notices if "stopped run" in n)
    assert "drawn anew with the new lr and warmup_steps" in line
    run(s, ":train")
    assert f"its next step trains at {s.trainer.history[3]['lr']:.3g}" in line


def test_train_help_says_its_seed_draws_the_weights_of_a_model_it_builds():
    from minitf_repl.commands import REGISTRY

    assert "weights of a model this command builds" in REGISTRY["train"].find_param("seed").help


# --- :compare with dropout: each contender draws its own masks ------------------------------------------------
def test_compare_with_dropout_trains_each_contender_as_train_would_whatever_the_others_are():
    def current_curve(line: str) -> list:
        s = tiny_session()
        run(s, ":set dropout=0.2")
        return [(e.step, e.val_loss) for e in run(s, line).outcomes[0].curve]

    one = current_curve(":compare current lr=0.005 steps=6")
    assert one == current_curve(":compare current n_layers=2 steps=6")  # a rival of two blocks drew more masks
    alone = tiny_session()
    run(alone, ":set dropout=0.2")
    trained = run(alone, ":train steps=6")  # a fresh model of the same settings, trained as :train trains it
    assert one[-1] == (6, trained.evals[-1]["val_loss"])


# --- :context length= builds a longer copy of the model --------------------------------------------------------
def test_context_past_the_window_leaves_the_random_state(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("the cat sat on the mat. a dog ran in the fog. " * 60)
    s = tiny_session(str(text))
    run(s, ":set pos_encoding=rope dropout=0.2")
    run(s, ":train steps=2")
    before = torch.get_rng_state()
    run(s, ":context length=64")  # a copy reading 64 positions: its throwaway initial weights drew from the session's
    assert torch.equal(torch.get_rng_state(), before)


def test_a_train_seed_refused_with_its_command_leaves_the_seed_setting():
    from minitf_repl.core.errors import UserError

    s = tiny_session()
    with pytest.raises(UserError):
        run(s, ":train seed=3 watch=attn layer=7")  # a block the model has not: refused, and nothing changes
    assert s.train_config.seed == 1337


def test_a_train_seed_with_new_data_refused_leaves_the_trained_models_batch_order(tmp_path):
    from minitf_repl.core.errors import UserError

    text = tmp_path / "text.txt"
    text.write_text("the cat sat on the mat. " * 40)
    s, t = tiny_session(), tiny_session()
    for session in (s, t):
        run(session, ":train steps=2")
    with pytest.raises(UserError):
        run(s, f":train data={text} seed=3 watch=attn layer=7")  # refused before the switch: nothing changes
    assert s.train_config.seed == 1337
    for session in (s, t):
        run(session, ":train steps=2")
    assert same_weights(weights(s), weights(t))  # the batch order went on where it was, not from seed 1337 anew


def test_a_train_seed_whose_data_switch_cannot_keep_the_trained_model_leaves_the_seed(tmp_path, monkeypatch):
    from minitf_repl.commands import shared
    from minitf_repl.core.errors import CheckpointError

    def full_disk(*args, **kwargs):
        raise CheckpointError("could not keep the trained model (no space left on the device); free some space")

    text = tmp_path / "text.txt"
    text.write_text("the cat sat on the mat. " * 40)
    s = tiny_session()
    run(s, ":train steps=2")
    monkeypatch.setattr(shared, "keep_trained_model", full_disk)
    with pytest.raises(CheckpointError):
        run(s, f":train data={text} seed=3")  # the switch fails before the rebuild: nothing changes
    assert s.train_config.seed == 1337 and s.trainer.config.seed == 1337


# --- a Hugging Face folder holds no random state ---------------------------------------------------------------
def test_loading_a_folder_starts_the_random_state_from_the_seed_whatever_came_before(tmp_path):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    from minitf_repl.core.bpe import train_bpe
    from minitf_repl.session import Session

    text = "the cat sat on the mat; a dog ran in the fog and the cat ran off. " * 20
    tokenizer = train_bpe(text, 270)
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=270, n_positions=32, n_embd=32, n_layer=1, n_head=2)
    folder = tmp_path / "gpt2"
    transformers.GPT2LMHeadModel(config).save_pretrained(folder)
    tokenizer.tokenizer.save(str(folder / "tokenizer.json"))

    states = []
    for before in ([], [":train steps=2"]):  # a fresh session, and one that trained something first
        s = Session(data_spec="sort:4", device_name="cpu")
        run(s, ":set autosave=off steps=2 batch_size=2 eval_batches=1")
        for line in before:
            run(s, line)
        run(s, f":load hf:{folder}")
        states.append(torch.get_rng_state())
    assert torch.equal(*states)  # the next :train's dropout masks are the same in both

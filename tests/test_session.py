"""The session: built lazily, seeded, torch-free until something needs torch, rebuilt only when it must."""

import subprocess
import sys

import pytest
import torch

from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.data import load_data
from minitf_repl.session import GenConfig, Session, Status

TINY = dict(n_layers=1, d_model=32, n_heads=2, d_ff=64, max_seq_len=32)


def tiny_session(data: str = "sort:4", **train) -> Session:
    train = {"steps": 6, "batch_size": 4, "eval_every": 3, "eval_batches": 2, **train}
    return Session(ModelConfig(**TINY), TrainConfig(**train), data_spec=data, device_name="cpu")


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_defaults_match_the_documented_settings():
    s = Session()
    assert (s.model_config.n_layers, s.model_config.n_heads, s.model_config.d_model) == (4, 4, 128)
    assert (s.model_config.d_ff, s.model_config.max_seq_len, s.model_config.dropout) == (512, 64, 0.0)
    assert s.model_config.attention == "explicit"
    # pydoc's recipe (core/recipes.py, bench/recipes.py)
    assert (s.train_config.steps, s.train_config.batch_size, s.train_config.lr) == (600, 16, 1e-2)
    assert (s.train_config.optimizer, s.train_config.warmup_steps) == ("muon", 10)
    assert s.train_config.eval_every == 100
    assert s.gen_config == GenConfig(n=200, temperature=0.8, top_k=None, top_p=None, gen_seed=None, cache=True)
    assert (s.data_spec, s.device_name, s.autosave) == ("pydoc", "auto", True)


def test_importing_session_and_status_before_a_model_do_not_import_torch():
    result = run_python(
        "import sys\n"
        "from minitf_repl.session import Session\n"
        "s = Session()\n"
        "st = s.status()\n"
        "assert st.n_params is None and st.step == 0 and st.last_loss is None, st\n"
        "assert st.data == 'pydoc' and st.device == 'auto', st\n"
        "assert not s.has_model\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    assert result.returncode == 0, result.stderr


def test_nothing_is_built_until_asked():
    s = tiny_session()
    assert not s.has_model and s._data is None and s._device is None
    assert s.status() == Status(device="cpu", n_params=None, step=0, last_loss=None, data="sort:4")
    s.data
    assert not s.has_model
    assert s.model_config.vocab_size == 12  # taken from the data: "+0123456789="
    s.model
    assert s.has_model and s.trainer.model is s.model


def test_status_after_training_reports_params_step_and_loss():
    s = tiny_session()
    s.trainer.run()
    status = s.status()
    assert status.n_params == s.model.num_parameters()
    assert status.step == 6
    assert status.last_loss == pytest.approx(s.trainer.history[-1]["train_loss"])
    assert status.device == "cpu" and status.data == "sort:4"


def test_building_is_seeded_by_the_training_seed():
    a, b, c = tiny_session(), tiny_session(), tiny_session(seed=7)
    wa, wb, wc = (s.model.state_dict()["blocks.0.attn.q_proj.weight"] for s in (a, b, c))
    assert torch.equal(wa, wb)
    assert not torch.equal(wa, wc)


def test_data_with_the_same_vocabulary_keeps_the_model_and_trainer():
    s = tiny_session()
    model, trainer = s.model, s.trainer
    s.trainer.run()
    data = load_data("reverse:4")
    assert s.use_data("reverse:4", data) == (False, {})  # not rebuilt; no recipe for either task
    assert s.model is model and s.trainer is trainer and trainer.data is data
    assert s.data is data and s.data_spec == "reverse:4" and s.trainer.step == 6


def test_data_with_another_vocabulary_rebuilds():
    s = tiny_session()
    s.trainer.run()
    old = s.model
    data = load_data("random:7")
    assert s.use_data("random:7", data)[0] is True
    assert s.model is not old and s.model.config.vocab_size == 7 and s.model_config.vocab_size == 7
    assert s.trainer.step == 0 and s.trainer.history == [] and s.trainer.data is data


def test_switching_data_before_a_model_only_records_it():
    s = tiny_session()
    assert s.use_data("random:7", load_data("random:7"))[0] is False
    assert not s.has_model and s.model_config.vocab_size == 7


def test_a_new_architecture_rebuilds_but_attention_and_dropout_apply_in_place():
    s = tiny_session()
    old = s.model
    weights = {k: v.clone() for k, v in old.state_dict().items()}
    x = torch.tensor([[1, 2, 3, 4, 5]])
    old.eval()
    before, _ = old(x)

    assert s.set_model_config(s.model_config.replace(attention="sdpa", dropout=0.1)) is False
    assert s.model is old and old.config.attention == "sdpa"
    assert all(m.p == 0.1 for m in old.modules() if isinstance(m, torch.nn.Dropout))
    assert all(torch.equal(weights[k], v) for k, v in old.state_dict().items())
    old.eval()
    after, _ = old(x)
    torch.testing.assert_close(after, before, atol=1e-5, rtol=1e-5)  # same weights, other kernel

    assert s.set_model_config(s.model_config.replace(d_model=64)) is True
    assert s.model is not old and s.model.config.d_model == 64


def test_setting_an_unchanged_config_rebuilds_nothing():
    s = tiny_session()
    model = s.model
    assert s.set_model_config(s.model_config.replace()) is False
    assert s.model is model


def test_train_config_changes_reach_the_trainer():
    s = tiny_session()
    trainer = s.trainer
    s.set_train_config(s.train_config.replace(lr=0.02, weight_decay=0.5, seed=3))
    assert trainer.config is s.train_config and trainer.config.lr == 0.02
    for group in trainer.optimizer.param_groups:  # matrices decay; gains and biases never do
        assert group["weight_decay"] == (0.5 if group["params"][0].dim() == 2 else 0.0)
    assert torch.equal(trainer.generator.get_state(), torch.Generator().manual_seed(3).get_state())


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_move_to_cpu_keeps_everything_on_cpu(optimizer):
    s = tiny_session(optimizer=optimizer)
    s.trainer.run()
    assert s.move_to(torch.device("cpu")) is False
    assert s.device_name == "cpu" and s.trainer.device == torch.device("cpu")
    assert all(p.device.type == "cpu" for p in s.model.parameters())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_move_to_cuda_moves_model_and_optimizer_and_training_continues(optimizer):
    s = tiny_session(optimizer=optimizer)
    s.trainer.run()
    assert s.move_to(torch.device("cuda", 0)) is True
    assert all(p.is_cuda for p in s.model.parameters())
    states = s.trainer.optimizer.state.values()
    assert states and all(v.is_cuda for st in states for k, v in st.items() if k != "step")
    s.trainer.start_run(2)
    s.trainer.run()
    assert s.status().device == "cuda:0" and s.status().step == 8
    s.move_to(torch.device("cpu"))  # and back: Muon's momentum too
    assert all(v.device.type == "cpu" for st in s.trainer.optimizer.state.values() for k, v in st.items())
    s.trainer.start_run(1)
    s.trainer.run()

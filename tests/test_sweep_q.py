"""What a sweep of the variant lab's experiment commands, tried as a user would, found wrong: each test failed
before its fix.

:report of a model without a causal mask (causal=off, or :ablate mask) said in its loss-by-position and
teacher-forcing sections that each position reads only the tokens up to it (the causal mask). :lrfind run out below
your rate said it was past where the loss turned back up, and from above your rate said where it sits on a curve
that never read it. :ablate cut a long task question before its '=', and refused `head=0.1 head=1.0` as a malformed
head (several in one line now stack). :config said a model matched no preset after rope_base without rope.
:compare drew one model twice with no word of why, and named a refused tokenizer contender twice. :gen under
:quantize int8 or :ablate said nothing of either. :set causal=on after :ablate mask and causal=off said the mask
was back while the ablation kept it off. :experts with experts_per_token = n_experts showed even shares and a
load-balancing loss of 1 as if the router had balanced them, and a skipped block's routing with no word that it
changes nothing. :params wrote 128 B as 0.1 KiB, so 'a token x 32' did not multiply to the total beside it; and
:help report left out the page's loss by position. :ablate of a model that had not trained showed a change near 0
with no word that its parts had learned nothing.
"""

import re

import pytest
import torch

from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.session import Session
from test_cli import invoke
from test_commands import run
from test_render import plain

TINY = dict(d_model=32, n_heads=2, n_layers=1, d_ff=64, max_seq_len=32)


def session_on(data="pydoc", **model) -> Session:
    return Session(ModelConfig(**{**TINY, **model}), TrainConfig(steps=2, batch_size=2, eval_every=1,
                                                                  eval_batches=2),
                   data_spec=data, device_name="cpu")


def page_text(path) -> str:
    """The page's words, its tags and drawings aside."""
    page = re.sub(r"<svg.*?</svg>|<style.*?</style>", " ", path.read_text(), flags=re.S)
    return " ".join(re.sub(r"<[^>]+>", " ", page).split())


# --- :report of a model without a causal mask ---------------------------------------------------------
@pytest.mark.parametrize("how", ["causal=off", "ablate"])
def test_the_report_of_a_model_without_a_mask_does_not_say_a_position_reads_only_the_tokens_up_to_it(how, tmp_path):
    session = session_on(causal=how != "causal=off")
    if how == "ablate":
        run(session, ":ablate mask")
    run(session, f":report {tmp_path / 'page.html'}")
    page = page_text(tmp_path / "page.html")
    assert "(the causal mask)" not in page and "each from the tokens before it" not in page
    assert "position i reads the i + 1 tokens up to it" not in page and "reading the same one token" not in page
    assert "each from the whole text, the true next token included (no causal mask now)" in page
    assert "with no causal mask every position reads the whole window, and every one but the last the token it " \
           "predicts too" in page
    masked = session_on()
    run(masked, f":report {tmp_path / 'masked.html'}")
    page = page_text(tmp_path / "masked.html")  # with the mask, the page says what it did
    assert "each from the tokens before it (the causal mask)" in page
    assert "position i reads the i + 1 tokens up to it" in page


# --- :lrfind run out below your rate ----------------------------------------------------------------------
def test_lrfind_run_out_with_the_loss_still_falling_does_not_say_your_rate_is_past_its_lowest():
    session = session_on()  # lr 0.01, above the test's last rate
    # Rates where this model's loss falls clearly, and batches of 8: at 1e-5 to 1e-3 on batches of 2 the loss moved
    # by less than its noise, and where the lowest point fell was the draw's (3.10's pydoc put it at the second rate)
    session.train_config.batch_size = 8
    result = run(session, ":lrfind low=3e-4 high=8e-3 steps=10")
    test = result.test
    assert len(test.rates) == test.steps and test.blown_at is None and test.lowest == test.rates[-1]
    shown = plain(result)
    assert "is past the lowest point" not in shown and "turned the loss back up" not in shown  # it never read one
    assert "lowest so far at 0.008" in shown
    assert "your lr 0.01 lies past the test's last rate (0.008), the loss still falling there: :lrfind low=0.0003 " \
           "high=1 steps=10 reads on past it" in shown  # the same 10 steps, on to a higher rate
    assert "lr=0.0027" not in shown  # a rate lower than the test's end was offered for a curve still falling


# --- :ablate's sample on a task of long questions ---------------------------------------------------------
@pytest.mark.parametrize("task", ["sort:8", "add:5"])
def test_ablate_asks_a_tasks_question_whole_so_its_sample_is_an_answer(task):
    session = session_on(task)
    result = run(session, ":ablate head=0.1")
    question = session.data.sample_questions("val", 1, torch.Generator().manual_seed(0))[0]
    assert result.prompt == question and result.prompt.endswith("=")  # was cut at 8 characters, before its '='
    assert len(result.sample) <= len(session.data.tokenizer.encode(question))  # stopped at the answer's end
    assert len(run(session_on(), ":ablate head=0.1").prompt) == 8  # a corpus's sample starts as before


# --- :config's preset, of settings that build the same model ------------------------------------------
def test_config_says_a_model_that_builds_as_a_preset_matches_it():
    session = session_on()  # the seed's learned positions: rope_base turns nothing
    run(session, ":set rope_base=500")
    assert run(session, ":config").preset == "seed"  # was: 'the model settings match no preset'
    assert "the architecture matches the preset seed (sizes aside)" in plain(run(session, ":config"))
    run(session, ":set preset=llama")
    run(session, ":set rope_base=500")  # a base is no part of an architecture (49th session: Llama 3's 500,000)
    assert run(session, ":config").preset == "llama"
    run(session, ":set norm=layernorm")
    assert run(session, ":config").preset is None
    odd = session_on(d_model=30, n_heads=2)  # head_dim 15: no rotary preset can be built for it
    assert run(odd, ":config").preset == "seed"


# --- :compare of contenders that build and train the same model -----------------------------------------
def test_compare_says_where_contenders_differ_only_in_settings_that_build_nothing():
    from test_commands import Recorder

    session = session_on()  # learned positions and n_kv_heads none (= n_heads 2)
    hooks = Recorder()
    result = run(session, ":compare current rope_base=500 n_kv_heads=2 pos_encoding=rope steps=2", hooks)
    curves = [[e.val_loss for e in o.curve] for o in result.outcomes]
    assert curves[0] == curves[1] == curves[2] != curves[3]  # one model three times: one curve, with no word of why
    said = [n for n in hooks.notices if "the very model" in n]
    assert said == ["rope_base=500 builds and trains the very model current does: rope_base changes nothing in "
                    "it, so their curves are one",
                    "n_kv_heads=2 builds and trains the very model current does: n_kv_heads changes nothing in "
                    "it, so their curves are one"]
    from minitf_repl.core.errors import UserError

    with pytest.raises(UserError, match="given twice"):  # typed alike: refused before it trains (test_sweep_as)
        run(session, ":compare current current steps=1")


# --- :gen under :quantize int8 and :ablate ------------------------------------------------------------------
def test_gen_says_it_samples_the_int8_copy_and_the_ablated_model():
    from minitf_repl.commands import REGISTRY
    from minitf_repl.dispatch import json_document

    session = session_on()
    plain_gen = run(session, ":gen n=3")
    assert "int8" not in plain(plain_gen) and "switched off" not in plain(plain_gen)
    run(session, ":quantize int8")
    result = run(session, ":gen n=3")  # said nothing of the copy, as :step and :kv do
    assert result.int8 and "the int8 copy (:quantize off goes back to the float model)" in plain(result)
    run(session, ":ablate head=0.1")
    result = run(session, ":gen n=3")  # said nothing of the part switched off
    assert result.ablations == ["head 0.1"] and "switched off now: head 0.1 (:ablate off puts the model back)" \
        in plain(result)
    document = json_document(REGISTRY["gen"], result)
    assert document["schema"].startswith("minitf.gen/") and document["int8"] is True
    assert document["ablations"] == ["head 0.1"]


# --- :ablate mask, then causal=off and on ----------------------------------------------------------------------
def test_causal_on_after_off_puts_the_mask_back_where_ablate_had_taken_it():
    session = session_on()
    run(session, ":ablate mask")
    run(session, ":set causal=off")  # the setting takes the mask itself: the ablation has nothing left to switch off
    assert session.ablations == [] and "nothing switched off" in plain(run(session, ":ablate"))
    shown = plain(run(session, ":set causal=on"))
    assert "the mask is back" in shown and session.model.causal  # was: said so, and the model read the future
    run(session, ":ablate head=0.1")
    run(session, ":set causal=off")
    assert [str(a) for a in session.ablations] == ["head 0.1"]  # other parts stay off


# --- :compare's refusal of a contender names it once -------------------------------------------------------------
def test_compare_names_a_refused_contender_once():
    from minitf_repl.core.errors import UserError

    with pytest.raises(UserError) as refused:
        run(session_on(), ":compare current tokenizer=bpe:200 steps=1")
    assert str(refused.value).startswith("contender tokenizer=bpe:200: a byte-level BPE has at least 257 tokens")


def test_lrfind_from_above_your_rate_does_not_say_where_it_sits_on_a_curve_that_never_read_it():
    result = run(session_on(), ":lrfind low=0.5 high=1 steps=10")  # lr 0.01: below the test's first rate
    assert result.test.rates[0] == 0.5 > result.lr
    shown = plain(result)
    assert "sits between where the loss falls fastest and where it is lowest" not in shown  # it read no such rate
    assert "your lr 0.01 lies below the test's first rate (0.5): :lrfind low=1e-05 steps=10 reads from below it" \
        in shown


# --- :ablate of several parts at once ------------------------------------------------------------------------------
def test_ablate_takes_several_parts_in_one_line_as_they_stack():
    from minitf_repl.core.errors import UserError

    session = session_on(n_layers=2)
    result = run(session, ":ablate head=0.1 head=1.0")  # was: "head takes LAYER.HEAD ...; got '0.1 head=1.0'"
    assert result.active == ["head 0.1", "head 1.0"]
    assert run(session, ":ablate mask,block=1").active == ["head 0.1", "head 1.0", "the causal mask", "block 1"]
    # `off PART` puts that part back (a fifty-third session; it was refused, "off puts back every part on its own")
    assert run(session, ":ablate off head=0.1").active == ["head 1.0", "the causal mask", "block 1"]
    run(session, ":ablate head=0.1")
    with pytest.raises(UserError, match=r"block of head=L\.H must be in 0\.\.1"):  # a line refused switches nothing off
        run(session, ":ablate head=0.0 head=5.0")
    assert len(session.ablations) == 4


# --- :experts where every token goes to every expert -----------------------------------------------------------
def test_experts_says_the_shares_are_even_by_construction_when_each_token_takes_every_expert():
    result = run(session_on(n_experts=4, experts_per_token=4), ":experts")
    shown = plain(result)
    assert "load-balancing loss 1.000" in shown  # read alone, a router that balanced perfectly
    assert "every token goes to all 4 experts (experts_per_token = n_experts): the shares are even and the " \
           "load-balancing loss 1 whatever the router learns; only the gates weigh the experts" in shown
    assert "every token goes to all" not in plain(run(session_on(n_experts=4, experts_per_token=2), ":experts"))


# --- :experts of a block :ablate skips -----------------------------------------------------------------------------
def test_experts_says_a_skipped_blocks_routing_changes_nothing():
    from minitf_repl.commands import REGISTRY
    from minitf_repl.dispatch import json_document

    session = session_on(n_experts=4, n_layers=2)
    run(session, ":ablate block=1")
    result = run(session, ":experts")  # block 1's routing was shown as any other's, its load in the aux loss
    assert result.skipped == [1]
    # (a fifty-third session: what the column is, the router's reading of the block's input without its attention)
    assert "block 1 is skipped (:ablate block=1): its experts write nothing now, and its column is where its router " \
           "would send a stream without the block's own attention, not its routing in the whole model" \
        in " ".join(plain(result).split())
    assert json_document(REGISTRY["experts"], result)["schema"] == "minitf.experts/5"
    run(session, ":ablate off")
    assert "is skipped" not in plain(run(session, ":experts"))


# --- :params's sizes under a KiB -------------------------------------------------------------------------------------
def test_params_shows_a_size_under_a_kib_in_bytes_so_its_product_checks_out():
    shown = plain(run(session_on(n_kv_heads=1), ":params"))  # 2 x 1 layer x 1 head x 16 numbers x 4 bytes = 128 B
    assert "4.0 KiB 128 B a token x 32: K and V of 1 key/value head per layer" in shown  # was '0.1 KiB a token x 32'


# --- :help report -----------------------------------------------------------------------------------------------------
def test_help_report_names_every_section_the_page_has(tmp_path):
    from minitf_repl.commands import REGISTRY

    result = run(session_on(), f":report {tmp_path / 'page.html'}")
    summary = REGISTRY["report"].summary
    assert all(section in summary for section in result.sections)  # 'loss by position' was left out


# --- :ablate of a model that has not trained --------------------------------------------------------------------------
def test_ablate_of_an_untrained_model_says_its_parts_have_learned_nothing_to_switch_off(tmp_path):
    from minitf_repl.commands import REGISTRY
    from minitf_repl.dispatch import json_document

    session = session_on()
    session.checkpoint_dir = tmp_path
    result = run(session, ":ablate head=0.1")  # a change near 0 read as 'this head does nothing'
    assert result.untrained
    assert "this model has not trained yet: its parts have learned nothing to switch off; :ablate off, :train, " \
           "then switch them off again" in plain(result)  # :train refuses while parts are off
    assert json_document(REGISTRY["ablate"], result)["schema"] == "minitf.ablate/4"
    run(session, ":ablate off")
    run(session, ":train steps=1")
    assert "has not trained" not in plain(run(session, ":ablate head=0.1"))
    one_shot = invoke("--set", "n_layers=1", "--set", "d_model=32", "--set", "n_heads=2", "--set", "d_ff=64",
                      "--checkpoint-dir", str(tmp_path), "ablate", "head=0.1")
    assert one_shot.exit_code == 0 and "its parts have learned nothing to switch off; minitf --checkpoint-dir " \
        f"{tmp_path} --set n_layers=1 --set d_model=32 --set n_heads=2 --set d_ff=64 train first, then minitf " \
        f"--checkpoint-dir {tmp_path} --load autosave ablate WHAT" in " ".join(one_shot.stdout.split())

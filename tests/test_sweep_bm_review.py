"""A review of the session's changes: unpack lines for any name, notes of rows not shown, cluster rules, 6N's N."""

import bz2
import gzip
import inspect
import lzma
import math
import re
import shutil
import subprocess
import zipfile
from types import SimpleNamespace

import pytest

from test_commands import run, tiny_session
from test_render import plain, text_of

from minitf_repl.commands.inside import AttnResult, ScoreResult, code_points_note
from minitf_repl.commands.why import ATTRIB_ROWS, AttribPart, AttribResult
from minitf_repl.core.config import MAX_BPE_TOKENS, MIN_BPE_TOKENS
from minitf_repl.core.data import TextCorpus, load_data
from minitf_repl.core.errors import DataError
from minitf_repl.palette import clusters
from minitf_repl.render import fmt
from minitf_repl.render.heatmap import column_width, heads_note, heatmap


def _causal(T):
    return [[1.0 if j <= i else 0.0 for j in range(T)] for i in range(T)]


# --- 1. a packed file: a line that unpacks it whatever its name -----------------------------------------------------
def _zipped(text: bytes) -> bytes:
    import io

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr("inside.txt", text)
    return buffer.getvalue()


PACKERS = {"gzip": gzip.compress, "bzip2": bz2.compress, "xz": lzma.compress, "zip": _zipped}


@pytest.mark.parametrize("kind", list(PACKERS))
@pytest.mark.parametrize("name, out", [("packed.txt", "packed-unpacked.txt"), ("my data", "my data.txt")])
def test_a_packed_file_named_without_its_suffix_gets_a_line_that_unpacks_it(tmp_path, kind, name, out):
    """`gunzip -k packed.txt` answered "unknown suffix -- ignored" (unxz and unzstd so too), bunzip2 wrote .out."""
    text = b"hello world\n" * 100
    path = tmp_path / name
    path.write_bytes(PACKERS[kind](text))
    with pytest.raises(DataError, match=f"is {kind}-compressed") as caught:
        load_data(str(path))
    line = str(caught.value).split("give the text inside: ", 1)[1]
    assert line.endswith(f" > '{tmp_path / out}'" if " " in out else f" > {tmp_path / out}"), line
    tool = line.split()[0]
    if shutil.which(tool) is None:
        pytest.skip(f"no {tool} here to run the line")
    subprocess.run(line, shell=True, check=True, cwd=tmp_path, capture_output=True)  # as pasted, spaces quoted
    assert (tmp_path / out).read_bytes() == text and path.exists()  # the packed file left as it is


def test_a_packed_file_with_its_suffix_unpacks_beside_it_and_never_over_a_file_there(tmp_path):
    path = tmp_path / "text.txt.gz"
    path.write_bytes(gzip.compress(b"hello world\n" * 100))
    with pytest.raises(DataError, match=re.escape(f"gzip -dc {path} > {tmp_path / 'text.txt'}")):
        load_data(str(path))
    (tmp_path / "text.txt").write_text("mine")  # `>` would write over it without a word
    with pytest.raises(DataError, match=re.escape(f"gzip -dc {path} > {tmp_path / 'text-unpacked.txt'}")):
        load_data(str(path))


@pytest.mark.skipif(shutil.which("zstd") is None, reason="no zstd here to pack with")
def test_a_zstd_file_named_as_text_gets_zstds_stdout_line(tmp_path):
    path = tmp_path / "z.txt"
    (tmp_path / "plain").write_bytes(b"hello world\n" * 100)
    subprocess.run(["zstd", "-q", "-o", str(path), str(tmp_path / "plain")], check=True)
    with pytest.raises(DataError, match=re.escape(f"zstd -dc {path} > {tmp_path / 'z-unpacked.txt'}")):
        load_data(str(path))


# --- 2. :attrib's b^O note only beside its row ------------------------------------------------------------------
def _attrib(bias: float, others: int) -> AttribResult:
    parts = [AttribPart(f"head 0.{k}", "head", 1.0 + k) for k in range(others)]
    parts.append(AttribPart("output biases b^O", "bias", bias))
    parts.sort(key=lambda p: -abs(p.logit))
    total = sum(p.logit for p in parts)
    return AttribResult("abc", "d", total, 0.0, 1.0, parts, 0.5, 1, norm_bias=False)


def test_attrib_explains_bo_only_where_its_row_is_shown_and_says_where_it_went():
    """The bias among "10 smaller parts add +0.05" or writing exactly 0 still got "output biases b^O: every block's
    W^O bias, ...", of a row not on screen."""
    shown = plain(_attrib(bias=50.0, others=ATTRIB_ROWS + 2), 200)
    assert "output biases b^O: every block's W^O bias" in shown
    summed = plain(_attrib(bias=0.05, others=ATTRIB_ROWS + 2), 200)
    assert "every block's W^O bias" not in summed
    assert "3 smaller parts add +3.05 together, the output biases b^O among them" in summed, summed
    silent = plain(_attrib(bias=0.0, others=3), 200)
    assert "every block's W^O bias" not in silent and "writes exactly 0, not listed (output biases b^O)" in silent


# --- 3. :score's bars against a row not shown; a tiny largest loss of counted positions -----------------------------
def _score(losses, counted):
    n = len(losses)
    return ScoreResult("x" * (n + 1), ["x"] * (n + 1), [math.exp(-v) for v in losses], losses, ["x"] * n, [0.9] * n,
                       counted, sum(losses) / n, 2.48)


def test_score_bars_say_when_the_full_bar_is_in_a_row_left_out():
    """With more than 64 positions, "3.000 at t = 18 (a full bar)" named a row the table left out: the worst row is
    now always shown, so its bar is there to read."""
    losses = [1.0] * 70
    losses[18] = 3.0  # positions 16 to 21 are not shown
    said = plain(_score(losses, [True] * 70), 120)
    assert "the text's largest one, 3.000 at t = 18 (a full bar), not against a fixed scale" in said, said
    losses[18], losses[40] = 1.0, 3.0
    assert "3.000 at t = 40 (a full bar)" in plain(_score(losses, [True] * 70), 120)


def test_score_tiny_largest_loss_speaks_of_the_counted_positions_only():
    """"near certain at every position" where the given ones, a question's, are no guesses of the model's."""
    said = plain(_score([13.4, 0.0001, 0.0004], [False, True, True]), 120)
    assert "the model was near certain at every counted position" in said, said
    assert "at every position" in plain(_score([0.0001, 0.0004], [True, True]), 120)


# --- 4. core/model.py and the parts read as the views write them --------------------------------------------------
def test_model_comments_write_the_streams_and_the_heads_as_the_views_do():
    from minitf_repl.core import inside, model, positions

    block = inspect.getsource(model.TransformerBlock.__init__)
    assert "x' + FFN(LN(x'))" in block and "# x + FFN(LN(x))" not in block  # the second half reads x'
    source = inspect.getsource(model)
    assert "(B, h, T" not in source and "(B, T, h," not in source and "H * T, kept" not in source  # n_h heads
    rope = inspect.getdoc(positions.RotaryEmbedding)
    assert "theta_c = base^(-2c / head_dim)" in rope and "theta_i" not in rope and "2i" not in rope
    assert "formula of h," not in inspect.getsource(inside.FeedForwardNeurons)  # the FFN's units are u


# --- 5. fmt.size: the next unit from 1,000 as printed ------------------------------------------------------------
def test_size_moves_to_the_next_unit_where_the_rounded_value_reads_1000():
    assert fmt.size(1023990) == "1.0 MiB"  # was "1000.0 KiB"
    assert fmt.size(1_048_575_000) == "1.0 GiB"  # was "1000.0 MiB"
    assert fmt.size(1023 * 2**10) == "1.0 MiB" and fmt.size(999 * 2**10) == "999.0 KiB"
    assert fmt.size(1000) == "1.0 KiB" and fmt.size(999) == "999 B"
    assert "under 1,000" in fmt.size.__doc__ and "under a KiB" not in fmt.size.__doc__  # 1,000 B reads 1.0 KiB


# --- 6. :tok's code points add up; one cluster rule for :tok and the grids ---------------------------------------
def test_tok_note_counts_every_code_point_that_folds():
    """"these 16 show as 10, since the text's 1 skin-tone modifier, 1 combining mark and 2 zero-width joiners": 4
    listed where 6 fold (the two people after the joiners)."""
    text = "👋🏽 नि 👨\u200d👩\u200d👧 café"
    said = code_points_note(text)
    assert ("these 16 show as 10, since 6 fold into the one before them: 1 skin-tone modifier, 1 combining mark, 2 "
            "zero-width joiners and 2 code points after a joiner") in said, said
    for sample in (text, "🇯🇵🇫🇷 x", "e\u0301\u0301 \u2764\ufe0f"):
        said = code_points_note(sample)
        listed = re.search(r"fold into the one before them: (.*) \('", said).group(1)
        assert sum(int(n) for n in re.findall(r"(\d+) ", listed)) == len(sample) - len(clusters(sample)), said


def test_a_grid_heads_a_column_by_the_cluster_tok_counts():
    """The heads cut "नि" to "न" (no spacing vowel sign) and 👋🏽 to 👋: another rule than :tok's."""
    tokens = ["नि", "य", "👋🏽"]
    assert column_width(tokens, 1) == 4  # 👋🏽 whole: two columns and two, as terminals measure it
    head = heatmap(tokens, _causal(3), 1.0, 1, True).plain.splitlines()[0]
    assert head.split() == ["नि", "य", "👋🏽"], head
    assert clusters("🇯🇵🇫🇷") == ["🇯🇵", "🇫🇷"] and clusters("\u25cc\u093f") == ["\u25cc\u093f"]


# --- 7. :params: N is not "the parameters a token's matmuls use" -------------------------------------------------
def test_params_says_n_as_the_parameters_less_the_lookups():
    """"N = all X parameters, each in a token's matmuls": N counts norm gains and biases, which no matmul takes."""
    from minitf_repl.core.config import ModelConfig, TrainConfig
    from minitf_repl.session import Session

    def said(**model):
        config = ModelConfig(**{"d_model": 32, "n_heads": 4, "n_layers": 2, "d_ff": 64, "max_seq_len": 32, **model})
        result = run(Session(config, TrainConfig(batch_size=2), data_spec="sort:4", device_name="cpu"), ":params")
        return result.ledger, plain(result, 200)

    ledger, words = said()
    table = ledger["lookup_params"]
    assert (f"N = {ledger['six_n_params']:,}: the {ledger['n_params']:,} parameters less the {table:,} a token only "
            "looks up") in words and "matmuls use" not in words
    ledger, words = said(pos_encoding="rope")
    assert f"N = all {ledger['n_params']:,} parameters: none is only looked up" in words and "each in" not in words


# --- 8. heads of position digits are said; English BPE pieces headed by two characters ----------------------------
BPE_PIECES = ["the", " c", "at", " s", "at", " on", " the", " m", "at"]
BYTES = ["\\xe6\\x88", "\\x91", "我们", "\\xac\\xe4\\xbb\\xac\\xe4", "\\xbb"]


def test_english_bpe_pieces_are_headed_by_their_first_two_characters_not_positions():
    """Every piece after the first started with "␣", so any English text got heads "012345678"."""
    lines = heatmap(BPE_PIECES, _causal(9), 1.0, 1, True).plain.splitlines()
    assert lines[0].split() == ["th", "␣c", "at", "␣s", "at", "␣o", "␣t", "␣m", "at"], lines[0]
    assert column_width(BPE_PIECES, 1) == 3  # a space between heads: side by side they read "th␣cat␣s"
    assert heads_note(BPE_PIECES) == ("each column is headed by its token's first two characters: the first alone "
                                      "does not tell them apart")
    assert heads_note(list("abc")) is None


def test_attn_says_its_columns_are_headed_by_position_digits():
    """A line of digits over the map was not said to be positions (mod 10)."""
    result = AttnResult("x", BYTES, 0, [0], 1, [_causal(5)], unit="token")
    said = plain(result, 120)
    assert ("each column is headed by its position's last digit (0 to 9, then 0 again), and each row starts with its "
            "position") in said, said
    assert "headed by" not in plain(AttnResult("abc", list("abc"), 0, [0], 1, [_causal(3)]), 120)


# --- 9. the BPE size suggested is one :set takes ------------------------------------------------------------------
def _reading(chars: str, per: float = 1.5):
    """What more_tokens_than_characters reads of a corpus whose training text holds `chars`."""
    return SimpleNamespace(tokenizer=SimpleNamespace(kind="bpe", own_size=300, vocab_size=300),
                           tokens_per_char=lambda split="val": per, split_text=lambda split: chars)


def test_the_bpe_size_suggested_for_a_character_a_token_is_within_what_set_takes():
    """70,000 distinct 4-byte characters: the line said bpe:280,256, past the largest N (65,536)."""
    many = "".join(chr(0x20000 + k) for k in range(70_000))
    said = TextCorpus.more_tokens_than_characters(_reading(many))
    sizes = [int(n) for n in re.findall(r"bpe:(\d+)", said)]
    assert sizes == [MAX_BPE_TOKENS], said
    assert "(the largest N)" in said and "tokenizer=char reads a character a token" in said
    few = TextCorpus.more_tokens_than_characters(_reading("你好世界"))
    assert all(MIN_BPE_TOKENS <= int(n) <= MAX_BPE_TOKENS for n in re.findall(r"bpe:(\d+)", few)), few


def test_a_real_bpe_that_reads_more_tokens_than_characters_suggests_a_size_set_takes(tmp_path):
    import random

    rng = random.Random(0)
    path = tmp_path / "zh.txt"
    path.write_text("".join(rng.choice([chr(0x4E00 + k) for k in range(40)]) for _ in range(6000)), encoding="utf-8")
    words = run(tiny_session(data=str(path)), ":set tokenizer=bpe:300").tokenizer
    sizes = [int(n) for n in re.findall(r"bpe:(\d+) \(the 256 bytes", words)]
    assert len(sizes) == 1 and MIN_BPE_TOKENS <= sizes[0] <= MAX_BPE_TOKENS, words

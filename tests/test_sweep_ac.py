"""What a sweep of the views' numbers, checked against plain torch from the model's own weights, found: each test
failed before its fix.

`:embed` on a task (sort:4 trains on rows of 8 positions, the window is 32) said how alike the learned position
table's rows are by distance averaged over all 32 rows, 24 of which no training row reaches: they stay the random
rows they started as, so a trained table whose 8 rows read 0.53 at distance 1 was shown as 0.12 (and distance 16
compared untrained rows only). The view now compares the rows a training row reaches, and says the rest are left out.
"""

import pytest
import torch

from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.session import Session
from test_commands import TINY, run, text_file  # noqa: F401 (a fixture)
from test_render import plain


def session_with(data: str = "sort:4", **model) -> Session:
    return Session(ModelConfig(**{**TINY, **model}), TrainConfig(steps=4, batch_size=4, eval_every=2, eval_batches=1),
                   data_spec=data, device_name="cpu")


def mean_cosine_by_distance(table: torch.Tensor) -> list[float]:
    rows = table / table.norm(dim=1, keepdim=True)
    cos = rows @ rows.T
    return [float(cos.diagonal(d).mean()) for d in range(1, len(rows))]


# --- :embed ----------------------------------------------------------------------------------------------------
def test_embed_compares_the_position_rows_a_task_trains_not_the_untrained_rest():
    s = session_with()  # sort:4: rows of 8 positions in a window of 32
    run(s, ":train steps=3")
    result = run(s, ":embed")
    trained = s.model.position_embedding.weight.detach()[:8]
    assert result.by_distance == pytest.approx(mean_cosine_by_distance(trained), abs=1e-6)
    assert result.trained_rows == 8
    words = plain(result)
    assert "its first 8" in words and "never trained" in words


def test_embed_on_a_text_compares_every_row_of_the_window(text_file):
    s = session_with(text_file, max_seq_len=16)
    result = run(s, ":embed")
    table = s.model.position_embedding.weight.detach()
    assert len(result.by_distance) == 15 and result.trained_rows is None
    assert result.by_distance == pytest.approx(mean_cosine_by_distance(table), abs=1e-6)
    assert "never trained" not in plain(result)

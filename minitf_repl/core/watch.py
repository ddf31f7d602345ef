"""What `:train watch=attn|lens|samples|grad|heads|embed|context` looks at while a model learns: one view, at every
evaluation.

A `Watcher` holds what stays the same through a run (the view, the prompt, the layer, the token the
lens should find) and makes a `WatchFrame` from the model as it is now: the attention pattern of
each head of one block (core.inside.attention_maps), the logit lens at the prompt's last position
(core.inside.logit_lens), a short greedy continuation (core.generate), the gradient each block
receives from the loss on the prompt (core.backprop), every head's role as :heads scores it
(core.heads: on the same repeated random tokens at every frame, or on the prompt when one is given),
the token embeddings on their two main directions as `:embed map=on` draws them (core.inside), or
the val loss by position in bands of positions, on the same val windows at every frame (core.context).
Every view only listens (eval mode, training flags restored; the gradient view asks autograd and
writes no parameter's .grad) and draws no random number from torch's global generator (the random
tokens come from a generator of their own), so a run with watch= trains exactly as the same run
without it (tests/test_watch.py).

Torch is imported inside the methods: the command that declares watch= loads before torch has.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field

WATCH_VIEWS = ("attn", "lens", "samples", "grad", "heads", "embed", "context")
ONE_BLOCK = ("attn",)  # the views that show one block, which layer= picks; the others read every block
SAMPLE_TOKENS = 40  # the length of a samples frame (a task's answer ends it sooner)
CONTEXT_WINDOWS = 128  # a context frame's val windows: an eighth of :context's default, under a tenth of a second


class Grid(Sequence):
    """A block of numbers ([head][query i][key j], [token][x, y]) held as one flat array of machine floats, read as
    the nested lists it stands for: `grid[h]` is head h's map as lists, `grid.tolist()` the whole.

    A frame is kept for every evaluation of a run: as Python lists of floats (32 bytes a number, a list per row) the
    attention maps of a 256-token window took 8 MB a frame, so `eval_every=1` on a long run held gigabytes for
    what a float32 tensor holds in a megabyte. The numbers are the same (float32 values kept as float32, exactly).
    """

    def __init__(self, values: array, shape: tuple[int, ...]):
        self.values, self.shape = values, tuple(shape)
        self.stride = math.prod(self.shape[1:])

    @classmethod
    def of(cls, tensor) -> Grid:
        """The tensor's numbers, at its own precision where that is float64, else as float32 (exact for float32,
        bfloat16 and float16)."""
        import torch

        wide = tensor.dtype == torch.float64
        flat = tensor.detach().to("cpu", torch.float64 if wide else torch.float32).contiguous().reshape(-1)
        values = array("d" if wide else "f")
        values.frombytes(flat.numpy().tobytes())
        return cls(values, tuple(tensor.shape))

    @classmethod
    def of_rows(cls, rows: list[list[float]]) -> Grid:
        """Rows of equal length, kept as float64 (Python's own floats: exact)."""
        return cls(array("d", [v for row in rows for v in row]), (len(rows), len(rows[0]) if rows else 0))

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("Grid index out of range")
        if len(self.shape) == 1:
            return self.values[index]
        return _nested(self.values[index * self.stride:(index + 1) * self.stride].tolist(), self.shape[1:])

    def tolist(self) -> list:
        return _nested(self.values.tolist(), self.shape)

    def __eq__(self, other) -> bool:
        if isinstance(other, Grid):
            return self.shape == other.shape and self.values.tolist() == other.values.tolist()
        return isinstance(other, list) and self.tolist() == other

    __hash__ = None

    def __repr__(self) -> str:
        return f"Grid(shape={self.shape})"


def _nested(flat: list, shape: tuple[int, ...]) -> list:
    """`flat`, row-major, as nested lists of `shape`."""
    for size in reversed(shape[1:]):
        flat = [flat[i:i + size] for i in range(0, len(flat), size)]
    return flat


@dataclass
class LensGuess:
    layer: str  # "embed", "blocks.0", ...
    guess: str  # the likeliest next token after that layer
    prob: float  # its probability: softmax(lm_head(ln_f(h))) of the stream after that layer
    target_rank: int | None = None  # of the true next token (1: the likeliest); None when unknown


@dataclass
class BlockGradient:
    block: int  # the block (the rows run from the last block down)
    attention: float  # |dL/dW| of the block's attention weights
    ffn: float | None  # |dL/dW| of its feed-forward part (None: a block without one, ffn=off)
    below: float  # |dL/dh| of the stream the block read: the gradient it hands down


@dataclass
class HeadWatch:
    layer: int  # the block
    head: int  # the head in it
    role: str | None  # the role the head is named for now (core.heads.name_role), or None
    score: float  # its score for that role (None role: its largest score)
    induction: float  # its induction score, whatever its role


@dataclass
class WatchFrame:
    """One view of the model at one evaluation; its maps and coordinates are Grids (read as the nested lists)."""

    step: int  # optimizer steps done when the frame was made (the first frame: before the run's first step)
    val_loss: float | None  # the evaluation it was made at (None: the frame before training)
    view: str  # attn | lens | samples | grad | heads | embed | context
    # the text the view reads, the same at every frame; "": none (context, and heads on repeated random tokens)
    prompt: str
    tokens: list[str]  # the prompt's tokens
    layer: int | None = None  # attn: the block shown
    maps: Grid | list = field(default_factory=list,  # attn: [head][query i][key j]
                              metadata={"json": "list[list[list[float]]]"})
    lens: list[LensGuess] = field(default_factory=list)  # lens: one row per layer, at the last position
    target: str | None = None  # lens: the true next token, when known
    sample: str | None = None  # samples: the greedy continuation of the prompt
    top: float | None = None  # grad: |dL/dh_L|, the gradient reaching the last block's output
    grads: list[BlockGradient] = field(default_factory=list)  # grad: one row per block, the last block first
    heads: list[HeadWatch] = field(default_factory=list)  # heads: every head of every block, block by block
    repeat: int | None = None  # heads: h, each random sequence's block (None: scored on the prompt)
    first_copy: float | None = None  # heads: the loss on the first copy's tokens (nats)
    second_copy: float | None = None  # heads: the loss on the repeat's tokens, which context gives away
    # heads: the induction score of a head that attends evenly to keys 0..i, what a score is read against (None: no
    # query had an earlier copy to score)
    even_induction: float | None = None
    vocab: list[str] = field(default_factory=list)  # embed: every token drawn, by id (the prompt's on top)
    left_out: int = 0  # embed: the tokens not drawn: an untied model's that the training text never holds
    coords: Grid | list = field(default_factory=list,  # embed: each token's [x, y] on W_E's two main directions
                                metadata={"json": "list[list[float]]"})
    explained: list[float] = field(default_factory=list)  # embed: the share of the rows' variance along each
    bands: list[str] = field(default_factory=list)  # context: each band of positions, "0", "1", "2-3", ...
    band_losses: list[float] = field(default_factory=list)  # context: each band's mean val loss (nats)


class Watcher:
    """One view of a model on one prompt, made again at every evaluation of a run."""

    def __init__(self, view: str, tokenizer, prompt: str | None, layer: int | None = None, target: str | None = None,
                 done=None, counted: list[bool] | None = None, data=None):
        if view not in WATCH_VIEWS:
            raise ValueError(f"view must be one of {WATCH_VIEWS}, got {view!r}")
        self.view = view
        self.tokenizer = tokenizer
        self.prompt = prompt or ""  # heads: None, the repeated random tokens
        self.ids = tokenizer.encode(self.prompt)
        self.repeated = None  # heads without a prompt: the random sequences, drawn once, the same every frame
        self.layer = layer
        self.target = target if target is not None and len(tokenizer.encode(target)) == 1 else None
        self.done = done  # a task's "the answer is complete" (Task.answer_complete), for samples
        self.counted = counted  # grad: which next tokens the loss counts (a task's answer's); None: all
        self.data = data  # context: the data whose val windows are scored; heads: whose rows bound the repeat
        self.vocab = None  # embed: every token drawn, by id, once for all frames
        self.among = None  # embed: the ids of those tokens (None: every one)
        self._names: list[str] | None = None  # names(): every token as the views name it

    def names(self) -> list[str]:
        """Every token as the views name it (core.bpe.shown_piece: a byte of a longer character as its escape, \\xe4,
        as :attn and :embed show it, not "�"), worked out once for the run."""
        if self._names is None:
            from .bpe import shown_piece

            self._names = [shown_piece(self.tokenizer, i) for i in range(self.tokenizer.vocab_size)]
        return self._names

    def frame(self, model, step: int, val_loss: float | None) -> WatchFrame:
        itos = self.names()
        frame = WatchFrame(step, val_loss, self.view, self.prompt, [itos[i] for i in self.ids])
        if self.view == "attn":
            from .inside import attention_maps

            maps = attention_maps(model, self.ids, layer=self.layer)
            frame.layer, frame.maps = maps.layers[0], Grid.of(maps.maps[0])
        elif self.view == "lens":
            from .inside import logit_lens

            targets = None
            if self.target is not None:
                targets = [-1] * (len(self.ids) - 1) + self.tokenizer.encode(self.target)
            lens = logit_lens(model, self.ids, top=1, targets=targets)
            frame.target = self.target
            frame.lens = [LensGuess(layer.name, itos[layer.top_ids[-1][0]], layer.top_probs[-1][0],
                                    layer.target_ranks[-1] if layer.target_ranks else None)
                          for layer in lens.layers]
        elif self.view == "heads":
            self._heads(model, frame)
        elif self.view == "embed":
            from .inside import embedding_map, trained_tokens

            if self.vocab is None:  # one list for every frame of the run: the same tokens each time
                # untied: the rows that train only, as :embed maps them; the others stay where they started
                self.among = trained_tokens(model.config.tie_embeddings, self.data)
                self.vocab = list(itos) if self.among is None else [itos[i] for i in self.among]
            found = embedding_map(model, self.among)
            frame.vocab, frame.coords, frame.explained = self.vocab, Grid.of_rows(found.coords), found.explained
            frame.left_out = len(itos) - len(self.vocab)
        elif self.view == "context":
            from .context import position_bands, position_losses

            device = next(model.parameters()).device
            curve = position_losses(model, self.data, device, CONTEXT_WINDOWS)  # seed 0: the same windows each frame
            frame.bands, frame.band_losses = position_bands(curve.losses)
        elif self.view == "grad":
            from .backprop import backprop, per_block

            done = backprop(model, self.ids, self.counted, check=False)
            frame.top = done.top
            # ffn=off: no FFN, not an FFN that got no gradient (a 0.0000 read as the latter)
            frame.grads = [BlockGradient(b, attention, ffn if model.blocks[b].ffn is not None else None, below)
                           for b, attention, ffn, below in per_block(done)]
        else:
            from .bpe import decode_after
            from .config import GenConfig
            from .generate import generate

            settings = GenConfig(n=SAMPLE_TOKENS, temperature=0.0, gen_seed=0)  # greedy: the model's own best
            new = list(generate(model, self.ids, settings, done=self.done))
            frame.sample = decode_after(self.tokenizer, self.ids, new)
        return frame

    def _heads(self, model, frame: WatchFrame) -> None:
        import torch

        from .heads import head_roles, repeated_tokens, text_tokens, trained_length

        if self.prompt:
            tokens, repeat = torch.tensor([self.ids]), None
        else:
            if self.repeated is None:  # its own generator: the run's batches are the same with or without it
                length, among = model.config.max_seq_len, None
                if self.data is not None:  # as :heads reads them: within a task's rows, of the text's own tokens
                    length, among = trained_length(self.data, length), text_tokens(self.data)
                self.repeated = repeated_tokens(model.config.vocab_size, length, among=among)
            tokens, repeat = self.repeated, self.repeated.shape[1] // 2
            frame.tokens = [self.names()[i] for i in tokens[0].tolist()]
        roles = head_roles(model, tokens, repeat, sweep=False)  # a frame shows patterns: no pass per head
        frame.repeat, frame.first_copy, frame.second_copy = repeat, roles.first_copy, roles.second_copy
        even = roles.uniform["induction"]
        frame.even_induction = None if math.isnan(even) else even
        for h in roles.heads:
            known = [v for v in h.scores.values() if not math.isnan(v)]  # nan: no query had that role's keys
            score = h.scores[h.role] if h.role else max(known, default=math.nan)
            frame.heads.append(HeadWatch(h.layer, h.head, h.role, score, h.scores["induction"]))

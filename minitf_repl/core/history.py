"""What a training run leaves behind, step by step: StepInfo, the numbers of one optimizer step, and History,
Trainer.history's rows of them.

Kept apart from core.train so that the training loop there reads as the loop. History is a list of dicts to its
readers (:plot, :report, the loss table, checkpoints) and a set of arrays in memory, for the reason its docstring
gives.
"""

from __future__ import annotations

from array import array
from collections.abc import MutableSequence
from dataclasses import dataclass, fields


@dataclass
class StepInfo:
    step: int  # optimizer steps done in total (across runs)
    run_step: int  # steps done in this run
    run_steps: int  # length of this run
    train_loss: float  # the cross-entropy of this step's one batch, before its update (a mixture of experts'
    #                    load-balancing share left out: aux_loss)
    lr: float  # the learning rate this step's update used
    grad_norm: float  # the global norm of this step's gradient, before clipping to grad_clip
    # training tokens per second of this step; on an evaluated row, of the steps since the last evaluation,
    # as the loss table shows it (the compiling step left out)
    tokens_per_second: float
    elapsed: float  # seconds spent in this run, evaluation included
    val_loss: float | None = None  # the mean loss of eval_batches held-out batches after this step; None: not evaluated
    # the validation loss in bits per character of the val text (core.data.bits_per_char; text data only):
    # unlike the loss per token, it compares across tokenizers
    val_bpc: float | None = None
    accuracy: float | None = None  # a task's exact-match accuracy on held-out questions at this evaluation (tasks only)
    aux_loss: float | None = None  # mixture of experts: the load-balancing loss (train_loss is without it)
    compile_seconds: float | None = None  # set on the step that ran torch.compile's compilation
    # with dropout on: the mean loss of eval_batches training batches after this step, scored in eval mode as val_loss
    # is. train_loss is then measured with dropout dropping units, above what the weights score, and read above the
    # val loss ("train below val: overfitting" read backwards); None: not evaluated, or dropout is 0 (train_loss is
    # comparable then, and no time is spent on it)
    train_eval_loss: float | None = None


class HistoryRow(dict):
    """A row of a History read by its index, as the dict it was: a value set in it (`trainer.history[-1]["val_loss"]
    = x`) is set in the history too, as in a row of the list of dicts Trainer.history was. A copy of it (copy,
    pickle) is a plain dict."""

    __slots__ = ("_history", "_index")

    def __init__(self, values, history: "History", index: int):
        super().__init__(values)
        self._history, self._index = history, index

    def __setitem__(self, key, value) -> None:
        super().__setitem__(key, value)
        self._history._put(self._index, self)

    def __reduce__(self):
        return dict, (dict(self),)


class History(MutableSequence):
    """Trainer.history: a row per optimizer step, each read as the dict of StepInfo's fields it is appended as
    (`history[-1]["lr"]`, slices, iteration, `==` with a list of dicts), kept as one array per field.

    A dict per step held about 660 bytes: a `minitf train --steps 200000` run kept some 130 MB of history in the
    process, for numbers the arrays keep in 117 bytes a step (8 a value, a byte saying whether it is there). A row
    that is not StepInfo's fields of their types (one a newer minitf saved with a field this one has not, or a
    hand-edited checkpoint's) is kept as given, and reads back as it was. A row is made as it is read: one read by
    its index (`history[-1]`) sets a value set in it in the history too (HistoryRow); the rows of an iteration or a
    slice are dicts of their own, made faster, for the readers that walk a long run's rows (:plot, a save).
    """

    _INTS = ("step", "run_step", "run_steps")

    def __init__(self, rows=()):
        self._names = [f.name for f in fields(StepInfo)]
        self._columns = {name: array("q" if name in self._INTS else "d") for name in self._names}
        self._there = {name: bytearray() for name in self._names}  # 1 where the row has a value, 0 where None
        self._odd: dict[int, dict] = {}  # rows kept as given (the docstring's), by index
        self.extend(rows)

    def _fits(self, row) -> bool:
        if not isinstance(row, dict) or len(row) != len(self._names):
            return False
        for name in self._names:
            if name not in row:
                return False
            value = row[name]
            if value is None:
                continue
            if name in self._INTS:
                if type(value) is not int or not -2**63 <= value < 2**63:
                    return False
            elif type(value) is not float:
                return False
        return True

    def _put(self, i: int, row) -> None:
        """Row `i`'s values into the columns (existing, or one past the end)."""
        fits = self._fits(row)
        for name in self._names:
            value = row.get(name) if fits else None
            there = value is not None
            if i == len(self._columns[name]):
                self._columns[name].append(value if there else 0)
                self._there[name].append(there)
            else:
                self._columns[name][i] = value if there else 0
                self._there[name][i] = there
        if fits:
            self._odd.pop(i, None)
        else:
            self._odd[i] = dict(row)

    def _row(self, i: int) -> dict:
        if i in self._odd:
            return dict(self._odd[i])
        return {name: self._columns[name][i] if self._there[name][i] else None for name in self._names}

    def __len__(self) -> int:
        return len(self._columns["step"])

    def __iter__(self):
        # the columns zipped, not a row looked up by index: a save walks the 200,000 rows of a long run twice
        names, odd = self._names, self._odd
        values = zip(*(self._columns[name] for name in names))
        flags = zip(*(self._there[name] for name in names))
        for i, (row, there) in enumerate(zip(values, flags)):
            yield dict(odd[i]) if i in odd else {n: v if t else None for n, v, t in zip(names, row, there)}

    def _index(self, i: int) -> int:
        n = len(self)
        if not -n <= i < n:
            raise IndexError("history index out of range")
        return i % n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._row(k) for k in range(*i.indices(len(self)))]
        i = self._index(i)
        return HistoryRow(self._row(i), self, i)

    def __setitem__(self, i, row) -> None:
        if isinstance(i, slice):  # rare: through a list, as a list would take it
            rows = list(self)
            rows[i] = row
            self._reset(rows)
            return
        self._put(self._index(i), row)

    def __delitem__(self, i) -> None:
        rows = list(self)
        del rows[i]
        self._reset(rows)

    def insert(self, i: int, row) -> None:
        if i >= len(self):
            self._put(len(self), row)
            return
        rows = list(self)
        rows.insert(i, row)
        self._reset(rows)

    def _reset(self, rows) -> None:
        for name in self._names:
            self._columns[name] = array(self._columns[name].typecode)
            self._there[name] = bytearray()
        self._odd = {}
        self.extend(rows)

    def last_index(self, name: str) -> int | None:
        """The index of the last row whose `name` is not None (None: none has one), read from the column's flags
        without making a row: the toolbar asks it at every redraw, of a run of 200,000 steps evaluated once."""
        found = self._there[name].rfind(1)
        odd = [i for i, row in self._odd.items() if row.get(name) is not None]
        best = max(found, *odd) if odd else found
        return None if best < 0 else best

    def copy(self) -> "History":
        """A copy sharing nothing with this one (a snapshot's, for rollback), made column by column."""
        other = History()
        other._columns = {name: array(column.typecode, column) for name, column in self._columns.items()}
        other._there = {name: bytearray(there) for name, there in self._there.items()}
        other._odd = {i: dict(row) for i, row in self._odd.items()}
        return other

    def __eq__(self, other) -> bool:
        if not isinstance(other, (History, list, tuple)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    def __repr__(self) -> str:
        return f"History({list(self)!r})"

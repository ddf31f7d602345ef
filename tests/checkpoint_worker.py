"""A separate process for tests/test_checkpoint.py: a resume must work in a NEW process, and a save
must survive being killed. Also the shared fixtures (tiny text, model, trainer) of those tests.

    python tests/checkpoint_worker.py first  CKDIR OUT N      train 2N steps in one go (the reference),
                                                              then a 2N-step run stopped after N, saved as "half"
                                                              (the test calls first() in its own process, with
                                                              the optimizer it tests)
    python tests/checkpoint_worker.py resume CKDIR OUT V...   load "half", continue the run, once per variant V
                                                              (with the optimizer the checkpoint names)
    python tests/checkpoint_worker.py hang   NAME DIR...      save NAME in each DIR at once, each stopping halfway
                                                              through its model file (prints HALF-WRITTEN, then
                                                              sleeps until killed)
    python tests/checkpoint_worker.py race   DIR ME OTHER ROUNDS KIND [OPTIONS]
                                                              one of two processes saving into DIR at the same
                                                              time, ROUNDS times; each round starts when both
                                                              are ready (files in DIR/../sync). KIND: autosave
                                                              (rotate + save "autosave"), same (both save
                                                              "same-<round>"), own (each saves "<ME>-<round>").
                                                              OPTIONS: pid=N (os.getpid() answers N, as in a PID
                                                              namespace), no-flock (the file system has no flock).
                                                              Prints one JSON line: {"errors": [...], "saved": n}
"""

from __future__ import annotations

import inspect
import json
import random
import sys
import threading
import time
from pathlib import Path

import safetensors.torch
import torch

from minitf_repl.core import checkpoint as ckpt
from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.data import TextCorpus
from minitf_repl.core.model import MiniTransformerLM
from minitf_repl.core.train import Trainer, make_optimizer

def manifest_of(path: Path) -> dict:
    return json.loads((path / ckpt.MANIFEST).read_text())


def rewrite_manifest(path: Path, mutate) -> None:
    """Edit checkpoint.json and re-sign it, to reach the checks behind the checksum."""
    m = manifest_of(path)
    mutate(m)
    m["meta_sha256"] = ckpt.manifest.meta_sha256(m)
    (path / ckpt.MANIFEST).write_bytes(ckpt.manifest.encode_manifest(m))


CHARS = "abcdefghijkl "  # 13 distinct characters: vocab_size 13
SIZES = dict(vocab_size=13, max_seq_len=16, d_model=32, n_heads=2, n_layers=2, d_ff=48, dropout=0.1)
DATA_SPEC = "tiny-test-text"
VARIANTS = ("exact", "fresh-optimizer", "fresh-rng", "fresh-torch-rng")


def make_text(n: int = 3000) -> str:
    rng = random.Random(0)
    words = []
    while sum(len(w) + 1 for w in words) < n:
        words.append("".join(rng.choice(CHARS[:-1]) for _ in range(rng.randint(1, 7))))
    text = " ".join(words)
    assert sorted(set(text)) == sorted(CHARS)
    return text


def make_data() -> TextCorpus:
    return TextCorpus("tiny", make_text(), "test text")


def make_trainer(steps: int, seed: int = 0, data=None, optimizer: str = "adamw") -> Trainer:
    torch.manual_seed(seed)
    model = MiniTransformerLM(ModelConfig(**SIZES))
    config = TrainConfig(steps=steps, batch_size=4, eval_every=3, eval_batches=2, warmup_steps=2, seed=7,
                         optimizer=optimizer)
    return Trainer(model, data or make_data(), config)


def dump(out: Path, tag: str, trainer: Trainer) -> None:
    params = {k: v.detach().clone().contiguous() for k, v in trainer.model.named_parameters()}
    safetensors.torch.save_file(params, str(out / f"{tag}.safetensors"))
    (out / f"{tag}.json").write_text(json.dumps(list(trainer.history)))


def first(ckdir: Path, out: Path, n: int, optimizer: str = "adamw") -> None:
    full = make_trainer(2 * n, optimizer=optimizer)
    full.run()
    dump(out, "full", full)

    half = make_trainer(2 * n, optimizer=optimizer)
    half.run(should_stop=lambda: half.step >= n)
    assert half.step == n and half.run_remaining == n
    ckpt.save_checkpoint(ckdir, "half", half.model, half, half.data.tokenizer.vocab, DATA_SPEC)
    dump(out, "first", half)


def resume(ckdir: Path, out: Path, variants: list[str]) -> None:
    data = make_data()
    for variant in variants:
        c = ckpt.load_checkpoint(ckdir, "half")
        model, trainer = ckpt.restore(c, data)
        ckpt.restore_rng(c)
        if variant == "fresh-optimizer":
            trainer.optimizer = make_optimizer(model, trainer.config)
        elif variant == "fresh-rng":
            trainer.generator.manual_seed(12345)
            torch.manual_seed(12345)
        elif variant == "fresh-torch-rng":
            torch.manual_seed(12345)
        else:
            assert variant == "exact", variant
        trainer.run()
        dump(out, variant, trainer)


def hang(name: str, directories: list[Path]) -> None:
    """Save NAME into each directory at once (one thread each); all stop halfway through the model file."""
    trainer = make_trainer(4, seed=1)
    trainer.run()
    real_write = ckpt.store.write_file
    lock, halfway = threading.Lock(), []

    def half_then_sleep(path: Path, data: bytes) -> None:
        if not path.name.startswith("model-"):
            return real_write(path, data)
        with open(path, "xb") as f:
            f.write(data[: len(data) // 2])
            f.flush()
        with lock:
            halfway.append(path)
            if len(halfway) == len(directories):
                print("HALF-WRITTEN", flush=True)
        time.sleep(120)  # the test kills the process here

    ckpt.store.write_file = half_then_sleep
    vocab = trainer.data.tokenizer.vocab
    threads = [
        threading.Thread(target=ckpt.save_checkpoint, args=(d, name, trainer.model, trainer, vocab, DATA_SPEC), daemon=True)
        for d in directories
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    raise SystemExit("the saves finished: the test should have killed this process")


def race(directory: Path, me: str, other: str, rounds: int, kind: str, options: list[str]) -> None:
    import errno
    import os

    for option in options:
        if option.startswith("pid="):
            fake = int(option[4:])
            os.getpid = lambda: fake  # what a process in another PID namespace would see
        elif option == "no-flock":
            def no_flock(fd):
                raise OSError(errno.ENOLCK, "No locks available")

            ckpt.locks.flock = no_flock
        else:
            raise SystemExit(f"unknown option {option!r}")
    real_write = ckpt.store.write_file

    def slow_write(path: Path, data: bytes) -> None:  # a bigger model: saves overlap for sure
        time.sleep(0.004)
        real_write(path, data)

    ckpt.store.write_file = slow_write
    trainer = make_trainer(2, seed=1)
    trainer.run()
    vocab = trainer.data.tokenizer.vocab
    sync = directory.parent / "sync"
    sync.mkdir(exist_ok=True)
    errors, saved = [], 0
    for i in range(rounds):
        (sync / f"{me}-{i}").touch()
        deadline = time.time() + 60
        while not (sync / f"{other}-{i}").exists() and time.time() < deadline:
            time.sleep(0.0005)
        name = {"autosave": "autosave", "same": f"same-{i}", "own": f"{me}-{i}"}[kind]
        try:
            if kind == "autosave" and "rotate" not in inspect.signature(ckpt.save_checkpoint).parameters:
                ckpt.rotate(directory, name, 3)  # releases before the lock: what :train did, two calls
                ckpt.save_checkpoint(directory, name, trainer.model, trainer, vocab, DATA_SPEC)
            elif kind == "autosave":
                ckpt.save_checkpoint(directory, name, trainer.model, trainer, vocab, DATA_SPEC, origin="autosave",
                                     session=me, rotate=3)
            else:
                ckpt.save_checkpoint(directory, name, trainer.model, trainer, vocab, DATA_SPEC)
            saved += 1
        except Exception as e:  # noqa: BLE001 - reported to the test
            errors.append(f"round {i}: {type(e).__name__}: {e}")
    print(json.dumps({"errors": errors, "saved": saved}), flush=True)


if __name__ == "__main__":
    torch.set_num_threads(1)  # tiny tensors: one thread is fastest, and immune to a busy machine
    mode, *args = sys.argv[1:]
    if mode == "first":
        first(Path(args[0]), Path(args[1]), int(args[2]), *args[3:])
    elif mode == "resume":
        resume(Path(args[0]), Path(args[1]), args[2:])
    elif mode == "hang":
        hang(args[0], [Path(a) for a in args[1:]])
    elif mode == "race":
        race(Path(args[0]), args[1], args[2], int(args[3]), args[4], args[5:])
    else:
        raise SystemExit(f"unknown mode {mode!r}")

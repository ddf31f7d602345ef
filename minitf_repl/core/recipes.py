"""Default training recipes per dataset: how a first `:train` on each data learns fastest here.

A recipe is a handful of TrainConfig settings (learning rate, batch, warm-up, schedule, length,
optimizer) tuned for one dataset and the default model (4 layers x 4 heads x 128, block 64) on a
2-core CPU; `bench/recipes.py` holds the tuning runs behind each number. The built-in data's recipe
is TrainConfig's own defaults, so a plain `minitf` trains with it; any other data without a recipe
trains with those defaults too.

Switching data switches recipes, but never over a person's choice: a setting moves to the new
recipe's value only while it still holds the old recipe's value. `:set lr=0.01` then
`:data shakespeare` keeps lr 0.01 and takes the rest of Shakespeare's recipe.

The data's recipes are Muon's, the default optimizer. Switching optimizer follows the same rule
(`follow_optimizer`): `:set optimizer=adamw` takes AdamW's rate and warm-up (OPTIMIZER_RECIPES)
where lr and warmup_steps still held Muon's, since AdamW at Muon's settings does not settle.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection

from .catalog import CORPORA, TASKS
from .config import TrainConfig

# Settings that differ from TrainConfig's defaults (the recipe of the built-in data, pydoc).
RECIPES: dict[str, dict] = {
    # pydoc is TrainConfig's defaults: Muon at lr 1e-2, batch 16, warm-up 10, 600 steps. bench/recipes.py
    # (float32): val 1.305 after 600 steps at batch 16 (1e-2; 1.327 at 1.5e-2), 1.246 at batch 32 in
    # about a fifth more time; the previous defaults (AdamW 3e-3, batch 32, warm-up 30) ended at 1.446.
    # Under dtype=auto's bfloat16 (a CPU with AMX) the same recipe ends at 1.327 in 32.5 s (float32:
    # 1.305 in 41.1 s). Batch 16 keeps the first run shorter than before (bench/first_train.py).
    "pydoc": {},
    # bench/recipes.py, default model, Muon. Batch 16 for 360 steps at lr 1.25e-2, clipping at 0.25,
    # learns more from fewer tokens than the earlier batch 32 for 220 steps at 1.5e-2 (5,760 sequences
    # against 7,040). Over seven seeds in float32 (Zen 4) its validation loss on 100 wide batches averages
    # 1.872 against 1.878 (bfloat16, four seeds: 1.860 against 1.870), and the reported 8-batch loss
    # ends below 1.88 with six seeds of seven against two; the default seed: 1.863 (bfloat16 1.861).
    # In float32 the run takes about 0.9 of the time (smaller batches run a little slower per token,
    # fewer tokens win), under bfloat16 about 1.05. docs/speed.md has the seed table. Batch 32, 220
    # steps: 1.862 with the default seed, 1.86-1.91 with others; AdamW at 3e-3 was at 2.17 after 300
    # steps, at 1e-2 at 2.34. A longer run wants a lower lr: 2000 steps at batch 32 reach 1.510 at 4e-3
    # (3e-3: 1.513, 5e-3: 1.518, 7e-3: 1.522, 1.5e-2: 1.532, 2.5e-2: 1.554; bfloat16).
    # Since Muon's momentum is 0.9 (core/optimizers.py; it was torch's 0.95): 340 steps at lr 2e-2. Over
    # the same seven seeds in float32 (Zen 5) the wide loss averages 1.857 (the default seed's reported
    # loss 1.841), against 1.872 (1.858) for 360 steps at 1.25e-2 with 0.95, in 0.94 of the steps. With
    # 0.9: 340 steps at 1.25e-2 1.868, 1.5e-2 1.861, 1e-2 1.885; 320 steps at 2e-2 1.879 (1.874, too
    # near 1.88), at 1.5e-2 1.882; 360 at 1.25e-2 1.851; batch 20 for 280 steps 1.879, batch 24 for 240
    # 1.886 (1.25e-2). The schedule's shape, tried with 0.95 at 360 steps and 1.25e-2: cosine to 0 (1.901),
    # to 0.2 (1.874) or 0.3 (1.885) of the peak, a linear decay to 0 (1.873) and warm-up-stable-decay
    # (1.878, 1.883) ended no lower than the cosine to 0.1 (1.872), which stays.
    # Fewer steps, tried for issue #16's quarter of nanoGPT's time (about 285 steps at this pace; float32 on
    # an AMX Xeon's float32 units, seeds 1337, 1, 2, the wide loss): 290 steps 1.893 against 340's 1.852, and
    # with lr 2.5e-2 1.903, 3e-2 1.911, weight decay 0 1.892 or 0.05 1.888, cosine to 0 1.915, no warm-up
    # 1.903, no clipping 1.916, the AdamW part's rate x0.5 1.903 or x3 1.921. None comes near, so 340 stays
    # (docs/speed.md, the seventeenth session). Nor did changes beyond the settings (the eighteenth, capped
    # at AVX2, the recipe 1.849 that hour): batch 8 for the first 150 steps 1.946 against 1.840 (seed 1337:
    # cheaper steps that learn much less), NorMuon 1.859, Muon's rate x1.5 for q and k 1.848, for v and the
    # attention's output 1.881; uncapped, four Newton-Schulz steps 1.859 against 1.849 (pydoc: 1.286 against
    # 1.279), windows drawn without overlap 1.849.
    "shakespeare": {"lr": 2e-2, "steps": 340, "grad_clip": 0.25},
}

# What another optimizer needs over a data's recipe, which is tuned for Muon, the default. `follow_optimizer`
# applies it when a person switches optimizer; ANY_DATA covers data without an entry of its own. AdamW at
# Muon's rate and 10 warm-up steps does not settle: pydoc's 600 steps end at val 2.44 (Muon: 1.30), tiny
# Shakespeare's 340 at 2.82 (Muon: 1.84), sort at 14% of answers right (Muon: 100%). Measured in float32
# (uncapped Zen 5, one run per seed, the reported validation loss), batch and length the data's recipe's:
# - pydoc, seeds 1337 and 1: warm-up 30 at lr 2e-3 / 3e-3 / 4e-3 / 6e-3: 1.731 / 1.695 / 1.990 / 2.234;
#   warm-up 60: 1.700 / 1.652 / 1.650 / 1.847 (lr 2e-3 to 6e-3); warm-up 100 at 3e-3 / 4e-3 / 5e-3:
#   1.642 / 1.616 / 1.622; warm-up 150 at 4e-3 / 6e-3: 1.632 / 1.603; warm-up 200: 1.629 / 1.609.
#   Over six seeds (1337, 1 to 5): lr 6e-3 with 150 steps of warm-up 1.613, lower on every seed than lr 4e-3
#   with 100 (1.627) and 5e-3 with 100 (1.633).
# - tiny Shakespeare, seeds 1337 and 1: lr 6e-3 with warm-up 150 2.144, with 100 2.133; lr 5e-3 with 30, 60
#   or 100 2.165 to 2.171; 3e-3 2.22; 8e-3 2.16 to 2.18. One entry serves both texts.
# - the tasks want a lower rate: sort at lr 3e-3 with warm-up 150 ends 100% and 99.6% right (seeds 1337, 1),
#   with 30 99.4% and 98%, at 6e-3 with 150 only 83% and 63%; add at 3e-3 11% on one seed (Muon's settings:
#   0%); reverse is learned whatever the rate. So any other data (the tasks, a file) takes 3e-3, AdamW's
#   usual rate for a model this small and this codebase's default before Muon.
ANY_DATA = "*"
OPTIMIZER_RECIPES: dict[str, dict[str, dict]] = {
    "adamw": {
        ANY_DATA: {"lr": 3e-3, "warmup_steps": 150},
        "pydoc": {"lr": 6e-3, "warmup_steps": 150},
        "shakespeare": {"lr": 6e-3, "warmup_steps": 150},
    },
}


def data_name(spec: str) -> str:
    """The recipe key of a data spec: `shakespeare`, `sort:5` -> `sort`; anything else (a file's path) is its own
    data, whatever it is called: a file named Shakespeare (or `w/shakespeare`, a copy of a README) took tiny
    Shakespeare's recipe, and was called shakespeare in every message. A copy of tiny Shakespeare is `shakespeare`
    by its SHA-256 (data_key, catalog.known_as)."""
    head = spec.split(":", 1)[0].strip()
    return head if head in CORPORA + TASKS else spec.strip()


def data_key(data) -> str:
    """The recipe key of loaded data: its own (core.data.TextCorpus.recipe_key: a file's path, or `shakespeare` for a
    copy of it), a stand-in's spec (VocabOnly: a file named shakespeare that is gone took the recipe by its name),
    else its name (a task, random tokens)."""
    return getattr(data, "recipe_key", None) or getattr(data, "spec", None) or data.name


def recipe(spec: str, optimizer: str | None = None) -> dict:
    """The settings this data trains with by default under `optimizer` (None: the default one, Muon):
    TrainConfig's defaults changed by the data's recipe, then by what that optimizer needs over it."""
    defaults = dataclasses.asdict(TrainConfig())
    optimizer = optimizer or defaults["optimizer"]
    own = OPTIMIZER_RECIPES.get(optimizer, {})
    name = data_name(spec)
    return {**defaults, **RECIPES.get(name, {}), "optimizer": optimizer, **own.get(name, own.get(ANY_DATA, {}))}


def switch_recipe(config: TrainConfig, old_spec: str, new_spec: str) -> tuple[TrainConfig, dict]:
    """(config for the new data, {setting: (old value, new value)} for what changed).

    A setting follows the new recipe only where it still equals the old recipe's value: what a
    person set by hand stays. Both recipes are those of the config's optimizer.
    """
    changes = _followed(config, recipe(old_spec, config.optimizer), recipe(new_spec, config.optimizer))
    if not changes:
        return config, {}
    return config.replace(**{name: after for name, (_, after) in changes.items()}), changes


def follow_optimizer(before: TrainConfig, after: TrainConfig, spec: str,
                     given: Collection[str] = ()) -> tuple[TrainConfig, dict]:
    """`after` (`before` with some settings changed) with the settings that follow its optimizer's recipe.

    Where `after` names another optimizer than `before`, a setting moves to the new optimizer's value
    for this data when `before` still held the old optimizer's and it is not among `given` (what the
    same command set by hand): `:set optimizer=adamw` takes AdamW's rate and warm-up, `:set
    optimizer=adamw lr=1e-3` keeps lr 1e-3. Returns (config, {setting: (before, after)} for each that
    followed), the optimizer itself left out of the second.
    """
    if after.optimizer == before.optimizer:
        return after, {}
    moved = _followed(before, recipe(spec, before.optimizer), recipe(spec, after.optimizer),
                      skip={"optimizer", *given})
    return after.replace(**{name: value for name, (_, value) in moved.items()}), moved


def recipe_label(spec: str, optimizer: str) -> str:
    """How a line names an optimizer's recipe for a data: "adamw on pydoc"."""
    return f"{optimizer} on {data_name(spec)}"


def _followed(config: TrainConfig, old: dict, new: dict, skip: Collection[str] = ()) -> dict:
    """{setting: (its value, new's)} for each setting outside `skip` that still holds `old`'s value and
    that `new` changes: the rule every switch of recipe follows."""
    return {name: (getattr(config, name), value) for name, value in new.items()
            if name not in skip and getattr(config, name) == old[name] and getattr(config, name) != value}

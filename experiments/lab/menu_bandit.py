"""Does SmolLM2-135M learn to read a shuffled menu? The bandit of `tests/train/bandit.py` (issue 15).

    python -m experiments.lab.menu_bandit rl --rounds 12                     # PA-MAGRPO, both paid for "deliver"
    python -m experiments.lab.menu_bandit rl --rounds 16 --paying pay,pick   # each agent paid for its own option
    python -m experiments.lab.menu_bandit supervised --steps 40 --lr 1e-3    # cross-entropy on the right letter
    python -m experiments.lab.menu_bandit rl --paying pay,pick train.letter_augment=3   # any config override
    python -m experiments.lab.menu_bandit rl --rounds 24 --noise 2.5 lora.scope=reply   # noisy team reward
    python -m experiments.lab.menu_bandit rl --rounds 12 lora.scope=reply env.menu_format=letter_last

Two agents, one decision per episode among four options (`wait here`, `pick up an onion`,
`deliver the soup`, `drop what you hold`) whose letters are reshuffled at every decision;
training draws only the 12 even orderings, and P(own paying option) is measured after every
round (or every 5 supervised steps) on the 12 odd ones, never seen in training, with the
shipped letter policy summed over the state labels the model may write. `rl` runs the shipped
trainer (rollouts, cohort advantages, PPO-clipped per-agent update); `supervised` trains agent 0's
adapter on -log P(paying letter) with Adam: the upper bound of what the adapter can learn per
step, without RL's noise or PPO's clip. The settings (rank 16 on q,k,v,o of the top 8 layers,
K = 32, kl_coef 0) are those of the slow tests in `tests/train/test_learning.py`.
Writes `<out>/curve.jsonl` (one line per evaluation) and `<out>/curve.png`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from matplotlib.figure import Figure

REPO = Path(__file__).resolve().parents[2]


def _test_module(name: str):
    """A module of `tests/train/` (the bandit and its learning test's helpers), loaded by path: the
    probe reuses the acceptance test's setting instead of a copy that could drift from it."""
    spec = importlib.util.spec_from_file_location(name, REPO / "tests" / "train" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # test_learning imports `bandit` by its bare name
    spec.loader.exec_module(module)
    return module


_bandit = _test_module("bandit")
_learning_test = _test_module("test_learning")
HELD_OUT_ORDERS, OPTIONS, TRAIN_ORDERS, MenuBandit, menu_of = (
    _bandit.HELD_OUT_ORDERS, _bandit.OPTIONS, _bandit.TRAIN_ORDERS, _bandit.MenuBandit, _bandit.menu_of)
SMOLLM2_SETTING, menu_inputs, option_probabilities = (
    _learning_test.SMOLLM2_SETTING, _learning_test.menu_inputs, _learning_test.option_probabilities)

from omjax.config import load_config
from omjax.models import load
from omjax.train.trainer import Trainer



def run_rl(trainer: Trainer, rounds: int, own: list[int], log) -> None:
    held = [menu_of(o) for o in HELD_OUT_ORDERS]
    state = trainer.init_state()
    p = option_probabilities(trainer, state.bank, held)
    log({"round": -1, "heldout": [float(p[a, own[a]]) for a in range(len(own))]})
    for r in range(rounds):
        state, row, _ = trainer.round(state)
        p = option_probabilities(trainer, state.bank, held)
        log({"round": r, "team_return": row["team_return_mean"], "kl": row["kl"], "clip_frac": row["clip_frac"],
             "heldout": [float(p[a, own[a]]) for a in range(len(own))]})


def run_supervised(trainer: Trainer, steps: int, lr: float, log) -> None:
    game, policy, base = trainer.game, trainer.policy, trainer.model.params
    game.reset([0])

    def inputs_of(orders):
        menus = [menu_of(o) for o in orders]
        slot = np.array([[it.index for it in m].index(game.paying[0]) for m in menus])  # [N]
        return policy.prepare(base, menu_inputs(trainer, menus, 0)), jnp.asarray(slot)

    train, held = inputs_of(TRAIN_ORDERS), inputs_of(HELD_OUT_ORDERS)

    def p_paying(lora, base, data):
        x, slot = data
        p = jnp.exp(jax.nn.logsumexp(policy.joint_logp(base, lora, x), axis=1))  # [N, M], over labels
        return p[jnp.arange(p.shape[0]), slot]

    opt = optax.adam(lr)

    @jax.jit
    def step(lora, opt_state, base, data):
        loss, grad = jax.value_and_grad(lambda l: -jnp.mean(jnp.log(p_paying(l, base, data))))(lora)
        updates, opt_state = opt.update(grad, opt_state, lora)
        return optax.apply_updates(lora, updates), opt_state, loss

    evaluate = jax.jit(lambda lora, base, tr, ho: (p_paying(lora, base, tr).mean(), p_paying(lora, base, ho).mean()))
    lora = jax.tree.map(lambda x: x[0], trainer.init_state().bank)
    opt_state = opt.init(lora)
    tr, ho = evaluate(lora, base, train, held)
    log({"step": 0, "train": float(tr), "heldout": [float(ho)]})
    for s in range(1, steps + 1):
        lora, opt_state, loss = step(lora, opt_state, base, train)
        if s % 5 == 0:
            tr, ho = evaluate(lora, base, train, held)
            log({"step": s, "loss": float(loss), "train": float(tr), "heldout": [float(ho)]})


def plot_curve(rows: list[dict], paying: tuple[str, ...], mode: str, path: Path) -> None:
    """Held-out P(own paying option) of each agent against rounds (rl) or Adam steps (supervised)."""
    x = "round" if mode == "rl" else "step"
    fig = Figure(figsize=(6.0, 3.8))
    ax = fig.add_subplot()
    for a in range(len(rows[0]["heldout"])):
        ax.plot([r[x] for r in rows], [r["heldout"][a] for r in rows], marker="o", label=f"agent {a} ({paying[a]})")
    ax.axhline(0.25, color="grey", ls=":", label="chance")
    ax.set(xlabel=x + (" (-1: frozen base)" if mode == "rl" else ""), ylabel="held-out P(own paying option)",
           ylim=(0, 1), title=f"Menu bandit, SmolLM2-135M, {mode} (held-out letter orders)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=["rl", "supervised"])
    ap.add_argument("--rounds", type=int, default=12, help="rl: training rounds")
    ap.add_argument("--steps", type=int, default=40, help="supervised: Adam steps")
    ap.add_argument("--lr", type=float, default=2e-3, help="overrides the setting's train.lr")
    ap.add_argument("--paying", default="pay,pay", help=f"each agent's paying option, from {OPTIONS}")
    ap.add_argument("--noise", type=float, default=0.0,
                    help="rl: sd of Gaussian noise added to each episode's team reward (label noise)")
    ap.add_argument("--out", default=None, help="default runs/menu_bandit/<mode>_<paying>")
    ap.add_argument("overrides", nargs="*", help="config overrides KEY=VALUE applied after the setting's")
    args = ap.parse_intermixed_args(argv)
    paying = tuple(args.paying.split(","))
    noise = f"_noise{args.noise:g}" if args.noise else ""
    out = Path(args.out or f"runs/menu_bandit/{args.mode}_{'_'.join(paying)}{noise}")
    out.mkdir(parents=True, exist_ok=True)
    cfg = load_config(None, [*SMOLLM2_SETTING, f"train.lr={args.lr}", f"run.out_dir={out / 'run'}",
                             *args.overrides])
    trainer = Trainer(cfg, model=load("smollm2-135m", dtype=jnp.float32),
                      game=MenuBandit(2, 1, shuffle=True, paying=paying, reward_noise=args.noise,
                                     menu_format=cfg.env.menu_format))
    rows, t0 = [], time.time()
    curve = out / "curve.jsonl"
    curve.write_text("")

    def log(row):
        row = {**row, "time_s": round(time.time() - t0, 1)}
        rows.append(row)
        with curve.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)

    if args.mode == "rl":
        run_rl(trainer, args.rounds, [OPTIONS.index(p) for p in paying], log)
    else:
        run_supervised(trainer, args.steps, args.lr, log)
    plot_curve(rows, paying, args.mode, out / "curve.png")
    print(f"wrote {curve} and {out / 'curve.png'}")


if __name__ == "__main__":
    main()

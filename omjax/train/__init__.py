"""PA-MAGRPO training (paper §5.2, Algorithm 1).

* `grpo`: cohort advantages, clipped surrogate, exact-menu and k3 KL (pure array functions).
* `credit`, `objectives`: the plug-ins `train.credit` and `train.objective` select (the paper's
  cohort credit and PPO clip by default; the continuation critic and the target objective).
* `update`: the one-agent update against an abstract policy function, lifted to the adapter
  bank with `jax.vmap` and jitted (`make_bank_update`).
* `policy`: LLM policies over menus: `LetterPolicy` (the model's own state label and menu
  letter, one exact joint distribution scored in one forward) and `SamplePolicy` (generated
  two-line replies); per-row adapters and shared-prefix caches gathered from the bank.
* `rollout`: the engine over any `omjax.games.Game` (asynchronous option decisions, one batched LLM call per env step,
  per-decision records) and the padded per-adapter update batches.
* `checkpoint`, `metrics`: orbax round/best checkpoints; metrics.jsonl, learning-curve PNG.
* `trainer`: `Trainer(cfg).run(resume=...)`; `cli`: `omjax train`.
"""

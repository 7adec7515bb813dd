"""Symbolic option libraries, burn-in, guard synthesis and menu assembly (paper §5.1).

Game-agnostic core
------------------
* `schema`: the typed option contract. `Schema(game, options, read_set, effect_features,
  transient)`; `OptionSpec(name, target_class, label, effect, reasons)`; `Effect(private=Transition,
  shared=(Transition | Increased, ...))`; `Reason` (`TargetAbsent`, `NoPath`, `NothingHeld`, the
  only typed executor failures); outcome codes `SUCCESS`, `EFFECT_FAIL`, `EXPLICIT_BASE + Reason`.
  Defects 1-3 of §5.1 are rejected at construction: transitions must have disjoint from/to sets,
  shared-only effects make an option `solo_only`, instantiation is per target class.
  `effect_holds` (Python) and `compile_effects` + `effect_holds_jax` (jittable) evaluate effects
  on effect-feature code vectors taken before and after the executor's last step.
* `records`: `RecordTable`, the columnar burn-in log (one row per completed execution:
  ep, step, aid, opt, target, features [F], transient [G], outcome, solo, changed, contested),
  with `write_records_jsonl` / `read_records_jsonl` in the paper's record format and npz save/load.
* `synthesis`: `synthesize(table, schema, SynthesisConfig(min_explicit=5, min_support=5,
  max_literals=2)) -> list[Guard]`; `Guard(opt, channel, when, support)`;
  `certificate_violations` (must be 0); `write_guards` / `read_guards` (jsonl guard files).
* `menu`: `instantiate(schema, targets_by_class) -> list[Instance]` (one per target);
  `hidden_mask(schema, guards, instances, feats [I, F], live [I, R])` (Python evaluator);
  `assemble_menu(..., rng) -> list[MenuItem(letter, index, opt, target, label)]` with letters
  shuffled per decision from `episode_rng(seed, agent)`; `render_menu(items)`.
  JAX: `GuardTable.from_guards(schema, guards)` (literal tables, a pytree) and
  `hidden_mask_jax(table, inst_opt [I], feats [..., I, F], live [..., I, R]) -> bool [..., I]`,
  `letter_ranks_jax(key, visible [..., I]) -> int32 [..., I]` (-1 = hidden), and on the host
  `items_from_ranks(schema, instances, ranks [I]) -> list[MenuItem]`.
* `diagnostics`: `diagnose(table, schema)` lists options with 100 % explicit failure, options
  that never succeed (at all, or in the records synthesis learns from) or never ran, and
  successes with an empty delta.
* The registry of games (name -> library, shipped guard files `omjax/options/guards/<game>_<variant>.jsonl`)
  and the `omjax burnin | guards | menu` commands live in `omjax.games` (`registry`, `cli`).

A game library supplies: the `Schema`; its targets per class for a state; read-set and
transient features per instance at initiation; a raw executor that returns one primitive action
per env step (or a `Reason` at initiation) and says when its plan is drained; the live check of
each `Reason` (for explicit guards); and the effect features before/after the last step.
Records should set `contested` where another agent can act on the same target (it defaults to
False); options without a private effect part learn from solo records, or from uncontested ones
when they never succeeded solo (`SynthesisConfig.solo_only_records`).

Overcooked (`omjax.options.overcooked`)
---------------------------------------
`lib = library(layout)` is an `OvercookedOptions`: `lib.instances` (I instances, fixed per
layout; `lib.label(i)` is the menu text, e.g. "place held item in pot @ (4, 2)"), `lib.inst_opt`
[I], `lib.inst_xy` [I, 2], planner tables `lib.plans` (shortest interact plans, BFS-exact,
partner = dynamic obstacle: a planned move into an occupied cell becomes STAY). Shipped guard
files: `omjax/options/guards/overcooked_<layout>.jsonl` (`read_guards(guard_path("overcooked",
layout), SCHEMA)`), reproduced by `omjax guards --game overcooked --layout <layout>`.

A rollout (one env; `jax.vmap` every call for `[E]` envs):

    table = GuardTable.from_guards(SCHEMA, guards)
    state, ex = initial_state(lib.layout), lib.init_exec()
    for t in range(horizon):
        need = ex.inst < 0                                   # bool [A]: agents at a decision point
        hidden = lib.hidden_mask(table, state)               # bool [A, I] (jittable;
                                                             # hidden_mask_batch: [E, A, I])
        letters = letter_ranks_jax(key_t, ~hidden)           # int32 [A, I], -1 = not shown
        # prompt text: items_from_ranks(SCHEMA, lib.instances, letters[a]) per deciding agent a
        choice = ...policy picks a visible instance per agent...      # int32 [A]
        state, ex, rec, sparse, shaped = lib.option_step(state, ex, choice, active)  # rewards [A]
        # rec.valid [A]: an execution finished this step, rec.outcome its success/failure code

Python, for prompts: `lib.menu(state, agent, guards, episode_rng(seed, agent)) -> [MenuItem]`
(letter, index into lib.instances, opt, target, label); `start_menu(layout, seed, agent, guards)`.
Burn-in: `burnin(layout, solo, team, seed)` (jitted; 2,000 + 2,000 episodes, 1.23 M decisions, in
~5-6 s once compiled on 2 busy shared cores) and `burnin_python(layout, episodes, choices)` (the same library per env on the
reference simulator; identical records for identical choices).
"""

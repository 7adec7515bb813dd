"""`omjax burnin | guards | menu`: Stages 2-4 of the option pipeline from the command line.

    omjax burnin --game overcooked --layout asymmetric_advantages --out runs/burnin.jsonl
    omjax guards --game overcooked --layout asymmetric_advantages      # writes the shipped guard file
    omjax menu   --game overcooked --layout asymmetric_advantages --seed 3 --agent 1
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from omjax.jax_cache import enable_compilation_cache
from omjax.options.diagnostics import diagnose
from omjax.options.menu import render_menu
from omjax.options.records import load_npz, read_records_jsonl, save_npz, write_records_jsonl
from omjax.games.registry import GAMES, canonical_game, guard_path, library, resolve_variant
from omjax.options.synthesis import SynthesisConfig, certificate_violations, read_guards, synthesize, write_guards


def _parser(command: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"omjax {command}")
    p.add_argument("--game", required=True,
                   help=f"one of {', '.join(GAMES)} (aliases such as clean_up are accepted)")
    p.add_argument("--layout", "--variant", dest="variant", default=None,
                   help="Overcooked layout / Melting Pot variant (default: the game's first)")
    p.add_argument("--seed", type=int, default=0)
    if command in ("burnin", "guards"):
        p.add_argument("--solo", type=int, default=None, help="solo burn-in episodes (default: the game's)")
        p.add_argument("--team", type=int, default=None, help="team burn-in episodes (default: the game's)")
        p.add_argument("--quiet", action="store_true", help="no progress bar")
    if command == "burnin":
        p.add_argument("--out", required=True, help="records file: .jsonl (paper format) or .npz (columnar)")
    if command == "guards":
        p.add_argument("--records", default=None,
                       help="synthesise from this records file (.jsonl or .npz) instead of a burn-in")
        p.add_argument("--save-records", default=None, help="also write the burn-in records here (jsonl)")
        p.add_argument("--out", default=None, help="guard file (default: the shipped one for this game/layout)")
        p.add_argument("--min-support", type=int, default=SynthesisConfig.min_support)
        p.add_argument("--min-explicit", type=int, default=SynthesisConfig.min_explicit)
        p.add_argument("--max-literals", type=int, default=SynthesisConfig.max_literals)
        p.add_argument("--solo-only-records", choices=("auto", "solo", "uncontested"),
                       default=SynthesisConfig.solo_only_records,
                       help="records that options without a private effect learn from")
    if command == "menu":
        p.add_argument("--agent", type=int, default=0)
        p.add_argument("--guards", default=None, help="guard file (default: the shipped one)")
        p.add_argument("--no-guards", action="store_true", help="show the guardless instantiated menu")
    return p


def _run_burnin(lib, variant, args):
    solo = lib.DEFAULT_EPISODES[0] if args.solo is None else args.solo
    team = lib.DEFAULT_EPISODES[1] if args.team is None else args.team
    if solo < 0 or team < 0 or solo + team == 0:
        raise SystemExit(f"need a positive number of burn-in episodes, got --solo {solo} --team {team}")
    t0 = time.perf_counter()
    table = lib.burnin(variant, solo, team, args.seed, progress=not args.quiet)
    return table, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("burnin", "guards", "menu"):
        print("usage: omjax {burnin|guards|menu} --game <game> ...", file=sys.stderr)
        return 2
    command = argv[0]
    args = _parser(command).parse_args(argv[1:])
    try:
        args.game = canonical_game(args.game)
        lib = library(args.game)
        variant = resolve_variant(lib, args.game, args.variant)
    except ValueError as err:
        print(f"omjax {command}: {err}", file=sys.stderr)
        return 2
    schema = lib.SCHEMA
    enable_compilation_cache()

    if command == "burnin":
        table, secs = _run_burnin(lib, variant, args)
        if args.out.endswith(".npz"):
            save_npz(args.out, table)
        else:
            write_records_jsonl(args.out, table, schema)
        print(f"{len(table)} records in {secs:.2f} s -> {args.out}")
        print(diagnose(table, schema).render())
        return 0

    if command == "guards":
        config = SynthesisConfig(min_explicit=args.min_explicit, min_support=args.min_support,
                                 max_literals=args.max_literals, solo_only_records=args.solo_only_records)
        if args.records:
            table = load_npz(args.records) if args.records.endswith(".npz") else read_records_jsonl(args.records, schema)
            secs = 0.0
        else:
            table, secs = _run_burnin(lib, variant, args)
            if args.save_records:
                write_records_jsonl(args.save_records, table, schema)
        t0 = time.perf_counter()
        guards = synthesize(table, schema, config)
        synth_secs = time.perf_counter() - t0
        violations = certificate_violations(guards, table, schema, config)
        if violations:
            print(f"omjax guards: certificate violated: {violations} logged successes hidden", file=sys.stderr)
            return 1
        out = args.out or guard_path(args.game, variant)
        write_guards(out, guards)
        print(diagnose(table, schema, config).render())
        print(f"{len(table)} records (burn-in {secs:.2f} s), {len(guards)} guards "
              f"({sum(g.channel == 'explicit' for g in guards)} explicit) in {synth_secs:.3f} s -> {out}")
        print(json.dumps({"game": args.game, "variant": variant, "records": len(table),
                          "guards": len(guards), "burnin_s": round(secs, 3), "synthesis_s": round(synth_secs, 4)}))
        return 0

    guards = []
    if not args.no_guards:
        path = args.guards or guard_path(args.game, variant)
        try:
            guards = read_guards(path, schema)
        except FileNotFoundError:
            print(f"omjax menu: no guard file at {path}; run `omjax guards --game {args.game} "
                  f"--layout {variant}` or pass --no-guards", file=sys.stderr)
            return 2
    try:
        items = lib.start_menu(variant, args.seed, args.agent, guards)
    except ValueError as err:
        print(f"omjax menu: {err}", file=sys.stderr)
        return 2
    print(f"{args.game} / {variant}, seed {args.seed}, agent {args.agent}: {len(items)} options\n")
    print(render_menu(items))
    return 0

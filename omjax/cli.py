"""`omjax <command> ...`: one entry point, one module per command.

Each command module exposes `main(argv: list[str] | None = None) -> int`; it is imported only
when its command runs, so `omjax guards` never imports the LLM stack and vice versa.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS: dict[str, tuple[str, str]] = {
    "rollout": ("omjax.envs.overcooked.cli", "random-policy Overcooked rollouts; prints returns"),
    "burnin": ("omjax.games.cli", "uniform-random option burn-in (Stage 2); writes jsonl records"),
    "guards": ("omjax.games.cli", "burn-in + guard synthesis (Stages 2-3) for a game"),
    "menu": ("omjax.games.cli", "print the option menu an agent sees at the start state"),
    "config": ("omjax.config", "print a resolved run config, or (--doc) the reference of every key"),
    "train": ("omjax.train.cli", "PA-MAGRPO training from a YAML config"),
    "eval": ("omjax.eval.cli", "held-out evaluation of a checkpoint with bootstrap CIs"),
    "audit": ("omjax.eval.audit_cli", "behavioural audits (histograms, solo test, heatmaps, patches)"),
}


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: omjax <command> [args...]", "", "commands:"]
    lines += [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"omjax: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    return int(module.main([name, *rest]) or 0)


if __name__ == "__main__":
    sys.exit(main())

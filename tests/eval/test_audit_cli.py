import json

import numpy as np
from PIL import Image

from omjax.eval.audit_cli import main
from omjax.eval.results import EpisodeResult, Trajectory, trajectory_path, write_results


def _write_eval(eval_dir, policy, seeds, patches, worker_cells):
    """An eval directory as `omjax eval` leaves it: agent 1 always waits at cell (1, 1)."""
    results = []
    for seed in seeds:
        results.append(EpisodeResult(
            policy=policy, game="commons_harvest", layout="default", interface="options", seed=seed,
            env_steps=len(patches), team_return=5.0, agent_returns=(5.0, 0.0), llm_calls=(10, 10),
            parse_failures=(0, 0), invalid_actions=(0, 0),
            macro_counts=({"eat_apple": 7, "move_to": 3}, {"wait": 10}),
            primitive_counts=({}, {}),
        ))
        positions = np.array([[cell, (1, 1)] for cell in worker_cells], np.int32)  # [T, A=2, 2]
        walls = np.zeros((4, 5), bool)
        walls[0] = True
        Trajectory(positions=positions, walls=walls, patches_alive=np.asarray(patches, np.int32)).save(
            trajectory_path(eval_dir, seed))
    write_results(eval_dir / "eval.jsonl", results)


def test_audit_commands_write_pngs_and_summaries(tmp_path):
    cells = [(2, c) for c in range(5)] + [(3, 4)] * 3
    _write_eval(tmp_path / "frozen", "frozen", [10000, 10001], [6, 4, 2, 1, 0, 0, 0, 0], cells)
    _write_eval(tmp_path / "tuned", "tuned", [10000, 10001], [6, 6, 5, 4, 3, 3, 3, 3], cells)

    assert main(["audit", "macro", "--eval", str(tmp_path / "tuned")]) == 0
    macro = json.loads((tmp_path / "tuned" / "audit_macro.json").read_text())
    assert macro["options"] == ["eat_apple", "move_to", "wait"]
    assert macro["shares"][1] == [0.0, 0.0, 1.0]  # the idle agent shows as 100 % wait

    out = tmp_path / "fig2.png"
    assert main(["audit", "patches", "--eval", f"frozen={tmp_path / 'frozen'}", f"tuned={tmp_path / 'tuned'}",
                 "--out", str(out)]) == 0
    patches = json.loads(out.with_suffix(".json").read_text())
    assert patches["frozen"]["depletion_step"] == [4, 4]
    assert patches["tuned"]["final_mean_alive"] == 3.0

    assert main(["audit", "heatmap", "--eval", str(tmp_path / "tuned" / "eval.jsonl")]) == 0
    heat = json.loads((tmp_path / "tuned" / "audit_heatmap.json").read_text())
    assert heat["visits"] == [16, 16] and heat["distinct_cells"] == [6, 1]
    for png in (tmp_path / "tuned" / "audit_macro.png", out, tmp_path / "tuned" / "audit_heatmap.png"):
        with Image.open(png) as image:
            assert image.format == "PNG"


def test_audit_names_missing_inputs(tmp_path):
    import pytest

    with pytest.raises(SystemExit, match="no eval.jsonl"):
        main(["audit", "macro", "--eval", str(tmp_path)])


def test_macro_and_patches_pool_runs_of_several_seeds(tmp_path):
    """Two training seeds whose worker is a different agent index: pooled by return rank, the
    worker's and the idler's choices land in one row each; patch curves pool every episode."""
    import dataclasses

    from omjax.eval.audit_cli import audit_macro, audit_patches
    from omjax.eval.results import read_results

    cells = [(2, c) for c in range(4)]
    _write_eval(tmp_path / "s0", "s0", [10000], [6, 5, 4, 3], cells)
    _write_eval(tmp_path / "s1", "s1", [10000], [6, 6, 6, 6], cells)
    swapped = [dataclasses.replace(r, agent_returns=r.agent_returns[::-1], macro_counts=r.macro_counts[::-1])
               for r in read_results(tmp_path / "s1" / "eval.jsonl")]
    write_results(tmp_path / "s1" / "eval.jsonl", swapped)
    macro = audit_macro([tmp_path / "s0", tmp_path / "s1"], tmp_path / "fig1.png")
    assert macro["options"] == ["eat_apple", "move_to", "wait"]
    assert macro["counts"] == [[14, 6, 0], [0, 0, 20]]  # rank 0: the worker of both seeds
    patches = audit_patches({"tuned": [tmp_path / "s0", tmp_path / "s1"]}, tmp_path / "fig2.png", n_patches=6)
    assert patches["tuned"]["runs"] == 2 and patches["tuned"]["final_mean_alive"] == 4.5

"""`python -m omjax.bench round`: one real round of a paper config, tiny, on the CPU."""

import json

from omjax.bench import round as bench_round


def test_flops_only_reports_the_paper_scale_pair(capsys):
    assert bench_round.main(["--flops-only"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    pf = out["paper_flops"]
    assert out["backbone"] == "qwen3-4b-instruct-2507" and "rounds" not in out
    assert pf["workload"]["decisions"] == 0.4 * 400 * 6  # per agent: 0.4 decisions a step, K = 6
    before, now = pf["pflop"]["before"], pf["pflop"]["now"]
    assert set(before) >= {"rollout_prefill", "rollout_decide", "reference", "epoch_forward", "remat", "backward"}
    assert 6.5 < pf["prompt_passes"]["before"] < 7.5  # reference + 2 x (forward, remat, backward)
    assert before["update"] > 0.85 * before["total"]
    # The update as it runs now (shared prefix once per minibatch, remat from the memory plan):
    # at least a quarter fewer FLOPs for the round (issue #53).
    assert now["total"] <= 0.75 * before["total"]
    assert pf["remat_layers"]["now"] < pf["remat_layers"]["of"]


def test_tiny_round_writes_every_phase(tmp_path, capsys):
    out_file = tmp_path / "round.json"
    assert bench_round.main(["--tiny", "--out", str(out_file)]) == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    saved = json.loads(out_file.read_text())
    assert saved == line
    (r,) = saved["rounds"]
    assert r["collect"]["decisions"] > 0 and r["collect"]["prompt_tokens"] > 0
    assert r["update"]["active_rows"] > 0 and r["update"]["tflop"] > 0
    assert r["collect"]["mfu"] is None  # a CPU has no peak
    assert saved["reference"]["wall_s"] > 0
    assert saved["memory"]["estimate_bytes"] > 0
    assert saved["projection"]["cell_s"] > 0 and saved["projection"]["cell_seeds"] == 5

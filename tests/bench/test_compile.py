"""`python -m omjax.bench compile`: the reference depth and one real tiny compile."""

import json

from omjax.bench import compile as bench_compile


def test_quarter_depth_is_whole_blocks_of_the_layer_pattern():
    # gemma-4-E4B: 42 layers of (5 sliding + 1 full) -> 42 // 4 = 10, raised to two blocks.
    assert bench_compile._period("gemma-4-e4b-it", False) == 6
    assert bench_compile.quarter_depth("gemma-4-e4b-it", False) == 12
    assert bench_compile._period("qwen3.5-2b", False) == 4                 # 3 linear + 1 full
    assert bench_compile.quarter_depth("qwen3.5-2b", False) == 8
    assert bench_compile._period("qwen3-4b-instruct-2507", False) == 1     # one layer kind
    assert bench_compile.quarter_depth("qwen3-4b-instruct-2507", False) == 9


def test_tiny_compile_prints_one_json_line(capsys):
    assert bench_compile.main(["--tiny", "--models", "smollm2-135m", "--programs", "decide"]) == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    (row,) = line["results"]
    assert line["bench"] == "compile" and row["backbone"] == "smollm2-135m" and row["program"] == "decide"
    assert row["full"]["layers"] == 8 and row["quarter"]["layers"] == 2
    assert row["full"]["compile_s"] > 0 and row["full"]["hlo_kb"] > 0
    assert row["ratio"] == round(row["full"]["total_s"] / row["quarter"]["total_s"], 2)

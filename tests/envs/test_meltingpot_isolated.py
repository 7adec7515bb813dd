"""The isolated task server: every task forks from the same heap, in any invocation environment."""

import pytest

from omjax.envs.meltingpot import isolated

pytestmark = pytest.mark.skipif(not isolated.isolation_available(), reason="needs Linux fork + personality(2)")


def test_every_task_starts_from_the_same_heap_whatever_the_callers_environment(monkeypatch, tmp_path):
    tasks = [(k, 0, 0) for k in range(5)]
    first = list(isolated.run_tasks(isolated.__name__, "heap_probe", "-", tasks))
    assert len(first) == 5 and len(set(first)) == 1  # no task sees what the ones before it did
    # Environment size, working directory and the caller's own heap moved addresses before.
    monkeypatch.setenv("OMJAX_TEST_PAD", "x" * 3000)
    monkeypatch.chdir(tmp_path)
    ballast = [bytearray(1000) for _ in range(1000)]
    again = list(isolated.run_tasks(isolated.__name__, "heap_probe", "-", tasks[:2]))
    assert again == first[:2] and ballast


def test_a_failing_task_raises_with_the_servers_traceback():
    with pytest.raises(RuntimeError, match=r"after 1 of 3 tasks(.|\n)*ValueError: heap_probe: negative task"):
        list(isolated.run_tasks(isolated.__name__, "heap_probe", "-", [(0, 0, 0), (-1, 0, 0), (2, 0, 0)]))


def test_an_overlong_argument_is_refused():
    with pytest.raises(ValueError, match="must be one line of <= 192 characters"):
        list(isolated.run_tasks(isolated.__name__, "heap_probe", "x" * 200, [(0, 0, 0)]))

"""K Melting Pot episodes stepped concurrently, one engine per worker process.

    with EnvPool("cleanup", num_envs=4) as pool:
        states = pool.reset([10, 11, 12, 13])        # list of SymbolicState | WorkerCrash
        while not all(...done...):
            states = pool.step(actions)                # actions int [K, A]

Every call sends its command to all live workers first and then collects the replies, so the K
engines advance in parallel. A worker that dies (the engine aborts the process, e.g. a Lua
check failure) or raises is reported in its slot as a `WorkerCrash` carrying the episode seed,
the step and the message; the other slots carry on, and the dead slot is skipped (its entry
stays the crash) until the next `reset` restarts its process. Workers are started with the
`spawn` method, so a parent that already imported JAX is never forked.
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import signal
import traceback

import numpy as np

from omjax.envs.meltingpot.adapter import SymbolicState, make


@dataclasses.dataclass(frozen=True)
class WorkerCrash:
    """A rollout lost to an engine failure."""

    slot: int
    seed: int
    step: int  # env steps the episode had completed
    message: str
    """The worker's traceback, or how the process died."""

    @property
    def summary(self) -> str:
        """The last line of `message` (the exception itself)."""
        lines = [line for line in self.message.strip().splitlines() if line.strip()]
        return lines[-1].strip() if lines else "no message"


class RolloutWorkerError(RuntimeError):
    """An episode's engine worker crashed; the message says where (game, rollout, step) in one
    line, and callers that know the user's seed (run seed and round, held-out seed) prefix it."""


def _worker(conn, game: str, episode_length: int | None) -> None:
    # Ctrl-C reaches the whole process group; the parent decides what stops, and a worker
    # printing its own KeyboardInterrupt traceback would bury the parent's one-line report.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    env = make(game, episode_length)
    while True:
        cmd, arg = conn.recv()
        if cmd == "close":
            conn.close()
            return
        try:
            state = env.reset(arg) if cmd == "reset" else env.step(arg)
        except Exception:  # noqa: BLE001  (reported to the parent with the seed, not swallowed)
            conn.send(("error", traceback.format_exc()))
        else:
            conn.send(("ok", state))


class EnvPool:
    """K worker processes, each holding one `MeltingPotEnv` of `game`."""

    def __init__(self, game: str, num_envs: int, episode_length: int | None = None):
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        make(game, episode_length).close()  # fail here, in the parent, on a bad game name
        self.game = game
        self.episode_length = episode_length
        self.num_envs = num_envs
        self._ctx = mp.get_context("spawn")
        self._procs: list = [None] * num_envs
        self._conns: list = [None] * num_envs
        self._seeds = [-1] * num_envs
        self._steps = [0] * num_envs
        self._results: list[SymbolicState | WorkerCrash | None] = [None] * num_envs

    def __enter__(self) -> "EnvPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def pid(self, slot: int) -> int | None:
        proc = self._procs[slot]
        return None if proc is None else proc.pid

    def _start(self, slot: int) -> None:
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(target=_worker, args=(child, self.game, self.episode_length), daemon=True)
        proc.start()
        child.close()
        self._procs[slot], self._conns[slot] = proc, parent

    def _alive(self, slot: int) -> bool:
        return self._procs[slot] is not None and not isinstance(self._results[slot], WorkerCrash)

    def _crash(self, slot: int, message: str) -> WorkerCrash:
        proc = self._procs[slot]
        if proc is not None:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join()
            if proc.exitcode not in (None, 0):
                message = f"{message} (worker exit code {proc.exitcode})"
        self._procs[slot] = self._conns[slot] = None
        return WorkerCrash(slot=slot, seed=self._seeds[slot], step=self._steps[slot], message=message)

    def _exchange(self, slots: list[int], cmds: list[tuple]) -> None:
        sent = []
        for slot, cmd in zip(slots, cmds):
            try:
                self._conns[slot].send(cmd)
                sent.append(slot)
            except (BrokenPipeError, OSError) as err:  # the worker's end is closed: it has died
                self._results[slot] = self._crash(slot, f"worker died: {err!r}")
        for slot in sent:
            try:
                status, payload = self._conns[slot].recv()
            except (EOFError, OSError) as err:
                self._results[slot] = self._crash(slot, f"worker died: {err!r}")
                continue
            if status == "ok":
                self._results[slot] = payload
                self._steps[slot] = payload.step
            else:
                self._results[slot] = WorkerCrash(slot=slot, seed=self._seeds[slot], step=self._steps[slot],
                                                  message=payload)

    def reset(self, seeds) -> list[SymbolicState | WorkerCrash]:
        seeds = [int(s) for s in seeds]
        if len(seeds) != self.num_envs:
            raise ValueError(f"need {self.num_envs} seeds, got {len(seeds)}")
        for slot, seed in enumerate(seeds):
            if self._procs[slot] is None or not self._procs[slot].is_alive():
                self._start(slot)
            self._seeds[slot], self._steps[slot] = seed, 0
            self._results[slot] = None
        self._exchange(list(range(self.num_envs)), [("reset", s) for s in seeds])
        return list(self._results)

    def step(self, actions) -> list[SymbolicState | WorkerCrash]:
        """Step every live, unfinished episode with its row of `actions` int [K, A].

        Finished episodes keep their last state; crashed slots keep their `WorkerCrash`."""
        actions = np.asarray(actions)
        if actions.ndim != 2 or actions.shape[0] != self.num_envs:
            raise ValueError(f"actions must be int [K={self.num_envs}, A], got shape {actions.shape}")
        slots = [k for k in range(self.num_envs)
                 if self._alive(k) and isinstance(self._results[k], SymbolicState) and not self._results[k].done]
        self._exchange(slots, [("step", actions[k]) for k in slots])
        return list(self._results)

    def close(self) -> None:
        for slot in range(self.num_envs):
            proc, conn = self._procs[slot], self._conns[slot]
            if proc is None:
                continue
            try:
                conn.send(("close", None))
            except (BrokenPipeError, OSError):
                pass
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join()
            self._procs[slot] = self._conns[slot] = None

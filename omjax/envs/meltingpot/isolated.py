"""Run engine tasks (one Melting Pot episode each) so that each is a pure function of its arguments.

Why it is needed. Even with LuaJIT's PRNG pinned (`engine.pin_luajit_seed`), what an engine does
at a given seed depends on the memory addresses its objects get: the same engine seed spawned
the seven Commons Harvest avatars on 2-4 different cell sets depending only on how many bytes of
environment variables the process had (the step-0 state of seeds 0-9 under padded environments,
measured on 2026-12-01, commit 9ed08b9; docs/results.md). Addresses in turn depend on everything
the process did before: its environment, argv, working directory, the path of the checkout, whether .pyc
files had to be compiled, the type of its stdio files and every earlier episode. So a long
burn-in in one process drifted from one invocation to the next (three 64 + 64 Commons Harvest
burn-ins: 19,577 / 19,193 / 19,224 records), and episode k of a burn-in depended on episodes
0 .. k-1.

What `run_tasks` does about it: one server process is started in a canonical state (no address
randomisation, one thread, PYTHONHASHSEED=0, a fixed environment, cwd `/`, the checkout reached
through a fixed-length link, regular files as stdin and stderr, a fixed-width argv, .pyc files
written beforehand) and builds what every task needs; then each task runs in a child forked from
that unchanged server, which reads its fixed-size task only after the fork and writes its result
only after the work. Every task therefore starts from the same address space whatever ran before
it or beside it, and a burn-in of n episodes is a prefix of a burn-in of 2n. That holds for one
installation (interpreter, packages and their paths); another may give other records, just as
reproducibly.
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import os
import pickle
import signal
import struct
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator, Sequence

ADDR_NO_RANDOMIZE = 0x0040000  # personality(2) flag: this process's address space is not randomised
CHILD_FLAG = "OMJAX_BURNIN_CHILD"
"""Set in the server's environment: code running there must not start another isolated process."""

TASK_FORMAT = "<3q"
"""A task: three int64 (read by the forked child from the server's stdin, which is the task file)."""
ARG_WIDTH = 192
"""The server's one argument `<module> <factory> <arg>`, space-padded to this width: argv has one size."""
_DONE = 3  # exit status of a child that found no task left
_WARMUP_FORKS = 2  # forks that run nothing: the server's loop state is steady before the first task
_LENGTH = struct.Struct("<Q")
_PR_SET_PDEATHSIG = 1  # prctl(2) option: a signal this process gets when its parent dies

# Sets the flag, then re-executes the interpreter (the flag survives exec) on the real command:
# no preexec_fn, so a multithreaded parent (JAX) never runs Python code in a forked child.
_NO_ASLR_LAUNCHER = ("import ctypes, os, sys; ctypes.CDLL(None).personality(%d); "
                     "os.execv(sys.executable, [sys.executable] + sys.argv[1:])" % ADDR_NO_RANDOMIZE)
_SERVER_CODE = "import sys; from omjax.envs.meltingpot.isolated import serve; sys.exit(serve(sys.argv[1]))"


def isolation_available() -> bool:
    """fork and personality(2) exist (Linux) and this process is not already an isolated server."""
    return sys.platform.startswith("linux") and os.environ.get(CHILD_FLAG) != "1"


def _checkout_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _server_env(root_link: str) -> dict[str, str]:
    """The server's whole environment: nothing inherited but the opt-out of the PRNG pin."""
    # One thread: a BLAS / OpenMP worker that mallocs maps its arena whenever it gets scheduled.
    env = {"PATH": os.defpath, "PYTHONHASHSEED": "0", CHILD_FLAG: "1", "OPENBLAS_NUM_THREADS": "1",
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": root_link}
    if "OMJAX_MELTINGPOT_ENTROPY" in os.environ:
        env["OMJAX_MELTINGPOT_ENTROPY"] = os.environ["OMJAX_MELTINGPOT_ENTROPY"]
    return env


def run_tasks(module: str, factory: str, arg: str, tasks: Sequence[tuple[int, int, int]]) -> Iterator:
    """Yield `run(task)` for each task, in order, where `run = module.factory(arg)` is built once
    in a canonical server process and each call runs in a fresh fork of it (module docstring).
    Results must pickle. Raises `RuntimeError` with the server's stderr when a task fails."""
    line = f"{module} {factory} {arg.strip()}"
    if len(line) > ARG_WIDTH or "\n" in line:
        raise ValueError(f"run_tasks: '<module> <factory> <arg>' must be one line of <= {ARG_WIDTH} "
                         f"characters, got {line!r}")
    command = [sys.executable, "-c", _NO_ASLR_LAUNCHER, "-c", _SERVER_CODE, line.ljust(ARG_WIDTH)]
    # /tmp, not $TMPDIR: every path the server sees has the same length on every invocation.
    with tempfile.TemporaryDirectory(prefix="omjax-iso-", dir="/tmp") as tmp:
        link = os.path.join(tmp, "root")
        os.symlink(_checkout_root(), link)
        env = _server_env(link)
        task_file, err_file = os.path.join(tmp, "tasks"), os.path.join(tmp, "stderr")
        with open(task_file, "wb") as f:
            f.write(b"".join(struct.pack(TASK_FORMAT, *map(int, t)) for t in tasks))
        with open(task_file, "rb") as fin, open(err_file, "wb") as ferr:
            # Compiling a module allocates differently from loading its .pyc: a server without
            # tasks first imports (and so compiles) everything the real one will.
            warm = subprocess.run(command, env=env, cwd="/", stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=ferr).returncode
            proc = subprocess.Popen(command, stdin=fin, stdout=subprocess.PIPE, stderr=ferr, env=env, cwd="/")
            done = 0
            try:
                for _ in tasks:
                    head = proc.stdout.read(_LENGTH.size)
                    if len(head) < _LENGTH.size:
                        break
                    yield pickle.loads(proc.stdout.read(_LENGTH.unpack(head)[0]))
                    done += 1
                rc = proc.wait() or warm
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                proc.stdout.close()
        if rc != 0 or done < len(tasks):
            with open(err_file, "rb") as f:
                tail = f.read()[-4000:].decode(errors="replace")
            raise RuntimeError(f"isolated engine process failed (exit {rc}) after {done} of {len(tasks)} "
                               f"tasks:\n{tail}")


def serve(line: str) -> int:
    """The server loop (`python -c _SERVER_CODE "<module> <factory> <arg>"`): build `run`, then fork
    once per task; the child reads its task from stdin and writes `run(task)` to stdout."""
    libc = ctypes.CDLL(None)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # the caller gone (killed), nobody reads the results
    module, factory, arg = line.split(maxsplit=2)
    run: Callable = getattr(importlib.import_module(module), factory)(arg.strip())
    size = struct.calcsize(TASK_FORMAT)
    # The loop allocates only what it frees again before the next fork (`del`, and a counter that
    # stops in the cached small ints), so every task's fork sees the same heap: an int still held
    # from the previous iteration would make the state alternate between forks.
    warmups = 0
    while True:
        gc.collect()  # the same collector state at every fork
        pid = os.fork()
        if pid == 0:
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
            status = 0
            try:
                if warmups == _WARMUP_FORKS:
                    raw = os.read(0, size)
                    if len(raw) < size:
                        status = _DONE
                    else:
                        out = pickle.dumps(run(struct.unpack(TASK_FORMAT, raw)))
                        with open(1, "wb", closefd=False) as f:
                            f.write(_LENGTH.pack(len(out)) + out)
            except BaseException:  # noqa: BLE001  (reported on stderr, exit status 1)
                traceback.print_exc()
                status = 1
            finally:
                sys.stderr.flush()
                os._exit(status)
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        del pid
        if status == _DONE:
            return 0
        if status != 0:
            return status
        del status
        warmups = min(warmups + 1, _WARMUP_FORKS)


def heap_probe(arg: str) -> Callable[[tuple[int, int, int]], tuple[int, int]]:
    """A `run_tasks` factory that checks the premise: run(task) returns the addresses a fresh
    Python object and a fresh 64 KiB malloc block get in the task's fork (equal for every task of
    every invocation when each fork starts from the same heap); a negative task[0] raises."""
    del arg

    def run(task: tuple[int, int, int]) -> tuple[int, int]:
        if task[0] < 0:
            raise ValueError(f"heap_probe: negative task {task}")
        return id(object()), ctypes.addressof(ctypes.create_string_buffer(1 << 16))

    return run

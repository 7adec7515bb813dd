"""`python -m omjax.bench env`: env steps per second, JAX Overcooked vs overcooked_ai_py, one run.

Ours: `jit(scan(vmap(env.step)))` over a batch of envs with uniform random joint actions drawn on
device, auto-reset at the horizon included. Reference: overcooked_ai_py 1.1.0
`OvercookedGridworld.get_state_transition` stepping one env in Python with uniform random joint
actions, reset at the horizon (the core of `OvercookedEnv.step`, without its bookkeeping, so the
reference's figure is if anything flattering). Both count joint env steps. With `--consume-obs`
each step's observations are also reduced into the carry, so XLA cannot prune their computation.

The batch is split over `--devices` XLA CPU devices (default: one per core of the machine), each
stepping its share of the envs with `shard_map`; the reference is one Python process on one core.
By default (`--xla-threads 1`) each device runs its computation on one thread: XLA would otherwise
split single loops over a pool of one thread per core, and on so few cores those hand-offs cost
more than they gain. The output states the devices used and also gives the ratio per device (per
core) and per CPU second of each side, each device's own rate (its share of the envs over the time
that share took) and the CPU seconds per wall second this process got: under load from other jobs
that is below the number of devices, and the total falls short of devices x one device's rate.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np
import tqdm


# omjax.envs is imported inside the functions: importing it (through jaxmarl) starts JAX's backend,
# and `--xla-threads` has to set XLA's flags before that.


def start_backend(devices: int, one_thread: bool) -> None:
    """Start JAX's CPU backend with `devices` devices; with `one_thread`, one XLA thread per device.

    XLA sizes the CPU client's intra-op thread pool from the CPUs this process may run on when the
    client starts, so the process is restricted to one CPU for that moment and then given back all
    of its CPUs, which the devices' computations then run on side by side.

    On Linux an affinity belongs to a thread, not to the process: the threads XLA starts while the
    process is held to one CPU (the pool that runs the devices' computations among them) inherit
    that one CPU, and restoring the calling thread's affinity leaves them there, every device's work
    time-sharing one core. So every thread of the process is given back the CPUs.
    """
    if jax._src.xla_bridge.backends_are_initialized():
        if jax.device_count() != devices or one_thread:
            raise RuntimeError("the bench must set up JAX's backend itself: run it in a fresh process "
                               f"(or with --devices {jax.device_count()} --xla-threads 0)")
        return
    jax.config.update("jax_num_cpu_devices", devices)
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    if one_thread and cpus:
        os.sched_setaffinity(0, {min(cpus)})
    try:
        jax.devices()
    finally:
        if one_thread and cpus:
            restore_affinity(cpus)


def restore_affinity(cpus: set[int]) -> None:
    """Let every thread of this process (not only the calling one) run on `cpus`."""
    tasks = os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else []
    for tid in [0, *map(int, tasks)]:
        try:
            os.sched_setaffinity(tid, cpus)
        except ProcessLookupError:  # a thread that has exited meanwhile
            pass


def make_rollout(env, batch: int, steps: int, consume_obs: bool):
    """A jitted `(key, states) -> (states, team_return [B], obs_checksum [B])` of `steps` batched steps."""
    from omjax.envs.overcooked import random_actions

    # One step key for the whole batch: with the layout's fixed start, `env.step` uses its key only
    # for the auto-reset, which then gives every env the same start anyway.
    step = jax.vmap(env.step, in_axes=(None, 0, 0))

    def body(carry, inputs):
        states, total, checksum = carry
        key, actions = inputs  # actions [B, A]
        obs, states, rewards, _, _ = step(key, states, actions)
        total = total + rewards[env.agents[0]]
        if consume_obs:
            checksum = checksum + sum(jnp.sum(o, axis=(1, 2, 3)) for o in obs.values())
        return (states, total, checksum), None

    @jax.jit
    def rollout(key, states):
        k_act, k_step = jax.random.split(key)
        # Drawn flat and reshaped (free): drawing [T, B, A] directly costs a layout copy on the CPU.
        actions = random_actions(k_act, (steps * batch * env.num_agents,))
        actions = actions.reshape(steps, batch, env.num_agents)  # [T, B, A]
        carry = (states, jnp.zeros(batch, jnp.float32), jnp.zeros(batch, jnp.int32))
        (states, total, checksum), _ = jax.lax.scan(body, carry, (jax.random.split(k_step, steps), actions))
        return states, total, checksum

    return rollout


def make_sharded_rollout(env, batch: int, steps: int, consume_obs: bool, devices: int):
    """`make_rollout` over `devices` CPU devices, each stepping `batch // devices` envs (`shard_map`)."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.array(jax.devices()[:devices]), ("envs",))
    local = make_rollout(env, batch // devices, steps, consume_obs)

    def shard(key, states):
        return local(jax.random.fold_in(key, jax.lax.axis_index("envs")), states)

    rollout = jax.jit(jax.shard_map(shard, mesh=mesh, in_specs=(PartitionSpec(), PartitionSpec("envs")),
                                    out_specs=PartitionSpec("envs"), check_vma=False))
    return rollout, NamedSharding(mesh, PartitionSpec("envs"))


class JaxBench:
    """The batched JAX rollout, compiled once; each `run()` times one call of `steps` steps."""

    def __init__(self, layout: str, batch: int, steps: int, horizon: int, consume_obs: bool, devices: int = 1):
        from omjax.envs.overcooked import Overcooked

        env = Overcooked(layout, horizon=horizon)
        _, states = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(0), batch))
        self.rollout, sharding = make_sharded_rollout(env, batch, steps, consume_obs, devices)
        self.states = jax.device_put(states, sharding)
        self.batch, self.steps, self.calls = batch, steps, 0
        t0 = time.perf_counter()
        jax.block_until_ready(self.rollout(jax.random.PRNGKey(1), self.states))
        self.compile_s = time.perf_counter() - t0
        self.returns: list[float] = []

    def run(self) -> tuple[float, float, list[float]]:
        """Env steps per wall-clock second and per CPU second (this process) of one timed call, and
        each device's own steps per wall-clock second (its share of the envs over the time its
        share took to be ready; shares are awaited in device order, so a device that finished
        before an earlier one is credited with the earlier one's time: never flattered)."""
        self.calls += 1
        c0, t0 = time.process_time(), time.perf_counter()
        self.states, total, checksum = self.rollout(jax.random.PRNGKey(1 + self.calls), self.states)
        done = []
        for shard in sorted(total.addressable_shards, key=lambda shard: shard.device.id):
            shard.data.block_until_ready()
            done.append(time.perf_counter() - t0)
        jax.block_until_ready((self.states, checksum))
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        self.returns.append(float(jnp.mean(total)))
        share = self.batch // len(done) * self.steps
        return self.batch * self.steps / elapsed, self.batch * self.steps / cpu, [share / t for t in done]


class ReferenceBench:
    """overcooked_ai_py stepping one env in Python; each `run(seconds)` times a stretch of steps."""

    def __init__(self, layout: str, horizon: int, seed: int):
        from omjax.envs.overcooked.reference import load_overcooked_ai, make_mdp

        self.mdp = make_mdp(layout)
        self.actions = load_overcooked_ai().Action.INDEX_TO_ACTION
        self.rng = np.random.default_rng(seed)
        self.horizon = horizon
        self.state = self.mdp.get_standard_start_state()
        self.reward = 0

    def run(self, seconds: float) -> tuple[float, float]:
        """Env steps per wall-clock second and per CPU second over about `seconds`."""
        chunk, steps = 500, 0
        c0, t0 = time.process_time(), time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            for row in self.rng.integers(0, len(self.actions), size=(chunk, self.mdp.num_players)):
                self.state, info = self.mdp.get_state_transition(self.state, [self.actions[a] for a in row])
                self.reward += sum(info["sparse_reward_by_agent"])
                if self.state.timestep >= self.horizon:
                    self.state = self.mdp.get_standard_start_state()
            steps += chunk
        return steps / (time.perf_counter() - t0), steps / (time.process_time() - c0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m omjax.bench env", description=__doc__.split("\n")[0])
    parser.add_argument("--layout", default="asymmetric_advantages")
    parser.add_argument("--batch", type=int, default=4096, help="parallel JAX envs (>= 1)")
    parser.add_argument("--steps", type=int, default=400, help="scan length per timed call")
    parser.add_argument("--rounds", type=int, default=5, help="alternating timed rounds; best of each")
    parser.add_argument("--horizon", type=int, default=400)
    parser.add_argument("--ref-seconds", type=float, default=10.0,
                        help="total time spent stepping the reference, over all rounds")
    parser.add_argument("--consume-obs", action="store_true", help="reduce observations into the carry")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--devices", type=int, default=None,
                        help="XLA CPU devices the batch is split over (default: one per core, or the most "
                             "that divide --batch)")
    parser.add_argument("--xla-threads", type=int, default=1,
                        help="1: one XLA thread per device; 0: XLA's default thread pool")
    args = parser.parse_args(argv)
    if args.xla_threads not in (0, 1):
        parser.error("--xla-threads must be 1 or 0")
    if args.devices is None:
        args.devices = max(d for d in range(1, max(1, min(os.cpu_count() or 1, args.batch)) + 1)
                           if args.batch % d == 0)
    for name in ("batch", "steps", "rounds", "horizon", "devices"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.batch % args.devices:
        parser.error(f"--batch {args.batch} must be a multiple of --devices {args.devices}")
    try:
        start_backend(args.devices, args.xla_threads == 1)
    except RuntimeError as error:
        parser.error(str(error))

    # The machine is shared, so the two simulators are timed in alternating rounds and each is
    # credited with its best round: a load spike then hurts neither side's figure. Steps per CPU
    # second of this process are reported too: they measure the work each simulator does per step,
    # whatever share of the cores the other jobs leave it.
    ours = JaxBench(args.layout, args.batch, args.steps, args.horizon, args.consume_obs, args.devices)
    reference = ReferenceBench(args.layout, args.horizon, args.seed)
    ref_rates, our_rates = [], []
    for _ in tqdm.trange(args.rounds, desc="bench env rounds", leave=False):
        ref_rates.append(reference.run(args.ref_seconds / args.rounds))
        our_rates.append(ours.run())
    ref_wall, ref_cpu = (max(r[k] for r in ref_rates) for k in (0, 1))
    our_wall, our_cpu = (max(r[k] for r in our_rates) for k in (0, 1))
    per_device = [max(r[2][d] for r in our_rates) for d in range(args.devices)]  # each device's best round
    best = max(our_rates, key=lambda r: r[0])
    cores_used = best[0] / best[1]  # CPU seconds of this process per wall second in the best round
    ratio, ratio_cpu = our_wall / ref_wall, our_cpu / ref_cpu
    median_ratio = float(np.median([r[0] for r in our_rates]) / np.median([r[0] for r in ref_rates]))
    ratio_per_device = ratio / args.devices
    print(f"layout {args.layout}, horizon {args.horizon}, random joint actions, "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f}; ours on {args.devices} {jax.devices()[0].platform} "
          f"device{'s' if args.devices > 1 else ''} ({args.batch // args.devices} envs each, "
          f"{'1 XLA thread each' if args.xla_threads == 1 else 'XLA default threads'}), reference on 1 core")
    print(f"{'simulator':<44} {'steps/s':>12} {'steps/CPU-s':>12}   wall-clock rounds")
    for label, wall, cpu, rates in (
            ("overcooked_ai_py 1.1.0 (Python, 1 env)", ref_wall, ref_cpu, ref_rates),
            (f"omjax JAX (jit+vmap, {args.batch} envs, {args.devices} dev{', obs' if args.consume_obs else ''})",
             our_wall, our_cpu, our_rates)):
        print(f"{label:<44} {wall:>12,.0f} {cpu:>12,.0f}   {', '.join(f'{r[0]:,.0f}' for r in rates)}")
    print(f"ours per device ({args.batch // args.devices} envs each, best rounds): "
          f"{', '.join(f'{r:,.0f}' for r in per_device)} steps/s; "
          f"{cores_used:.2f} CPU s per wall s in the best round (of {args.devices} cores for ours)")
    print(f"ratio ours / reference: {ratio:,.1f}x wall-clock (best rounds; median rounds {median_ratio:,.1f}x), "
          f"{ratio_cpu:,.1f}x per CPU second, {ratio_per_device:,.1f}x per device (core)")
    print(f"(JAX compile {ours.compile_s:.1f}s; mean team return per env per {args.steps} steps "
          f"{np.mean(ours.returns):.3f}; reference return over all its steps {reference.reward})")
    print(json.dumps({"bench": "env", "layout": args.layout, "batch": args.batch, "steps": args.steps,
                      "rounds": args.rounds, "consume_obs": args.consume_obs, "devices": args.devices,
                      "xla_threads": args.xla_threads,
                      "ours_steps_per_s": round(our_wall), "reference_steps_per_s": round(ref_wall),
                      "ours_steps_per_s_per_device": [round(r) for r in per_device],
                      "ours_cpu_s_per_wall_s": round(cores_used, 2),
                      "ratio": round(ratio, 1), "median_ratio": round(median_ratio, 1),
                      "ours_steps_per_cpu_s": round(our_cpu), "reference_steps_per_cpu_s": round(ref_cpu),
                      "ratio_per_cpu_s": round(ratio_cpu, 1),
                      "ratio_per_device": round(ratio_per_device, 1), "load_average": round(os.getloadavg()[0], 2),
                      "jax_compile_s": round(ours.compile_s, 2), "backend": jax.devices()[0].platform}))
    return 0

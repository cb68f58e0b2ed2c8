"""Plumbing of notebook 11 (Scale a TPU model): checks, the two-process launcher, pictures."""

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from helpers.display import subplots
from helpers.params import all_of, check, integer, number, validate
from helpers.processes import LAUNCHER_ENV, free_ports, listening


def check_parameters(*, budget_mb, width, rounds, timeout_s):
    """Notebook 11's parameters, checked before any work: one line names a wrong one."""
    return validate(budget_mb=(budget_mb, number(1, 1_000_000)),
                    width=(width, all_of(integer(8, 8192), check(lambda v: v % 4 == 0,
                                         "expected a multiple of 4 (split 4 ways)"))),
                    rounds=(rounds, integer(2, 100)),
                    timeout_s=(timeout_s, integer(30, 3600)))


def mib(size: float) -> str:
    return f"{size / 2**20:.1f} MiB"


def plot_memory(rows: dict, budget: float, title: str):
    """Compiled memory (MiB) by batch size, one line per variant, against the budget line."""
    fig, ax = subplots(figsize=(6, 3.2), layout="tight")
    for i, (name, sizes) in enumerate(rows.items()):  # lines that coincide all still show
        ax.plot(list(sizes), [v / 2**20 for v in sizes.values()], marker="os^"[i % 3],
                markersize=9 - 3 * (i % 3), linestyle=("-", "--", ":")[i % 3], label=name)
    ax.axhline(budget / 2**20, color="k", linestyle=":", label="budget")
    ax.set(xscale="log", xlabel="batch size", ylabel="MiB per device", title=title)
    ax.xaxis.set_major_formatter("{x:.0f}")
    ax.legend(fontsize=7)
    return fig


def plot_mesh(shape: tuple, axes: tuple, held: dict):
    """The device mesh as a grid: each device's (data, model) place and the shards it holds."""
    rows, cols = shape
    fig, ax = subplots(figsize=(1.6 * cols + 1, 1.1 * rows + 1), layout="tight")
    shades = np.add.outer(np.arange(rows) % 2, 2 * np.arange(cols))  # tab20's pairs: a hue a column
    ax.imshow(shades, cmap="tab20", vmin=0, vmax=19, aspect="auto")
    for (r, c), (device, text) in held.items():
        ax.text(c, r, f"device {device}\n({axes[0]}={r}, {axes[1]}={c})\n{text}", ha="center",
                va="center", fontsize=7)
    ax.set(xticks=[], yticks=[], xlabel=f"{axes[1]} axis: each holds a slice of every split "
           "kernel", ylabel=f"{axes[0]} axis:\na share of the batch")
    return fig


def run_processes(script, count: int, env: dict, folder, timeout_s: float, watch=None) -> dict:
    """``python script i port out_i`` for each process ``i``, with ``env`` added to this one's, in
    its own process group; while they run, their listening sockets are read back: one beyond
    loopback stops them all. Returns the port, the result files read, what they listened on,
    and a summary."""
    folder, port = Path(folder), free_ports(1)[0]
    env = {**os.environ, LAUNCHER_ENV: str(os.getpid()), **env}  # each ends if this one does
    logs = [folder / f"process-{i}.log" for i in range(count)]
    outs = [folder / f"process-{i}.npz" for i in range(count)]
    children = [subprocess.Popen([sys.executable, str(script), str(i), str(port), str(outs[i])],
                                 stdout=log.open("w"), stderr=subprocess.STDOUT, env=env,
                                 start_new_session=True)
                for i, log in enumerate(logs)]
    seen, began = set(), time.monotonic()
    try:
        while any(c.poll() is None for c in children):
            seen.update(listening({c.pid for c in children}))  # each leads its own group
            if exposed := sorted(f"{ip}:{p}" for ip, p in seen if not ip.is_loopback):
                raise RuntimeError(f"a process listened on {', '.join(exposed)}, beyond "
                                   "loopback: both were stopped")
            if watch:
                watch(port)
            if time.monotonic() - began > timeout_s:
                raise TimeoutError(f"the processes ran past timeout_s={timeout_s}: both were "
                                   f"stopped (their logs: {folder})")
            time.sleep(0.2)
    finally:
        for child in children:
            if child.poll() is None:
                os.killpg(child.pid, 9)
            child.wait()
    failed = [(i, c.returncode) for i, c in enumerate(children) if c.returncode]
    if failed:
        tail = logs[failed[0][0]].read_text().strip().splitlines()[-1:]
        raise RuntimeError(f"process {failed[0][0]} ended with {failed[0][1]}: {tail}")
    results = [dict(np.load(o)) if o.exists() else {} for o in outs]  # those that wrote one
    listened = sorted(seen, key=str)
    heard = ", ".join(f"{ip}:{p}" for ip, p in listened)
    said = [line for log in logs for line in log.read_text().splitlines()
            if line.startswith("process ")]  # each process's own lines, not JAX's logs
    summary = (f"{count} processes, coordinator on 127.0.0.1:{port}; they listened on {heard} "
               "only (read back from /proc while they ran)")
    return {"port": port, "results": results, "listened": listened,
            "summary": "\n".join([summary, *said])}

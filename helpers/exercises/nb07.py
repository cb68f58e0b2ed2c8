"""Checks for notebook 07's exercises (scale out and profile).
"""

from __future__ import annotations

import json
import math
import os
from types import SimpleNamespace

from helpers.exercises import exercise, require


@exercise("07.1", "write TF_CONFIG for worker i",
          hint="`json.dumps` the dict that `tf_config(addresses, index)` returns: the same "
               "cluster for every worker, and its own index.",
          right="Each worker gets a string it can put in its environment, with the whole cluster "
                "and its own place in it.")
def tf_config_env(fn) -> str | None:
    addresses = ["10.0.0.1:2222", "10.0.0.2:2222", "10.0.0.3:2222"]
    before = os.environ.get("TF_CONFIG")
    for index in range(len(addresses)):
        got = fn(list(addresses), index)
        if os.environ.get("TF_CONFIG") != before:  # this kernel is no worker: leave it alone
            if before is None:
                os.environ.pop("TF_CONFIG", None)
            else:
                os.environ["TF_CONFIG"] = before
            return ("It set TF_CONFIG in this kernel's own environment: return the string, and "
                    "leave the kernel's environment as it was (the launcher gives each worker "
                    "its own).")
        require(got)
        if isinstance(got, dict):
            return ("It returned a dict: an environment variable holds a string, so write the "
                    "dict as JSON (`json.dumps`).")
        if not isinstance(got, str):
            return f"It returned a {type(got).__name__}, not a string."
        try:
            parsed = json.loads(got)
        except ValueError:
            return (f"For worker {index} it returned {got[:60]!r}, which is not JSON (`str` of "
                    "a dict writes single quotes): use `json.dumps`.")
        if not isinstance(parsed, dict):
            return f"For worker {index} the JSON holds a {type(parsed).__name__}, not an object."
        cluster, task = parsed.get("cluster"), parsed.get("task")
        if cluster != {"worker": addresses}:
            return (f"For worker {index} the cluster is {cluster!r}: every worker gets the whole "
                    f"cluster, {{'worker': {addresses!r}}}.")
        if task != {"type": "worker", "index": index}:
            return (f"For worker {index} the task is {task!r}, not "
                    f"{{'type': 'worker', 'index': {index}}}: each worker is told its own index.")
    return None


@exercise("07.2", "compute the scaling efficiency",
          hint="The speedup is images/s over the smallest replica count's images/s; divide it "
               "by how many times more replicas that is (n / smallest).",
          right="Efficiency says how much of each added device's throughput you keep.")
def scaling_efficiency(fn) -> str | None:
    cases = [
        ({4: 3000.0, 1: 1000.0, 2: 1800.0}, {1: 1.0, 2: 0.9, 4: 0.75}),  # not in replica order
        ({2: 1000.0, 8: 2000.0}, {2: 1.0, 8: 0.5}),  # the smallest count measured is 2
        # one replica faster than two (logical devices of one chip): the baseline is the
        # smallest replica count, not the slowest
        ({2: 1000.0, 1: 1250.0, 4: 2000.0}, {1: 1.0, 2: 0.4, 4: 0.4}),
    ]
    for measured, expected in cases:
        got = fn(dict(measured))
        require(got)
        if not isinstance(got, dict):
            return f"It returned a {type(got).__name__}, not a dict {{replicas: efficiency}}."
        if sorted(got) != sorted(expected):
            return f"For {measured} it has keys {sorted(got)}, not {sorted(expected)}."
        for count, want in expected.items():
            value = got[count]
            if not isinstance(value, int | float) or not math.isclose(value, want, rel_tol=1e-6):
                speedup = measured[count] / measured[min(measured)]
                if isinstance(value, int | float) and math.isclose(value, speedup, rel_tol=1e-6):
                    return (f"For {count} replicas it gave {value:g}, the speedup: efficiency "
                            f"divides it by {count // min(measured)} (replicas / smallest).")
                return (f"For images/s {measured} it gave {value!r} at {count} replicas, "
                        f"not {want:g}.")
    return None


def _summary(input_share: float, idle_share: float):
    return SimpleNamespace(input_share=input_share, idle_share=idle_share)


@exercise("07.3", "read the first fix from a trace",
          hint="Check the input share first (more than 20%: 'input'); idle time counts the "
               "input wait too, so compare `idle_share - input_share` with 30% ('idle'); "
               "otherwise 'compute'.",
          right="From a trace's two shares you can say which fix comes first.")
def first_fix(fn) -> str | None:
    cases = [((0.5, 0.6), "input"), ((0.05, 0.5), "idle"), ((0.15, 0.4), "compute"),
             ((0.0, 0.1), "compute"), ((0.3, 0.9), "input"),
             ((0.2, 0.25), "compute"), ((0.0, 0.3), "compute")]  # "more than": not at 20%, 30%
    for (input_share, idle_share), want in cases:
        got = fn(_summary(input_share, idle_share))
        require(got)
        if got != want:
            return (f"For input_share={input_share:.0%}, idle_share={idle_share:.0%} it said "
                    f"{got!r}, not {want!r}.")
    return None

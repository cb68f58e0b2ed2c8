"""Solutions to notebook 07's exercises.

Each block replaces the exercise cell that starts with the same line (`make solutions` writes
the solved notebooks into build/solutions; `make test` checks every one).
"""
# Names such as `tf` come from the notebook's earlier cells:
# ruff: noqa: F821

# Exercise 07.1: write TF_CONFIG for worker i
def tf_config_env(addresses, index):
    """The value of the TF_CONFIG environment variable for worker `index`."""
    return json.dumps(tf_config(addresses, index))


print(f"worker 1's environment: TF_CONFIG={tf_config_env(addresses, 1)}")


# Exercise 07.2: compute the scaling efficiency
def scaling_efficiency(images_per_s):
    """{replicas: efficiency} from {replicas: images/s}, relative to the fewest replicas."""
    base = min(images_per_s)
    return {n: (ips / images_per_s[base]) / (n / base) for n, ips in images_per_s.items()}


mine = scaling_efficiency({r["replicas"]: r["images_per_s"] for r in rows})
for r in rows:
    print(f"{r['replicas']} replica(s): efficiency {mine[r['replicas']]:.0%} "
          f"(the sweep's table: {r['efficiency']:.0%})")


# Exercise 07.3: read the first fix from a trace
def first_fix(summary):
    """"input", "idle" or "compute": what the trace says to fix first."""
    if summary.input_share > 0.2:
        return "input"
    if summary.idle_share - summary.input_share > 0.3:
        return "idle"
    return "compute"


for name, summary in traces.items():
    print(f"{name}: fix {first_fix(summary)} first (input {summary.input_share:.0%}, "
          f"idle {summary.idle_share:.0%})")

"""Solutions to notebook 07's exercises.

Each block replaces the exercise cell that starts with the same line (`make solutions` writes
the solved notebooks into build/solutions; `make test` checks every one).
"""
# Names such as `tf` come from the notebook's earlier cells:
# ruff: noqa: F821

# Exercise 07.1: resume from the latest checkpoint
def resume(checkpoint, directory):
    """Restore the newest checkpoint in `directory`, if any; the step to start from."""
    latest = tf.train.latest_checkpoint(directory)  # None before the first save
    if latest:
        checkpoint.restore(latest)
    return int(checkpoint.step)


# Exercise 07.2: compute the scaling efficiency
def scaling_efficiency(images_per_s):
    """{replicas: efficiency} from {replicas: images/s}, relative to the fewest replicas."""
    base = min(images_per_s)
    return {n: (ips / images_per_s[base]) / (n / base) for n, ips in images_per_s.items()}


mine = scaling_efficiency({r["replicas"]: r["images_per_s"] for r in rows})
for r in rows:
    print(f"{r['replicas']} replica(s): efficiency {mine[r['replicas']]:.0%} "
          f"(the sweep's table: {r['efficiency']:.0%})")

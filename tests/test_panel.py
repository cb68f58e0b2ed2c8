from helpers import gpu_vs_cpu_benchmark


def test_panel_runs_the_chosen_benchmark_when_clicked():
    calls, shown = [], []

    def run(sizes, dtypes, kind, device):
        calls.append((sizes, dtypes, kind, device))
        return [{"kind": kind, "size": s} for s in sizes]

    box = gpu_vs_cpu_benchmark.matmul_panel({"cpu": "CPU", "gpu": "Tesla T4"}, run, shown.append)
    assert box.devices.value == ("gpu",)  # the accelerator is picked by default
    box.sizes.value = (1024, 256)
    box.dtypes.value = ("float16", "float32")
    box.devices.value = ("cpu", "gpu")
    box.button.click()
    assert calls == [
        ([256, 1024], ["float16", "float32"], "cpu", "CPU"),
        ([256, 1024], ["float16", "float32"], "gpu", "Tesla T4"),
    ]
    assert len(box.records) == 4 and shown == [box.records]

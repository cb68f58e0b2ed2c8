"""Notebook 11's plumbing (helpers.tpu_scale) and its exercise checks, on Keras 3 on JAX with 8
host devices; the two-process run listens on loopback only.

`make tpu-unit-keras-jax` runs this file on the TPU stack, with what the notebook's first cell
sets (KERAS_BACKEND=jax, 8 host devices); elsewhere it is skipped.
"""

import os
import socket
import subprocess

import pytest

pytestmark = pytest.mark.tpu
if os.environ.get("KERAS_BACKEND") != "jax":
    pytest.skip("needs KERAS_BACKEND=jax from the start (make tpu-unit)", allow_module_level=True)

jax = pytest.importorskip("jax")
keras = pytest.importorskip("keras")
import numpy as np  # noqa: E402
from solved import solution_functions  # noqa: E402

from helpers import exercises, tpu_scale  # noqa: E402

SOLUTIONS = solution_functions("11_tpu_scale", jax=jax, keras=keras, np=np)

#: a coordinator alone: what the notebook's processes start first (JAX's, loopback-bound)
COORDINATOR = """import sys, time
import jax
port = sys.argv[2]
if sys.argv[1] == "0":
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=1,
                               process_id=0, coordinator_bind_address=f"127.0.0.1:{port}"%s)
time.sleep(6)
import numpy as np
np.savez(sys.argv[3], done=1)
"""


def _outside_address():
    found = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    return next((a for a in found if not a.startswith("127.") and ":" not in a), None)


def test_the_processes_listen_on_loopback_only(tmp_path):
    outside = _outside_address()
    if outside is None:
        pytest.skip("this machine has no non-loopback IPv4 address")
    script = tmp_path / "coordinator.py"
    script.write_text(COORDINATOR % "")
    tried = {}

    def watch(port):
        with socket.socket() as inside:
            inside.settimeout(1)
            if inside.connect_ex(("127.0.0.1", port)) != 0 or tried:
                return  # not up yet, or already tried
        with socket.socket() as there:
            there.settimeout(2)
            tried["outside"] = there.connect_ex((outside, port))
        tried["inside"] = 0
    run = tpu_scale.run_processes(script, 2, {}, tmp_path, 120, watch)
    assert tried["inside"] == 0, "the control: the coordinator answers on 127.0.0.1"
    assert tried["outside"] != 0, f"the coordinator answered on {outside}"
    assert run["listened"] and all(ip.is_loopback for ip, _ in run["listened"])


def test_a_process_listening_beyond_loopback_is_stopped_in_one_line(tmp_path):
    script = tmp_path / "wide.py"
    script.write_text("import socket, sys, time\ns = socket.socket()\ns.bind(('0.0.0.0', 0))\n"
                      "s.listen()\ntime.sleep(30)\n")
    said = r"listened on 0\.0\.0\.0:.*, beyond loopback: both were stopped"
    with pytest.raises(RuntimeError, match=said):
        tpu_scale.run_processes(script, 2, {}, tmp_path, 60)


def test_a_run_past_its_timeout_is_stopped(tmp_path):
    script = tmp_path / "slow.py"
    script.write_text("import time\ntime.sleep(60)\n")
    with pytest.raises(TimeoutError, match="timeout_s=1"):
        tpu_scale.run_processes(script, 2, {}, tmp_path, 1)


def _linear(memory_of, budget):  # right, and slow: one call per multiple of 8
    batch = 8
    while memory_of(batch + 8) <= budget:
        batch += 8
    return batch if memory_of(8) <= budget else 0


def _doubling_only(memory_of, budget):  # a power of two, never bisected
    batch = 8
    while memory_of(2 * batch) <= budget:
        batch *= 2
    return batch


def _bisect_from_scratch(memory_of, budget):  # right: a bisection over 0..2**20 in eighths
    low, high = 0, 2**17
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if memory_of(8 * middle) <= budget else (low, middle)
    return 8 * low


def _gallop(memory_of, budget):  # right: doubling and bisection counted in eighths
    if memory_of(8) > budget:
        return 0
    units = 1
    while memory_of(16 * units) <= budget:
        units *= 2
    low, high = units, 2 * units  # 8 * low fits, 8 * high does not
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if memory_of(8 * middle) <= budget else (low, middle)
    return 8 * low


RIGHT_11_1 = [_bisect_from_scratch, _gallop,
              lambda m, b: int(SOLUTIONS["fit_batch"](m, b))]
WRONG_11_1 = [(_linear, "memory_of"), (_doubling_only, "the largest multiple of 8"),
              (lambda m, b: SOLUTIONS["fit_batch"](m, b) + 8, "the largest multiple of 8"),
              (lambda m, b: max(SOLUTIONS["fit_batch"](m, b) - 8, 0), "the largest multiple"),
              (lambda m, b: SOLUTIONS["fit_batch"](m, b) or 8, "the largest multiple of 8"),
              (lambda m, b: m(0.5) and 8, "Your code raised ValueError")]


def test_11_1_right():
    assert exercises.check("11.1", SOLUTIONS["fit_batch"]).passed


def test_11_1_untouched():
    def fit_batch(memory_of, budget):
        """docstring"""
        ...

    assert "placeholder" in exercises.check("11.1", fit_batch).message


@pytest.mark.parametrize("answer", RIGHT_11_1)
def test_11_1_accepts_right_answers(answer):
    assert exercises.check("11.1", answer).passed


@pytest.mark.parametrize("answer, said", WRONG_11_1)
def test_11_1_names_the_mistake(answer, said):
    result = exercises.check("11.1", answer)
    assert not result.passed and said in result.message, result.message


def _mesh():
    return keras.distribution.DeviceMesh((2, 4), ("data", "model"), devices=jax.devices())


def _layout(entries):
    def answer(mesh):
        layout = keras.distribution.LayoutMap(mesh)
        for key, value in entries.items():
            layout[key] = value
        return layout
    return answer


RIGHT_11_2 = [_layout({"sequential.*/block[^/]*/kernel": (None, "model")}),
              _layout({".*/block[^/]*/kernel": (None, "model"), ".*/head/kernel": (None, None)}),
              _layout({".*block[^/]*/kernel": (None, "model"), ".*block.*bias": ("model",)})]
WRONG_11_2 = [(_layout({".*kernel": (None, "model")}), "keep the others whole"),
              (_layout({".*block.*kernel": ("model", None)}), "not (None, 'model')"),
              (_layout({"kernel": (None, "model")}), "No key matches the whole path"),
              (_layout({".*block.*kernel": (None, "data")}), "not (None, 'model')"),
              (lambda mesh: {".*block.*kernel": (None, "model")}, "not a keras.distribution"),
              (_layout({".*head.*kernel": (None, "model")}), "No key matches"),
              (_layout({"block.*/kernel": (None, "model")}), "No key matches the whole path")]


def test_11_2_right():
    assert exercises.check("11.2", SOLUTIONS["split_kernels"], mesh=_mesh()).passed
    assert keras.distribution.distribution() is None


def test_11_2_untouched():
    def split_kernels(mesh):
        """docstring"""
        ...

    assert "placeholder" in exercises.check("11.2", split_kernels, mesh=_mesh()).message


@pytest.mark.parametrize("answer", RIGHT_11_2)
def test_11_2_accepts_right_answers(answer):
    assert exercises.check("11.2", answer, mesh=_mesh()).passed
    assert keras.distribution.distribution() is None


@pytest.mark.parametrize("answer, said", WRONG_11_2)
def test_11_2_names_the_mistake(answer, said):
    result = exercises.check("11.2", answer, mesh=_mesh())
    assert not result.passed and said in result.message, result.message
    assert keras.distribution.distribution() is None

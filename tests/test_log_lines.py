"""No log line in a notebook's outputs: the detector every executed copy goes through
(tools/run_notebooks.log_lines: `make run` and the notebook tests of every stack), and the two
sources found in them: the fork server's bare import of TensorFlow (07's and 08's children) and
Grappler's remapper failing on the GAN's step on a CPU where oneDNN is on (05, 06)."""

import importlib.util
import subprocess
import sys

import nbformat
import pytest

from tools import run_notebooks
from tools.run_notebooks import RunResult, log_lines

needs_tensorflow = pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None,
                                      reason="TensorFlow is not installed here")

LOGS = [  # one of each kind, as TensorFlow 2.20 and 2.21 write them
    "E0000 00:00:1796542743.214429   29414 meta_optimizer.cc:967] remapper failed: INVALID_ARG",
    "W0000 00:00:1796542743.214429   29414 gpu_device.cc:2344] Cannot dlopen some GPU libraries.",
    "I1206 07:26:37.012832   4126 cuda_executor.cc:1015] successful NUMA node read from SysFS",
    "F0000 00:00:1.5 12 logging.h:7] Check failed: x",
    "2026-12-06 07:26:37.012832: I tensorflow/core/util/port.cc:153] oneDNN custom operations "
    "are on. You may see slightly different numerical results",
    "2026-12-06 07:26:37.012832: E external/local_xla/xla/stream_executor/cuda/cuda_fft.cc:467] "
    "Unable to register cuFFT factory",
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "To enable the following instructions: AVX2 AVX512F FMA, in other operations, rebuild "
    "TensorFlow with the appropriate compiler flags.",
    "child: I0000 00:00:1796542991.873304   32189 port.cc:153] oneDNN custom operations are on.",
]
ORDINARY = [  # what notebooks print on purpose
    "E0 = 3",
    "W1 = 0.25, I2 = 4",
    "notebook   status  seconds  device",
    "--------   ------  -------  ------",
    "04_dcgan   passed  41.2     CPU (2 cores)",
    "epoch 3/10: step 96, 812 images/s, d_loss 1.234, g_loss 0.812",
    "Traceback (most recent call last):",
    '  File "/tmp/lesson.py", line 12, in <module>',
    "ResourceExhaustedError: OOM when allocating tensor with shape[1024,1024]",
    "2026-12-06 07:26:37: the run started",
    "oneDNN fuses ops on CPUs that have AVX-512 (see the note above)",
]


def notebook(*outputs):
    cell = nbformat.v4.new_code_cell("print('hello')", id="c1")
    cell.outputs = list(outputs)
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1", id="c0"), cell])


@pytest.mark.tools
@pytest.mark.parametrize("line", LOGS)
def test_a_log_line_is_found_in_every_kind_of_output(line):
    kinds = [
        nbformat.v4.new_output("stream", name="stderr", text=f"before\n{line}\nafter\n"),
        nbformat.v4.new_output("stream", name="stdout", text=line),
        nbformat.v4.new_output("error", ename="RuntimeError", evalue="x",
                               traceback=["\x1b[0;31mRuntimeError\x1b[0m", line]),
        nbformat.v4.new_output("display_data", data={"text/plain": line}),
        nbformat.v4.new_output("execute_result", execution_count=1,
                               data={"text/html": f"<pre>{line}</pre>"}),
    ]
    for output in kinds:
        assert log_lines(notebook(output)) == [("c1", line if "html" not in str(output) else
                                                f"<pre>{line}</pre>")], output


@pytest.mark.tools
def test_ordinary_outputs_pass_and_every_log_line_is_named_with_its_cell():
    text = "\n".join(ORDINARY) + "\n"
    quiet = notebook(nbformat.v4.new_output("stream", name="stdout", text=text),
                     nbformat.v4.new_output("error", ename="ResourceExhaustedError", evalue="OOM",
                                            traceback=ORDINARY[6:9]),
                     nbformat.v4.new_output("display_data", data={"text/plain": text,
                                                                  "image/png": "iVBORw0KGgo="}))
    assert log_lines(quiet) == []
    quiet.cells[0].outputs = [nbformat.v4.new_output("stream", name="stderr",
                                                     text="\n".join(LOGS[:3]))]
    assert log_lines(quiet) == [("c0", line) for line in LOGS[:3]]


@pytest.mark.tools
def test_make_run_fails_a_notebook_that_shows_a_log_line(tmp_path, monkeypatch, capsys):
    executed = tmp_path / "executed" / "05_survive_a_disconnect.ipynb"
    executed.parent.mkdir()
    nbformat.write(notebook(nbformat.v4.new_output("stream", name="stderr", text=LOGS[0])),
                   executed)
    monkeypatch.setattr(run_notebooks, "notebook_paths", lambda: [executed])
    monkeypatch.setattr(run_notebooks, "execute", lambda path, build, params: RunResult(
        path.stem, "passed", 1.0, "CPU", executed, exercises={}))
    assert run_notebooks.main(["--build", str(tmp_path)]) == 1
    printed = capsys.readouterr().out
    assert f"05_survive_a_disconnect: cell c1: {LOGS[0]}\n" in printed
    assert "notebooks: 0 passed, 1 failed" in printed


@needs_tensorflow
def test_children_of_the_fork_server_start_quietly():
    """07's trials and 08's workers come from a fork server that imported TensorFlow for them:
    quietly, as a kernel does (helpers.preload), where a bare import printed absl's and oneDNN's
    notices into the cell (the server writes to the kernel's stderr)."""
    code = ("from helpers import processes\n"
            "child = processes.context().Process(target=exec, args=(\n"
            "    \"import sys; print('tensorflow' in sys.modules, flush=True)\",))\n"
            "child.start()\n"
            "child.join()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr[-2000:]
    assert not [line for line in done.stderr.splitlines() if run_notebooks.LOG_LINE.search(line)]
    assert done.stderr == "", done.stderr[-2000:]


GAN_STEP = """
import sys

import tensorflow as tf
from tensorflow.python.util import _pywrap_util_port

from helpers import dcgan
from helpers.lessons.nb04 import build_gan, make_train_step

if sys.argv[1] == "chosen":
    print("policy", dcgan.choose_precision("cpu", "float32"))
print("oneDNN", _pywrap_util_port.IsMklEnabled())
step = make_train_step(*build_gan("tutorial", (28, 28, 1), "float32"),
                       tf.random.Generator.from_seed(0))
print("losses", [round(float(x), 2) for x in step(tf.random.uniform((8, 28, 28, 1), -1, 1))])
"""


@needs_tensorflow
def test_the_gan_step_logs_no_remapper_failure_once_the_precision_is_chosen(fresh_process):
    """On a CPU where oneDNN is on, TF 2.20-2.21's remapper fuses the discriminator's bias and
    LeakyReLU although the gradient reads their sum, and logs its failure as an error in the
    cell; choose_precision("cpu") turns the remapper off there (and nowhere else)."""
    chosen = fresh_process(GAN_STEP, args=["chosen"])
    assert chosen.returncode == 0 and "losses" in chosen.output, chosen.output[-2000:]
    assert not [line for line in chosen.output.splitlines()
                if run_notebooks.LOG_LINE.search(line)], chosen.output[-2000:]
    if "oneDNN True" in chosen.output:  # where it fails: the control shows the line
        control = fresh_process(GAN_STEP, args=["not chosen"])
        assert "remapper failed" in control.output, control.output[-2000:]

"""Notebook 04's networks are Keras's own layers: a generator it saves loads with Keras alone."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

#: Run in a fresh Python, in a folder outside the repository, where `import helpers` fails.
LOAD = """
import json, sys


class NoHelpers:  # a Python without this course: `import helpers` fails
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "helpers":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


sys.meta_path.insert(0, NoHelpers())
import keras
import numpy as np

try:
    import helpers  # noqa: F401
    sys.exit("helpers was importable")
except ModuleNotFoundError:
    pass
generator = keras.saving.load_model("generator.keras")
images = np.asarray(generator(np.load("noise.npy"), training=False), dtype="float32")
np.save("loaded.npy", images)
print(json.dumps({"layers": sorted({type(layer).__module__.split(".")[0]
                                    for layer in generator.layers}),
                  "helpers": sorted(m for m in sys.modules if m.split(".")[0] == "helpers")}))
"""


@pytest.mark.parametrize("architecture, shape", [
    ("tutorial", (28, 28, 1)), ("dcgan", (32, 32, 3)), ("dcgan", (64, 64, 3))])
def test_the_lesson_networks_are_keras_own_layers(tf, architecture, shape):
    from helpers.lessons.dcgan_networks import build_pair  # notebook 04's networks

    for model in build_pair(architecture, shape, noise_dim=16):
        assert {type(layer).__module__.split(".")[0] for layer in model.layers} == {"keras"}


def test_a_generator_saved_as_04_saves_it_loads_with_keras_alone(tf, tmp_path):
    from helpers.lessons.nb04 import build_gan  # the generator a run of 04 trains and saves

    generator = build_gan("tutorial", (28, 28, 1), "mixed_bfloat16")[0]
    noise = np.random.default_rng(0).standard_normal((4, 100)).astype("float32")
    np.save(tmp_path / "noise.npy", noise)
    generator.save(tmp_path / "generator.keras")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-I", "-c", LOAD], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert said == {"layers": ["keras"], "helpers": []}
    expected = np.asarray(generator(noise, training=False), dtype="float32")
    np.testing.assert_allclose(np.load(tmp_path / "loaded.npy"), expected, atol=1e-3)

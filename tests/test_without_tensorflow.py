"""`helpers` imports without TensorFlow and without Keras: the TPU notebooks (09, 10) run on
runtimes that have neither (Colab's TPU image has no TensorFlow; PyTorch/XLA needs no Keras).

Each test runs a fresh interpreter in which `import tensorflow` and `import keras` fail, as
they do there, so it proves the same on every stack (make tpu-unit runs it where TensorFlow
is not installed at all).
"""

import json
import pkgutil
import subprocess
import sys

import pytest

import helpers
from tools import lessons

#: Modules generated from a notebook's #@save cells import that notebook's engine, as the
#: notebook does; every other module must import without TensorFlow and Keras.
NEEDS_AN_ENGINE = {
    "helpers.lessons.nb04",
    "helpers.lessons.nb05",
    "helpers.lessons.dcgan_networks",
    "helpers.lessons.nb07",
    "helpers.lessons.nb08",
    "helpers.lessons.nb03",
    "helpers.lessons.nb09",
    "helpers.lessons.nb10",
    "helpers.lessons.nb11",
}

BLOCKED = """
import json, sys


class Missing:  # what `import tensorflow` gives on a runtime without it
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("tensorflow", "keras"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


sys.meta_path.insert(0, Missing())
import importlib
failed = {}
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception as error:
        failed[name] = f"{type(error).__name__}: {error}"
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "keras"))
print(json.dumps({"failed": failed, "loaded": loaded}))
"""


def modules() -> list[str]:
    found = ["helpers"] + [m.name for m in pkgutil.walk_packages(helpers.__path__, "helpers.")]
    return sorted(set(found) - NEEDS_AN_ENGINE)


def test_every_module_but_the_engines_lessons_imports_without_tensorflow_or_keras():
    names = modules()
    assert "helpers.tpu_keras_jax" in names and "helpers.tpu_pytorch_xla" in names
    done = subprocess.run([sys.executable, "-c", BLOCKED, *names], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["failed"] == {}, result["failed"]
    assert result["loaded"] == [], "imported at module level"


@pytest.mark.parametrize("name", sorted(NEEDS_AN_ENGINE))
def test_the_engines_lessons_are_the_generated_ones(name):
    path = lessons.LESSONS / (name.rsplit(".", 1)[1] + ".py")
    assert path.exists() and lessons.is_generated(path)

"""The locks `make` installs every stack from (`make lock` writes them): each holds its
requirements file's pins, with hashes, and the compat and Colab TPU stacks' hold the versions
their Colab image ships (the copies of its freeze in freezes/) for every package both list."""

import re

import pytest

from tools.course import ROOT

#: Each lock, the requirements file it is compiled from, and the freeze it is held to
STACKS = [("requirements.lock", "requirements.txt", None),
          ("requirements-site.lock", "requirements-site.txt", None),
          ("requirements-compat.lock", "requirements-compat.txt", "freezes/colab-gpu.txt"),
          ("requirements-tpu.lock", "requirements-tpu.txt", "freezes/colab-tpu.txt"),
          ("requirements-tpu-kaggle.lock", "requirements-tpu-kaggle.txt", None)]
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)", re.MULTILINE)


def pins(text: str) -> dict[str, str]:
    """``{name: version}`` of every ``name==version`` line, names normalised (PEP 503)."""
    return {re.sub(r"[-_.]+", "-", name).lower(): version for name, version in PIN.findall(text)}


def differences(lock: dict[str, str], other: dict[str, str], where: str) -> list[str]:
    """Each package both list at different versions: its name and both versions."""
    return [f"{name}: {lock[name]} in the lock, {other[name]} in {where}"
            for name in sorted(lock.keys() & other.keys()) if lock[name] != other[name]]


@pytest.mark.parametrize(("lock", "requirements"), [s[:2] for s in STACKS])
def test_each_lock_holds_its_requirements_with_hashes(lock, requirements):
    text = (ROOT / lock).read_text()
    locked = pins(text)
    wanted = pins((ROOT / requirements).read_text())
    missing = sorted(wanted.keys() - locked.keys())
    assert not missing, f"{lock} lacks {missing} (make lock)"
    moved = differences(locked, wanted, requirements)
    assert not moved, f"{lock}: " + "; ".join(moved) + " (make lock)"
    entries = re.split(r"\n(?=[a-z0-9])", text.split("\n", 2)[2])
    unhashed = [e.split("==")[0] for e in entries if "--hash=sha256:" not in e]
    assert not unhashed, f"{lock}: no hash for {unhashed}"


def test_the_site_lock_moves_nothing_the_pinned_stack_pins():
    site = pins((ROOT / "requirements-site.lock").read_text())
    pinned = pins((ROOT / "requirements.lock").read_text())
    assert not differences(site, pinned, "requirements.lock")


@pytest.mark.parametrize(("lock", "freeze"), [(s[0], s[2]) for s in STACKS if s[2]])
def test_colab_stacks_hold_the_versions_their_image_ships(lock, freeze):
    locked, shipped = pins((ROOT / lock).read_text()), pins((ROOT / freeze).read_text())
    assert len(locked.keys() & shipped.keys()) > 20, "the freeze or the lock reads as empty"
    moved = differences(locked, shipped, freeze)
    assert not moved, f"{lock} differs from Colab's image: " + "; ".join(moved)


def test_the_comparison_names_the_package_and_both_versions():
    lock = "numpy==2.1.3 \\\n    --hash=sha256:ab\npillow==13.0.0 \\\n    --hash=sha256:cd\n"
    freeze = "# pip freeze\nnumpy==2.1.3\nPillow==11.3.0\ntorch @ https://example.org/t.whl\n"
    assert differences(pins(lock), pins(freeze), "the freeze") == [
        "pillow: 13.0.0 in the lock, 11.3.0 in the freeze"]

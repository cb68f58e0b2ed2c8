"""Notebook 08's workers where the machine refuses a network namespace (Colab, Kaggle, Docker's
default seccomp profile): a shim (LD_PRELOAD) binds them to loopback, and what they listen on is
read back from /proc while they run; a worker heard listening beyond loopback is killed and
refused in one line. The cluster test runs under ``unshare -U -r`` with user namespaces turned
off inside (``max_user_namespaces`` 0): no nested namespace, and the machine's own network."""

import contextlib
import ipaddress
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import processes, scale_out_profile
from helpers.errors import WorkersRefused

NOTEBOOK = Path(__file__).parent.parent / "notebooks" / "08_scale_out_profile.ipynb"
#: runs a command where no network namespace can be made, in this machine's network
NO_NAMESPACE = ["unshare", "-U", "-r", "sh", "-c",
                'echo 0 > /proc/sys/user/max_user_namespaces && exec "$@"', "no-namespace"]


def unshare_works() -> bool:
    return bool(shutil.which("unshare")) and subprocess.run(
        NO_NAMESPACE + ["true"], capture_output=True).returncode == 0


def outside() -> list[str]:
    """This machine's addresses another machine could connect to (link-local ones need a scope)."""
    found = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    return [a for a in found if not ipaddress.ip_address(a).is_loopback
            and not ipaddress.ip_address(a).is_link_local]


CLUSTER = """
import json, socket, sys
from pathlib import Path
from helpers import data, scale_out_profile
from helpers.lessons.nb08 import tf_config
from tests.test_loopback_workers import outside
from tests.test_multiworker import reaches
from tools import course

work, found = Path(sys.argv[1]), {"ports": [], "workers": {}, "control": {}}
images = data.load("mnist", limit=256, verbose=False)
scale_out_profile.write_data(work, images.x_train, images.y_train)
(work / "worker.py").write_text(course.worker_script(Path(sys.argv[2])))
host = scale_out_profile._workers_host()
found["host"] = {"isolated": host.isolated, "refused": host.refused}

def config(addresses, index):  # the notebook's TF_CONFIG; the first ports it names, kept
    found["ports"] = found["ports"] or sorted(int(a.rsplit(":", 1)[1]) for a in addresses)
    return tf_config(addresses, index)

def progress(attempt, step, loss):  # the chief trained a step: every worker's server is up
    if not found["workers"]:  # as another machine would connect: to this one's own addresses
        found["workers"] = {a: [reaches(a, p) for p in found["ports"]] for a in outside()}
        family = socket.AF_INET6 if socket.has_dualstack_ipv6() else socket.AF_INET
        with socket.create_server(("", 0), family=family,
                                  dualstack_ipv6=family == socket.AF_INET6) as control:
            port = control.getsockname()[1]  # every interface, as TensorFlow's server asks
            found["control"] = {a: reaches(a, port) for a in outside()}

job = scale_out_profile.Job(workers=2, steps=8, checkpoint_every=3, kill=(1, 5))
run = scale_out_profile.run_cluster(job, work, tf_config=config, progress=progress)
found["attempts"] = [[a.exit_codes, a.resumed_from] for a in run.attempts]
found["losses"] = run.losses
print("RESULT", json.dumps(found))
"""


@pytest.mark.heavy
def test_without_a_namespace_the_workers_listen_on_loopback_only_and_recover(tmp_path):
    """Where no namespace can be made, the workers start with the shim, train, lose a worker and
    resume from the checkpoint; meanwhile nothing reaches their ports at this machine's own
    outside addresses, while a control listener on every interface in the same place is."""
    if not unshare_works():
        pytest.skip("unshare -U -r is not available here: no way to refuse the namespace")
    env = {**os.environ, "PYTHONPATH": scale_out_profile.PACKAGE_ROOT}
    done = subprocess.run(NO_NAMESPACE + [sys.executable, "-c", CLUSTER, str(tmp_path),
                                          str(NOTEBOOK)], capture_output=True, text=True,
                          env=env, timeout=540, cwd=scale_out_profile.PACKAGE_ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    found = json.loads(done.stdout.split("RESULT ", 1)[1])
    assert found["host"] == {"isolated": False, "refused": None}  # the shim, no namespace
    ports = found["ports"]
    heard = " and ".join(f"127.0.0.1:{port}" for port in ports)
    assert f"The workers listen on {heard} only (read back from /proc)" in done.stdout
    (killed, started_from), resumed = found["attempts"]  # SIGKILLed; from step 3's checkpoint
    assert -9 in killed and started_from == 0 and resumed == [[0, 0], 3], found["attempts"]
    assert sorted(int(step) for step in found["losses"]) == list(range(1, 9))
    print(f"workers' ports {ports}, from this machine's outside addresses:", found["workers"],
          "; a control listener on every interface there:", found["control"])
    if found["control"]:  # (a machine with loopback alone has nothing to reach from)
        assert found["control"] == dict.fromkeys(found["control"], True), "the control is reached"
        assert found["workers"] == {a: [False, False] for a in found["control"]}


LISTENER = """
import json, os, socket, sys, time
from pathlib import Path
from helpers.processes import follow_launcher
follow_launcher(interval_s=0.1)
config = json.loads(os.environ["TF_CONFIG"])
port = int(config["cluster"]["worker"][config["task"]["index"]].rsplit(":", 1)[1])
server = socket.create_server(("0.0.0.0", port))  # every interface, as if no shim were there
Path(sys.argv[1]).with_name("pid").write_text(str(os.getpid()))
time.sleep(600)
"""


class Host:
    """A stand-in for the workers' host: one with no namespace and a shim that did not take."""
    refused, isolated = None, False
    start_script = staticmethod(processes.start_script)


def test_a_worker_that_listens_beyond_loopback_is_killed_and_refused_in_one_line(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(scale_out_profile, "_workers_host", Host)
    scale_out_profile.write_data(tmp_path, np.zeros((4, 2)), np.zeros(4))
    (tmp_path / "listener.py").write_text(LISTENER)
    with pytest.raises(WorkersRefused) as refused:
        scale_out_profile.run_cluster(
            scale_out_profile.Job(workers=1), tmp_path, script=tmp_path / "listener.py",
            tf_config=lambda addresses, i: {"cluster": {"worker": addresses},
                                            "task": {"index": i}}, timeout_s=120)
    line = str(refused.value)
    assert "\n" not in line and line.startswith("The workers were stopped: they listened on ")
    assert line.count("0.0.0.0:") == 1
    assert "beyond loopback" in line and "open_ports=True" in line
    pid = int((tmp_path / "pid").read_text())
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()
    assert not scale_out_profile._LIVE


def test_what_a_process_group_listens_on_is_read_back_from_proc():
    wanted = [("127.0.0.1", socket.AF_INET, "127.0.0.1")]
    if socket.has_dualstack_ipv6():  # (some containers have no IPv6)
        wanted += [("::1", socket.AF_INET6, "::1"), ("", socket.AF_INET6, "::")]
    with contextlib.ExitStack() as stack:
        ports = [stack.enter_context(socket.create_server(
            (address, 0), family=family, dualstack_ipv6=not address and family == socket.AF_INET6
        )).getsockname()[1] for address, family, _ in wanted]
        found = {(str(ip), port) for ip, port in scale_out_profile.listening({os.getpgid(0)})}
        assert {(read, port) for (_, _, read), port in zip(wanted, ports, strict=True)} <= found
        assert not any(port in ports for _, port in scale_out_profile.listening({-5}))


def test_the_shim_binds_a_wildcard_to_loopback_and_is_built_once(tmp_path, monkeypatch):
    if not shutil.which("cc"):
        pytest.skip("no C compiler here")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    shim = processes.loopback_shim()
    assert Path(shim).parent == tmp_path / "fast-tf-course" and os.listdir(Path(shim).parent) == [
        Path(shim).name]  # no partial file left
    built = os.stat(shim).st_mtime_ns
    assert processes.loopback_shim() == shim and os.stat(shim).st_mtime_ns == built
    probe = ("import socket\nfor family, wildcard in ((socket.AF_INET, '0.0.0.0'), "
             "(socket.AF_INET6, '::')):\n    s = socket.socket(family)\n"
             "    s.bind((wildcard, 0))\n    print(s.getsockname()[0])\n")
    got = subprocess.run([sys.executable, "-c", probe], env={**os.environ, "LD_PRELOAD": shim},
                         capture_output=True, text=True).stdout.split()
    assert got[0] == "127.0.0.1"  # and on a dual-stack socket, IPv4's loopback (with IPv6)
    assert got[1:] == (["::ffff:127.0.0.1"] if socket.has_dualstack_ipv6() else got[1:])


def test_without_a_namespace_or_a_c_compiler_the_workers_are_refused_in_one_line(
    tmp_path, monkeypatch
):
    class Refused:  # a host refused its namespace
        refused, isolated = "this machine refuses a network namespace (EPERM)", False

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))  # no cc
    monkeypatch.setattr(processes, "Host", lambda shim=None: Refused())
    monkeypatch.setattr(scale_out_profile, "_HOST", None)
    with pytest.raises(WorkersRefused) as refused:
        scale_out_profile.exposure(False)
    line = str(refused.value)
    assert "\n" not in line and line.startswith("The workers were not started:")
    assert "(EPERM), and there is no C compiler (cc) to build the loopback shim" in line
    assert "open_ports=True" in line

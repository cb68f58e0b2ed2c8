"""A stand-in for notebook 08's worker.py; used by tests/test_multiworker.py.

    TF_CONFIG=... python fake_worker.py JOB_FILE

It follows its launcher (as a real worker does), starts a child of its own, writes both
process ids to ``pids<INDEX>`` beside the job file; the chief (index 0) then reports one step
once every worker has done so. Then it waits, until it is stopped.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from helpers.processes import follow_launcher
from helpers.scale_out_profile import PROGRESS_FILE

job_path = Path(sys.argv[1])
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
if not os.environ.get("FAKE_WORKER_ALONE"):  # set: only the launcher's own cleanup can end it
    follow_launcher(interval_s=0.1)
work = job_path.parent
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
(work / f"pids{index}.tmp").write_text(f"{os.getpid()} {child.pid}")
(work / f"pids{index}.tmp").rename(work / f"pids{index}")
if index == 0:
    workers = json.loads(job_path.read_text())["workers"]
    while not all((work / f"pids{i}").exists() for i in range(workers)):
        time.sleep(0.05)
    record = {"attempt": 0, "step": 1, "loss": 1.0, "seconds": 0.1}
    with open(work / PROGRESS_FILE, "a") as f:
        f.write(json.dumps(record) + "\n")
time.sleep(600)

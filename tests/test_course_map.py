"""tools/course_map.py: the README's course map and the timings behind it."""

import subprocess
import sys

import pytest

from tools import course_map

# the maintainers' tools (or the package's structure): the same on every stack (see pyproject.toml)
pytestmark = pytest.mark.tools


def test_times_read_as_minutes_with_the_cpu_time_and_stopped_runs_say_so():
    assert course_map.cell(None) == "not measured"
    passed = {"status": "passed", "wall_s": 125, "cpu_s": 59}
    assert course_map.cell(passed) == "2 min 05 s (CPU 59 s)"
    assert course_map.cell({**passed, "status": "failed"}).endswith(", failed")
    stopped = {"status": "stopped", "wall_s": 301, "cpu_s": None}
    assert course_map.cell(stopped) == "> 5 min 01 s (stopped there)"


def test_every_notebook_has_a_row_with_its_prerequisites_and_runtime():
    table = course_map.course_map({})
    rows = [line for line in table.splitlines() if line[:5].strip("| ").isdigit()]
    assert len(rows) == len(course_map.notebook_paths()) == len(course_map.RUNTIMES)
    assert rows[0].startswith("| 01 | [Runtime check](notebooks/01_runtime_check.ipynb) | none |")
    assert "| 01, 02 |" in rows[2], "03 builds on 01 and 02"


def test_the_readme_is_written_between_its_markers_and_checked(tmp_path, monkeypatch):
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{course_map.START}\nold\n{course_map.END}\nrest\n")
    monkeypatch.setattr(course_map, "README", readme)
    monkeypatch.setattr(course_map, "RECORDS", tmp_path / "none.json")
    assert not course_map.write_readme(check=True)
    assert course_map.write_readme()
    text = readme.read_text()
    assert text.startswith("intro\n") and text.endswith("\nrest\n") and "old" not in text
    assert course_map.write_readme(check=True)


def test_a_run_past_its_budget_is_stopped_with_all_its_processes(tmp_path):
    """A stand-in for a notebook run: a child that starts a grandchild (as a kernel does) and
    both sleep; past the budget both must be gone."""
    marker = tmp_path / "grandchild.pid"
    script = (
        "import subprocess, sys, time; "
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        f"open({str(marker)!r}, 'w').write(str(p.pid)); time.sleep(60)"
    )
    record = course_map.measure_one("demo", "quick", 3, tmp_path, [sys.executable, "-c", script])
    assert record["status"] == "stopped" and record["cpu_s"] is None
    assert record["wall_s"] < 60, "it stopped the stand-in instead of waiting for its end"
    pid = int(marker.read_text())
    alive = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True)
    assert alive.stdout.strip() in ("", "Z"), f"the grandchild {pid} still runs"


@pytest.mark.parametrize("code, status", [("pass", "passed"), ("raise SystemExit(1)", "failed")])
def test_a_finished_run_records_its_status_and_cpu_time(tmp_path, code, status):
    record = course_map.measure_one("demo", "quick", 60, tmp_path, [sys.executable, "-c", code])
    assert record["status"] == status and record["cpu_s"] is not None
    assert record["machine"] and record["date"] and "load_at_start" in record


def test_each_measurement_starts_without_an_earlier_runs_files(tmp_path):
    """A run left by an earlier measurement would be resumed (04), not timed."""
    left = tmp_path / "work" / "demo" / "course_runs" / "dcgan_run"
    left.mkdir(parents=True)
    (left / "checkpoint").write_text("an earlier run")
    other = tmp_path / "work" / "other"
    other.mkdir()
    course_map.measure_one("demo", "quick", 60, tmp_path, [sys.executable, "-c", "pass"])
    assert not (tmp_path / "work" / "demo").exists() and other.exists()

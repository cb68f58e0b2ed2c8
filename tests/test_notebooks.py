"""The notebook-execution suite: every notebook runs headlessly with small parameters, twice
in the same kernel (a learner's second "Run all"): the first time with its exercises as
learners get them (every check says "not yet"), the second with their solutions filled in
(every check says "right"); the cells tagged ``nbval-check-output`` give the same outputs both
times (nbval's comparison), and every invalid parameter value stops it in its validation cell
with one clear line.

Invalid values: a misspelled name runs through papermill end to end; all of them run through the
parameters and validation cells in the same kernel once the two runs have passed (a kernel start
costs seconds), and so does a folder holding a user's file, passed as each folder parameter: it must
be refused and the file must survive. The executed copies (the second run's outputs) land in
build/test/executed, the first run's in build/test/first-pass ($COURSE_TEST_BUILD, relative to
the repository, moves them: the stacks use it).
"""

import json
import os
import re

import nbformat
import pytest
from conftest import folder_parameters

from helpers import workdirs, yardstick
from tools import course, exercises, run_notebooks

pytestmark = pytest.mark.notebooks

BUILD = course.ROOT / os.environ.get("COURSE_TEST_BUILD", "build/test")
# How many times each notebook runs in its kernel: 2 proves "Run all" twice works.
PASSES = int(os.environ.get("COURSE_TEST_PASSES", "2"))
# Whether the last run's exercise cells hold their solutions (tools/exercises.py;
# $COURSE_TEST_SOLUTIONS=0: no): its checks must then say "right", the first run's "not yet".
SOLUTIONS = os.environ.get("COURSE_TEST_SOLUTIONS", "1") == "1"
# Whether each run also tries the invalid values ($COURSE_TEST_INVALID=0: no). Every stack does:
# the values are requests to the kernel, and Colab's ipykernel once answered one with the
# previous one's error.
CHECK_INVALID = os.environ.get("COURSE_TEST_INVALID", "1") == "1"
# The notebooks this stack runs ($COURSE_STACK: compat, tpu or tpu-kaggle; tools.course.STACKS),
# the slowest first (docs/measured_times.json), so that the two workers finish together.
STACK = os.environ.get("COURSE_STACK", "compat")


def heaviest_first(paths: list) -> list:
    """``paths``, the slowest first by docs/measured_times.json (the test profile's, else
    quick's; unmeasured last)."""
    records = course.ROOT / "docs" / "measured_times.json"
    measured = json.loads(records.read_text()) if records.exists() else {}
    times = measured.get("test") or measured.get("quick", {})
    return sorted(paths, key=lambda p: -times.get(p.stem, {}).get("wall_s", 0))


NOTEBOOKS = heaviest_first(course.stack_notebooks(STACK))
PROFILES = course.profiles()
INVALID = {
    path: [
        (name, value)
        for name, values in PROFILES.get("invalid", {}).get(path.stem, {}).items()
        for value in values
    ]
    for path in NOTEBOOKS
}
# The papermill path (what a batch user runs) with a misspelled name, in the lightest notebook of
# the compat stack: that papermill stops at the validation cell and records its one line does
# not depend on the notebook. Each notebook's own values are tried after its runs
# (check_invalid_values).
FIRST_INVALID = [(path, *INVALID[path][0]) for path in NOTEBOOKS[-1:]
                 if INVALID[path] and STACK == "compat"]


def validation_cell_id(path) -> str:
    """The id of the cell after the ``parameters`` cell, in the stored notebook."""
    cells = json.loads(path.read_text())["cells"]
    tagged = [i for i, c in enumerate(cells) if "parameters" in c["metadata"].get("tags", [])]
    return cells[tagged[0] + 1]["id"]


def invalid_cases(path, users) -> list[tuple]:
    """The values to try after the runs: a control (the test parameters, which must pass),
    the notebook's invalid values (notebooks/profiles.toml), and ``users``, a learner's own
    folder, as each folder parameter (in 05 also with ``fresh_start=True``)."""
    resumes = any(name == "fresh_start" for name, _ in INVALID[path])  # 05: also when asked
    extras = [{}, {"fresh_start": True}] if resumes else [{}]  # to start afresh
    folders = [(name, str(users), extra)
               for name in folder_parameters(path) for extra in extras]
    return [(None, None), *INVALID[path], *folders]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_with_test_parameters(path, tmp_path):
    """All cells, then all cells again in the same kernel ($COURSE_TEST_PASSES): set-up that is
    not idempotent (memory settings, strategies, a TPU initialised twice, folders) fails the
    second run. Every exercise's check must say "not yet" in the first run, and "right" in the
    second, where the exercise cells hold their solutions. Then, in that kernel, every invalid
    value must be refused (check_invalid_values)."""
    params = course.parameters_for(path.stem, "test")
    users = tmp_path / "my_project"  # a learner's own folder, passed as a work folder
    users.mkdir()
    (users / "thesis.tex").write_text("months of work")
    cases = invalid_cases(path, users) if CHECK_INVALID else ()
    result = run_notebooks.execute(path, BUILD, params, passes=PASSES, solutions=SOLUTIONS,
                                   invalid=cases)
    assert result.status == "passed", (
        f"run {result.failed_pass} of {PASSES}, cell {result.error_cell}: {result.error}"
    )
    if CHECK_INVALID:
        check_invalid_values(result.validations, cases, users)
    expected = [id for _, id, _ in exercises.exercise_cells(nbformat.read(path, as_version=4))]
    runs = [(result.exercises, SOLUTIONS)]
    if PASSES > 1:
        runs.insert(0, (result.first_exercises, False))
    for verdicts, solved in runs:
        assert sorted(verdicts) == expected, "every exercise's check ran and said so"
        wrong = [id for id, passed in verdicts.items() if passed != solved]
        assert not wrong, (
            f"{'solved' if solved else 'untouched'} exercises whose check said "
            f"{'not yet' if solved else 'right'}: {wrong} (see {result.executed})"
        )
    assert PASSES == 1 or result.differ is not None, "the second run was compared with the first"
    assert not result.differ, "the two runs disagree (nbval):\n" + "\n".join(result.differ)
    assert "This run took " in result.executed.read_text(), "it says how long it ran"
    if PASSES > 1:  # make site-test builds the site from the first runs, highlighted as IPython
        first = json.loads((BUILD / "first-pass" / path.name).read_text())
        assert first["metadata"]["language_info"].get("pygments_lexer") == "ipython3"
    noise = [line for line in ("Please report this", "AutoGraph could not transform",
                               "child: Downloading") if line in result.executed.read_text()]
    noise += run_notebooks.log_lines(nbformat.read(result.executed, as_version=4))  # any stack
    assert not noise, f"outputs that look like a crash, a download or a log: {noise}"
    assert result.device != "not stated", "the notebook must say which device ran it"
    if path.stem == "04_dcgan":  # the saved generator holds Keras's own layers only
        assert "loaded back, its layers all come from: keras." in result.executed.read_text()
    if path.stem == "05_survive_a_disconnect":
        check_resumed_run(path, params, result, tmp_path)
    engines = course.TPU_NOTEBOOKS.get(path.stem, ("tensorflow",))
    assert result.imported is not None and set(engines) <= set(result.imported), (
        f"the kernel imported {result.imported}, not {engines}")
    if path.stem in course.TPU_NOTEBOOKS:
        check_tpu_notebook(path.stem, result)
    if path.stem in ("06_data_parallel", "07_out_of_memory", "08_scale_out_profile",
                     *course.TPU_NOTEBOOKS):
        check_yardstick(result.executed)
    if path.stem == "06_data_parallel":
        check_replicas(result.executed)
    if path.stem == "07_out_of_memory":  # the variable reached the child (a fork server's)
        assert "allocator in the first child: TensorFlow's own (BFC); in this one: " \
            "cuda_malloc_async" in result.executed.read_text()
    if path.stem == "08_scale_out_profile":  # make test never opens ports: a namespace, or
        executed = result.executed.read_text()  # loopback read back from /proc, or nothing
        assert "The workers run in a network namespace of their own" in executed or re.search(
            r"The workers listen on (127\.0\.0\.1:\d+(?: and )?)+ only \(read back from /proc\)",
            executed)
    if path.stem == "01_runtime_check":  # the child really lost its GPUs, whatever this has
        assert 'a child process with CUDA_VISIBLE_DEVICES=\\"\\": 0 GPU(s)' in (
            result.executed.read_text()
        )


def table_row(executed, first: str) -> list[float]:
    """The numbers of the row of a printed table that starts with ``first``."""
    for cell in json.loads(executed.read_text())["cells"]:
        for output in cell.get("outputs", []):
            text = "".join(output.get("data", {}).get("text/plain", ""))
            for line in text.splitlines():
                if line.startswith(first):
                    return [float(v) for v in re.findall(r"\d\.\d\de[-+]\d\d", line)]
    raise AssertionError(f"no row starting {first!r} in {executed}")


# How close 8 devices must be (the notebooks' own tables, each run against float64): the
# losses to float32 rounding; the update's distance from float64 (09 steps both models with
# SGD, whose update a wrongly averaged gradient would move by about 1). 10's split lies 6.6e-5
# from float64 (torch-xla 2.9.0, test profile), as its unsplit program does; gradients left
# unsummed over 8 devices would put it 0.875 away.
TOLERANCES = {
    "09_tpu_keras_jax": {"classifier  all devices": (1e-4, 1e-3),
                         "DCGAN step  all devices": (1e-5, 1e-3)},
    "10_tpu_pytorch_xla": {"DCGAN step  split between 8 devices": (1e-5, 1e-3)},
    "11_tpu_scale": {"MLP step  ModelParallel, all devices": (1e-5, 1e-3),
                     "MLP step  two processes, all devices": (1e-5, 1e-3)},
}


def check_tpu_notebook(stem, result):
    """A TPU notebook ran on 8 simulated devices, its kernel never imported TensorFlow (read from
    the kernel's own modules: Kaggle's TPU image has it installed, and a TPU notebook must not
    load it, nor its memory and threads), and its 1-versus-8 table is within :data:`TOLERANCES`."""
    text = result.executed.read_text()
    assert "8 simulated CPU device(s)" in text, "the TPU notebooks run on 8 simulated devices"
    assert "tensorflow" not in result.imported, f"the kernel imported {result.imported}"
    for row, (loss, update) in TOLERANCES[stem].items():
        numbers = table_row(result.executed, row)
        assert numbers[0] < loss and numbers[-1] < update, f"{row}: {numbers}"


def check_replicas(executed):
    """Notebook 06: with synchronized batch norm N replicas make the update 1 makes (the
    yardstick's rounding); with per-replica batch norm another update; and ``fit`` says it fell
    back from ``steps_per_execution`` under N replicas."""
    text = executed.read_text()
    verdicts = {name.split(" batch norm")[0]: verdict
                for name, *_, verdict in yardstick_lines(executed)}
    assert verdicts == {"synchronized": "rounding, the same update",
                        "per replica": "another update"}, verdicts
    assert "steps_per_execution=1" in text and "keras-team/keras#19246" in text


# helpers.yardstick.line, read back
YARDSTICK = re.compile(r"^(.+): (\S+) from float64; this run's own rounding (\S+), so up to "
                       r"(\S+) is rounding: (rounding, the same update|another update)"
                       r"( \(by the floor: \d+ times the run's own\))?\.$", re.M)


def yardstick_lines(executed) -> list[tuple]:
    """Every yardstick verdict a notebook printed: (name, away, own, allowed, verdict); a
    verdict that rests on the floor (past twice the run's own rounding) must say so."""
    found = []
    for cell in json.loads(executed.read_text())["cells"]:
        for output in cell.get("outputs", []):
            text = "".join(output.get("text", ""))
            for name, *numbers, verdict, floor in YARDSTICK.findall(text):
                away, own, allowed = map(float, numbers)
                by_floor = verdict != "another update" and away > yardstick.SLACK * own * 1.05
                assert bool(floor) == by_floor or abs(away / own - 2) < 0.1, f"{name}: {floor!r}"
                found.append((name, away, own, allowed, verdict))
    return found


def check_yardstick(executed):
    """06 to 11 judge "the same update" alike: each prints the yardstick's lines, and
    none calls a difference rounding that lies further from float64 than the run's own rounding
    allows (yardstick.allowed), nor the reverse; the numbers carry two digits, hence the 5%."""
    lines = yardstick_lines(executed)
    assert lines, f"{executed.name} printed no yardstick line"
    for name, away, own, allowed, verdict in lines:
        assert abs(allowed / yardstick.allowed(own) - 1) < 0.05, name
        if verdict == "another update":
            assert away > allowed / 1.05, f"{name}: {away} called another update"
        else:
            assert away <= allowed * 1.05, f"{name}: {away} called rounding, over {allowed}"


@pytest.mark.parametrize(
    "path, name, value", FIRST_INVALID, ids=[f"{p.stem}-{n}={v!r}" for p, n, v in FIRST_INVALID]
)
def test_invalid_parameter_fails_in_the_validation_cell_with_one_line(path, name, value, tmp_path):
    """Through papermill, with the parameter's name misspelled (papermill injects any name): the
    validation cell stops the run in one line naming the name and the nearest known one."""
    wrong = name[:-1]  # max_images -> max_image
    params = {**course.parameters_for(path.stem, "test"), wrong: value}
    result = run_notebooks.execute(path, tmp_path, params)
    assert result.status == "failed"
    assert result.error_cell == validation_cell_id(path), result.error
    assert result.error == (f"ParameterError: Invalid parameter {wrong}={value!r}: this notebook "
                            f"has no parameter {wrong} (the nearest is {name}).")
    nb = json.loads(result.executed.read_text())
    cell = next(c for c in nb["cells"] if c.get("id") == result.error_cell)
    error = next(o for o in cell["outputs"] if o["output_type"] == "error")
    assert error["traceback"] == [result.error], "shown as one line, not a traceback"


def check_invalid_values(results, cases, users):
    """Each case's result (RunResult.validations): the control passed, every other value was
    refused by the validation cell with one line naming it, and ``users`` was not touched."""
    assert results is not None and len(results) == len(cases), f"values tried: {results}"
    assert results[0]["error"] == "", f"the test parameters must pass: {results[0]['error']}"
    assert [p.name for p in users.iterdir()] == ["thesis.tex"], "the user's folder was touched"
    assert (users / "thesis.tex").read_text() == "months of work"
    wrong = [
        f"{r['name']}={r['value']}: {r['error'] or 'accepted'}"
        for r in results[1:]
        if not r["error"].startswith(f"ParameterError: Invalid parameter {r['name']}={r['value']}")
        or "\n" in r["error"]
        or r["traceback"] != [r["error"]]
    ]
    assert not wrong, "not refused with one line: " + "; ".join(wrong)


def check_resumed_run(path, params, result, tmp_path):
    """Notebook 05's test run (budget_min=0: one epoch a session, notebooks/profiles.toml): the
    first "Run all" trains epoch 1 of 2 and stops on a checkpoint, the second resumes it and
    trains epoch 2. Then a run on that run_dir whose precision differs (a GPU session's run
    re-opened on a CPU runtime) stops in one line naming the change, and every file of the
    first run survives, byte for byte."""
    first = (result.executed.parent.parent / "first-pass" / path.name).read_text()
    assert "this session trains to epoch 1 of 2" in first, "budget_min=0: one epoch a session"
    assert "the rest is for another session" in first
    lost = re.search(r"(\d+) step\(s\) lost and trained again", first)  # killed between saves
    assert lost and int(lost[1]) > 0, "the child must die after its last save, losing steps"
    assert f"Trained to step {params['max_images'] // params['batch_size'] * 2} of " in (
        result.executed.read_text()), "the second run resumed and finished the run"
    run_dir = BUILD / "work" / path.stem / "course_runs" / "dcgan_run"
    ran = re.search(r"precision: (\w+);", result.executed.read_text())[1]

    def files_of_the_run():  # all but the lock, which names the process using the folder
        return {p: p.read_bytes() for p in run_dir.rglob("*")
                if p.is_file() and p.name != workdirs.LOCK}

    files = files_of_the_run()
    assert any(p.name.endswith(".index") for p in files), "the run's checkpoints"
    other = "float32" if ran != "float32" else "mixed_float16"
    second = run_notebooks.execute(path, tmp_path / "second",
                                   {**params, "precision": other, "run_dir": str(run_dir)})
    assert second.status == "failed"
    assert second.error.startswith("RunSettingsChanged: ") and "\n" not in second.error
    assert f"precision was {ran!r}, now {other!r}" in second.error, second.error
    assert files_of_the_run() == files


@pytest.mark.skipif(not any(p.stem == "03_tfdata_pipelines" for p in NOTEBOOKS),
                    reason="03 runs on the compat stack")
def test_two_notebooks_on_one_folder_at_once_one_is_refused(tmp_path):
    """Two tabs (or two papermill runs) with one work_dir: the one that prepared it first holds
    its lock while its kernel lives; the other stops in its prepare cell with one line naming
    the holder (process and host), and deletes nothing of the first one's files."""
    from jupyter_client.manager import start_new_kernel

    path = course.NOTEBOOKS / "03_tfdata_pipelines.ipynb"
    work = tmp_path / "shared_work"
    params = {**course.parameters_for(path.stem, "test"), "work_dir": str(work)}
    cells = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    upto = next(i for i, c in enumerate(cells) if "workdirs.prepare(" in c.source)
    tagged = next(i for i, c in enumerate(cells) if "parameters" in c.metadata.get("tags", []))
    assignments = "\n".join(f"{name} = {value!r}" for name, value in params.items())
    first = [c.source for c in cells[:upto + 1]]
    first.insert(tagged + 1, assignments)  # as papermill injects them
    first.append("(work / 'records.txt').write_text('the first tab')")
    manager, client = start_new_kernel(kernel_name="python3", cwd=str(tmp_path))
    try:
        replies = [client.execute_interactive(source, timeout=120) for source in first]
        assert all(r["content"]["status"] == "ok" for r in replies), "the first tab is set up"
        second = run_notebooks.execute(path, tmp_path / "second", params)
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    assert second.status == "failed" and second.error_cell == cells[upto].id, second.error_cell
    assert second.error.startswith("WorkFolderBusy: ") and "\n" not in second.error
    assert re.search(r"is in use by process \d+ on \S+", second.error), second.error
    assert (work / "records.txt").read_text() == "the first tab", "the first tab's files stay"

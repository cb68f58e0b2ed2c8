"""Execute the course's notebooks headlessly with papermill, render HTML, print a summary.

    python -m tools.run_notebooks [--profile quick|test|full] [--build DIR] [NAME ...]

Each notebook runs into ``<build>/executed/``, its HTML goes to ``<build>/html/``
and the files it writes to ``<build>/work/<name>/``. One failing notebook does
not stop the others; the exit status is 1 if any failed. ``--twice`` runs each
notebook's cells twice in the same kernel, as a learner's second "Run all" does
(the executed copy holds the second run's outputs).
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import nbformat
from jupyter_core.utils import run_sync
from nbval.plugin import (
    IPyNbCell,
    coalesce_streams,
    find_comment_markers,
    find_metadata_tags,
    nocolors,
)
from traitlets import Integer, List, Unicode

from helpers.devices import DEVICE_MIME  # the record helpers.devices.announce leaves
from helpers.display import Table
from helpers.exercises import EXERCISE_MIME  # the records the exercises' checks leave
from tools.course import BUILD, TPU_KERNEL, kernel_for, notebook_paths, parameters_for
from tools.exercises import write_solutions


@dataclass
class RunResult:
    notebook: str
    status: str  # "passed" or "failed"
    seconds: float
    device: str
    executed: Path
    error: str = ""
    error_cell: str | None = None  # the failing cell's id, as in the stored notebook
    passes: int = 1  # runs of all its cells in one kernel (2: the second "Run all" too)
    failed_pass: int | None = None  # which of them failed
    exercises: dict[str, bool] | None = None  # {exercise: its check passed}, as the run left it
    solutions: bool = False  # whether the exercise cells held their solutions
    differ: list[str] | None = None  # cells tagged nbval-check-output whose runs disagree
    # the parameter values tried after the passes, in the same kernel (see :func:`execute`):
    # {"name", "value" (its repr), "error" ("ename: evalue", "" if accepted), "traceback"}
    validations: list[dict] | None = None


PASS_KEY = "course_pass"  # notebook metadata: the pass under way, or the one that failed
VALIDATIONS_KEY = "course_validations"  # notebook metadata: RunResult.validations
ENGINE = "course_repeat"  # the papermill engine that runs every cell ``passes`` times


def _register_engine() -> None:
    """A papermill engine that runs all cells ``passes`` times in one kernel (stopping at
    the first failure), so that "Run all" twice is tested on the same execution."""
    from papermill.clientwrap import PapermillNotebookClient
    from papermill.engines import NBClientEngine, papermill_engines
    from papermill.log import logger
    from papermill.utils import merge_kwargs, remove_args

    class RepeatingClient(PapermillNotebookClient):
        passes = Integer(1).tag(config=True)
        first_pass = Unicode("").tag(config=True)  # where the first run's copy goes
        validations = List().tag(config=True)  # :func:`validation_requests`, after the passes

        def papermill_execute_cells(self):
            for number in range(1, self.passes + 1):
                self.nb.metadata[PASS_KEY] = number
                super().papermill_execute_cells()
                if self.nb.metadata.papermill.get("exception"):
                    return
                if number == 1 and self.passes > 1 and self.first_pass:
                    nbformat.write(self.nb, self.first_pass)
            if self.validations:
                self.nb.metadata[VALIDATIONS_KEY] = [
                    self.validate(request) for request in self.validations
                ]

        def validate(self, request: dict) -> dict:
            """One parameter value: the parameters cell with it assigned, then the
            validation cell, as requests of their own (not cells of the notebook)."""
            result = {"name": request["name"], "value": request["value"], "traceback": []}
            if error := self.run_code(request["parameters"]):
                result["error"] = f"the parameters cell failed: {error['evalue']}"
            elif error := self.run_code(request["validation"]):
                result["error"] = f"{error['ename']}: {error['evalue']}"
                result["traceback"] = error.get("traceback", [])
            else:
                result["error"] = ""
            return result

        def run_code(self, code: str) -> dict | None:
            """This request's error, or None: the reply to this very request says whether it
            failed, and its error is the message whose parent is this request. A failure is
            expected, so it must not abort the next request (``stop_on_error=False``): with
            ipykernel 6.17 (Colab's) under load, a request right after an error was aborted,
            and its error read as the previous one's."""
            errors = []

            def hook(message):
                if message["msg_type"] == "error":
                    errors.append((message["parent_header"].get("msg_id"), message["content"]))

            for _ in range(2):  # an aborted request (not run at all) is sent once more
                reply = run_sync(self.kc.execute_interactive)(
                    code, output_hook=hook, timeout=120, store_history=False,
                    stop_on_error=False,
                )
                if reply["content"]["status"] != "aborted":
                    break
            if reply["content"]["status"] == "ok":
                return None
            request = reply["parent_header"].get("msg_id")
            mine = [content for parent, content in errors if parent == request]
            return mine[0] if mine else {
                "ename": reply["content"].get("ename", reply["content"]["status"]),
                "evalue": reply["content"].get("evalue", "the request was not run"),
                "traceback": reply["content"].get("traceback", []),
            }

    class RepeatingEngine(NBClientEngine):
        @classmethod
        def execute_managed_notebook(
            cls, nb_man, kernel_name, log_output=False, stdout_file=None, stderr_file=None,
            start_timeout=60, execution_timeout=None, passes=1, first_pass="", validations=(),
            **kwargs,
        ):
            kwargs = remove_args(["input_path", "timeout", "startup_timeout"], **kwargs)
            final = merge_kwargs(
                kwargs, timeout=execution_timeout, startup_timeout=start_timeout,
                kernel_name=kernel_name, log=logger, log_output=log_output,
                stdout_file=stdout_file, stderr_file=stderr_file,
            )
            return RepeatingClient(
                nb_man, passes=passes, first_pass=first_pass, validations=list(validations),
                **final,
            ).execute()

    papermill_engines.register(ENGINE, RepeatingEngine)


def device_of(nb) -> str:
    """The device a notebook announced (``helpers.devices.announce``), or "not stated"."""
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            record = output.get("data", {}).get(DEVICE_MIME)
            if record:
                return record.get("description", "?")
    return "not stated"


def verdicts_in(nb) -> dict[str, bool]:
    """``{exercise: passed}`` from the records an executed notebook's checks left (the last
    verdict of each, as a second "Run all" leaves them)."""
    found = {}
    for cell in nb["cells"]:
        for output in cell.get("outputs", []):
            record = output.get("data", {}).get(EXERCISE_MIME)
            if record:
                found[record["exercise"]] = bool(record["passed"])
    return found


def first_error(nb) -> tuple[str | None, str]:
    """The id of the first code cell that failed, and its one-line error (for a cell that
    failed without an error output, such as the install cell's ``UsageError``, the last line
    it wrote to stderr)."""
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                return cell.get("id"), f"{output.get('ename')}: {output.get('evalue')}"
        if cell.get("metadata", {}).get("papermill", {}).get("exception"):
            stderr = [o.get("text", "") for o in cell["outputs"] if o.get("name") == "stderr"]
            return cell.get("id"), ("".join(stderr).strip().splitlines() or ["failed"])[-1]
    return None, ""


def validation_requests(path: Path, parameters: dict, cases) -> list[dict]:
    """What :func:`execute` sends, per case, to try parameter values after its passes: the
    ``parameters`` cell followed by the parameters with that case's value changed (assigned as
    papermill injects them), then the validation cell. A case is ``(name, value)``, or
    ``(name, value, others)`` with a dict of other parameters changed with it (04's
    ``fresh_start=True`` beside a ``run_dir``); a case named ``None`` changes nothing (a
    control that must pass)."""
    from papermill.translators import translate_parameters

    cells = nbformat.read(path, as_version=4).cells
    tagged = next(i for i, c in enumerate(cells) if "parameters" in c.metadata.get("tags", []))
    defaults, validation = cells[tagged].source, cells[tagged + 1].source
    requests = []
    for name, value, *others in cases:
        changed = {**(others[0] if others else {}), **({name: value} if name else {})}
        injected = translate_parameters(
            "python", "python3", {**parameters, **changed}, "Injected parameters"
        )
        requests.append({"name": name, "value": repr(value),
                         "parameters": defaults + "\n" + injected, "validation": validation})
    return requests


def execute(
    path: Path, build: Path, parameters: dict, timeout: int = 1800, passes: int = 1,
    solutions: bool = False, invalid=(),
) -> RunResult:
    """Run one notebook with papermill; never raises for a failing notebook.

    ``passes=2`` runs all its cells a second time in the same kernel once the first run
    passed: what a learner's second "Run all" does. ``solutions=True`` runs the copy whose
    exercise cells hold their solutions (tools/exercises.py), written to ``build/solved``.
    ``invalid`` lists parameter values (see :func:`validation_requests`) to try in the same
    kernel once every pass has passed, each through the parameters and validation cells: a
    kernel start imports TensorFlow (seconds), so this checks many values for the price of
    none. Each one's error lands in ``RunResult.validations``."""
    import papermill

    _register_engine()

    executed = build / "executed" / path.name
    first = build / "first-pass" / path.name  # the first run's copy, for the nbval comparison
    first.parent.mkdir(parents=True, exist_ok=True)
    first.unlink(missing_ok=True)
    workdir = build / "work" / path.stem
    executed.parent.mkdir(parents=True, exist_ok=True)
    workdir.mkdir(parents=True, exist_ok=True)
    source = write_solutions(build / "solved", [path])[0] if solutions else path
    kernel = kernel_for(path.stem)
    if kernel is None:  # neither this interpreter nor a registered kernel has its engine
        missing = (f"no kernel here has what {path.name} needs: run `make venv-tpu`, which "
                   f"registers the {TPU_KERNEL!r} kernel")
        nbformat.write(nbformat.read(source, as_version=4), executed)
        return RunResult(path.stem, "failed", 0.0, "not run", executed, missing, None, passes,
                         None, {}, solutions)
    executed.unlink(missing_ok=True)  # never read an earlier run's copy as this one's
    start = time.perf_counter()
    try:
        papermill.execute_notebook(
            str(source),
            str(executed),
            parameters=parameters,
            kernel_name=kernel,
            cwd=str(workdir),
            progress_bar=False,
            execution_timeout=timeout,
            # the kernel's own start-up notices (e.g. "running over TCP") are not the lesson;
            # figures are outputs, as in Jupyter, even where MPLBACKEND=Agg (as in the tests)
            extra_arguments=["--IPKernelApp.log_level=ERROR", "--matplotlib=inline"],
            engine_name=ENGINE,
            passes=passes,
            first_pass=str(first),
            validations=validation_requests(source, parameters, invalid) if invalid else (),
        )
        status, crash = "passed", ""
    except papermill.PapermillExecutionError:
        status, crash = "failed", ""
    except Exception as error:  # a dead kernel (the OOM killer), a cell past its timeout...
        status, crash = "failed", f"{type(error).__name__}: {str(error).strip()[:300]}"
    seconds = time.perf_counter() - start
    if not executed.exists():  # papermill stopped before writing it: the notebook as it was
        nbformat.write(nbformat.read(source, as_version=4), executed)
    nb = nbformat.read(executed, as_version=4)
    validations = nb.metadata.pop(VALIDATIONS_KEY, None)
    if validations is not None:  # the executed copy is the notebook's, not the test's
        nbformat.write(nb, executed)
    cell, error = first_error(nb)
    if crash and not error:  # the kernel died: no cell reported an error, papermill did
        error = crash
    failed = nb.metadata.get(PASS_KEY) if status == "failed" else None
    differ = (outputs_that_differ(nbformat.read(first, as_version=4), nb)
              if status == "passed" and first.exists() else None)
    return RunResult(
        path.stem, status, seconds, device_of(nb), executed, error, cell, passes, failed,
        verdicts_in(nb), solutions, differ, validations,
    )


def outputs_that_differ(first, second) -> list[str]:
    """The cells tagged ``nbval-check-output`` (or marked ``# NBVAL_CHECK_OUTPUT``) whose
    outputs differ between two runs of one notebook, each as ``"cell <id>: <nbval's report>"``.

    This is nbval's ``--nbval-lax`` comparison, its own code (``IPyNbCell.compare_outputs``,
    with its default skips: metadata, execution counts, images...), applied to the first and
    second "Run all" of one kernel instead of to a stored copy and a third run."""
    class Cell:  # what compare_outputs reads from the pytest item it is written for
        colors = nocolors
        parent = SimpleNamespace(skip_compare=_NBVAL_SKIPS, sanitize_patterns={})
        config = None  # no pytest here: nbval falls back to its own report of the two outputs
        ihook = SimpleNamespace(pytest_assertrepr_compare=lambda **_: [])
        sanitize = IPyNbCell.sanitize
        format_output_compare = IPyNbCell.format_output_compare
        compare_outputs = IPyNbCell.compare_outputs

    differ = []
    for one, two in zip(first.cells, second.cells, strict=True):
        if one.cell_type != "code":
            continue
        options = dict(find_metadata_tags(one.metadata))
        options.update(find_comment_markers(one.source))
        item = Cell()
        if options.get("check") and not item.compare_outputs(
            coalesce_streams(copy.deepcopy(two.outputs)),
            coalesce_streams(copy.deepcopy(one.outputs)),
        ):
            differ.append(f"cell {one.get('id')}: " + "\n".join(item.comparison_traceback))
    return differ


#: nbval's skips (IPyNbFile.__init__, without --nbdime): what its comparison ignores.
_NBVAL_SKIPS = (
    "metadata", "traceback", "prompt_number", "output_type", "name", "execution_count",
    "application/vnd.jupyter.widget-view+json", "image/png", "image/jpeg",
)


def gif_outputs_as_html(nb):
    """Give every ``image/gif`` output an ``<img>`` as ``text/html``, in place; returns ``nb``.

    nbconvert's HTML templates render PNG, JPEG and SVG but not GIF: without this, notebook 04's
    progress animation shows as ``<IPython.core.display.Image object>``. Outputs that already
    have HTML are left alone."""
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if "image/gif" in data and "text/html" not in data:
                gif = "".join(data["image/gif"]).replace("\n", "")
                data["text/html"] = f'<img src="data:image/gif;base64,{gif}" alt="animation">'
    return nb


def render_html(executed: Path, html_dir: Path) -> Path:
    """Render an executed notebook to a standalone HTML page (GIF outputs included)."""
    from nbconvert import HTMLExporter

    html_dir.mkdir(parents=True, exist_ok=True)
    nb = gif_outputs_as_html(nbformat.read(executed, as_version=4))
    body, _ = HTMLExporter().from_notebook_node(nb)
    target = html_dir / (executed.stem + ".html")
    target.write_text(body, encoding="utf-8")
    return target


def summary(results: list[RunResult], root: Path) -> str:
    rows = []
    for r in results:
        where = r.executed.relative_to(root) if r.executed.is_relative_to(root) else r.executed
        rows.append([r.notebook, r.status, f"{r.seconds:.1f}", r.device, where])
    passed = sum(r.status == "passed" for r in results)
    text = repr(Table(rows, ["notebook", "status", "seconds", "device", "outputs"]))
    for r in results:
        if r.error:
            run = f" (run {r.failed_pass} of {r.passes})" if r.passes > 1 else ""
            text += f"\n{r.notebook}: cell {r.error_cell}{run}: {r.error}"
    return text + f"\nnotebooks: {passed} passed, {len(results) - passed} failed"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="quick", help="quick (default), test or full")
    parser.add_argument("--build", type=Path, default=BUILD)
    parser.add_argument(
        "--twice", action="store_true", help="run each notebook's cells twice in one kernel"
    )
    parser.add_argument(
        "--solutions", action="store_true", help="run the copies with the exercises solved"
    )
    parser.add_argument("names", nargs="*", help="notebook names (stems); default: all")
    args = parser.parse_args(argv)
    paths = [p for p in notebook_paths() if not args.names or p.stem in args.names]
    if not paths:
        print("no notebooks matched", file=sys.stderr)
        return 1
    results = []
    for path in paths:
        params = parameters_for(path.stem, args.profile)
        print(
            f"running {path.name} ({args.profile}: {params or 'notebook defaults'}) ...", flush=True
        )
        result = execute(
            path, args.build, params, passes=2 if args.twice else 1, solutions=args.solutions
        )
        try:
            render_html(result.executed, args.build / "html")
        except Exception as error:  # a half-written copy: say so, go on with the next
            print(f"  no HTML page for {path.name}: {type(error).__name__}: {error}")
        right = sum((result.exercises or {}).values())
        print(f"  {result.status} in {result.seconds:.1f} s on {result.device}; exercises "
              f"right: {right} of {len(result.exercises or {})}", flush=True)
        results.append(result)
    print(summary(results, args.build.resolve().parent))
    return 0 if all(r.status == "passed" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

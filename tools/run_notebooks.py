"""Execute the course's notebooks with papermill, render their HTML, print a summary.

    python -m tools.run_notebooks [--profile quick|test|full] [--build DIR] [NAME ...]

Into ``<build>/executed/``, ``html/`` and ``work/<name>/``; exit status 1 if one failed.
"""

import argparse
import ast
import copy
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import nbformat
from jupyter_core.utils import run_sync
from nbval import plugin
from traitlets import Dict, Integer, List, Unicode

from helpers.devices import DEVICE_MIME  # the record helpers.devices.announce leaves
from helpers.display import Table
from helpers.exercises import EXERCISE_MIME  # the records the exercises' checks leave
from tools.course import BUILD, TPU_KERNEL, kernel_for, notebook_paths, parameters_for
from tools.exercises import solution_notebook


@dataclass
class RunResult:
    notebook: str
    status: str  # "passed" or "failed"
    seconds: float
    device: str
    executed: Path
    error: str = ""
    error_cell: str | None = None  # the failing cell's id, as in the stored notebook
    failed_pass: int | None = None  # which of the runs of all its cells in one kernel failed
    exercises: dict[str, bool] | None = None  # {exercise: its check passed}, after the last run
    first_exercises: dict[str, bool] | None = None  # the first run's verdicts (passes > 1)
    differ: list[str] | None = None  # cells tagged nbval-check-output whose runs disagree
    validations: list[dict] | None = None  # the values tried after the passes (validate)
    imported: list[str] | None = None  # the engines the kernel had imported at the end


PASS_KEY = "course_pass"  # notebook metadata: the pass under way, or the one that failed
VALIDATIONS_KEY = "course_validations"  # notebook metadata: RunResult.validations
IMPORTED_KEY = "course_imported"  # notebook metadata: RunResult.imported
#: Evaluated in the kernel after the passes: which engines it imported (sys.modules, not what
#: is installed: Kaggle's TPU image has TensorFlow installed, and its notebooks must not load it)
ENGINES = ("sorted({m.split('.')[0] for m, v in __import__('sys').modules.items() if v} & "
           "{'tensorflow', 'keras', 'jax', 'torch', 'torch_xla'})")
ENGINE = "course_repeat"  # the papermill engine that runs every cell ``passes`` times
#: What no executed notebook may show: a native log line (absl's and glog's; TensorFlow 2.20's
#: after a date), absl's notice before its set-up, oneDNN's and cpu_feature_guard's notices.
LOG_LINE = re.compile(r"\b([EWIF]\d{4} \d\d:\d\d:\d+\.\d+ +\d+|\d{4}-\d\d-\d\d [\d:.]+: [EWIF]) "
                      r"\S+\.(cc|h):\d+\]|absl::InitializeLog\(\) is called|oneDNN custom "
                      r"operations are on|To enable the following instructions")


def _register_engine() -> None:
    """A papermill engine: all cells ``passes`` times in one kernel, then the ``validations``."""
    from papermill.clientwrap import PapermillNotebookClient
    from papermill.engines import NBClientEngine, papermill_engines
    from papermill.log import logger
    from papermill.utils import remove_args

    class RepeatingClient(PapermillNotebookClient):
        passes = Integer(1).tag(config=True)
        first_pass = Unicode("").tag(config=True)  # where the first run's copy goes
        validations = List().tag(config=True)  # :func:`validation_requests`, after the passes
        solved = Dict().tag(config=True)

        def papermill_execute_cells(self):
            for number in range(1, self.passes + 1):
                self.nb.metadata[PASS_KEY] = number
                if number == self.passes:
                    for cell in self.nb.cells:
                        cell.source = self.solved.get(cell.get("id"), cell.source)
                super().papermill_execute_cells()
                if self.nb.metadata.papermill.get("exception"):
                    return
                if number == 1 and self.passes > 1 and self.first_pass:
                    # what papermill records after the last pass, which the site's lexer reads
                    info = self.wait_for_reply(self.kc.kernel_info())["content"]
                    self.nb.metadata["language_info"] = info["language_info"]
                    nbformat.write(self.nb, self.first_pass)
            reply = run_sync(self.kc.execute_interactive)(
                "", user_expressions={"engines": ENGINES}, timeout=60, store_history=False)
            found = reply["content"].get("user_expressions", {}).get("engines", {})
            self.nb.metadata[IMPORTED_KEY] = found.get("data", {}).get("text/plain", "?")
            if self.validations:
                self.nb.metadata[VALIDATIONS_KEY] = [self.validate(r) for r in self.validations]

        def validate(self, request: dict) -> dict:
            """The parameters cell with one value, then the validation cell."""
            result = {"name": request["name"], "value": request["value"], "traceback": [],
                      "error": ""}
            if error := self.run_code(request["parameters"]):
                result["error"] = f"the parameters cell failed: {error['evalue']}"
            elif error := self.run_code(request["validation"]):
                result["error"] = f"{error['ename']}: {error['evalue']}"
                result["traceback"] = error.get("traceback", [])
            return result

        def run_code(self, code: str) -> dict | None:
            """This request's error, or None. ipykernel 6.17 (Colab's) aborted a request right
            after an error: hence ``stop_on_error=False`` and a retry."""
            messages = []
            for _ in range(2):
                reply = run_sync(self.kc.execute_interactive)(
                    code, output_hook=messages.append, timeout=120, store_history=False,
                    stop_on_error=False)
                if reply["content"]["status"] != "aborted":
                    break
            if reply["content"]["status"] == "ok":
                return None
            request = reply["parent_header"].get("msg_id")
            mine = [m["content"] for m in messages
                    if m["msg_type"] == "error" and m["parent_header"].get("msg_id") == request]
            return mine[0] if mine else {"ename": reply["content"]["status"], "traceback": [],
                                         "evalue": "the request was not run", **reply["content"]}

    class RepeatingEngine(NBClientEngine):
        @classmethod
        def execute_managed_notebook(cls, nb_man, kernel_name, start_timeout=60,
                                     execution_timeout=None, **kwargs):
            kwargs = remove_args(["input_path", "timeout", "startup_timeout"], **kwargs)
            return RepeatingClient(nb_man, kernel_name=kernel_name, log=logger,
                                   timeout=execution_timeout, startup_timeout=start_timeout,
                                   **kwargs).execute()

    papermill_engines.register(ENGINE, RepeatingEngine)


def _records(nb, mime: str):
    for cell in nb["cells"]:
        for output in cell.get("outputs", []):
            if record := output.get("data", {}).get(mime):
                yield record


def device_of(nb) -> str:
    """The device a notebook announced (``helpers.devices.announce``), or "not stated"."""
    return next((r.get("description", "?") for r in _records(nb, DEVICE_MIME)), "not stated")


def verdicts_in(nb) -> dict[str, bool]:
    """``{exercise: passed}``: the last verdict each exercise's check left in ``nb``."""
    return {r["exercise"]: bool(r["passed"]) for r in _records(nb, EXERCISE_MIME)}


def first_error(nb) -> tuple[str | None, str]:
    """The first failed cell's id and its one-line error (else its last line on stderr)."""
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                return cell.get("id"), f"{output.get('ename')}: {output.get('evalue')}"
        if cell.get("metadata", {}).get("papermill", {}).get("exception"):
            stderr = [o.get("text", "") for o in cell["outputs"] if o.get("name") == "stderr"]
            return cell.get("id"), ("".join(stderr).strip().splitlines() or ["failed"])[-1]
    return None, ""


def log_lines(nb) -> list[tuple[str, str]]:
    """``(cell id, line)`` per line of ``nb``'s outputs (streams, errors, text) that is a log's."""
    return [(cell.get("id"), line) for cell in nb.cells for out in cell.get("outputs", [])
            for text in [out.get("text", ""), *out.get("traceback", []), *(
                v for k, v in out.get("data", {}).items() if k.startswith("text/"))]
            for line in str(text).splitlines() if LOG_LINE.search(line)]


def validation_requests(path: Path, parameters: dict, cases) -> list[dict]:
    """Per case ``(name, value[, {other: value}])``: the parameters cell, the validation cell."""
    from papermill.translators import translate_parameters

    cells = nbformat.read(path, as_version=4).cells
    tagged = next(i for i, c in enumerate(cells) if "parameters" in c.metadata.get("tags", []))
    requests = []
    for name, value, *others in cases:
        changed = {**parameters, **(others[0] if others else {}), **({name: value} if name else {})}
        injected = translate_parameters("python", "python3", changed, "Injected parameters")
        requests.append({"name": name, "value": repr(value), "validation": cells[tagged + 1].source,
                         "parameters": cells[tagged].source + "\n" + injected})
    return requests


def execute(path: Path, build: Path, parameters: dict, passes: int = 1, solutions: bool = False,
            invalid=()) -> RunResult:
    """Run one notebook with papermill, ``passes`` times in one kernel (the last solved with
    ``solutions``), then the ``invalid`` values; never raises for a failing notebook."""
    import papermill

    _register_engine()
    executed, first = build / "executed" / path.name, build / "first-pass" / path.name
    workdir = build / "work" / path.stem
    for folder in (executed.parent, first.parent, workdir):
        folder.mkdir(parents=True, exist_ok=True)
    first.unlink(missing_ok=True)
    if (kernel := kernel_for(path.stem)) is None:  # no kernel here has the notebook's engine
        nbformat.write(nbformat.read(path, as_version=4), executed)
        why = f"no kernel here runs {path.name}: `make venv-tpu` registers {TPU_KERNEL!r}"
        return RunResult(path.stem, "failed", 0.0, "not run", executed, why, exercises={})
    executed.unlink(missing_ok=True)  # never read an earlier run's copy as this one's
    solved = {c.id: c.source for c in solution_notebook(path).cells} if solutions else {}
    start, crash = time.perf_counter(), ""
    try:
        papermill.execute_notebook(
            str(path), str(executed), parameters=parameters, kernel_name=kernel,
            cwd=str(workdir), progress_bar=False, execution_timeout=1800,  # s, per cell
            # no kernel start-up notices; figures are outputs even where MPLBACKEND=Agg
            extra_arguments=["--IPKernelApp.log_level=ERROR", "--matplotlib=inline"],
            engine_name=ENGINE, passes=passes, first_pass=str(first), solved=solved,
            validations=validation_requests(path, parameters, invalid) if invalid else [])
        status = "passed"
    except papermill.PapermillExecutionError:
        status = "failed"
    except Exception as error:  # a dead kernel (the OOM killer), a cell past its timeout...
        status, crash = "failed", f"{type(error).__name__}: {str(error).strip()[:300]}"
    seconds = time.perf_counter() - start
    if not executed.exists():  # papermill stopped before writing it: the notebook as it was
        nbformat.write(nbformat.read(path, as_version=4), executed)
    nb = nbformat.read(executed, as_version=4)
    validations = nb.metadata.pop(VALIDATIONS_KEY, None)
    imported = nb.metadata.pop(IMPORTED_KEY, None)
    if validations is not None or imported is not None:  # the copy is the notebook's, not ours
        nbformat.write(nb, executed)
    cell, error = first_error(nb)
    first_nb = nbformat.read(first, as_version=4) if first.exists() else None
    differ = outputs_that_differ(first_nb, nb) if status == "passed" and first_nb else None
    return RunResult(path.stem, status, seconds, device_of(nb), executed, error or crash, cell,
                     nb.metadata.get(PASS_KEY) if status == "failed" else None, verdicts_in(nb),
                     verdicts_in(first_nb) if first_nb else None, differ, validations,
                     ast.literal_eval(imported) if imported and imported != "?" else None)


#: nbval's skips (IPyNbFile.__init__, without --nbdime): what its comparison ignores.
_NBVAL_SKIPS = ("metadata", "traceback", "prompt_number", "output_type", "name", "execution_count",
                "application/vnd.jupyter.widget-view+json", "image/png", "image/jpeg")


def outputs_that_differ(first, second) -> list[str]:
    """``"cell <id>: <nbval's report>"`` per ``nbval-check-output`` cell whose runs differ."""
    class Cell:  # what compare_outputs reads from the pytest item it is written for
        colors = plugin.nocolors
        parent = SimpleNamespace(skip_compare=_NBVAL_SKIPS, sanitize_patterns={})
        config = None  # no pytest here: nbval falls back to its own report of the two outputs
        ihook = SimpleNamespace(pytest_assertrepr_compare=lambda **_: [])
        sanitize = plugin.IPyNbCell.sanitize
        format_output_compare = plugin.IPyNbCell.format_output_compare
        compare_outputs = plugin.IPyNbCell.compare_outputs

    differ = []
    for one, two in zip(first.cells, second.cells, strict=True):
        options = dict(plugin.find_metadata_tags(one.metadata))
        options.update(plugin.find_comment_markers(one.source))
        item = Cell()
        if one.cell_type == "code" and options.get("check") and not item.compare_outputs(
            plugin.coalesce_streams(copy.deepcopy(two.outputs)),
            plugin.coalesce_streams(copy.deepcopy(one.outputs)),
        ):
            differ.append(f"cell {one.get('id')}: " + "\n".join(item.comparison_traceback))
    return differ


def gif_outputs_as_html(nb):
    """Give each ``image/gif`` output an ``<img>`` (nbconvert shows no GIF)."""
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if "image/gif" in data and "text/html" not in data:
                gif = "".join(data["image/gif"]).replace("\n", "")
                data["text/html"] = f'<img src="data:image/gif;base64,{gif}" alt="animation">'
    return nb


def render_html(executed: Path, html_dir: Path) -> Path:
    from nbconvert import HTMLExporter

    html_dir.mkdir(parents=True, exist_ok=True)
    nb = gif_outputs_as_html(nbformat.read(executed, as_version=4))
    target = html_dir / (executed.stem + ".html")
    target.write_text(HTMLExporter().from_notebook_node(nb)[0], encoding="utf-8")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="quick", help="quick (default), test or full")
    parser.add_argument("--build", type=Path, default=BUILD)
    parser.add_argument("names", nargs="*", help="notebook names (stems); default: all")
    args = parser.parse_args(argv)
    paths = [p for p in notebook_paths() if not args.names or p.stem in args.names]
    if not paths:
        print("no notebooks matched", file=sys.stderr)
        return 1
    results = []
    for path in paths:
        params = parameters_for(path.stem, args.profile)
        print(f"running {path.name} ({args.profile}: {params or 'its defaults'}) ...", flush=True)
        result = execute(path, args.build, params)
        logged = log_lines(nbformat.read(result.executed, as_version=4))  # none may show one
        if logged and result.status == "passed":  # failed: the first one, and where it is
            result.status, result.error_cell, result.error = "failed", *logged[0]
        try:
            render_html(result.executed, args.build / "html")
        except Exception as error:  # a half-written copy: say so, go on with the next
            print(f"  no HTML page for {path.name}: {type(error).__name__}: {error}")
        print(f"  {result.status} in {result.seconds:.1f} s on {result.device}; exercises right: "
              f"{sum(result.exercises.values())} of {len(result.exercises)}", flush=True)
        results.append(result)
    root = args.build.resolve().parent
    rows = [[r.notebook, r.status, f"{r.seconds:.1f}", r.device,
             r.executed.relative_to(root) if r.executed.is_relative_to(root) else r.executed]
            for r in results]
    print(repr(Table(rows, ["notebook", "status", "seconds", "device", "outputs"])))
    for r in results:
        if r.error:
            print(f"{r.notebook}: cell {r.error_cell}: {r.error}")
    passed = sum(r.status == "passed" for r in results)
    print(f"notebooks: {passed} passed, {len(results) - passed} failed")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())

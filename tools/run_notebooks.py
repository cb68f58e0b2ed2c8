"""Execute the course's notebooks headlessly with papermill, render HTML, print a summary.

    python -m tools.run_notebooks [--profile quick|test|full] [--build DIR] [NAME ...]

Each notebook runs into ``<build>/executed/``, its HTML goes to ``<build>/html/``
and the files it writes to ``<build>/work/<name>/``. One failing notebook does
not stop the others; the exit status is 1 if any failed.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from helpers.devices import DEVICE_MIME  # the record helpers.devices.announce leaves
from tools.course import BUILD, notebook_paths, parameters_for


@dataclass
class RunResult:
    notebook: str
    status: str  # "passed" or "failed"
    seconds: float
    device: str
    executed: Path
    error: str = ""
    error_cell: str | None = None  # the failing cell's id, as in the stored notebook


def device_of(nb) -> str:
    """The device a notebook announced (``helpers.devices.announce``), or "not stated"."""
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            record = output.get("data", {}).get(DEVICE_MIME)
            if record:
                return record.get("description", "?")
    return "not stated"


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


def execute(path: Path, build: Path, parameters: dict, timeout: int = 1800) -> RunResult:
    """Run one notebook with papermill; never raises for a failing notebook."""
    import nbformat
    import papermill

    executed = build / "executed" / path.name
    workdir = build / "work" / path.stem
    executed.parent.mkdir(parents=True, exist_ok=True)
    workdir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    try:
        papermill.execute_notebook(
            str(path),
            str(executed),
            parameters=parameters,
            kernel_name="python3",
            cwd=str(workdir),
            progress_bar=False,
            execution_timeout=timeout,
            # the kernel's own start-up notices (e.g. "running over TCP") are not the lesson
            extra_arguments=["--IPKernelApp.log_level=ERROR"],
        )
        status = "passed"
    except papermill.PapermillExecutionError:
        status = "failed"
    seconds = time.perf_counter() - start
    nb = nbformat.read(executed, as_version=4)
    cell, error = first_error(nb)
    return RunResult(path.stem, status, seconds, device_of(nb), executed, error, cell)


@dataclass
class ValidationResult:
    name: str
    value: object
    error: str  # "ename: evalue", or "" when the validation cell passed
    traceback: list[str]  # what the learner sees under the failing cell


def validate_in_one_kernel(
    path: Path, cases: list[tuple[str, object]], parameters: dict, cwd: Path, timeout: int = 120
) -> list[ValidationResult]:
    """Run the validation cell of ``path`` once per ``(name, value)`` in ``cases``, all in one
    kernel: the setup cells once, then for each case the ``parameters`` cell, ``parameters``
    with that one value changed (assigned as papermill injects them), and the validation cell.
    A case named ``None`` changes nothing (a control that must pass).

    Each kernel start imports TensorFlow (seconds), so this checks many invalid values for
    the price of one run; :func:`execute` still proves the whole papermill path."""
    import nbformat
    from jupyter_client.manager import start_new_kernel
    from papermill.translators import translate_parameters

    cells = nbformat.read(path, as_version=4).cells
    tagged = next(i for i, c in enumerate(cells) if "parameters" in c.metadata.get("tags", []))
    setup = [c.source for c in cells[:tagged] if c.cell_type == "code"]
    defaults, validation = cells[tagged].source, cells[tagged + 1].source
    cwd.mkdir(parents=True, exist_ok=True)
    manager, client = start_new_kernel(
        kernel_name="python3", cwd=str(cwd), extra_arguments=["--IPKernelApp.log_level=ERROR"]
    )

    def run(code: str) -> dict | None:
        errors = []

        def hook(message):
            if message["msg_type"] == "error":
                errors.append(message["content"])

        client.execute_interactive(code, output_hook=hook, timeout=timeout, store_history=False)
        return errors[0] if errors else None

    try:
        for source in setup:
            if error := run(source):
                raise RuntimeError(f"{path.name}: a setup cell failed: {error['evalue']}")
        results = []
        for name, value in cases:
            injected = translate_parameters(
                "python", "python3", {**parameters, **({name: value} if name else {})},
                "Injected parameters",
            )
            if error := run(defaults + "\n" + injected):
                raise RuntimeError(f"{path.name}: the parameters cell failed: {error['evalue']}")
            error = run(validation)
            text = f"{error['ename']}: {error['evalue']}" if error else ""
            results.append(ValidationResult(name, value, text, error["traceback"] if error else []))
        return results
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def render_html(executed: Path, html_dir: Path) -> Path:
    """Render an executed notebook to a standalone HTML page."""
    import nbformat
    from nbconvert import HTMLExporter

    html_dir.mkdir(parents=True, exist_ok=True)
    body, _ = HTMLExporter().from_notebook_node(nbformat.read(executed, as_version=4))
    target = html_dir / (executed.stem + ".html")
    target.write_text(body, encoding="utf-8")
    return target


def summary(results: list[RunResult], root: Path) -> str:
    from helpers.display import Table

    rows = []
    for r in results:
        where = r.executed.relative_to(root) if r.executed.is_relative_to(root) else r.executed
        rows.append([r.notebook, r.status, f"{r.seconds:.1f}", r.device, where])
    passed = sum(r.status == "passed" for r in results)
    text = repr(Table(rows, ["notebook", "status", "seconds", "device", "outputs"]))
    for r in results:
        if r.error:
            text += f"\n{r.notebook}: cell {r.error_cell}: {r.error}"
    return text + f"\nnotebooks: {passed} passed, {len(results) - passed} failed"


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
        print(
            f"running {path.name} ({args.profile}: {params or 'notebook defaults'}) ...", flush=True
        )
        result = execute(path, args.build, params)
        render_html(result.executed, args.build / "html")
        print(f"  {result.status} in {result.seconds:.1f} s on {result.device}", flush=True)
        results.append(result)
    print(summary(results, args.build.resolve().parent))
    return 0 if all(r.status == "passed" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

"""Work folders a notebook may empty, only those it made (:func:`prepare`); a run's settings."""

import contextlib
import errno
import json
import os
import re
import shutil
import socket
import stat
from pathlib import Path

from helpers.errors import DiskFull, RunSettingsChanged, WorkFolderBusy, invalid

ROOT = "course_runs"
COLAB_DRIVE = "/content/drive/MyDrive"  # where 05's run_dir goes with use_drive=True
MARKER = ".course_work_folder"
RUN_FILE = "run.json"  # a resumable run's settings (see same_run)
RUN_FILES = (RUN_FILE, "step-*.pt")  # what a resumable run (04's, 10's) leaves: never a work_dir
LOCK = ".course_work_folder.lock"  # locked while a process uses the folder; never deleted
_HELD: dict[Path, object] = {}  # folder (resolved) -> the open file whose lock this process holds
MARKER_TEXT = (
    "This folder was made by a notebook of the Fast TensorFlow Training course.\n"
    "{made_by}Only the notebook that made it uses it, and empties it when it runs again (a\n"
    "work_dir each run, a run_dir with fresh_start=True). Delete this file and no notebook will\n"
    "ever empty this folder again.\n")
#: Where a run's own files say which notebook made it (a marker written before the marker named it)
RUNS_OF = {"step-*.pt": "10_tpu_pytorch_xla", "ckpt-*": "05_survive_a_disconnect",
           "checkpoint": "05_survive_a_disconnect", RUN_FILE: "05_survive_a_disconnect"}
#: System and program folders: no work folder in them, unless inside the working or home folder
SYSTEM = ("proc", "sys", "dev", "run", "boot", "etc", "usr", "var", "bin", "sbin", "lib", "lib64")


def protected(path: Path) -> str | None:
    """Why ``path`` (resolved) may never be a work folder, or None."""
    path, cwd, home = Path(path).resolve(), Path.cwd().resolve(), Path.home().resolve()
    if path == cwd:
        return "it is the working folder itself"
    if path in cwd.parents:
        return "it is a folder above the working folder"
    if path == home:
        return "it is the home folder"
    if path == Path(path.anchor):
        return "it is the root of the file system"
    if len(path.parts) == 2 or (path.parts[1] in SYSTEM and cwd not in path.parents
                                and home not in path.parents):
        return f"it is /{path.parts[1]} or inside it, a folder the system shares with programs"
    return None


def unusable(path: Path) -> str | None:
    """Why ``path`` cannot be made or written here (a name too long, a folder not writable)."""
    parent = Path(path).absolute()
    while not os.path.lexists(parent):  # the nearest folder that exists: new ones go there
        parent = parent.parent
    longest = max(Path(path).absolute().parts, key=lambda part: len(os.fsencode(part)))
    if len(os.fsencode(longest)) > (limit := os.pathconf(parent, "PC_NAME_MAX")):
        return (f"a part of it ({longest[:20]}...) is {len(os.fsencode(longest))} bytes long, "
                f"over this file system's limit of {limit}")
    if parent != Path(path).absolute() and not parent.is_dir():
        return f"{parent} is a file, so no folder can be made in it"
    if parent.is_dir() and not os.access(parent, os.W_OK | os.X_OK):
        return f"{parent} is not writable by this user, so nothing can be made or emptied there"
    return None


def is_marked(path: Path) -> bool:
    """True when a notebook of this course made ``path`` (its marker is a file, not a link)."""
    marker = Path(path) / MARKER
    return marker.is_file() and not marker.is_symlink()


def made_by(path: Path) -> str | None:
    """The notebook that made marked folder ``path``: its marker's line, else its run's files."""
    text = (Path(path) / MARKER).read_text("utf-8", "replace")
    if found := re.search(r"(?m)^made by: (\S+)$", text):
        return found[1]
    return next((who for pattern, who in RUNS_OF.items() if any(Path(path).glob(pattern))), None)


def problem(path) -> str | None:
    """Why a notebook must not use (and empty) ``path``, as a clause; None when it may."""
    path = Path(path)
    if (why := protected(path) or unusable(path)) is not None:
        return why
    if path.exists() and not path.is_dir():
        return "it is a file, not a folder"
    if path.is_dir() and not is_marked(path) and any(path.iterdir()):
        return f"it holds files and no {MARKER} marker (no notebook of this course made it)"
    return None


ALLOWED = (f"a new or empty folder, or one this notebook made (it holds {MARKER}), not the "
           f"working folder, one above it or a system folder; e.g. '{ROOT}/my_run'")


def refuse(name: str, value, why: str):
    """The one-line error for folder parameter ``name``."""
    return invalid(name, value, f"{why}; allowed: {ALLOWED}")


def prepare(path, name: str = "work_dir", fresh: bool = True, notebook: str = "") -> Path:
    """Make ``path`` ready for ``notebook`` (created, marked, locked, emptied if ``fresh``)."""
    path = Path(path)
    if (why := problem(path)) is not None:
        raise refuse(name, str(path), why)
    if path.is_dir() and is_marked(path):
        if (why := not_ours(path, name, fresh, notebook)) is not None:  # refused: never locked
            raise refuse(name, str(path), why)
        lock(path)  # before anything is emptied: another process using it stops here
    if path.is_dir() and is_marked(path) and fresh:
        with _locks_inside(path):  # a work folder inside, in use elsewhere, stops it here
            for entry in path.iterdir():
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                elif entry.name != LOCK:  # the lock lives on this very file: keep it
                    entry.unlink()
    path.mkdir(parents=True, exist_ok=True)
    (path / MARKER).unlink(missing_ok=True)  # written anew, never through a link
    named = f"made by: {notebook}\n" if notebook else ""
    (path / MARKER).write_text(MARKER_TEXT.format(made_by=named))
    lock(path)
    return path


def not_ours(path: Path, name: str, fresh: bool, notebook: str) -> str | None:
    """Why ``notebook`` must not use (or, ``fresh``, empty) marked folder ``path``, or None."""
    for folder in sorted({p.parent for p in path.rglob(MARKER)} if fresh else {path}):
        if notebook and (owner := made_by(folder)) not in (None, notebook):
            return (f"{folder} is {owner}'s (its {MARKER} or its files say so), and only {owner} "
                    "may use or empty it; nothing was deleted")
    if fresh and name != "run_dir" and (runs := [p for g in RUN_FILES for p in path.rglob(g)]):
        return f"it holds a run ({runs[0]}) that emptying it would delete"
    if fresh and (mounts := [p for p in path.rglob("*") if os.path.ismount(p)]):
        return (f"a file system is mounted inside it ({mounts[0]}): emptying the folder would "
                "delete files there; nothing was deleted")
    return None


@contextlib.contextmanager
def _locks_inside(path: Path):
    """Hold the locks of the work folders inside ``path``, or :class:`WorkFolderBusy`."""
    with contextlib.ExitStack() as held:
        for inner in sorted({p.parent for g in (MARKER, LOCK) for p in path.rglob(g)} - {path}):
            if inner.resolve() in _HELD:
                raise WorkFolderBusy(f"{inner} is in use by this kernel: emptying {path} would "
                                     "delete its files. Give this run another folder.")
            if (handle := _take(inner)) is not None:  # None where there are no locks
                held.enter_context(handle)
        yield


def lock(path) -> bool:
    """Hold work folder ``path``'s lock in this process (again: a no-op); False without locks."""
    key = Path(path).resolve()
    if key not in _HELD and (handle := _take(key)) is not None:
        handle.truncate(0)
        handle.write(f"process {os.getpid()} on {socket.gethostname()}\n")
        handle.flush()
        _HELD[key] = handle  # kept open: the lock lives as long as the file is
    return key in _HELD


def _take(folder: Path):
    """``folder``'s lock file, opened without following a link, and locked; None without locks."""
    import fcntl

    remove = "nothing was deleted. Remove it, or use another folder."
    try:  # O_NOFOLLOW: a link named so (in a folder from elsewhere) would write where it points
        fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as error:
        raise WorkFolderBusy(f"{folder / LOCK} cannot be opened as a lock ({error.strerror}: a "
                             f"link?); {remove}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise WorkFolderBusy(f"{folder / LOCK} is not a regular file; {remove}")
    handle = os.fdopen(fd, "r+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = handle.read().strip() or "another process"
        handle.close()
        raise WorkFolderBusy(f"{folder} is in use by {holder}: two runs in one folder would delete "
                             "each other's files. Wait for it to finish (or stop its kernel), or "
                             "give this run another folder.") from None
    except OSError as error:  # no locks on this file system (some network mounts)
        handle.close()
        print(f"Note: {folder} cannot be locked here ({error.strerror}): do not use it from two "
              "sessions at once.")
        return None
    return handle


@contextlib.contextmanager
def saving(folder, *leftovers: str):
    """A save into ``folder``: a full disk raises :class:`DiskFull`, ``leftovers`` (globs) gone."""
    try:
        yield
    except Exception as error:
        free = shutil.disk_usage(folder).free  # before the leftovers go: what the save met
        if getattr(error, "errno", None) != errno.ENOSPC and free >= 2**20 and not any(
                s in str(error) for s in ("No space left", "ENOSPC")):
            raise
        for path in (p for pattern in leftovers for p in Path(folder).glob(pattern)):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        raise DiskFull(f"The disk of {folder} is full ({free / 2**20:.1f} MiB free): the save "
                       "failed, what it had written was removed, and the files saved before "
                       "are intact. Free some space (or use another folder), then run this "
                       "cell again.") from None


def lock_fds(path) -> tuple[int, ...]:
    """This process's lock on ``path``, as ``pass_fds`` for a child that works there; () if none."""
    handle = _HELD.get(Path(path).resolve())
    return (handle.fileno(),) if handle else ()


def same_settings(saved: dict, now: dict, where) -> None:
    """Raise :class:`RunSettingsChanged` (each change, how to resume) where ``now`` differs."""
    if changed := {k: (saved.get(k), v) for k, v in now.items() if saved.get(k) != v}:
        what = ", ".join(f"{k} was {old!r}, now {new!r}" for k, (old, new) in changed.items())
        back = ", ".join(f"{k}={old!r}" for k, (old, _) in changed.items())
        raise RunSettingsChanged(
            f"{where} holds a run made with other settings ({what}); nothing was loaded and "
            f"nothing was deleted. Resume it with the same settings ({back}), use another run_dir "
            "for a new run, or fresh_start=True to replace it.")


def same_run(path, settings: dict) -> bool:
    """True: ``settings`` are those of the run in ``path``; False: recorded there for a new run."""
    path = Path(path)
    record = path / RUN_FILE
    if record.is_file():
        try:
            saved = json.loads(record.read_text())
            if not isinstance(saved, dict):
                raise ValueError(f"it holds {type(saved).__name__}, not the settings' object")
        except (OSError, ValueError) as error:
            raise RunSettingsChanged(
                f"{record} could not be read ({error}): the settings of the run in {path} are "
                "unknown; nothing was deleted. Use another run_dir for a new run, or "
                "fresh_start=True to replace it.") from None
        same_settings(saved, settings, path)
        return True
    if others := sorted(p.name for p in path.iterdir() if p.name not in (MARKER, LOCK)):
        raise RunSettingsChanged(
            f"{path} holds files ({', '.join(others[:3])}) but no {RUN_FILE}, so the settings "
            "they were made with are unknown (an older version of the course?); nothing was "
            "deleted. Use another run_dir for a new run, or fresh_start=True to replace them.")
    partial = record.with_name(RUN_FILE + ".partial")
    with saving(path, partial.name):
        partial.write_text(json.dumps(settings, indent=1, sort_keys=True) + "\n")
        os.replace(partial, record)  # whole, or not there at all
    return False

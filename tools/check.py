"""Every check of the notebooks' form, in one process that reads each notebook once.

    python -m tools.check

Runs, in order, and reports each: the stored form (``tools.nbclean --check``), the conventions
(``tools.nbcheck``), the ``#@save`` lessons (``tools.lessons --check``), the code each notebook
must show (``tools.shown``), the exercises (``tools.exercises --check``) and the README's course
map (``tools.course_map readme --check``) and its versions table (``tools.compat readme
--check``). The exit status is 1 if any failed.
"""

from __future__ import annotations

import sys
import time

from tools import compat, course_map, exercises, lessons, nbcheck, nbclean, shown

CHECKS = [
    ("nbclean --check", nbclean.main, ["--check"]),
    ("nbcheck", nbcheck.main, []),
    ("lessons --check", lessons.main, ["--check"]),
    ("shown", shown.main, []),
    ("exercises --check", exercises.main, ["--check"]),
    ("course_map readme --check", course_map.main, ["readme", "--check"]),
    ("compat readme --check", compat.main, ["readme", "--check"]),
]


def main() -> int:
    failed = []
    for name, check, argv in CHECKS:
        start = time.perf_counter()
        status = check(argv)
        print(f"== tools.{name}: {'passed' if status == 0 else 'FAILED'} "
              f"({time.perf_counter() - start:.1f} s)", flush=True)
        if status:
            failed.append(name)
    if failed:
        print(f"notebook checks that failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

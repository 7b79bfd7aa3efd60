"""Progress bars: tqdm's (``tqdm.auto`` picks the Jupyter widget in notebooks and a text bar in
terminals) when tqdm is installed, else none. ``progress=`` on every method takes ``None``
(auto: a bar when stderr is a terminal or in Jupyter), ``True``, ``False``, or a callable
``f(done, total, label)``."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Union

ProgressCallback = Callable[[int, int, str], object]
ProgressArg = Union[bool, None, ProgressCallback]


def _in_jupyter() -> bool:
    try:
        from IPython import get_ipython  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def _wanted(progress: ProgressArg) -> bool:
    if progress is None:
        return sys.stderr.isatty() or _in_jupyter()
    return bool(progress)


@contextmanager
def progress_callback(progress: ProgressArg, desc: str, total: int | None = None) -> Iterator[ProgressCallback | None]:
    """The callback the native module calls after each trace, and the bar it drives."""
    if callable(progress):
        yield progress
        return
    if not _wanted(progress):
        yield None
        return
    try:
        from tqdm.auto import tqdm
    except ImportError:
        if progress is True:
            import warnings

            warnings.warn("progress=True needs tqdm (pip install 'maslens[progress]')", stacklevel=3)
        yield None
        return
    bar: Any = tqdm(total=total, desc=desc, unit="trace")

    def update(done: int, total_: int, label: str) -> None:
        if bar.total != total_:
            bar.total = total_
        bar.n = done
        bar.set_postfix_str(label[-40:], refresh=False)
        bar.refresh()

    try:
        yield update
    finally:
        bar.close()

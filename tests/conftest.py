"""Session-wide test setup."""

from __future__ import annotations

from composer_core.model import default_engine

# cel-python raises the interpreter's recursion limit (to 2500) the first time
# its grammar is built. Build it once before any test, so that hypothesis does
# not see the limit change in the middle of an example.
default_engine().compile("1")

"""Composer's pure core: workflow definitions, the node kinds, templates and the state machine.

Nothing here does I/O, reads the clock or makes ids; the engine injects them.
"""

from composer_core import errors, kinds, model, statemachine, templates

__all__ = ["errors", "kinds", "model", "statemachine", "templates"]

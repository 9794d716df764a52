"""How much work one evaluation of a template may do.

Templates run inside the services' event loops (the engine's transaction
loop, the coordinator), on every step that reaches their node: a template
that loops quadratically or builds a value without bound would stall every
run those services handle. So an evaluation spends from a budget and fails
with TemplateBudgetExceeded once it is spent, and an expression nested deeper
than the evaluator can recurse is refused when it is compiled.

Work is counted, not timed (the core has no clock), in two currencies:

- steps, roughly one per syntax node evaluated: each element a comprehension
  (map, filter, all, exists, exists_one, reduce) visits costs as many steps
  as its body has nodes, and walking a long list or string (``in``, ``==``,
  ``contains``, ``min``…) costs steps in proportion to its length;
- built units, one per character of a string or bytes and per element of a
  list or map the evaluation makes: concatenations, the results of map and
  filter, conversions, and each further copy of a value the result holds
  more than once (``input.l.map(x, input.l)`` is n² elements once written
  out). A value the template passes through unchanged costs nothing: the
  size limits on inputs and outputs bound those.

One budget covers everything one node's spec (or one condition, or the run's
output) evaluates.
"""

from __future__ import annotations

from contextvars import ContextVar

from composer_core.errors import TemplateBudgetExceeded

#: Syntax-tree levels an expression may nest. cel-python evaluates by recursion,
#: about five Python frames per level, so this leaves half of Python's default
#: limit of 1000 frames to the caller. Real templates stay under 70 (a map
#: inside a map building objects is about 67); ``((((1))))`` is 50.
MAX_EXPRESSION_DEPTH = 100
#: Evaluation steps per budget: about 0.3-1.5 s of cel-python on one core.
MAX_STEPS = 100_000
#: Characters and elements an evaluation may build (1 Mi units).
MAX_BUILT = 1024 * 1024
#: Elements of a list or map that one step walks (``x in list``, ``l1 == l2``).
ELEMENTS_PER_STEP = 8
#: Characters of a string that one step scans (``contains``, ``==``): C-speed.
CHARACTERS_PER_STEP = 16 * 1024


class Budget:
    """What is left of one evaluation's budget; spending past zero raises."""

    __slots__ = ("built", "max_built", "max_steps", "steps")

    def __init__(self, steps: int | None = None, built: int | None = None) -> None:
        # The module's limits are read here, not bound at import, so that tests can lower them.
        self.steps = self.max_steps = MAX_STEPS if steps is None else steps
        self.built = self.max_built = MAX_BUILT if built is None else built

    def spend(self, steps: int) -> None:
        self.steps -= steps
        if self.steps < 0:
            raise TemplateBudgetExceeded(
                f"template exceeded its budget (more than {self.max_steps} evaluation steps: "
                "a comprehension costs the size of its body for every element it visits, "
                "so loops inside loops add up fast)"
            )

    def build(self, units: int) -> None:
        self.built -= units
        if self.built < 0:
            raise TemplateBudgetExceeded(
                f"template exceeded its budget (it built more than {self.max_built} characters "
                "and list or map elements)"
            )


#: The budget of the evaluation under way in this thread or task, if any.
current: ContextVar[Budget | None] = ContextVar("composer_template_budget", default=None)

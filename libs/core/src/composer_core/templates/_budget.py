"""How much work the templates of one event may do.

Templates run inside the services' event loops (the API's start, the
coordinator's reports, the timer…), on every step that reaches their node: a
template that loops quadratically or builds a value without bound would stall
every run those services handle, and so would many modest ones reached by one
event (a FORK into a dozen branches). So every template one decision
evaluates spends from one budget, and fails with TemplateBudgetExceeded once
it is spent; an expression nested deeper than the evaluator can recurse is
refused when it is compiled.

Work is counted, not timed (the core has no clock), in three currencies:

- steps, roughly one per syntax node evaluated: each element a comprehension
  (map, filter, all, exists, exists_one, reduce) visits costs as many steps
  as its body has nodes, and walking a long list or string (``in``, ``==``,
  ``contains``, ``min``…) costs steps in proportion to its length;
- built units, one per character of a string or bytes and per element of a
  list or map the evaluation makes: concatenations, the results of map and
  filter, conversions, and each further copy of a value a result holds more
  than once (``input.l.map(x, input.l)`` is n² elements once written out);
- result units, the same units for what the templates' results hold the first
  time (a value passed through unchanged: ``"{{input.s}}"``): free for one
  template, since the size limits on inputs and outputs bound it, but not a
  hundred times over, which is what a node's input or a FORK's branches can ask.

A budget may also carry a pause mark (``pause_at``, a share of each
currency): past it, evaluation raises WorkPaused, which is no template error,
even where it would have run out of budget (the decision made again says so).
The engine decides an event on its event loop with a small mark, and a
decision that passes it is made again from the start, off the loop, on a
fresh budget without one: the decision is pure, so the first try leaves
nothing behind.
"""

from __future__ import annotations

from contextvars import ContextVar, Token

from composer_core.errors import TemplateBudgetExceeded, WorkPaused

#: Syntax-tree levels an expression may nest. cel-python evaluates by recursion,
#: about five Python frames per level, so this leaves half of Python's default
#: limit of 1000 frames to the caller. Real templates stay under 70 (a map
#: inside a map building objects is about 67); ``((((1))))`` is 50.
MAX_EXPRESSION_DEPTH = 100
#: Evaluation steps per event: about 0.3-1.5 s of cel-python on one core.
MAX_STEPS = 100_000
#: Characters and elements the templates of one event may build (1 Mi units).
MAX_BUILT = 1024 * 1024
#: Characters and elements the results of one event's templates may hold (16 Mi units):
#: sixteen node inputs of the default 1 MiB limit.
MAX_RESULTS = 16 * 1024 * 1024
#: Elements of a list or map that one step walks (``x in list``, ``l1 == l2``).
ELEMENTS_PER_STEP = 8
#: Characters of a string that one step scans (``contains``, ``==``): C-speed.
CHARACTERS_PER_STEP = 16 * 1024


class Budget:
    """What is left of one event's budget; spending past zero raises
    TemplateBudgetExceeded, and past the pause mark (when there is one) WorkPaused."""

    __slots__ = (
        "built",
        "built_floor",
        "max_built",
        "max_results",
        "max_steps",
        "pausing",
        "results",
        "results_floor",
        "steps",
        "steps_floor",
    )

    def __init__(
        self,
        steps: int | None = None,
        built: int | None = None,
        results: int | None = None,
        *,
        pause_at: float | None = None,
    ) -> None:
        """``pause_at``: the share of each currency (0 to 1) after which spending raises
        WorkPaused instead of going on (None: never)."""
        # The module's limits are read here, not bound at import, so that tests can lower them.
        self.steps = self.max_steps = MAX_STEPS if steps is None else steps
        self.built = self.max_built = MAX_BUILT if built is None else built
        self.results = self.max_results = MAX_RESULTS if results is None else results
        # What is left when the pause mark is passed: one comparison per spend either way.
        self.pausing = pause_at is not None
        keep = 0.0 if pause_at is None else 1.0 - pause_at
        self.steps_floor = int(self.max_steps * keep)
        self.built_floor = int(self.max_built * keep)
        self.results_floor = int(self.max_results * keep)

    @property
    def used(self) -> float:
        """The share of the budget spent: of the currency spent the most."""
        return max(
            1 - self.steps / self.max_steps if self.max_steps else 0.0,
            1 - self.built / self.max_built if self.max_built else 0.0,
            1 - self.results / self.max_results if self.max_results else 0.0,
        )

    def spend(self, steps: int) -> None:
        self.steps -= steps
        if self.steps < self.steps_floor:
            if self.pausing:
                raise WorkPaused
            raise TemplateBudgetExceeded(
                f"template exceeded its budget (more than {self.max_steps} evaluation steps "
                "for all the templates one event evaluates: a comprehension costs the size of "
                "its body for every element it visits, so loops inside loops add up fast)"
            )

    def build(self, units: int) -> None:
        self.built -= units
        if self.built < self.built_floor:
            if self.pausing:
                raise WorkPaused
            raise TemplateBudgetExceeded(
                f"template exceeded its budget (the templates of one event built more than "
                f"{self.max_built} characters and list or map elements)"
            )

    def hold(self, units: int) -> None:
        """Charge what a result holds as it is written out (a value passed through)."""
        self.results -= units
        if self.results < self.results_floor:
            if self.pausing:
                raise WorkPaused
            raise TemplateBudgetExceeded(
                f"template exceeded its budget (the results of one event's templates hold "
                f"more than {self.max_results} characters and list or map elements)"
            )


#: The budget of the evaluation under way in this thread or task, if any.
current: ContextVar[Budget | None] = ContextVar("composer_template_budget", default=None)


class spending:  # a function to its callers (lower case), a class for its cost
    """Every template evaluated inside spends from ``budget`` (one decision's).

    A class, not a ``contextlib.contextmanager``: the machine enters one for every
    event, and the generator's frame and wrapper were garbage to collect each time."""

    __slots__ = ("_budget", "_token")

    def __init__(self, budget: Budget) -> None:
        self._budget = budget
        self._token: Token[Budget | None] | None = None

    def __enter__(self) -> None:
        self._token = current.set(self._budget)

    def __exit__(self, *exc: object) -> None:
        assert self._token is not None
        current.reset(self._token)

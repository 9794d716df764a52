"""Templates: ``{{ CEL }}`` inside definition specs, compiled once per version."""

from composer_core.templates._budget import (
    MAX_BUILT,
    MAX_EXPRESSION_DEPTH,
    MAX_RESULTS,
    MAX_STEPS,
    Budget,
    spending,
)
from composer_core.templates._cel import CelEngine, CelExpression, prepare_parser
from composer_core.templates._engine import (
    ROOTS,
    Expression,
    ExpressionEngine,
    Json,
    References,
)
from composer_core.templates._secrets import (
    ORIGIN_KEY,
    SECRET_NAME,
    SECRET_ROOT,
    SECRETS_KEY,
    SecretReference,
)
from composer_core.templates._template import CompiledValue, compile_condition, compile_value

__all__ = [
    "MAX_BUILT",
    "MAX_EXPRESSION_DEPTH",
    "MAX_RESULTS",
    "MAX_STEPS",
    "ORIGIN_KEY",
    "ROOTS",
    "SECRETS_KEY",
    "SECRET_NAME",
    "SECRET_ROOT",
    "Budget",
    "CelEngine",
    "CelExpression",
    "CompiledValue",
    "Expression",
    "ExpressionEngine",
    "Json",
    "References",
    "SecretReference",
    "compile_condition",
    "compile_value",
    "prepare_parser",
    "spending",
]

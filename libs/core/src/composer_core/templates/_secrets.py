"""Secret references: ``{{ secret.NAME }}`` is written into a node's input, never resolved here.

The engine stores a worker node's rendered input, so a secret's value must
never be in it. A reference is rendered as its canonical text
``{{secret.NAME}}``, and the rendered input gets one more top-level key,
:data:`SECRETS_KEY`, listing every place the engine wrote one::

    {"headers": {"Authorization": "Bearer {{secret.API_TOKEN}}"},
     "$secrets": [{"path": ["headers", "Authorization"], "at": 7, "name": "API_TOKEN"}]}

``path`` leads from the input's top to the string (keys and list indexes),
``at`` is where the reference starts in it, in code points. The built-in
workers put the value there just before the call (composer_executors,
_secrets.py) and nowhere else: the same text arriving in a run's input, a
signal or a task's output is data, and stays text. The places are known when
the definition is compiled (a reference stands in a string of the spec, whose
enclosing maps and lists are the definition's own), and the offsets when the
string is built, so nothing a user sends can add one. docs/secrets.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: The root a secret reference starts from: ``{{ secret.NAME }}``.
SECRET_ROOT = "secret"
#: What a secret's NAME must look like (as a node id does).
SECRET_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: The top-level key of a rendered node input listing where secret references are.
SECRETS_KEY = "$secrets"
#: The top-level key, beside ``$secrets`` in an HTTP node's rendered input, naming the
#: only origin its secrets may be sent to: the one its definition's url spells out.
ORIGIN_KEY = "$origin"
#: The source of a template that is a secret reference and nothing else.
_REFERENCE = re.compile(r"secret\s*\.\s*([A-Za-z_][A-Za-z0-9_]*)")


@dataclass(frozen=True, slots=True)
class SecretReference:
    """``{{ secret.NAME }}`` in a template: rendered as its text, resolved by the worker."""

    name: str

    @property
    def text(self) -> str:
        """The canonical form written into the rendered input."""
        return "{{" + f"{SECRET_ROOT}.{self.name}" + "}}"

    @classmethod
    def parse(cls, source: str) -> SecretReference | None:
        """The reference ``source`` (a template's inside, stripped) is; None if it is not one."""
        match = _REFERENCE.fullmatch(source)
        return cls(match.group(1)) if match else None

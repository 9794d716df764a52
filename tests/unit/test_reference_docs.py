"""docs/nodes.md and docs/configuration.md are what tools/refdocs.py generates from the code.

The pages are regenerated in memory and compared with the files, so a field,
default or description changed in a model or a settings class without
`make docs` fails here, not in a reader's hands.
"""

from __future__ import annotations

import difflib

import pytest

from composer_core.model import NODE_SPECS, HttpSpec
from composer_executors import HttpPolicy
from composer_service import ServerSettings, ServiceSettings
from tools import refdocs


@pytest.mark.parametrize("page", sorted(refdocs.PAGES))
def test_the_generated_page_is_up_to_date(page: str) -> None:
    on_disk = (refdocs.ROOT / page).read_text(encoding="utf-8")
    generated = refdocs.PAGES[page]()
    if on_disk != generated:
        diff = "".join(
            difflib.unified_diff(
                on_disk.splitlines(keepends=True),
                generated.splitlines(keepends=True),
                f"{page} (in the repository)",
                f"{page} (from the code)",
                n=1,
            )
        )
        pytest.fail(f"{page} is out of date with the code: run `make docs`\n{diff[:4000]}")


def test_every_setting_is_described_and_no_stand_in_description_is_stale() -> None:
    classes: list[type[ServiceSettings]] = [ServiceSettings, ServerSettings]
    classes += [cls for _, cls in refdocs.service_settings()]
    for cls in classes:
        for name in refdocs.own_fields(cls):
            assert refdocs.describe(cls, name), (
                f"{cls.__name__}.{name} has no description: put a `#:` comment above it"
            )
    by_name = {cls.__name__: cls for cls in classes}
    for class_name, field in refdocs._UNCOMMENTED:
        assert class_name in by_name and field in refdocs.own_fields(by_name[class_name]), (
            f"tools/refdocs.py describes {class_name}.{field}, which is gone: drop the entry"
        )
        assert field not in refdocs.field_comments(by_name[class_name]), (
            f"{class_name}.{field} has its own `#:` comment now: drop its entry in "
            "tools/refdocs.py _UNCOMMENTED"
        )


def test_every_service_has_a_section() -> None:
    page = refdocs.render_configuration()
    services = sorted(p.parents[2].name for p in refdocs.ROOT.glob("services/*/src/*/settings.py"))
    assert len(services) >= 7
    for service in services:
        assert f"\n## {service.replace('_', '-')}\n" in page


def test_every_node_type_and_spec_field_is_on_the_page() -> None:
    page = refdocs.render_nodes()
    for node_type, model in NODE_SPECS.items():
        assert f"\n## {node_type.value}\n" in page
        for name in model.model_fields:
            assert f"| `{name}` |" in page


def test_the_http_status_rules_on_the_page_are_the_executors() -> None:
    page = refdocs.render_nodes()
    assert "**retryable** — 408, 425, 429 or 5xx" in page
    assert "**permanent** — 1xx, 2xx, 3xx or 4xx except 408, 425 and 429" in page


def test_check_reports_a_stale_page_and_names_make_docs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(refdocs.PAGES, "docs/nodes.md", lambda: "something else\n")
    assert refdocs.main(["--check"]) == 1
    assert "docs/nodes.md; run `make docs`" in capsys.readouterr().err


def test_the_redirect_limit_the_http_spec_model_names_is_the_executors() -> None:
    """libs/core cannot import the executor, so its prose is checked against it here."""
    assert f"up to {HttpPolicy().max_redirects}," in " ".join((HttpSpec.__doc__ or "").split())

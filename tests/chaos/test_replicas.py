"""``make chaos CHAOS_ARGS="--replicas …"``: the replicas per service, over the defaults."""

from __future__ import annotations

import pytest

from tests.chaos.__main__ import main
from tests.chaos.cluster import DEFAULT_REPLICAS, parse_replicas


def test_replicas_override_the_defaults() -> None:
    assert parse_replicas("") == DEFAULT_REPLICAS
    assert parse_replicas("timer=2,api-gateway=3") == DEFAULT_REPLICAS | {
        "timer": 2,
        "api-gateway": 3,
    }
    assert parse_replicas("all=2") == dict.fromkeys(DEFAULT_REPLICAS, 2)
    assert parse_replicas("all=2 api-gateway=1")["api-gateway"] == 1


@pytest.mark.parametrize("bad", ["timer", "timer=0", "timer=x", "timers=2"])
def test_a_bad_entry_is_refused_naming_it(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--replicas", bad])
    assert exited.value.code == 2
    assert bad.split("=")[0] in capsys.readouterr().err

"""The Degradation page's honest replica states (core.history.replica_view): pure functions over
a reading, and the exposition parser over a real agent endpoint's text."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from agent_memory_runtime.metrics import SaverCollector
from core.history import replica_view

NOW = datetime(2026, 12, 3, 8, 0, tzinfo=UTC)


def reading(state="healthy", age_s=2.0, reported=None):
    return pd.DataFrame(
        [
            {
                "replica_id": "r1",
                "state": state,
                "reported_state": reported or state,
                "last_heartbeat": NOW - timedelta(seconds=age_s),
                "degraded_since": None,
                "buffered_checkpoints": 0,
                "buffered_writes": 0,
            }
        ]
    )


def states(df, fresh, read_ago=0.0, endpoints=None):
    return replica_view.replica_states(
        df, fresh=fresh, read_at=NOW.timestamp() - read_ago, endpoints=endpoints, now=NOW.timestamp()
    )


def test_fresh_and_on_time_is_ok_and_all_clear():
    out = states(reading(), fresh=True)
    assert out["state"].tolist() == ["ok"] and replica_view.all_clear(out, fresh=True)


def test_last_good_reading_is_unknown_never_ok_with_its_age():
    out = states(reading(age_s=5.0), fresh=False, read_ago=3.0)
    assert out["state"].tolist() == ["unknown"]
    assert out["reading_age_s"].tolist() == [3.0] and out["heartbeat_age_s"].tolist() == [5.0]
    assert not replica_view.all_clear(out, fresh=False)


def test_heartbeat_past_the_silent_threshold_is_silent_even_in_the_last_good_reading():
    # The case: "ok" with a heartbeat 14.3 s old, past the 11 s threshold.
    for fresh in (True, False):
        out = states(reading("healthy", age_s=14.3), fresh=fresh)
        assert out["state"].tolist() == ["silent"]
        assert not replica_view.all_clear(out, fresh=fresh)


def test_stopped_stays_stopped_and_no_replica_is_no_all_clear():
    assert states(reading("stopped", age_s=3600), fresh=False)["state"].tolist() == ["stopped"]
    assert not replica_view.all_clear(states(pd.DataFrame(), fresh=True), fresh=True)


class _Saver:
    replica_id = "agentes-1:42:1"

    def status(self):
        return {
            "replica_id": self.replica_id,
            "state": "degraded",
            "degraded_since": NOW,
            "buffered_ops": 7,
            "buffered_checkpoints": 3,
            "buffered_writes": 4,
            "last_success": None,
            "last_resync_error": None,
            "episodes_total": 0,
        }


def test_endpoint_exposition_wins_over_the_last_reading():
    registry = CollectorRegistry()
    registry.register(SaverCollector([_Saver()]))
    rows = replica_view.parse_exposition(generate_latest(registry).decode(), "http://a:9464/metrics")
    assert rows[0]["state"] == "degraded" and rows[0]["buffered_checkpoints"] == 3
    assert rows[0]["degraded_since"] == NOW
    df = reading().assign(replica_id="agentes-1:42:1")
    out = states(df, fresh=False, read_ago=20, endpoints=pd.DataFrame(rows))
    assert out["state"].tolist() == ["degraded"] and out["source"].tolist() == ["endpoint"]


def test_unreachable_endpoint_is_a_row_with_its_error():
    out = replica_view.read_endpoints(["http://127.0.0.1:1/metrics"], timeout=0.5)
    assert out["state"].tolist() == ["unknown"] and out["error"].iloc[0]
    merged = states(None, fresh=False, endpoints=out)
    assert merged["state"].tolist() == ["unknown"] and merged["replica_id"].tolist() == ["http://127.0.0.1:1/metrics"]


@pytest.mark.parametrize("bad", ["ftp://x/metrics", "localhost:9464", "http://", "http://a\x00b/", "'; DROP"])
def test_bad_endpoint_setting_is_a_clear_error(bad):
    with pytest.raises(replica_view.BadEndpoints, match="AGENT_METRICS_URLS"):
        replica_view.parse_endpoints(bad)


def test_endpoint_setting_lists():
    assert replica_view.parse_endpoints("http://a:1/metrics, https://b:2/metrics") == [
        "http://a:1/metrics",
        "https://b:2/metrics",
    ]
    assert replica_view.parse_endpoints("") == [] and replica_view.parse_endpoints(None) == []

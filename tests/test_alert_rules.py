"""Alert rules: Prometheus's own promtool checks and unit-tests them; the PrometheusRule holds the
same rules as the plain file; the unit tests can fail (a rule without its `for: 1m` pages on a blip)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
ALERTS = ROOT / "deploy" / "alerts"
RULES = ALERTS / "agent-memory-rules.yaml"
UNIT = ALERTS / "agent-memory-rules.test.yaml"
OPERATOR = ROOT / "deploy" / "agent-memory-prometheusrule.yaml"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def promtool(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_promtool_checks_the_plain_rules():
    run = promtool("check", "rules", str(RULES))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS: 19 rules found" in run.stdout


def test_promtool_unit_tests_pass():
    run = promtool("test", "rules", str(UNIT))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS" in run.stdout


def test_the_unit_tests_fail_when_degraded_pages_on_a_blip(tmp_path):
    """Red check: without `for: 1m` the 20 s blip fires and promtool test rules says FAILED."""
    run = _test_with(tmp_path, "AgentCheckpointDegraded", lambda r: r.pop("for"))
    assert run.returncode != 0
    assert (
        "AgentCheckpointDegraded" in run.stdout + run.stderr and 'replica="agentes-7f9c:13"' in run.stdout + run.stderr
    )


def test_the_unit_tests_fail_when_follower_down_ignores_whether_a_slot_exists(tmp_path):
    """Red check: without `and on() ...retained_wal_bytes` a database with no slot (logical decoding not used) would
    page "no follower" forever; the unit test with no slot says FAILED."""
    run = _test_with(
        tmp_path, "AgentMemoryCaptureFollowerDown", lambda r: r.update(expr="agent_memory_capture_running == 0")
    )
    assert run.returncode != 0
    assert "AgentMemoryCaptureFollowerDown" in run.stdout + run.stderr


def _test_with(tmp_path, alert: str, change) -> subprocess.CompletedProcess:
    """promtool's unit tests of the alert named `alert` (the test groups that evaluate it: the others take seconds
    and test other rules) against a copy of the rules where `change(rule)` altered that rule."""
    rules = yaml.safe_load(RULES.read_text())
    found = [r for g in rules["groups"] for r in g["rules"] if r.get("alert") == alert]
    assert len(found) == 1, alert
    change(found[0])
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / RULES.name).write_text(yaml.safe_dump(rules, sort_keys=False))
    unit = yaml.safe_load(UNIT.read_text())
    unit["tests"] = [t for t in unit["tests"] if any(a["alertname"] == alert for a in t.get("alert_rule_test", ()))]
    assert unit["tests"], f"no unit test evaluates {alert}"
    (tmp_path / UNIT.name).write_text(yaml.safe_dump(unit, sort_keys=False))
    return promtool("test", "rules", UNIT.name, cwd=tmp_path)


def test_the_stuck_run_tests_fail_when_the_rule_pages_on_a_blip_or_on_busy_runs(tmp_path):
    """Red checks of AgentServerRunsStuck: without `for: 5m` a run counted stuck for two scrapes pages; on the runs
    gauge instead of the stuck one a busy server pages; never firing misses the killed worker's run."""
    blip = _test_with(tmp_path / "blip", "AgentServerRunsStuck", lambda r: r.pop("for"))
    assert blip.returncode != 0 and "AgentServerRunsStuck" in blip.stdout + blip.stderr
    assert "AgentServerRunsStuck, time: 11m" in blip.stdout + blip.stderr
    busy = _test_with(
        tmp_path / "busy",
        "AgentServerRunsStuck",
        lambda r: r.update(expr="max by (server, status) (agent_memory_agent_server_runs) > 0"),
    )
    assert busy.returncode != 0 and "AgentServerRunsStuck, time: 20m" in busy.stdout + busy.stderr
    never = _test_with(tmp_path / "never", "AgentServerRunsStuck", lambda r: r.update(expr=r["expr"] + " > 1"))
    assert never.returncode != 0 and "AgentServerRunsStuck, time: 16m" in never.stdout + never.stderr


def test_prometheusrule_is_generated_from_the_plain_file(tmp_path):
    operator = yaml.safe_load(OPERATOR.read_text())
    assert operator["apiVersion"] == "monitoring.coreos.com/v1" and operator["kind"] == "PrometheusRule"
    assert operator["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]
    # promtool checks the operator's groups too (the same rules, as Prometheus would load them).
    extracted = tmp_path / "operator-groups.yaml"
    extracted.write_text(yaml.safe_dump({"groups": operator["spec"]["groups"]}, sort_keys=False))
    run = promtool("check", "rules", str(extracted))
    assert run.returncode == 0, run.stdout + run.stderr
    # And the committed file is exactly what the generator writes.
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import gen_prometheusrule
    finally:
        sys.path.pop(0)
    assert OPERATOR.read_text() == gen_prometheusrule.render()


def test_every_alert_names_a_metric_we_export():
    exported = set()
    agent_text = (ROOT / "agent_memory_runtime" / "metrics.py").read_text()
    exporter_text = (ROOT / "core" / "operations" / "exporter.py").read_text()
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            for token in rule["expr"].replace("(", " ").replace(")", " ").replace("{", " ").replace("[", " ").split():
                if token.startswith("agent_memory_"):
                    exported.add(token)
    for name in exported:
        short = name.removeprefix("agent_memory_").removesuffix("_total")
        assert f'"{short}"' in agent_text or f'"{short}"' in exporter_text or short in agent_text, name

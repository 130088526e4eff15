"""The monitoring mixin of `mirror`, as code: alert and recording rules, their promtool unit
tests, and one Grafana dashboard per side (grafanalib). `make monitoring` renders the files
beside this one; tests/deploy/test_monitoring.py holds the checked-in files to this
rendering, runs `promtool check rules` and `promtool test rules`, and
tests/integration/test_monitoring_pipeline.py asks a real Prometheus every query.

Each alert names its metrics (`parts`): the queries that must return series wherever the
alert is loaded (a query naming a metric nobody exports is a failing test, not a silent
alert), a case that fires it and one that does not (promtool), and a summary naming the one
command to run first.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from grafanalib._gen import DashboardEncoder
from grafanalib.core import Dashboard, GridPos, Target, Template, Templating, TimeSeries

HERE = Path(__file__).resolve().parent
DAY = 86400
SERVED_AGE_LIMIT_DAYS = 14
"""The stated age past which the docs readers see are too old (MirrorServedDocsTooOld)."""
DOMAIN = "docs.example.com"
LEASE_STUCK_MINUTES = 10
"""A run held this long past its lease (`daemon.lease`, 30 s by default, renewed every third
of it; an expired one is taken over at the next pass) is stuck (MirrorLeaseStuck)."""


@dataclass(frozen=True)
class Case:
    """Input series (promtool's notation, one sample a minute) and when to look."""

    series: dict[str, str]
    at: str = "90m"


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    parts: tuple[str, ...]
    summary: str
    command: str
    fires: Case
    quiet: Case
    labels: dict[str, str] = field(default_factory=dict)
    wait: str = "0m"
    side: str = "connected"

    def rule(self) -> dict[str, Any]:
        return {
            "alert": self.name,
            "expr": self.expr,
            "for": self.wait,
            "labels": {"severity": "warning", "side": self.side},
            "annotations": {"summary": f"{self.summary}; first run: {self.command}"},
        }


ALERTS = (
    Alert(
        "MirrorExportFailing",
        "max by (domain) (mirror_export_consecutive_failures) >= 2",
        ("mirror_export_consecutive_failures",),
        "exports of {{ $labels.domain }} failed twice in a row",
        "mirror status",
        Case({f'mirror_export_consecutive_failures{{domain="{DOMAIN}"}}': "0 1 2+0x100"}),
        Case({f'mirror_export_consecutive_failures{{domain="{DOMAIN}"}}': "0 1 0+0x100"}),
        {"domain": DOMAIN},
    ),
    Alert(
        "MirrorBundleRefusedForCompleteness",
        "max by (domain) (mirror_version_refused) == 1",
        ("mirror_version_refused",),
        "the newest bundle of {{ $labels.domain }} was refused for completeness",
        "mirror status",
        Case({f'mirror_version_refused{{domain="{DOMAIN}"}}': "1+0x100"}),
        Case({f'mirror_version_refused{{domain="{DOMAIN}"}}': "0+0x100"}),
        {"domain": DOMAIN},
    ),
    Alert(
        "MirrorDownloadStuck",
        'sum(mirror_runs_in_state{state="downloading"}) > 0'
        " and sum(rate(mirror_download_bytes_total[15m])) == 0",
        ('mirror_runs_in_state{state="downloading"}', "mirror_download_bytes_total"),
        "a bundle download has received nothing for 15 minutes",
        "mirror status",
        Case(
            {
                'mirror_runs_in_state{state="downloading"}': "1+0x100",
                f'mirror_download_bytes_total{{domain="{DOMAIN}"}}': "500+0x100",
            }
        ),
        Case(
            {
                'mirror_runs_in_state{state="downloading"}': "1+0x100",
                f'mirror_download_bytes_total{{domain="{DOMAIN}"}}': "0+1000x100",
            }
        ),
        wait="15m",
    ),
    Alert(
        "MirrorVendorJobStuck",
        "sum by (domain) (increase(mirror_job_timeouts_total[1h])) > 0",
        ("mirror_job_timeouts_total",),
        "a vendor export job of {{ $labels.domain }} stayed unsettled past api.job_timeout",
        "mirror status",
        Case({f'mirror_job_timeouts_total{{domain="{DOMAIN}"}}': "0+0x30 1+0x70"}),
        Case({f'mirror_job_timeouts_total{{domain="{DOMAIN}"}}': "0+0x100"}),
        {"domain": DOMAIN},
    ),
    Alert(
        "MirrorLeaseStuck",
        f"max by (domain) (mirror_run_lease_overdue_seconds) > {LEASE_STUCK_MINUTES * 60}",
        ("mirror_run_lease_overdue_seconds",),
        f"the export run of {{{{ $labels.domain }}}} is held {LEASE_STUCK_MINUTES} minutes past"
        " its lease and no replica takes it over",
        "mirror status",
        Case({f'mirror_run_lease_overdue_seconds{{domain="{DOMAIN}"}}': "0+0x30 0+60x70"}),
        Case({f'mirror_run_lease_overdue_seconds{{domain="{DOMAIN}"}}': "0+0x40 0+60x5 0+0x55"}),
        {"domain": DOMAIN},
        wait="5m",
    ),
    Alert(
        "MirrorStoreDiskFilling",
        "predict_linear(mirror_store_free_bytes[6h], 86400) < 0",
        ("mirror_store_free_bytes",),
        "the disk holding the store fills within a day at this rate",
        "mirror store gc --dry-run",
        Case({"mirror_store_free_bytes": "10000000000-100000000x100"}),
        Case({"mirror_store_free_bytes": "10000000000+0x100"}),
        wait="30m",
    ),
    Alert(
        "MirrorSiteAcknowledgementLagging",
        "max by (site) (mirror_site_last_packed_sequence)"
        " - max by (site) (mirror_site_last_acknowledged_sequence) > 1",
        ("mirror_site_last_packed_sequence", "mirror_site_last_acknowledged_sequence"),
        "site {{ $labels.site }} has acknowledged none of the last two sets packed for it",
        "mirror sites",
        Case(
            {
                'mirror_site_last_packed_sequence{site="default"}': "5+0x100",
                'mirror_site_last_acknowledged_sequence{site="default"}': "3+0x100",
            }
        ),
        Case(
            {
                'mirror_site_last_packed_sequence{site="default"}': "5+0x100",
                'mirror_site_last_acknowledged_sequence{site="default"}': "4+0x100",
            }
        ),
        {"site": "default"},
        wait="1h",
    ),
    Alert(
        "MirrorSetsNeverAcknowledged",
        f"max by (site) (mirror_site_oldest_unacknowledged_age_seconds) > {7 * DAY}",
        ("mirror_site_oldest_unacknowledged_age_seconds",),
        "a set packed (or sent one-way) for site {{ $labels.site }} a week ago is not acknowledged",
        "mirror sites",
        Case({'mirror_site_oldest_unacknowledged_age_seconds{site="default"}': "700000+60x100"}),
        Case({'mirror_site_oldest_unacknowledged_age_seconds{site="default"}': "0+0x100"}),
        {"site": "default"},
    ),
    Alert(
        "MirrorLinkExpiresSoon",
        f"min by (domain) (mirror_values_link_expiry_timestamp_seconds) - time() < {DAY}",
        ("mirror_values_link_expiry_timestamp_seconds",),
        "the link in the values of {{ $labels.domain }} expires within a day",
        "mirror chart refresh",
        Case({f'mirror_values_link_expiry_timestamp_seconds{{domain="{DOMAIN}"}}': "43200+0x100"}),
        Case({f'mirror_values_link_expiry_timestamp_seconds{{domain="{DOMAIN}"}}': "900000+0x100"}),
        {"domain": DOMAIN},
        side="airgapped",
    ),
    Alert(
        "MirrorServedNotNewest",
        "min by (domain) (mirror_serve_current_is_newest) == 0",
        ("mirror_serve_current_is_newest",),
        "the current version of {{ $labels.domain }} is not its newest (a rollback?)",
        "mirror chart history {{ $labels.domain }}",
        Case({f'mirror_serve_current_is_newest{{domain="{DOMAIN}"}}': "1+0x10 0+0x90"}),
        Case({f'mirror_serve_current_is_newest{{domain="{DOMAIN}"}}': "1+0x100"}),
        {"domain": DOMAIN},
        wait="1h",
        side="airgapped",
    ),
    Alert(
        "MirrorServedNotCurrent",
        'max by (domain) (mirror_serve_last_served_info{current="false"}) == 1',
        ("mirror_serve_last_served_info",),
        "pods are served a version of {{ $labels.domain }} that is not the current one",
        "mirror chart history {{ $labels.domain }}",
        Case(
            {
                f'mirror_serve_last_served_info{{domain="{DOMAIN}",version="a",current="false"}}': (
                    "1+0x100"
                )
            }
        ),
        Case(
            {
                f'mirror_serve_last_served_info{{domain="{DOMAIN}",version="b",current="true"}}': (
                    "1+0x100"
                )
            }
        ),
        {"domain": DOMAIN},
        wait="30m",
        side="airgapped",
    ),
    Alert(
        "MirrorServedDocsTooOld",
        "max by (domain) (mirror_serve_served_version_age_seconds)"
        f" > {SERVED_AGE_LIMIT_DAYS * DAY}",
        ("mirror_serve_served_version_age_seconds",),
        f"the docs of {{{{ $labels.domain }}}} readers see are over {SERVED_AGE_LIMIT_DAYS} days"
        " old",
        "mirror chart history {{ $labels.domain }}",
        Case({f'mirror_serve_served_version_age_seconds{{domain="{DOMAIN}"}}': "1300000+60x100"}),
        Case({f'mirror_serve_served_version_age_seconds{{domain="{DOMAIN}"}}': "3600+60x100"}),
        {"domain": DOMAIN},
        wait="1h",
        side="airgapped",
    ),
    Alert(
        "MirrorServeRefusedVersion",
        "max by (domain) (mirror_serve_refused_versions) > 0",
        ("mirror_serve_refused_versions",),
        "mirror serve refuses a version of {{ $labels.domain }}: its object in the bucket is not"
        " what its manifest and provenance name, and pods asking for it get 502 (the status"
        " page and the log name the version and why)",
        "mirror evidence {{ $labels.domain }} VERSION --with-object --out DIR",
        Case({f'mirror_serve_refused_versions{{domain="{DOMAIN}"}}': "0+0x30 1+0x70"}),
        Case({f'mirror_serve_refused_versions{{domain="{DOMAIN}"}}': "0+0x100"}),
        {"domain": DOMAIN},
        side="airgapped",
    ),
    Alert(
        "MirrorOnewaySetIncomplete",
        'sum(increase(mirror_oneway_sets_total{outcome="incomplete"}[1h])) > 0',
        ('mirror_oneway_sets_total{outcome="incomplete"}',),
        "a set sent over the one-way link arrived incomplete (the receiver's log names what"
        " it lacks)",
        "mirror transfer send",
        Case({'mirror_oneway_sets_total{outcome="incomplete"}': "0+0x30 1+0x70"}),
        Case({'mirror_oneway_sets_total{outcome="incomplete"}': "0+0x100"}),
        side="airgapped",
    ),
    Alert(
        "MirrorImportRefused",
        'max(mirror_import_last_result{result="refused"}) == 1',
        ("mirror_import_last_result",),
        "the last transfer import refused its set",
        "mirror transfer verify DIR",
        Case({'mirror_import_last_result{result="refused"}': "1+0x100"}),
        Case({'mirror_import_last_result{result="refused"}': "0+0x100"}),
        side="airgapped",
    ),
)

RECORDS = {
    "mirror:export_age_seconds": "time() - max by (domain) (mirror_last_success_timestamp_seconds)",
    "mirror:site_unacknowledged_sets": "max by (site) (mirror_site_last_packed_sequence)"
    " - max by (site) (mirror_site_last_acknowledged_sequence)",
    "mirror:served_docs_age_seconds": "max by (domain) (mirror_serve_served_version_age_seconds)",
    "mirror:serve_freshness_seconds:p90_1d": "histogram_quantile(0.9,"
    " sum by (le) (rate(mirror_serve_freshness_seconds_bucket[1d])))",
    "mirror:values_link_ttl_seconds": "min by (domain)"
    " (mirror_values_link_expiry_timestamp_seconds) - time()",
}


def rules() -> dict[str, Any]:
    """rules.yaml: the recording rules, then the alerts."""
    recorded = [{"record": name, "expr": expr} for name, expr in RECORDS.items()]
    return {
        "groups": [
            {"name": "mirror.records", "rules": recorded},
            {"name": "mirror.alerts", "rules": [alert.rule() for alert in ALERTS]},
        ]
    }


def prometheus_rule() -> dict[str, Any]:
    """The same rules as a prometheus-operator PrometheusRule."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "mirror", "labels": {"app.kubernetes.io/name": "mirror"}},
        "spec": rules(),
    }


def _expected(alert: Alert) -> dict[str, Any]:
    labels = {"severity": "warning", "side": alert.side, **alert.labels}
    summary = alert.rule()["annotations"]["summary"]
    for name, value in alert.labels.items():
        summary = summary.replace(f"{{{{ $labels.{name} }}}}", value)
    return {"exp_labels": labels, "exp_annotations": {"summary": summary}}


def _case(alert: Alert, case: Case, fires: bool) -> dict[str, Any]:
    return {
        "interval": "1m",
        "input_series": [{"series": s, "values": v} for s, v in case.series.items()],
        "alert_rule_test": [
            {
                "eval_time": case.at,
                "alertname": alert.name,
                "exp_alerts": [_expected(alert)] if fires else [],
            }
        ],
    }


def rule_tests() -> dict[str, Any]:
    """tests.yaml for `promtool test rules`: per alert a case that fires and one that not."""
    cases = [_case(a, a.fires, True) for a in ALERTS] + [_case(a, a.quiet, False) for a in ALERTS]
    return {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": cases}


LEGEND = "".join(
    f"{{{{{label}}}}}" for label in ("domain", "site", "state", "outcome", "kind", "result", "code")
)
"""A series' legend: whichever of these labels it has (the others render empty)."""


def _panel(title: str, expr: str, x: int, y: int, *, unit: str) -> TimeSeries:
    return TimeSeries(
        title=title,
        targets=[Target(expr=expr, legendFormat=LEGEND, refId="A")],
        gridPos=GridPos(h=8, w=12, x=x, y=y),
        unit=unit,
        dataSource="$datasource",  # the dashboard's variable: no data source uid baked in
    )


def _dashboard(uid: str, title: str, panels: list[tuple[str, str, str]]) -> Dashboard:
    placed = [
        _panel(name, expr, 12 * (i % 2), 8 * (i // 2), unit=unit)
        for i, (name, expr, unit) in enumerate(panels)
    ]
    source = Template(name="datasource", query="prometheus", type="datasource", label="Source")
    return Dashboard(
        title=title,
        uid=uid,
        tags=["mirror"],
        timezone="utc",
        templating=Templating(list=[source]),
        panels=placed,
    ).auto_panel_ids()


CONNECTED = [
    ("Runs by outcome (1h)", "sum by (outcome) (increase(mirror_runs_total[1h]))", "short"),
    ("Since the last success", "mirror:export_age_seconds", "s"),
    ("Failures in a row", "max by (domain) (mirror_export_consecutive_failures)", "short"),
    ("Refused for completeness", "max by (domain) (mirror_version_refused)", "short"),
    ("Download rate", "sum by (domain) (rate(mirror_download_bytes_total[5m]))", "Bps"),
    ("Runs in flight", "sum by (state) (mirror_runs_in_state)", "short"),
    ("Runs held past their lease", "max by (domain) (mirror_run_lease_overdue_seconds)", "s"),
    ("Store: used", "max(mirror_store_bytes)", "bytes"),
    ("Store: free on its disk", "max(mirror_store_free_bytes)", "bytes"),
    ("Sets not acknowledged per site", "mirror:site_unacknowledged_sets", "short"),
    ("Oldest unacknowledged set", "mirror_site_oldest_unacknowledged_age_seconds", "s"),
    ("Export starts left this hour", "mirror_start_budget_remaining", "short"),
]
AIRGAPPED = [
    ("Age of the docs readers see", "mirror:served_docs_age_seconds", "s"),
    ("Current version's age", "max by (domain) (mirror_serve_current_version_age_seconds)", "s"),
    ("Freshness: export to first serve (p90, 1d)", "mirror:serve_freshness_seconds:p90_1d", "s"),
    ("Current is the newest", "min by (domain) (mirror_serve_current_is_newest)", "short"),
    ("Link expires in", "mirror:values_link_ttl_seconds", "s"),
    ("Imports by result", "max by (result) (mirror_import_sets_total)", "short"),
    ("Since the last import", "time() - max(mirror_import_last_timestamp_seconds)", "s"),
    ("Responses by status", "sum by (code) (rate(mirror_serve_responses_total[5m]))", "reqps"),
    ("Replicas ready", "sum(mirror_serve_ready)", "short"),
    ("Cache", "sum(mirror_serve_cache_bytes)", "bytes"),
    (
        "One-way: datagrams received",
        "sum by (kind) (rate(mirror_oneway_datagrams_total[5m]))",
        "pps",
    ),
    (
        "One-way: datagrams dropped (damaged, or a field out of bounds)",
        "sum(rate(mirror_oneway_corrupt_datagrams_total[5m]))"
        " + sum(rate(mirror_oneway_dropped_datagrams_total[5m]))",
        "pps",
    ),
    (
        "One-way: sets ended (1d)",
        "sum by (outcome) (increase(mirror_oneway_sets_total[1d]))",
        "short",
    ),
    (
        "One-way: landed sets imported (1d)",
        "sum by (outcome) (increase(mirror_oneway_imports_total[1d]))",
        "short",
    ),
    (
        "One-way: blocks repaired by FEC (1h)",
        "sum(increase(mirror_oneway_repaired_blocks_total[1h]))",
        "short",
    ),
]


def dashboards() -> dict[str, Dashboard]:
    return {
        "mirror-connected": _dashboard("mirror-connected", "mirror: connected side", CONNECTED),
        "mirror-airgapped": _dashboard("mirror-airgapped", "mirror: air-gapped side", AIRGAPPED),
    }


def dashboard_queries() -> list[str]:
    return [expr for _, expr, _ in CONNECTED + AIRGAPPED]


def rendered() -> dict[str, str]:
    """Every generated file (relative to deploy/monitoring) and its text."""
    files = {
        "rules.yaml": rules(),
        "prometheusrule.yaml": prometheus_rule(),
        "tests.yaml": rule_tests(),
    }
    out = {name: _yaml(document) for name, document in files.items()}
    for name, board in dashboards().items():
        data = board.to_json_data()
        text = json.dumps(data, cls=DashboardEncoder, sort_keys=True, indent=2)
        out[f"dashboards/{name}.json"] = text + "\n"
    return out


def _yaml(document: dict[str, Any]) -> str:
    head = "# Rendered by deploy/monitoring/mixin.py (make monitoring): edit that, not this.\n"
    return head + yaml.safe_dump(document, sort_keys=False, width=100)


def main(argv: list[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else HERE
    for name, text in rendered().items():
        path = out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

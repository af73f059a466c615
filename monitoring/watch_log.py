"""The live watch in MLflow: one run per champion in the `live-watch` experiment, one step per day.

Metrics are stepped by the day's number (days since 1970-01-01, timestamped at the day's UTC
midnight), so a chart of a metric over steps is the champion's days in order:
`watch/interactions`, `watch/action_drift_tv`, `watch/reward_<p10..p90>`, `watch/reward_ks`,
`watch/alarms`, `watch/failure_share/<mode>`, `watch/tools/<tool>`. Each day also leaves
`days/<day>/watch.json` (every number behind the day, interaction ids but no conversation text)
and two plots under `days/<day>/`. Re-running a day logs its step again; MLflow keeps both values.
"""

from __future__ import annotations

from datetime import UTC, date, datetime

from matplotlib.figure import Figure

from monitoring.watch import DayWatch
from tracking.registry import ensure_experiment, find_or_create_run, mlflow_client, mlflow_step
from tracking.run_log import bar_figure, metric_key

WATCH_EXPERIMENT = "live-watch"
CHAMPION_TAG = "watch_champion"


def day_step(day: str) -> int:
    """The metric step of a day: days since 1970-01-01."""
    return (date.fromisoformat(day) - date(1970, 1, 1)).days


def _shares(prefix: str, shares: dict[str, float]) -> dict[str, float]:
    """Shares under `watch/<prefix>/<name>`; a name unfit for a metric key (a served call to a
    tool that does not exist can be named anything) counts under `unlisted`."""
    out: dict[str, float] = {}
    for name, share in shares.items():
        try:
            key = metric_key("watch", prefix, name)
        except ValueError:
            key = metric_key("watch", prefix, "unlisted")
        out[key] = out.get(key, 0.0) + share
    return out


def watch_metrics(watch: DayWatch) -> dict[str, float]:
    """Every number of the day under its stable metric name."""
    out = {"watch/interactions": float(watch.interactions), "watch/alarms": float(len(watch.alarms))}
    if watch.action_drift.value is not None:
        out["watch/action_drift_tv"] = watch.action_drift.value
    if watch.reward_shift.value is not None:
        out["watch/reward_ks"] = watch.reward_shift.value
    out.update({f"watch/reward_{name}": v for name, v in watch.reward_quantiles.items()})
    out.update(_shares("failure_share", watch.failure_modes))
    out.update(_shares("tools", watch.tool_mix))
    return out


def _histogram_figure(watch: DayWatch) -> Figure:
    fig = Figure(figsize=(7, 4), layout="constrained")
    ax = fig.subplots()
    hist = watch.reward_histogram
    if hist.counts:
        widths = [b - a for a, b in zip(hist.edges, hist.edges[1:])]
        ax.bar(hist.edges[:-1], hist.counts, width=widths, align="edge", edgecolor="black")
    ax.set_xlabel("proxy reward")
    ax.set_ylabel("interactions with gold")
    ax.set_title(f"Proxy reward of {watch.champion}'s traffic on {watch.day}")
    return fig


def log_watch_day(tracking_uri: str, watch: DayWatch, artifact_location: str | None = None) -> str:
    """Log the day into its champion's watch run; returns the run id."""
    from mlflow.entities import Metric  # heavy (~1 s): see tracking.registry

    metric_key(watch.champion.replace("/", "-"))  # quoted into a filter string: plain characters only
    client = mlflow_client(tracking_uri)
    stamp = int(datetime.fromisoformat(watch.day).replace(tzinfo=UTC).timestamp() * 1000)
    step = day_step(watch.day)
    with mlflow_step(tracking_uri, "log live watch"):
        experiment = ensure_experiment(client, WATCH_EXPERIMENT, artifact_location)
        # The oldest, should two runs ever have been created for one champion: its days stay together.
        name = watch.champion.replace("/", "-v")
        run_id = find_or_create_run(client, experiment, {CHAMPION_TAG: watch.champion}, f"watch-{name}", newest=False)
        metrics = [Metric(k, float(v), stamp, step) for k, v in sorted(watch_metrics(watch).items())]
        for start in range(0, len(metrics), 100):
            client.log_batch(run_id, metrics=metrics[start : start + 100])
        client.log_dict(run_id, watch.to_dict(), f"days/{watch.day}/watch.json")
        client.log_figure(run_id, _histogram_figure(watch), f"days/{watch.day}/reward_histogram.png")
        mixes = {"served": watch.tool_mix, **({"evaluated": watch.evaluated_mix} if watch.evaluated_mix else {})}
        client.log_figure(
            run_id, bar_figure(f"Tool-call mix on {watch.day}", mixes, "share of calls"), f"days/{watch.day}/tools.png"
        )
        client.set_terminated(run_id)
    return run_id

"""bench_cpu_testbed.py --parts RECORD...: where a testbed step's time goes and what moves between runs, from the
raw records (testbed_record.py): nothing is run or fitted.

- Run-to-run spread of the wall time, the CPU time and their ratio: each run against the median of its
  configuration's other runs in the same record (log). refine/peer_wait.py's WAIT_RUN_SD_PRIOR is the ratio's of
  the multi-rank runs; refine/shrinkage.py's run and moment variances are meant for the CPU time's.
- The multi-rank configurations' wait for their peers, per record: each configuration's mean log(wall / CPU)
  (refine/peer_wait.py: WAIT_CONFIG_SD_PRIOR is their spread, pooled over records), how far the slowest rank's CPU
  per step lies above the mean rank's (the ranks drift apart between two collectives), and the wall beyond the
  slowest rank's CPU (blocked in the collectives) against the comm model's predicted collectives; and where the
  multi-rank steps' excess over the prediction sits (rank_excess): their CPU time, or the wall beyond it.
- The resolution of a target on one configuration: how far a perfect prediction of its typical step lies from the
  median of a few of its runs, at the records' run-to-run spread.
- Whether a machine-speed reference tracks a run's speed: for each reference reading a run saved, the correlation
  of its log deviation (from the median of the configuration's runs) with the run's CPU time's, the regression
  slope, and the run-to-run variance if every run were scaled by its reading (ratio > 1: scaling adds noise).
"""

from __future__ import annotations

import math
import statistics
from typing import Iterable

REFERENCE_KEYS = ("hook_reference_s", "ref_before_s", "ref_after_s", "ref_now_s")
"""The reference readings a record's run holds (testbed_runs.py): the hook's in-job one and the benchmark's."""


def config_ranks(config: dict) -> int:
    """The world size a record's configuration ran at (its explain JSON's)."""
    return int(config["config"].get("world_size") or 1)


def _runs_of(record: dict, k: int) -> list[dict]:
    return [r for r in record["runs"] if int(r["config"]) == k and r.get("cpu_s")]


def leave_one_out(values: list[float]) -> list[float]:
    """log(value / median of the others) of each value (none for fewer than 2)."""
    return [math.log(v / statistics.median(values[:i] + values[i + 1:])) for i, v in enumerate(values)] \
        if len(values) > 1 else []


def rms(values: Iterable[float]) -> float:
    values = list(values)
    return math.sqrt(statistics.fmean(v * v for v in values)) if values else float("nan")


def run_spread(records: list[dict], multi_rank: bool | None = None) -> dict[str, tuple[float, int]]:
    """{"wall" | "cpu" | "wall/cpu": (rms log deviation, runs)} over the records' runs (of multi-rank
    configurations only, of one-rank ones only, or all: `multi_rank` True / False / None)."""
    out: dict[str, list[float]] = {"wall": [], "cpu": [], "wall/cpu": []}
    for record in records:
        for k, config in enumerate(record["configs"]):
            if multi_rank is not None and (config_ranks(config) > 1) != multi_rank:
                continue
            runs = _runs_of(record, k)
            out["wall"] += leave_one_out([r["measured_s"] for r in runs])
            out["cpu"] += leave_one_out([r["cpu_s"] for r in runs])
            out["wall/cpu"] += leave_one_out([r["measured_s"] / r["cpu_s"] for r in runs])
    return {name: (rms(v), len(v)) for name, v in out.items()}


def rank_skew(run: dict) -> tuple[float, float] | None:
    """(median per step of (slowest rank's CPU - mean rank's) / mean rank's, median step wall - slowest rank's
    CPU in seconds) of a 2-rank run with per-rank steps; None otherwise."""
    ranks = run.get("rank_steps") or {}
    if len(ranks) < 2:
        return None
    steps = [{s[0]: s for s in ranks[r] if not s[3]} for r in sorted(ranks)[:2]]
    common = sorted(set(steps[0]) & set(steps[1]))
    if not common:
        return None
    cpu = [(steps[0][i][2], steps[1][i][2]) for i in common]
    wall = [max(steps[0][i][1], steps[1][i][1]) for i in common]
    skew = statistics.median(max(a, b) / ((a + b) / 2) - 1 for a, b in cpu)
    return skew, statistics.median(wall) - statistics.median(max(a, b) for a, b in cpu)


def wait_by_config(record: dict) -> list[dict]:
    """Per multi-rank configuration of the record: its label, mean log(wall / CPU) over its runs, the rank skew
    and wall beyond the slowest rank (medians over runs), and its predicted collectives' seconds."""
    out = []
    for k, config in enumerate(record["configs"]):
        runs = _runs_of(record, k)
        if config_ranks(config) < 2 or not runs:
            continue
        skews = [s for s in map(rank_skew, runs) if s is not None]
        comm = sum(v for name, v in (config.get("breakdown") or {}).items() if name.startswith("comm"))
        out.append({"k": k, "label": config.get("label", str(k)),
                    "wait": statistics.fmean(math.log(r["measured_s"] / r["cpu_s"]) for r in runs),
                    "skew": statistics.median(s[0] for s in skews) if skews else float("nan"),
                    "blocked_s": statistics.median(s[1] for s in skews) if skews else float("nan"),
                    "comm_s": comm})
    return out


def rank_excess(record: dict) -> dict[str, float] | None:
    """Where a multi-rank step's excess over the prediction sits, from the configurations' median runs (log, means
    over configurations): each one's CPU time against the prediction less its collectives (one and several ranks),
    and the multi-rank ones' log(wall / CPU) against the prediction's own log(P / (P - collectives)), the wait the
    prediction priced. None without both kinds of configuration."""
    cpu: dict[bool, list[float]] = {False: [], True: []}
    beyond = []
    for k, config in enumerate(record["configs"]):
        runs = _runs_of(record, k)
        predicted = config["predicted_s"]
        comm = sum(v for name, v in (config.get("breakdown") or {}).items() if name.startswith("comm"))
        if not runs or not 0 <= comm < predicted:
            continue
        wall, cpu_s = (statistics.median(r[key] for r in runs) for key in ("measured_s", "cpu_s"))
        multi = config_ranks(config) > 1
        cpu[multi].append(math.log(cpu_s / (predicted - comm)))
        if multi:
            beyond.append(math.log(wall / cpu_s) - math.log(predicted / (predicted - comm)))
    if not cpu[False] or not cpu[True]:
        return None
    return {"cpu_one": statistics.fmean(cpu[False]), "cpu_multi": statistics.fmean(cpu[True]),
            "wait_beyond_priced": statistics.fmean(beyond)}


def pooled_config_spread(records: list[dict]) -> float:
    """The between-configuration sd of the mean log(wall / CPU), pooled over records (each record's variance)."""
    variances = [statistics.variance(w) for w in ([c["wait"] for c in wait_by_config(r)] for r in records)
                 if len(w) > 1]
    return math.sqrt(statistics.fmean(variances)) if variances else float("nan")


def reference_tracking(records: list[dict], key: str) -> dict[str, float] | None:
    """corr, slope and the variance ratio (scaled / unscaled) of the run's CPU-time deviation against the
    reading `key`'s deviation; None with fewer than 3 pairs."""
    xs, ys = [], []
    for record in records:
        for k in range(len(record["configs"])):
            runs = [r for r in _runs_of(record, k) if r.get(key)]
            xs += leave_one_out([r[key] for r in runs])
            ys += leave_one_out([r["cpu_s"] for r in runs])
    if len(xs) < 3 or statistics.pvariance(xs) == 0 or statistics.pvariance(ys) == 0:
        return None
    cov = statistics.covariance(xs, ys)
    scaled = statistics.variance([y - x for x, y in zip(xs, ys)])
    return {"pairs": len(xs), "corr": statistics.correlation(xs, ys), "slope": cov / statistics.variance(xs),
            "scaled_variance_ratio": scaled / statistics.variance(ys)}


def target_resolution(records: list[dict], num_runs: int, tolerance: float = 0.03,
                      draws: int = 20000) -> tuple[float, float]:
    """(median |log error|, share within `tolerance`) of a perfect prediction of a configuration's typical step
    scored against the median of `num_runs` of its runs: the runs' log residuals about their configuration's mean
    (x sqrt(n / (n - 1)), the mean's own share put back), resampled (fixed seed)."""
    import random

    residuals = []
    for record in records:
        for k in range(len(record["configs"])):
            logs = [math.log(r["measured_s"]) for r in record["runs"] if int(r["config"]) == k]
            if len(logs) > 1:
                mean, inflate = statistics.fmean(logs), math.sqrt(len(logs) / (len(logs) - 1))
                residuals += [(x - mean) * inflate for x in logs]
    if not residuals:
        return float("nan"), float("nan")
    rng = random.Random(0)
    errors = [abs(statistics.median(rng.choices(residuals, k=num_runs))) for _ in range(draws)]
    return statistics.median(errors), sum(e <= tolerance for e in errors) / draws


def report_parts(records: list[dict], names: list[str]) -> None:
    print(f"[parts] {len(records)} record(s): {', '.join(names)}")
    for label, multi in (("all runs", None), ("one-rank runs", False), ("multi-rank runs", True)):
        spread = run_spread(records, multi)
        print(f"  run-to-run rms log deviation, {label}: " + ", ".join(
            f"{name} {sd:.3f}" for name, (sd, _) in spread.items()) + f" ({spread['wall'][1]} runs)")
    typical, within = target_resolution(records, 4)
    print(f"  a perfect prediction against the median of 4 runs (the instrumented configuration's reference): median "
          f"|error| {typical:.1%}, within 3 % in {within:.0%} of draws")
    print(f"  multi-rank configurations' mean log(wall / CPU): between-configuration sd pooled over records "
          f"{pooled_config_spread(records):.3f} (refine/peer_wait.py WAIT_CONFIG_SD_PRIOR)")
    for name, record in zip(names, records):
        rows = wait_by_config(record)
        print(f"  {name}: mean wait x{math.exp(statistics.fmean(r['wait'] for r in rows)):.3f}" if rows else
              f"  {name}: no multi-rank configuration")
        for r in rows:
            print(f"   {r['k']:2d} {r['label']:34s} wall/CPU x{math.exp(r['wait']):.3f}  slowest rank's CPU "
                  f"+{r['skew']:.1%} over the mean rank's  wall beyond it {r['blocked_s'] * 1e3:5.1f} ms "
                  f"(predicted collectives {r['comm_s'] * 1e3:5.1f} ms)")
    for name, record in zip(names, records):
        e = rank_excess(record)
        if e:
            print(f"  {name}: CPU time / (prediction less its collectives): one rank {e['cpu_one']:+.3f}, several "
                  f"{e['cpu_multi']:+.3f} (log, mean over configurations: the multi-rank excess "
                  f"{e['cpu_multi'] - e['cpu_one']:+.3f} is CPU time); multi-rank wall / CPU beyond the priced "
                  f"collectives {e['wait_beyond_priced']:+.3f}")
    for key in REFERENCE_KEYS:
        t = reference_tracking(records, key)
        if t:
            print(f"  reference {key}: {t['pairs']} runs, corr {t['corr']:+.2f} with the run's CPU time, slope "
                  f"{t['slope']:+.2f}; scaling every run by it: variance x{t['scaled_variance_ratio']:.2f}")

"""bench_cpu_testbed.py --rescore: the calibrations printed in earlier outputs of the benchmark (text, before the
raw records of testbed_record.py existed) re-scored with the current shrinkage priors, and the run-to-run
spread of their quiet pass pairs."""

from __future__ import annotations

import math
import os
import statistics
from pathlib import Path

from testbed_record import _bad_input, mape, pct

PASS_LINE = r"^\s+(\d+) L\d+ .*?\s+measured\s+([\d.]+) ms \(CPU.*?(\d) run\(s\)( CONTENDED)?"
"""A measurement pass's line of this benchmark's output (index, measured ms, runs, contended)."""


def logged_passes(text: str) -> dict[int, list[tuple[float, bool]]]:
    """{configuration: [(measured s, contended) per measurement pass]} of one output of this benchmark."""
    import re

    line, out = re.compile(PASS_LINE), {}
    for part in text.split("[measure] pass ")[1:]:
        for m in map(line.match, part.split("[refine]")[0].splitlines()):
            if m:
                out.setdefault(int(m.group(1)), []).append((float(m.group(2)) * 1e-3, bool(m.group(4))))
    return out


def logged_run_spread(texts: list[str]) -> tuple[float, int]:
    """(sd of one run's log step time, pairs) from the quiet pass pairs of outputs with 24 timed steps: each
    pair's log difference d has variance 2 sd^2 (refine/shrinkage.SD_RUN_PRIOR's source)."""
    d = [math.log(runs[1][0] / runs[0][0]) for text in texts if "24 timed steps" in text
         for runs in logged_passes(text).values() if len(runs) >= 2 and not runs[0][1] and not runs[1][1]]
    return (math.sqrt(statistics.fmean(x * x for x in d) / 2) if d else float("nan")), len(d)


def last_calibration_run(head: str) -> tuple[float, bool] | None:
    """(ms, quiet-equivalent?) of the last calibration run printed in the head of a [refine] section: its measured
    step, or its quiet-equivalent when it was contended; None without one."""
    import re

    for job in reversed(head.split("    job ")[1:]):
        measured = re.search(r"measured ([\d.]+) ms \(CPU", job)
        if measured:
            equivalent = re.search(r"quiet-equivalent ([\d.]+) ms", job)
            return float((equivalent or measured).group(1)), equivalent is not None
    return None


def rescore(home: Path, logs: list[Path], cluster: str, num_configs: int, targets: dict[str, float]) -> None:
    """Each calibration printed in `logs` (a [refine] section: the table's measured and before columns, the last
    calibration run's measured step, or its quiet-equivalent when it was contended) re-scored with the current
    shrinkage priors of the profile in `home`; beside every configuration, the quiet ones (no pass CONTENDED).
    And the run-to-run spread of the logs' quiet 24-step pass pairs, against the prior sd_run."""
    import re

    from llmperf_hook.refine.prior_scale import averaged_posterior, scale_mixture
    from llmperf_hook.refine.shrinkage import SD_RUN_PRIOR, estimate_variances, group_runs, variance_priors

    os.environ["LLMPERF_HOME"] = str(home)
    pri = variance_priors(cluster)
    print(f"priors now: sd_shared {pri.sd_shared:.3f}, sd_config {pri.sd_config:.3f} ({pri.source})")
    texts = [log_text(log, "--rescore") for log in logs]
    sd, pairs = logged_run_spread(texts)
    print(f"run-to-run spread of these logs' quiet 24-step passes: sd {sd:.3f} of one run from {pairs} pairs "
          f"(prior sd_run {SD_RUN_PRIOR:.3f})")
    row = re.compile(r"^\s*(\d+)\s*\*?\s*L\d+ .*?\s{2,}([\d.]+)\s+([\d.]+) \(")
    own_quiet, others_quiet = [], []
    for log, text in zip(logs, texts):
        contended = {i for i, runs in logged_passes(text).items() if any(c for _, c in runs)}
        for sec in text.split("[refine] instrumenting configuration ")[1:]:
            k, last = int(sec.split()[0]), last_calibration_run(sec.split("\n  #")[0])
            rows = {int(m.group(1)): (float(m.group(2)), float(m.group(3)))
                    for m in map(row.match, sec.splitlines()) if m}
            if len(rows) != num_configs or last is None:
                continue
            run_ms, equivalent = last
            configs = group_runs([("j", "f", rows[k][1], run_ms)])
            v = estimate_variances(configs, pri.sd_config, pri.source, pri.sd_shared, pri.sd_moment, pri.sd_mix)
            post = averaged_posterior(configs, scale_mixture(configs, v))  # as refine (refine/prior_scale.py)
            own = pct(rows[k][1] * math.exp(post.config_log_scale["f"]), rows[k][0])
            shared = math.exp(post.shared_weight * post.shared_log_scale)
            others = {i: pct(b * shared, m) for i, (m, b) in rows.items() if i != k}
            quiet = [e for i, e in others.items() if i not in contended]
            own_quiet += [abs(own)] if k not in contended else []
            others_quiet += [mape(quiet)] if quiet else []
            print(f"{log.name} --calibrate {k}: run x{run_ms / rows[k][1]:.3f}{' (quiet-equivalent)' if equivalent else ''}"
                  f", k {post.shared_weight:.2f}; before {mape([pct(b, m) for m, b in rows.values()]):.1f} %, config "
                  f"{k} {abs(own):.1f} %{' (CONTENDED passes)' if k in contended else ''}, other {len(others)} "
                  f"{mape(list(others.values())):.1f} %; quiet ones: {len(rows) - len(contended)} of {len(rows)}, before "
                  f"{mape([pct(b, m) for i, (m, b) in rows.items() if i not in contended] or [0.0]):.1f} %, other "
                  f"{len(quiet)} {mape(quiet or [0.0]):.1f} %")
    if own_quiet and others_quiet:
        print(f"over these logs: the instrumented configuration {statistics.fmean(own_quiet):.2f} % on average over "
              f"the {len(own_quiet)} calibrations whose passes were quiet ({sum(e <= targets['instrumented'] for e in own_quiet)} "
              f"within {targets['instrumented']:.0f} %); the other quiet configurations {statistics.fmean(others_quiet):.2f} % "
              f"on average over {len(others_quiet)} calibrations ({sum(e <= targets['others'] for e in others_quiet)} "
              f"within {targets['others']:.0f} %)")


LOGGED_RUN = (r"^\s+(\d+) L\d+ .*?\s+measured\s+([\d.]+) ms \(CPU\s+([\d.]+) ms\)\s+predicted\s+([\d.]+) ms .*?"
              r"load ([\d.]+).*?(\d) run\(s\)( CONTENDED)?")
"""A measurement line of a printed output: index, measured ms, CPU ms, predicted ms, load, runs, contended."""


def log_text(path: Path, flag: str) -> str:
    """A saved output's text; exit 2 with the reason when it cannot be read."""
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError) as err:
        _bad_input(f"{flag} {path}: cannot be read ({err}); pass a saved output of bench_cpu_testbed.py")
        raise  # not reached: _bad_input exits


def read_log(path: Path) -> str:
    """The text of --replay-log's printed output; exit 2 with the reason when it cannot be read or holds no
    measurement pass (record_from_log would make a record without runs)."""
    import re

    text = log_text(path, "--replay-log")
    if "[measure] pass " not in text or not any(re.match(LOGGED_RUN, line) for line in text.splitlines()):
        _bad_input(f"--replay-log {path}: no '[measure] pass' section with measurement lines; pass a saved output "
                   f"of bench_cpu_testbed.py (for a JSON record it wrote, use --replay)")
    return text


def record_from_log(text: str, header: dict) -> dict:
    """A testbed record (testbed_record.py) from a printed output of the benchmark before records existed: its
    measurement passes and the calibration runs of its [refine] sections, with the predictions it printed; no
    step times (each run's median only). `header` is new_record's (configs' breakdowns and priors of the home's
    profile); its configurations' predictions are replaced by the printed ones."""
    import re

    line, runs, printed = re.compile(LOGGED_RUN), [], {}
    for p, part in enumerate(text.split("[measure] pass ")[1:]):
        for m in map(line.match, part.split("[refine]")[0].splitlines()):
            if m:
                i = int(m.group(1))
                printed[i] = float(m.group(4)) * 1e-3
                runs.append({"config": i, "pass": p, "measured_s": float(m.group(2)) * 1e-3,
                             "cpu_s": float(m.group(3)) * 1e-3, "load_before": float(m.group(5)),
                             "contended": bool(m.group(7)), "ref_now_s": header["ref_profile_s"]})
    for sec in text.split("[refine] instrumenting configuration ")[1:]:
        last = last_calibration_run(sec.split("\n  #")[0])
        cpu = re.findall(r"measured ([\d.]+) ms \(CPU ([\d.]+) ms per rank\), load ([\d.]+)", sec.split("\n  #")[0])
        if last is not None and cpu:
            runs.append({"config": int(sec.split()[0]), "pass": -1, "measured_s": float(cpu[-1][0]) * 1e-3,
                         "cpu_s": float(cpu[-1][1]) * 1e-3, "load_before": float(cpu[-1][2]), "contended": False,
                         "calibration": True, "ref_now_s": header["ref_profile_s"]})
    configs = [{**c, "predicted_s": printed.get(i, c["predicted_s"])} for i, c in enumerate(header["configs"])]
    return {**header, "configs": configs, "runs": runs, "calibrations": {}, "from_log": True}

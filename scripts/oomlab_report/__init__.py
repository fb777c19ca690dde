"""oomlab_report — the Python side of oomlab's results: loading and validating results files
(results.py), the one atomic writer (atomic.py), formatting for REPORT.md (fmt.py), the
summary schemas experiments declare (schema.py), the discovery of experiment folders and
their renderers (experiments.py), the provenance of committed results and GPU records
(provenance.py), the verdict statuses and the verdict rule as the report states it
(verdict_rule.py, with the rule's paired timing ratio), the report's GPU results section
(gpu_record.py reads a record, gpu_section.py renders it, gpu_order.py says which ran last) and
the benchmark files an experiment shows (bench_points.py).

The scripts in scripts/ import it directly (Python puts a script's own folder first on the
module path); the experiment renderers (experiments/NN_name/report.py) are loaded by
experiments.py and import it the same way. Standard library only, except matplotlib for the
figures (fmt.save_fig_atomic, the renderers).
"""

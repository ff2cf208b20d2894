"""Reading what runs left behind: a run's ``summary.json`` from its event
streams (summary) and its report (runreport); the reports of many runs
(collect, stats, plots, cost, naming, report), comparisons (compare), the perf
report (perfreport) and the machine a report describes (machine). Imports
nothing else of :mod:`launch`: it works on any run directory, also one copied
from another machine."""

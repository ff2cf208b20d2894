"""The launcher: everything that runs on the machine where ``psbench`` is typed
(the ranks themselves are :mod:`psmodes`).

Layers, each importing only the layers below it (``tests/test_imports.py``
checks this, and that there is no import cycle anywhere):

- :mod:`launch.cli` - the ``psbench`` command: parses the command line and hands
  each sub-command to the layer that does it; nothing imports it;
- :mod:`launch.experiments` - many runs and what they are for: sweeps, chaos
  trials, the perf measurement, Slurm batch scripts; imports the driver and
  the analysis;
- :mod:`launch.driver` - one run: its options, hosts and placement, the mpirun
  line, the fault injector, the runner that supervises the job; imports the
  analysis (the runner writes the run's summary and report when it ends);
- :mod:`launch.analysis` - reading what runs left behind: summaries, reports,
  statistics, plots, costs, comparisons; imports only the two layers below, so it
  works on any run directory without the machinery that made it;
- :mod:`launch.faultkinds` - the kinds of fault, one module each, and the one
  registry of them; a run's faults parsed once into a plan (what each kind is, how
  it is sent, recorded and drawn); imports only ``launch.remote``;
- :mod:`launch.remote` - how the launcher reaches a host (here, ssh, srun) and ties
  the processes it starts to its own life; imports nothing of ``launch``.

Every layer may import :mod:`psmodes` (the run configuration, event streams,
atomic writes) and :mod:`benchmarks`; neither of those imports ``launch``.
"""

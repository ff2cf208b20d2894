"""One run, start to end: the ``psbench run`` options turned into a validated
:class:`psmodes.config.RunConfig` (options), the hosts and the placement of
the roles on them (hosts), the mpirun or horovodrun line (mpirun), ULFM
detection (ulfm), the kill schedule (kills) and the fault injector that
carries it out (faults), crashes read from mpirun's output (crashes), the
runner that starts and supervises the job (runner), and ``psbench doctor``.
May import :mod:`launch.analysis`, never :mod:`launch.experiments`."""

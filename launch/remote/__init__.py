"""How the launcher reaches the run's hosts (:mod:`~launch.remote.routes`: here, ssh or srun) and
ties the processes it starts there to its own life (:mod:`~launch.remote.lifetime`). The lowest
layer of the launcher: the fault kinds, the driver and the experiments use it."""

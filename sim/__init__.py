"""Engine simulator: OpenAI-compatible servers that imitate each engine's timing and dialect.

Six of the seven engines infer-top knows cannot run without a GPU, and a load
generator's accuracy can only be proven against a server whose timing is known.
Everything produced here is labelled simulated: ``/v1/models`` owned_by
``infer-top-sim``, the ``X-Infer-Top-Simulated: 1`` header and an
``infer_top_simulated 1`` metric line.
"""

from sim.app import RunningSim, build_app, start_sim
from sim.faults import FaultConfig
from sim.labels import OWNED_BY, SIM_HEADER, SIMULATED_METRIC, is_simulated
from sim.profile import ProfileError, SimProfile, list_profiles, load_profile
from sim.scheduler import Arrival, Outcome, RequestTrace, Scheduler
from sim.server import SimServer
from sim.simulate import simulate, simulate_closed_loop

__all__ = [
    "OWNED_BY",
    "SIMULATED_METRIC",
    "SIM_HEADER",
    "Arrival",
    "FaultConfig",
    "Outcome",
    "ProfileError",
    "RequestTrace",
    "RunningSim",
    "Scheduler",
    "SimProfile",
    "SimServer",
    "build_app",
    "is_simulated",
    "list_profiles",
    "load_profile",
    "simulate",
    "simulate_closed_loop",
    "start_sim",
]
